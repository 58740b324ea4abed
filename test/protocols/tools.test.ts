/**
 * Tools on converting routes (docs/conversion.md "Tools by type"): Responses namespace tools
 * flattened and their calls mapped back, custom (freeform) tools, provider-side tools under the
 * group's `builtin_tools` policy, web search mapped to Anthropic's and its results and citations
 * back to `web_search_call` items and annotations; and the input estimate of a converted
 * Messages stream's `message_start`. The shapes are Codex's (openai/codex
 * `codex-rs/tools/src/responses_api.rs`, `codex-rs/tools/src/tool_spec.rs`).
 */
import t from 'tap';
import type { ProtocolName } from '../../core/config/types.js';
import { GatewayError } from '../../core/errors.js';
import { hubConversion } from '../../core/protocols/convert.js';
import type { BuiltinToolsPolicy, Conversion } from '../../core/protocols/types.js';
import { estimateTokens } from '../../core/protocols/usage.js';
import { SseParser } from '../../core/sse.js';
import { anthropicSees, frames, OPTS, responsesSees, text } from './helpers.js';

const A: ProtocolName = 'anthropic-messages';
const C: ProtocolName = 'openai-chat';
const R: ProtocolName = 'openai-responses';

type Obj = Record<string, any>;

function request(conv: Conversion, json: Obj, policy?: BuiltinToolsPolicy): { body: Obj; dropped: string[] } {
  const dropped: string[] = [];
  const text = conv.requestBody({
    text: JSON.stringify(json),
    json,
    stream: json.stream === true,
    upstreamModel: 'up-model',
    requestId: 'req-1',
    ...(policy ? { builtinTools: policy } : {}),
    onDroppedTools: (types) => dropped.push(...types),
  });
  return { body: JSON.parse(text), dropped };
}

function convert(from: ProtocolName, to: ProtocolName, json: Obj, policy?: BuiltinToolsPolicy) {
  return request(hubConversion(from, to)!, json, policy);
}

function rejects400(
  t: Pick<typeof import('tap').default, 'fail' | 'ok' | 'equal' | 'match'>,
  fn: () => unknown,
  message: RegExp,
  name: string,
): void {
  try {
    fn();
    t.fail(`${name}: no error`);
  } catch (e) {
    t.ok(e instanceof GatewayError, `${name}: a GatewayError`);
    t.equal((e as GatewayError).status, 400, `${name}: 400`);
    t.match((e as Error).message, message, `${name}: names the tool`);
  }
}

/** Runs an upstream SSE text through a conversion's stream translator, as the core does. */
function stream(conv: Conversion, upstream: string): string {
  const tr = conv.stream(OPTS);
  const parser = new SseParser();
  let out = '';
  for (const b of [...parser.feedBytes(Buffer.from(upstream)), ...parser.endBytes(true)]) out += text(tr.block(b));
  const end = tr.end();
  t.equal(end.complete, true, 'the upstream stream is complete');
  return out + end.text;
}

const sse = (events: Obj[]): string => events.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join('');

const params = (props: Obj) => ({ type: 'object', properties: props, additionalProperties: false });
const EXEC = {
  type: 'function',
  name: 'exec_command',
  description: 'Runs a command',
  strict: false,
  parameters: params({ cmd: { type: 'string' } }),
};
const NAMESPACE = {
  type: 'namespace',
  name: 'multi_agent_v1',
  description: 'Tools for spawning and managing sub-agents.',
  tools: [
    {
      type: 'function',
      name: 'spawn_agent',
      description: 'Spawn an agent',
      strict: false,
      parameters: params({ message: { type: 'string' } }),
    },
    {
      type: 'function',
      name: 'wait_agent',
      description: 'Wait for agents',
      strict: false,
      parameters: params({ targets: { type: 'array', items: { type: 'string' } } }),
    },
  ],
};
const WEB_SEARCH = { type: 'web_search', external_web_access: false };
const APPLY_PATCH = {
  type: 'custom',
  name: 'apply_patch',
  description: 'Edit files with a patch',
  format: { type: 'grammar', syntax: 'lark', definition: 'start: begin_patch hunk+ end_patch' },
};

/** A Codex turn as 0.169.0 sends it (shapes and fields; texts shortened). */
const CODEX = {
  model: 'gpt-x',
  stream: true,
  input: [
    { type: 'message', id: 'msg_dev', role: 'developer', content: [{ type: 'input_text', text: 'You are a coding agent.' }] },
    { type: 'message', id: 'msg_user', role: 'user', content: [{ type: 'input_text', text: 'list the files' }] },
  ],
  tools: [EXEC, NAMESPACE, WEB_SEARCH],
  tool_choice: 'auto',
  parallel_tool_calls: true,
  reasoning: { effort: 'medium', summary: 'auto' },
  store: false,
  include: ['reasoning.encrypted_content'],
  prompt_cache_key: 'thread-1',
  client_metadata: { session_id: 'thread-1', 'x-codex-turn-metadata': '{}' },
};

t.test('namespace tools are flattened the way Codex flattens them; every Codex field converts', async (t) => {
  const { body, dropped } = convert(R, A, CODEX);
  t.same(
    body.tools.map((x: Obj) => x.name),
    ['exec_command', 'multi_agent_v1__spawn_agent', 'multi_agent_v1__wait_agent', 'web_search'],
    'Anthropic sees flat names, then its web search',
  );
  t.same(
    body.tools[2],
    { name: 'multi_agent_v1__wait_agent', description: 'Wait for agents', input_schema: NAMESPACE.tools[1].parameters },
    'description and schema kept',
  );
  t.same(body.tools[3], { type: 'web_search_20250305', name: 'web_search' }, 'web_search → Anthropic web search');
  t.same(dropped, [], 'nothing dropped');
  for (const k of ['store', 'include', 'prompt_cache_key', 'client_metadata', 'parallel_tool_calls', 'reasoning'])
    t.notOk(k in body, `${k} dropped`);
  t.equal(body.system, 'You are a coding agent.', 'developer message → system');

  const chat = convert(R, C, CODEX);
  t.same(
    chat.body.tools.map((x: Obj) => x.function.name),
    ['exec_command', 'multi_agent_v1__spawn_agent', 'multi_agent_v1__wait_agent'],
    'Chat sees flat names',
  );
  t.same(chat.dropped, ['web_search'], 'Chat has no web search: dropped and reported');

  const history = {
    model: 'm',
    input: [
      { type: 'message', role: 'user', content: 'wait for it' },
      {
        type: 'function_call',
        id: 'fc_1',
        call_id: 'call_1',
        name: 'wait_agent',
        namespace: 'multi_agent_v1',
        arguments: '{"targets":["a"]}',
        status: 'completed',
      },
      { type: 'function_call_output', call_id: 'call_1', output: 'done' },
    ],
    tools: [NAMESPACE],
    tool_choice: { type: 'function', namespace: 'multi_agent_v1', name: 'spawn_agent' },
  };
  const h = convert(R, A, history).body;
  t.same(
    h.messages[1].content,
    [{ type: 'tool_use', id: 'call_1', name: 'multi_agent_v1__wait_agent', input: { targets: ['a'] } }],
    'a replayed namespaced call → the flat name',
  );
  t.same(h.tool_choice, { type: 'tool', name: 'multi_agent_v1__spawn_agent' }, 'tool_choice with a namespace → the flat name');
  t.equal(convert(R, C, history).body.messages[1].tool_calls[0].function.name, 'multi_agent_v1__wait_agent', 'and for Chat');
});

t.test('calls to a flattened tool come back as function_call items with their namespace', async (t) => {
  const conv = hubConversion(R, A)!;
  request(conv, CODEX);
  const json = conv.response(
    JSON.stringify({
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'claude',
      content: [
        { type: 'tool_use', id: 'toolu_1', name: 'multi_agent_v1__wait_agent', input: { targets: ['a'] } },
        { type: 'tool_use', id: 'toolu_2', name: 'exec_command', input: { cmd: 'ls' } },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 5 },
    }),
    OPTS,
  );
  const out = JSON.parse(json.body).output;
  t.match(
    out[0],
    { type: 'function_call', call_id: 'toolu_1', name: 'wait_agent', namespace: 'multi_agent_v1', arguments: '{"targets":["a"]}' },
    'namespaced call',
  );
  t.notOk('namespace' in out[1], 'a plain function call has no namespace');
  t.equal(out[1].name, 'exec_command');

  const conv2 = hubConversion(R, A)!;
  request(conv2, CODEX);
  const text = stream(
    conv2,
    sse([
      {
        type: 'message_start',
        message: {
          id: 'msg_2',
          type: 'message',
          role: 'assistant',
          model: 'claude',
          content: [],
          usage: { input_tokens: 10, output_tokens: 1 },
        },
      },
      {
        type: 'content_block_start',
        index: 0,
        content_block: { type: 'tool_use', id: 'toolu_3', name: 'multi_agent_v1__spawn_agent', input: {} },
      },
      { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{"message":' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '"go"}' } },
      { type: 'content_block_stop', index: 0 },
      { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 7 } },
      { type: 'message_stop' },
    ]),
  );
  const added = frames(text).find((f) => f.event === 'response.output_item.added')!.data.item;
  t.match(
    added,
    { type: 'function_call', name: 'spawn_agent', namespace: 'multi_agent_v1', status: 'in_progress' },
    'output_item.added names the namespace',
  );
  const { response } = await responsesSees(text);
  t.match(
    response.output[0],
    { type: 'function_call', call_id: 'toolu_3', name: 'spawn_agent', namespace: 'multi_agent_v1', arguments: '{"message":"go"}' },
    'the SDK accumulates the namespaced call',
  );
});

t.test('custom (freeform) tools: a function of one string, calls back as custom_tool_call items', async (t) => {
  const json = {
    model: 'm',
    input: [
      { type: 'message', role: 'user', content: 'fix it' },
      { type: 'custom_tool_call', id: 'ctc_1', call_id: 'call_p', name: 'apply_patch', input: '*** Begin Patch\n*** End Patch' },
      { type: 'custom_tool_call_output', call_id: 'call_p', output: 'applied' },
    ],
    tools: [APPLY_PATCH],
  };
  const { body } = convert(R, A, json);
  t.equal(body.tools[0].name, 'apply_patch');
  t.same(body.tools[0].input_schema.required, ['input'], 'one required string argument');
  t.match(
    body.tools[0].description,
    /Edit files with a patch[\s\S]*lark grammar:\nstart: begin_patch/,
    'the grammar rides in the description',
  );
  t.same(
    body.messages[1].content[0],
    { type: 'tool_use', id: 'call_p', name: 'apply_patch', input: { input: '*** Begin Patch\n*** End Patch' } },
    'a replayed custom call',
  );
  t.same(body.messages[2].content[0], { type: 'tool_result', tool_use_id: 'call_p', content: 'applied' }, 'its output');

  const conv = hubConversion(R, A)!;
  request(conv, json);
  const out = JSON.parse(
    conv.response(
      JSON.stringify({
        id: 'msg_1',
        type: 'message',
        role: 'assistant',
        model: 'claude',
        content: [{ type: 'tool_use', id: 'toolu_9', name: 'apply_patch', input: { input: 'PATCH' } }],
        stop_reason: 'tool_use',
        stop_sequence: null,
        usage: { input_tokens: 3, output_tokens: 2 },
      }),
      OPTS,
    ).body,
  ).output;
  t.match(out[0], { type: 'custom_tool_call', call_id: 'toolu_9', name: 'apply_patch', input: 'PATCH', status: 'completed' });

  const conv2 = hubConversion(R, A)!;
  request(conv2, json);
  const text = stream(
    conv2,
    sse([
      {
        type: 'message_start',
        message: {
          id: 'msg_2',
          type: 'message',
          role: 'assistant',
          model: 'claude',
          content: [],
          usage: { input_tokens: 3, output_tokens: 1 },
        },
      },
      { type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 'toolu_8', name: 'apply_patch', input: {} } },
      { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{"input":"*** Be' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: 'gin Patch"}' } },
      { type: 'content_block_stop', index: 0 },
      { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 4 } },
      { type: 'message_stop' },
    ]),
  );
  const events = frames(text).map((f) => f.event);
  t.ok(
    events.includes('response.custom_tool_call_input.delta') && events.includes('response.custom_tool_call_input.done'),
    'custom input events',
  );
  t.notOk(events.includes('response.function_call_arguments.delta'), 'no function argument events');
  const { response } = await responsesSees(text);
  t.match(
    response.output[0],
    { type: 'custom_tool_call', call_id: 'toolu_8', name: 'apply_patch', input: '*** Begin Patch' },
    'the SDK sees the custom call',
  );
});

t.test('provider-side tools follow the group policy: map (default), drop, reject', async (t) => {
  const json = {
    model: 'm',
    input: 'q',
    tools: [
      EXEC,
      WEB_SEARCH,
      { type: 'file_search', vector_store_ids: ['vs_1'] },
      { type: 'code_interpreter', container: { type: 'auto' } },
    ],
  };
  const map = convert(R, A, json);
  t.same(
    map.body.tools.map((x: Obj) => x.type ?? 'function'),
    ['function', 'web_search_20250305'],
    'map: web_search mapped',
  );
  t.same(map.dropped, ['file_search', 'code_interpreter'], 'map: the others dropped and reported');
  const drop = convert(R, A, json, 'drop');
  t.same(
    drop.body.tools.map((x: Obj) => x.name),
    ['exec_command'],
    'drop: only function tools',
  );
  t.same(drop.dropped, ['web_search', 'file_search', 'code_interpreter']);
  rejects400(
    t,
    () => convert(R, A, json, 'reject'),
    /tools\[2\]: 'file_search'.*builtin_tools is 'reject'/,
    'reject: the first unmappable tool',
  );
  const only = convert(R, A, { model: 'm', input: 'q', tools: [WEB_SEARCH] }, 'reject');
  t.same(only.body.tools, [{ type: 'web_search_20250305', name: 'web_search' }], 'reject still maps what it can');
  rejects400(
    t,
    () => convert(R, C, { model: 'm', input: 'q', tools: [WEB_SEARCH] }, 'reject'),
    /'web_search'/,
    'reject: Chat cannot search',
  );
  t.same(
    convert(R, A, { model: 'm', input: 'q', tools: [{ type: 'web_search_preview_2025_03_11' }] }).body.tools[0].type,
    'web_search_20250305',
    'dated preview variants are web search too',
  );
  const clash = convert(R, A, { model: 'm', input: 'q', tools: [{ ...EXEC, name: 'web_search' }, WEB_SEARCH] });
  t.same(
    clash.body.tools.map((x: Obj) => x.name),
    ['web_search'],
    'a client function of the same name wins',
  );
  t.same(clash.dropped, ['web_search']);

  const claude = {
    model: 'm',
    max_tokens: 10,
    messages: [{ role: 'user', content: 'q' }],
    tools: [
      { type: 'web_search_20250305', name: 'web_search', max_uses: 3 },
      { name: 'f', input_schema: { type: 'object' } },
    ],
  };
  const a = convert(A, C, claude);
  t.same(
    a.body.tools.map((x: Obj) => x.function.name),
    ['f'],
    'Anthropic server tools: dropped on a Chat upstream',
  );
  t.same(a.dropped, ['web_search'], 'named without their version');
  rejects400(t, () => convert(A, R, claude, 'reject'), /web_search/, 'reject: 400');
  const hist = convert(A, C, {
    model: 'm',
    max_tokens: 10,
    messages: [
      { role: 'user', content: 'news?' },
      {
        role: 'assistant',
        content: [
          { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: { query: 'news' } },
          { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_1', content: [] },
          { type: 'text', text: 'Nothing new.' },
        ],
      },
      { role: 'user', content: 'thanks' },
    ],
  }).body;
  t.same(hist.messages[1], { role: 'assistant', content: 'Nothing new.' }, 'server tool blocks in history are dropped, the text stays');
  const ws = convert(R, A, {
    model: 'm',
    input: [
      { type: 'message', role: 'user', content: 'q' },
      { type: 'web_search_call', id: 'ws_1', status: 'completed', action: { type: 'search', query: 'q' } },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'found', annotations: [] }] },
    ],
  }).body;
  t.same(
    ws.messages.map((m: Obj) => m.role),
    ['user', 'assistant'],
    'a replayed web_search_call is dropped',
  );
});

t.test('web_search options carry over to Anthropic where they have an equivalent', async (t) => {
  const { body } = convert(R, A, {
    model: 'm',
    input: 'q',
    tools: [
      {
        type: 'web_search',
        filters: { allowed_domains: ['https://docs.example.com/', 'example.org'] },
        user_location: { type: 'approximate', country: 'CH', city: 'Bern', timezone: 'Europe/Zurich' },
        search_context_size: 'high',
      },
    ],
  });
  t.same(body.tools[0], {
    type: 'web_search_20250305',
    name: 'web_search',
    allowed_domains: ['docs.example.com', 'example.org'],
    user_location: { type: 'approximate', city: 'Bern', country: 'CH', timezone: 'Europe/Zurich' },
  });
});

const SEARCH_ANSWER = {
  id: 'msg_s',
  type: 'message',
  role: 'assistant',
  model: 'claude',
  content: [
    { type: 'text', text: 'Let me look.' },
    { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: { query: 'bern weather' } },
    {
      type: 'web_search_tool_result',
      tool_use_id: 'srvtoolu_1',
      content: [
        { type: 'web_search_result', url: 'https://weather.example/bern', title: 'Bern weather', encrypted_content: 'E1', page_age: null },
        { type: 'web_search_result', url: 'https://meteo.example/be', title: 'Meteo', encrypted_content: 'E2', page_age: null },
      ],
    },
    {
      type: 'text',
      text: 'It is sunny.',
      citations: [
        {
          type: 'web_search_result_location',
          url: 'https://weather.example/bern',
          title: 'Bern weather',
          encrypted_index: 'I1',
          cited_text: 'sunny',
        },
      ],
    },
  ],
  stop_reason: 'end_turn',
  stop_sequence: null,
  usage: { input_tokens: 20, output_tokens: 9, server_tool_use: { web_search_requests: 1 } },
};

t.test('a web search Anthropic ran comes back as a web_search_call item and url_citation annotations', async (t) => {
  const conv = hubConversion(R, A)!;
  request(conv, { model: 'm', input: 'weather in Bern?', tools: [WEB_SEARCH] });
  const out = JSON.parse(conv.response(JSON.stringify(SEARCH_ANSWER), OPTS).body).output;
  t.same(
    out.map((o: Obj) => o.type),
    ['message', 'web_search_call', 'message'],
  );
  t.match(out[1], {
    type: 'web_search_call',
    status: 'completed',
    action: {
      type: 'search',
      query: 'bern weather',
      sources: [
        { type: 'url', url: 'https://weather.example/bern' },
        { type: 'url', url: 'https://meteo.example/be' },
      ],
    },
  });
  t.match(out[1].id, /^ws_/, 'a ws_ item id');
  t.same(out[2].content[0].annotations, [
    { type: 'url_citation', start_index: 0, end_index: 'It is sunny.'.length, url: 'https://weather.example/bern', title: 'Bern weather' },
  ]);
  t.same(out[0].content[0].annotations, [], 'uncited text has none');

  const frames_ = [
    {
      type: 'message_start',
      message: {
        id: 'msg_s',
        type: 'message',
        role: 'assistant',
        model: 'claude',
        content: [],
        usage: { input_tokens: 20, output_tokens: 1 },
      },
    },
    { type: 'content_block_start', index: 0, content_block: { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} } },
    { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{"query": "bern' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: ' weather"}' } },
    { type: 'content_block_stop', index: 0 },
    { type: 'content_block_start', index: 1, content_block: SEARCH_ANSWER.content[2] },
    { type: 'content_block_stop', index: 1 },
    { type: 'content_block_start', index: 2, content_block: { type: 'text', text: '', citations: [] } },
    { type: 'content_block_delta', index: 2, delta: { type: 'citations_delta', citation: (SEARCH_ANSWER.content[3] as Obj).citations[0] } },
    { type: 'content_block_delta', index: 2, delta: { type: 'text_delta', text: 'It is sunny.' } },
    { type: 'content_block_stop', index: 2 },
    {
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null },
      usage: { output_tokens: 9, server_tool_use: { web_search_requests: 1 } },
    },
    { type: 'message_stop' },
  ];
  const conv2 = hubConversion(R, A)!;
  request(conv2, { model: 'm', input: 'weather in Bern?', tools: [WEB_SEARCH], stream: true });
  const text = stream(conv2, sse(frames_));
  const names = frames(text).map((f) => f.event);
  for (const e of [
    'response.web_search_call.in_progress',
    'response.web_search_call.searching',
    'response.web_search_call.completed',
    'response.output_text.annotation.added',
  ]) {
    t.ok(names.includes(e), `${e} sent`);
  }
  const { response } = await responsesSees(text);
  t.match(
    response.output[0],
    { type: 'web_search_call', status: 'completed', action: { query: 'bern weather' } },
    'the SDK sees the search',
  );
  t.same(
    response.output[1].content[0].annotations.map((a: Obj) => a.url),
    ['https://weather.example/bern'],
    'and the citation',
  );
  t.equal(response.output_text, 'It is sunny.');

  // Other clients see the answer without the search (there is nothing to show it in).
  const toClaude = hubConversion(A, R)!;
  t.ok(toClaude, 'the reverse pair exists');
  const viaChat = hubConversion(C, A)!;
  const chatOut = JSON.parse(viaChat.response(JSON.stringify(SEARCH_ANSWER), OPTS).body);
  t.equal(chatOut.choices[0].message.content, 'Let me look.It is sunny.', 'a Chat client gets the text');
});

t.test('a converted Messages stream reports an input estimate in message_start, the exact figure at the end', async (t) => {
  const claudeBody = {
    model: 'm',
    max_tokens: 100,
    stream: true,
    system: 'Be brief. '.repeat(40),
    messages: [{ role: 'user', content: 'Hello there, how are you today?' }],
  };
  const estimate = estimateTokens(JSON.stringify(claudeBody).length);
  t.ok(estimate > 50, 'the estimate is sizeable');
  const conv = hubConversion(A, C)!;
  request(conv, claudeBody);
  const chatUpstream =
    [
      {
        id: 'c1',
        object: 'chat.completion.chunk',
        created: 1,
        model: 'gpt',
        choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }],
      },
      {
        id: 'c1',
        object: 'chat.completion.chunk',
        created: 1,
        model: 'gpt',
        choices: [{ index: 0, delta: { content: 'Fine.' }, finish_reason: null }],
      },
      { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'gpt', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] },
      {
        id: 'c1',
        object: 'chat.completion.chunk',
        created: 1,
        model: 'gpt',
        choices: [],
        usage: { prompt_tokens: 123, completion_tokens: 2, total_tokens: 125 },
      },
    ]
      .map((c) => `data: ${JSON.stringify(c)}\n\n`)
      .join('') + 'data: [DONE]\n\n';
  const text = stream(conv, chatUpstream);
  const fs = frames(text);
  t.equal(fs[0].data.message.usage.input_tokens, estimate, 'message_start: the estimate of the request, not 0');
  const delta = fs.find((f) => f.event === 'message_delta')!.data;
  t.equal(delta.usage.input_tokens, 123, "message_delta: the upstream's exact input");
  t.equal(delta.usage.output_tokens, 2);
  const { message } = await anthropicSees(text);
  t.equal(message.usage.input_tokens, 123, 'the Anthropic SDK ends with the exact figure');

  const viaResponses = hubConversion(A, R)!;
  request(viaResponses, claudeBody);
  const rText = stream(
    viaResponses,
    sse([
      {
        type: 'response.created',
        sequence_number: 0,
        response: { id: 'resp_1', object: 'response', status: 'in_progress', model: 'gpt', output: [], usage: null },
      },
      {
        type: 'response.output_item.added',
        sequence_number: 1,
        output_index: 0,
        item: { id: 'msg_1', type: 'message', status: 'in_progress', role: 'assistant', content: [] },
      },
      {
        type: 'response.content_part.added',
        sequence_number: 2,
        item_id: 'msg_1',
        output_index: 0,
        content_index: 0,
        part: { type: 'output_text', text: '', annotations: [] },
      },
      { type: 'response.output_text.delta', sequence_number: 3, item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'Fine.' },
      {
        type: 'response.completed',
        sequence_number: 4,
        response: {
          id: 'resp_1',
          object: 'response',
          status: 'completed',
          model: 'gpt',
          output: [
            {
              id: 'msg_1',
              type: 'message',
              status: 'completed',
              role: 'assistant',
              content: [{ type: 'output_text', text: 'Fine.', annotations: [] }],
            },
          ],
          usage: {
            input_tokens: 99,
            output_tokens: 2,
            total_tokens: 101,
            input_tokens_details: { cached_tokens: 0 },
            output_tokens_details: { reasoning_tokens: 0 },
          },
        },
      },
    ]),
  );
  const rf = frames(rText);
  t.equal(rf[0].data.message.usage.input_tokens, estimate, 'from a Responses upstream too');
  t.equal(rf.find((f) => f.event === 'message_delta')!.data.usage.input_tokens, 99);
});
