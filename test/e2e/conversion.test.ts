/**
 * Conversion end to end, driven by the official SDKs: every client protocol against an upstream
 * of every protocol (three single-protocol mock providers), streamed and not, with text, tools and
 * thinking; then multi-turn tool loops where thinking signatures and tool ids must round-trip.
 */
import t from 'tap';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { baseConfig, bearer, call, startGateway, type TestGateway } from '../helpers/gateway.js';

const KEY = 'sk-' + 'cc'.repeat(32);
let g: TestGateway;
t.before(async () => {
  const cfg = baseConfig();
  cfg.providers['up-chat'] = { kind: 'mock', protocols: ['openai-chat'] };
  cfg.providers['up-messages'] = { kind: 'mock', protocols: ['anthropic-messages'] };
  cfg.providers['up-responses'] = { kind: 'mock', protocols: ['openai-responses'] };
  cfg.models['via-chat'] = { provider: 'up-chat', price: { input: 1, output: 2 } };
  cfg.models['via-messages'] = { provider: 'up-messages', price: { input: 1, output: 2 } };
  cfg.models['via-responses'] = { provider: 'up-responses', price: { input: 1, output: 2 } };
  cfg.groups.any = { kind: 'responses', allow_messages: true, models: ['via-chat', 'via-messages', 'via-responses'] };
  cfg.keys.push({ key: KEY, name: 'any', user: 'alice', group: 'any' });
  g = await startGateway(cfg);
});
t.teardown(() => g.close());

const upstreamOf = { 'via-chat': 'up-chat', 'via-messages': 'up-messages', 'via-responses': 'up-responses' } as const;
type Model = keyof typeof upstreamOf;
const MODELS = Object.keys(upstreamOf) as Model[];
const lastUpstream = (m: Model) => g.gw.mocks.get(upstreamOf[m])!.requests.at(-1)!;

const openai = () => new OpenAI({ baseURL: g.url + '/v1', apiKey: KEY, maxRetries: 0 });
const anthropic = () => new Anthropic({ apiKey: KEY, baseURL: g.url, maxRetries: 0 });

const chatTools = [
  {
    type: 'function' as const,
    function: {
      name: 'get_weather',
      description: 'Weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];
const msgTools = [
  {
    name: 'get_weather',
    description: 'Weather',
    input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
  },
];
const respTools = [
  {
    type: 'function' as const,
    name: 'get_weather',
    description: 'Weather',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    strict: false,
  },
];

for (const model of MODELS) {
  t.test(`Chat client → ${model}`, async (t) => {
    const c = openai();
    for (const stream of [false, true]) {
      const label = `${stream ? 'stream' : 'json'}`;
      const ask = (body: any) => (stream ? c.chat.completions.stream(body).finalChatCompletion() : c.chat.completions.create(body));
      const text: any = await ask({
        model,
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Hello there friend' },
        ],
      });
      t.match(text.choices[0].message.content, /This is a mock reply\. You said: Hello there friend/, `${label}: text survives`);
      t.equal(text.choices[0].finish_reason, 'stop');
      t.ok(text.usage.prompt_tokens > 0 && text.usage.completion_tokens > 0, `${label}: usage`);
      const tool: any = await ask({ model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: chatTools });
      const tc = tool.choices[0].message.tool_calls[0];
      t.equal(tool.choices[0].finish_reason, 'tool_calls', `${label}: tool call`);
      t.equal(tc.function.name, 'get_weather');
      t.type(JSON.parse(tc.function.arguments).city, 'string');
      t.ok(tc.id);
      const think: any = await ask({ model, reasoning_effort: 'low', messages: [{ role: 'user', content: 'Think [[mock: thinking]]' }] });
      t.match(think.choices[0].message.content, /mock reply/, `${label}: answer after thinking`);
      t.ok(think.choices[0].message.reasoning_content, `${label}: reasoning_content`);
    }
    t.equal(JSON.parse(lastUpstream(model).body).model, model, 'the upstream got its model name');
  });

  t.test(`Messages client → ${model}`, async (t) => {
    const c = anthropic();
    for (const stream of [false, true]) {
      const label = `${stream ? 'stream' : 'json'}`;
      const ask = (body: any) => (stream ? c.messages.stream(body).finalMessage() : c.messages.create(body));
      const text: any = await ask({
        model,
        max_tokens: 300,
        system: 'Be brief.',
        messages: [{ role: 'user', content: 'Hello there friend' }],
      });
      t.match(
        text.content.find((b: any) => b.type === 'text').text,
        /This is a mock reply\. You said: Hello there friend/,
        `${label}: text`,
      );
      t.equal(text.stop_reason, 'end_turn');
      t.ok(text.usage.input_tokens > 0 && text.usage.output_tokens > 0);
      const tool: any = await ask({ model, max_tokens: 300, tools: msgTools, messages: [{ role: 'user', content: 'Weather in Paris?' }] });
      const use = tool.content.find((b: any) => b.type === 'tool_use');
      t.equal(tool.stop_reason, 'tool_use', `${label}: tool use`);
      t.equal(use.name, 'get_weather');
      t.type(use.input.city, 'string');
      const think: any = await ask({
        model,
        max_tokens: 4000,
        thinking: { type: 'enabled', budget_tokens: 1024 },
        messages: [{ role: 'user', content: 'Think [[mock: thinking]]' }],
      });
      t.match(think.content.at(-1).text, /mock reply/, `${label}: answer`);
      const blocks = think.content.map((b: any) => b.type);
      if (model === 'via-messages') {
        t.same(blocks, ['thinking', 'text'], `${label}: signed thinking from an Anthropic upstream`);
        t.ok(think.content[0].signature);
      } else {
        t.same(blocks, ['text'], `${label}: no unsigned thinking ever reaches an Anthropic client`);
      }
    }
  });

  t.test(`Responses client → ${model}`, async (t) => {
    const c = openai();
    for (const stream of [false, true]) {
      const label = `${stream ? 'stream' : 'json'}`;
      const ask = (body: any) => (stream ? c.responses.stream(body).finalResponse() : c.responses.create(body));
      const text: any = await ask({ model, instructions: 'Be brief.', input: 'Hello there friend' });
      t.match(text.output_text, /This is a mock reply\. You said: Hello there friend/, `${label}: text`);
      t.equal(text.status, 'completed');
      t.ok(text.usage.input_tokens > 0 && text.usage.output_tokens > 0);
      const tool: any = await ask({ model, input: 'Weather in Paris?', tools: respTools });
      const fc = tool.output.find((o: any) => o.type === 'function_call');
      t.equal(fc?.name, 'get_weather', `${label}: function call`);
      t.type(JSON.parse(fc.arguments).city, 'string');
      t.ok(fc.call_id);
      t.match(fc.id, /^fc_/);
      const think: any = await ask({ model, reasoning: { effort: 'low', summary: 'auto' }, input: 'Think [[mock: thinking]]' });
      t.match(think.output_text, /mock reply/, `${label}: answer`);
      const rs = think.output.find((o: any) => o.type === 'reasoning');
      t.ok(rs, `${label}: reasoning item`);
      t.match(rs.id, /^rs_/);
    }
  });
}

t.test('Codex-style loop: Responses client, Anthropic upstream, thinking + tool call round-trip byte-exact', async (t) => {
  const c = openai();
  const first: any = await c.responses.create({
    model: 'via-messages',
    reasoning: { effort: 'low', summary: 'auto' },
    input: 'Weather in Paris? [[mock: thinking]]',
    tools: respTools,
  });
  const rs = first.output.find((o: any) => o.type === 'reasoning');
  const fc = first.output.find((o: any) => o.type === 'function_call');
  t.ok(rs?.encrypted_content, 'the Anthropic signature travels as encrypted_content');
  const firstUp = JSON.parse(g.gw.mocks.get('up-messages')!.requests.at(-1)!.body);
  t.ok(firstUp.thinking, 'thinking requested upstream');
  const second: any = await c.responses.create({
    model: 'via-messages',
    reasoning: { effort: 'low', summary: 'auto' },
    tools: respTools,
    input: [
      { role: 'user', content: 'Weather in Paris? [[mock: thinking]]' },
      rs,
      fc,
      { type: 'function_call_output', call_id: fc.call_id, output: '{"temp":21}' },
    ],
  });
  t.match(second.output_text, /mock reply/);
  const sent = JSON.parse(g.gw.mocks.get('up-messages')!.requests.at(-1)!.body);
  const assistant = sent.messages.find((m: any) => m.role === 'assistant');
  t.equal(assistant.content[0].type, 'thinking', 'the assistant turn starts with its thinking block');
  t.equal(assistant.content[0].signature, rs.encrypted_content, 'signature byte-exact');
  const use = assistant.content.find((b: any) => b.type === 'tool_use');
  t.equal(use.id, fc.call_id, 'tool id verbatim');
  const result = sent.messages.at(-1).content.find((b: any) => b.type === 'tool_result');
  t.equal(result.tool_use_id, fc.call_id);
});

t.test('Chat client with thinking_blocks, Anthropic upstream: signatures round-trip', async (t) => {
  const first = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEY),
    json: {
      model: 'via-messages',
      reasoning_effort: 'low',
      tools: chatTools,
      messages: [{ role: 'user', content: 'Weather? [[mock: thinking]]' }],
    },
  });
  const msg = first.json.choices[0].message;
  t.ok(msg.thinking_blocks?.[0]?.signature, 'thinking_blocks with the signature');
  const second = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEY),
    json: {
      model: 'via-messages',
      reasoning_effort: 'low',
      tools: chatTools,
      messages: [
        { role: 'user', content: 'Weather? [[mock: thinking]]' },
        msg,
        { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: '{"temp":21}' },
      ],
    },
  });
  t.equal(second.status, 200);
  const sent = JSON.parse(g.gw.mocks.get('up-messages')!.requests.at(-1)!.body);
  const assistant = sent.messages.find((m: any) => m.role === 'assistant');
  t.equal(assistant.content[0].signature, msg.thinking_blocks[0].signature, 'signature byte-exact');
  t.equal(assistant.content.find((b: any) => b.type === 'tool_use').id, msg.tool_calls[0].id);
});

t.test('parallel tool calls keep their own ids and arguments across protocols', async (t) => {
  for (const model of MODELS) {
    const s: any = await openai()
      .chat.completions.stream({
        model,
        messages: [{ role: 'user', content: 'both [[mock: tool_calls=2]]' }],
        tools: [
          ...chatTools,
          { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } } } } },
        ],
      } as any)
      .finalChatCompletion();
    const calls = s.choices[0].message.tool_calls;
    t.same(
      calls.map((c: any) => c.function.name),
      ['get_weather', 'get_time'],
      `${model}: two calls in order`,
    );
    t.equal(new Set(calls.map((c: any) => c.id)).size, 2, 'distinct ids');
    for (const c of calls) t.doesNotThrow(() => JSON.parse(c.function.arguments));
  }
});

t.test('converting groups drop response_format, n, seed, user, logprobs; passthrough keeps them', async (t) => {
  const extra = { response_format: { type: 'json_object' }, n: 1, seed: 7, user: 'u-1', logprobs: true };
  const r = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEY),
    json: { model: 'via-messages', messages: [{ role: 'user', content: 'hi' }], ...extra },
  });
  t.equal(r.status, 200);
  const sent = JSON.parse(lastUpstream('via-messages').body);
  for (const k of Object.keys(extra)) t.notOk(k in sent, `${k} dropped when converting`);
  const r2 = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEY),
    json: { model: 'via-chat', messages: [{ role: 'user', content: 'hi' }], ...extra },
  });
  t.equal(r2.status, 200);
  const sent2 = JSON.parse(lastUpstream('via-chat').body);
  for (const k of Object.keys(extra)) t.ok(k in sent2, `${k} kept on the same protocol`);
});

t.test('409 malformed_session_state for invalid Messages histories', async (t) => {
  const cases = [
    [
      'tool result answering no call',
      [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'ok' },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_nope', content: 'x' }] },
      ],
    ],
    [
      'duplicate tool ids',
      [
        { role: 'user', content: 'hi' },
        {
          role: 'assistant',
          content: [
            { type: 'tool_use', id: 'toolu_1', name: 'a', input: {} },
            { type: 'tool_use', id: 'toolu_1', name: 'a', input: {} },
          ],
        },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'x' }] },
      ],
    ],
    [
      'thinking without a signature',
      [
        { role: 'user', content: 'hi' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'hmm' },
            { type: 'text', text: 'ok' },
          ],
        },
        { role: 'user', content: 'more' },
      ],
    ],
    [
      'redacted thinking without data',
      [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: [{ type: 'redacted_thinking' }, { type: 'text', text: 'ok' }] },
        { role: 'user', content: 'more' },
      ],
    ],
  ] as const;
  for (const [name, messages] of cases) {
    for (const model of ['via-messages', 'via-chat']) {
      const r = await call(g.url + '/v1/messages', { headers: bearer(KEY), json: { model, max_tokens: 50, messages } });
      t.equal(r.status, 409, `${name} (${model})`);
      t.equal(r.json.type, 'error');
      t.equal(r.json.error.type, 'malformed_session_state');
      t.equal(r.headers.get('x-should-retry'), 'false');
    }
  }
});
