/**
 * Responses tools through a running gateway on converting routes, with the openai SDK: the
 * group's `builtin_tools` policy (map by default, drop, reject) and the
 * `x-gateway-dropped-tools` header, a web search run by the Anthropic upstream seen as a
 * `web_search_call` item with `url_citation` annotations (streamed and not), and namespaced calls.
 */
import t from 'tap';
import OpenAI from 'openai';
import { baseConfig, bearer, call, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';

const hex = (n: number) => `sk-${n.toString(16).padStart(64, '0')}`;
const K = { drop: hex(0x7001), reject: hex(0x7002), chatUp: hex(0x7003) };

let g: TestGateway;
t.before(async () => {
  const cfg = baseConfig();
  cfg.providers['chat-api'] = { kind: 'mock', protocols: ['openai-chat'] };
  cfg.models['chat-up'] = { provider: 'chat-api', price: { input: 1, output: 2 } };
  cfg.groups['tools-drop'] = { kind: 'messages', models: ['claude-model'], builtin_tools: 'drop' };
  cfg.groups['tools-reject'] = { kind: 'messages', models: ['claude-model'], builtin_tools: 'reject' };
  cfg.groups['tools-chat'] = { kind: 'responses', models: ['chat-up'] };
  cfg.keys.push(
    { key: K.drop, name: 'tools-drop', user: 'alice', group: 'tools-drop' },
    { key: K.reject, name: 'tools-reject', user: 'alice', group: 'tools-reject' },
    { key: K.chatUp, name: 'tools-chat', user: 'alice', group: 'tools-chat' },
  );
  g = await startGateway(cfg);
});
t.teardown(() => g.close());

const HEADER = 'x-gateway-dropped-tools';
const mockFor = (name = 'mock') => g.gw.mocks.get(name)!;
const lastUpstream = (name = 'mock') => JSON.parse(mockFor(name).requests.at(-1)!.body);
const respond = (key: string, body: Record<string, unknown>) =>
  call(g.url + '/v1/responses', { headers: bearer(key), json: { model: 'claude-model', ...body } });

t.test('builtin_tools: map (default) maps web_search, drops the rest and names them', async (t) => {
  const r = await respond(KEYS.messages, {
    input: 'hi',
    tools: [
      { type: 'web_search' },
      { type: 'file_search', vector_store_ids: ['vs_1'] },
      { type: 'mcp', server_label: 'x', server_url: 'https://mcp.example' },
    ],
  });
  t.equal(r.status, 200);
  t.equal(r.headers.get(HEADER), 'file_search, mcp', 'dropped tools named');
  t.same(lastUpstream().tools, [{ type: 'web_search_20250305', name: 'web_search' }], 'web search sent to Anthropic');
  const none = await respond(KEYS.messages, { input: 'hi', tools: [{ type: 'web_search' }] });
  t.equal(none.headers.get(HEADER), null, 'no header when nothing was dropped');
  const stream = await call(g.url + '/v1/responses', {
    headers: bearer(KEYS.messages),
    json: { model: 'claude-model', input: 'hi', stream: true, tools: [{ type: 'code_interpreter', container: { type: 'auto' } }] },
  });
  t.equal(stream.status, 200);
  t.equal(stream.headers.get(HEADER), 'code_interpreter', 'on streams too');
  const chat = await respond(K.chatUp, { model: 'chat-up', input: 'hi', tools: [{ type: 'web_search' }] });
  t.equal(chat.status, 200, 'a Chat upstream cannot search');
  t.equal(chat.headers.get(HEADER), 'web_search', 'so web_search is dropped and named');
  t.notOk('tools' in lastUpstream('chat-api'), 'nothing sent as a tool');
});

t.test('builtin_tools: drop and reject', async (t) => {
  const d = await respond(K.drop, {
    input: 'hi',
    tools: [{ type: 'web_search' }, { type: 'function', name: 'f', parameters: { type: 'object', properties: {} } }],
  });
  t.equal(d.status, 200);
  t.equal(d.headers.get(HEADER), 'web_search', 'drop: even the mappable search');
  t.same(
    lastUpstream().tools.map((x: any) => x.name),
    ['f'],
  );
  const r = await respond(K.reject, { input: 'hi', tools: [{ type: 'web_search' }, { type: 'file_search', vector_store_ids: ['vs_1'] }] });
  t.equal(r.status, 400, 'reject: 400');
  t.match(r.json.error.message, /tools\[1\]: 'file_search'/, 'naming the tool');
  t.equal(r.headers.get('x-should-retry'), 'false');
  t.equal((await respond(K.reject, { input: 'hi', tools: [{ type: 'web_search' }] })).status, 200, 'reject still maps the search');
});

t.test('a web search by the Anthropic upstream: web_search_call and url_citation annotations', async (t) => {
  const client = new OpenAI({ apiKey: KEYS.messages, baseURL: g.url + '/v1', maxRetries: 0 });
  const body = {
    model: 'claude-model',
    input: 'News about gateways? [[mock: web_search=llm+gateways]]',
    tools: [{ type: 'web_search' as const }],
  };
  const r: any = await client.responses.create(body);
  t.same(
    r.output.map((o: any) => o.type),
    ['web_search_call', 'message'],
  );
  t.match(r.output[0], { status: 'completed', action: { type: 'search', query: 'llm gateways' } });
  t.same(
    r.output[0].action.sources.map((s: any) => s.url),
    ['https://example.com/llm-gateways/1', 'https://example.com/llm-gateways/2'],
  );
  t.match(r.output[1].content[0].annotations, [
    { type: 'url_citation', url: 'https://example.com/llm-gateways/1', title: 'Result 1 for llm gateways', start_index: 0 },
  ]);
  t.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);

  const stream = client.responses.stream(body);
  const types: string[] = [];
  for await (const ev of stream) types.push(ev.type);
  const final: any = await stream.finalResponse();
  for (const e of [
    'response.web_search_call.in_progress',
    'response.web_search_call.searching',
    'response.web_search_call.completed',
    'response.output_text.annotation.added',
  ]) {
    t.ok(types.includes(e), `${e} streamed`);
  }
  t.equal(final.output[0].type, 'web_search_call', "the SDK's final response has the search");
  t.equal(final.output[1].content[0].annotations[0].url, 'https://example.com/llm-gateways/1', 'and the citation');
  t.match(final.output_text, /^This is a mock reply/);
});

t.test('namespaced tools through the SDK: called back with their namespace', async (t) => {
  const client = new OpenAI({ apiKey: KEYS.messages, baseURL: g.url + '/v1', maxRetries: 0 });
  const tools: any = [
    {
      type: 'namespace',
      name: 'crm',
      description: 'Customer records',
      tools: [
        {
          type: 'function',
          name: 'lookup',
          description: 'Find a customer',
          strict: false,
          parameters: { type: 'object', properties: { email: { type: 'string' } }, required: ['email'] },
        },
      ],
    },
  ];
  const r: any = await client.responses.create({ model: 'claude-model', input: 'Who is bob@example.com?', tools });
  t.match(r.output[0], { type: 'function_call', name: 'lookup', namespace: 'crm', arguments: '{"email":"mock"}' });
  t.equal(lastUpstream().tools[0].name, 'crm__lookup', 'Anthropic saw the flat name');
  const next: any = await client.responses.create({
    model: 'claude-model',
    tools,
    input: [
      { role: 'user', content: 'Who is bob@example.com?' },
      { type: 'function_call', call_id: r.output[0].call_id, name: 'lookup', namespace: 'crm', arguments: r.output[0].arguments },
      { type: 'function_call_output', call_id: r.output[0].call_id, output: 'Bob, a customer since 2020' },
    ],
  } as any);
  t.match(next.output_text, /^This is a mock reply/, 'the loop completes');
});
