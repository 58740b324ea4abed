/** The real `openai` 6.x SDK pointed straight at the mock: Chat Completions and Responses. */
import t from 'tap';
import OpenAI from 'openai';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { CONFORMANCE } from './helpers.js';

let mock: MockServer;
let client: OpenAI;
t.before(async () => {
  mock = await startMockServer({ fixturesDir: CONFORMANCE });
  client = new OpenAI({ apiKey: 'sk-test-upstream', baseURL: `${mock.url}/v1`, maxRetries: 0, timeout: 10_000 });
});
t.teardown(() => mock.close());

const weather = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['c', 'f'] } },
      required: ['city', 'unit'],
    },
  },
};
const clock = { type: 'function' as const, function: { name: 'get_time', parameters: { type: 'object', properties: {} } } };

t.test('chat.completions.create (text)', async (t) => {
  const c = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'Hello mock' }] });
  t.equal(c.object, 'chat.completion');
  t.equal(c.model, 'chat-model');
  t.equal(c.choices[0].message.content, 'This is a mock reply. You said: Hello mock');
  t.equal(c.choices[0].finish_reason, 'stop');
  t.match(c.usage, {
    prompt_tokens: 2,
    completion_tokens: 9,
    total_tokens: 11,
    prompt_tokens_details: { cached_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0 },
  });
  const rec = mock.requests[mock.requests.length - 1];
  t.equal(rec.headers.authorization, 'Bearer sk-test-upstream');
  t.equal(rec.path, '/v1/chat/completions');
  t.same(JSON.parse(rec.body), { model: 'chat-model', messages: [{ role: 'user', content: 'Hello mock' }] });
});

t.test('chat.completions.stream().finalChatCompletion() (text, include_usage, cache)', async (t) => {
  const s = client.chat.completions.stream({
    model: 'chat-model',
    messages: [{ role: 'user', content: 'Stream please [[mock: words=12 cache_read=4]]' }],
    stream_options: { include_usage: true },
  });
  const deltas: string[] = [];
  s.on('content', (d) => deltas.push(d));
  const c = await s.finalChatCompletion();
  t.equal(c.choices[0].message.content, 'This is a mock reply. You said: Stream please lorem ipsum dolor');
  t.ok(deltas.length >= 12, 'several content deltas');
  t.equal(c.choices[0].finish_reason, 'stop');
  t.match(c.usage, { prompt_tokens: 6, completion_tokens: 12, total_tokens: 18, prompt_tokens_details: { cached_tokens: 4 } });
});

t.test('chat stream with tools: finalChatCompletion has the calls', async (t) => {
  const s = client.chat.completions.stream({
    model: 'chat-model',
    messages: [{ role: 'user', content: 'Weather and time? [[mock: tool_calls=2]]' }],
    tools: [weather, clock],
  });
  const c = await s.finalChatCompletion();
  const calls = c.choices[0].message.tool_calls ?? [];
  t.equal(c.choices[0].finish_reason, 'tool_calls');
  t.equal(calls.length, 2);
  t.match(calls[0], { type: 'function', function: { name: 'get_weather', arguments: '{"city":"mock","unit":"c"}' } });
  t.match(calls[1], { type: 'function', function: { name: 'get_time', arguments: '{}' } });
  t.match(calls[0].id, /^call_/);
  t.not(calls[0].id, calls[1].id);
  // Non-streaming tool call too.
  const n = await client.chat.completions.create({
    model: 'chat-model',
    messages: [{ role: 'user', content: 'Weather?' }],
    tools: [weather],
  });
  t.equal(n.choices[0].message.content, null);
  t.equal(
    n.choices[0].message.tool_calls?.[0].type === 'function' && n.choices[0].message.tool_calls[0].function.arguments,
    '{"city":"mock","unit":"c"}',
  );
});

t.test('chat stream with thinking: reasoning_content deltas', async (t) => {
  const stream = await client.chat.completions.create({
    model: 'chat-model#thinking',
    messages: [{ role: 'user', content: 'Think' }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let reasoning = '';
  let content = '';
  let usage: OpenAI.CompletionUsage | null | undefined;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined;
    reasoning += d?.reasoning_content ?? '';
    content += d?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  t.equal(reasoning, 'Thinking about the request: Think. A short deterministic answer will do.');
  t.equal(content, 'This is a mock reply. You said: Think');
  t.equal(usage?.completion_tokens_details?.reasoning_tokens, 11);
  t.equal(usage?.completion_tokens, 19, 'reasoning included in completion tokens');
});

t.test('responses.create (text, function call)', async (t) => {
  const r = await client.responses.create({ model: 'gpt-model', input: 'Hello responses', instructions: 'Be nice.' });
  t.equal(r.object, 'response');
  t.equal(r.status, 'completed');
  t.equal(r.model, 'gpt-model');
  t.equal(r.output_text, 'This is a mock reply. You said: Hello responses');
  t.match(r.usage, {
    input_tokens: 4,
    output_tokens: 9,
    total_tokens: 13,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens_details: { reasoning_tokens: 0 },
  });
  const f = await client.responses.create({
    model: 'gpt-model',
    input: [{ role: 'user', content: 'Weather?' }],
    tools: [{ type: 'function', name: 'get_weather', parameters: weather.function.parameters, strict: true }],
  });
  const call = f.output[0];
  t.equal(call.type, 'function_call');
  if (call.type === 'function_call') {
    t.match(call.id, /^fc_/);
    t.match(call.call_id, /^call_/);
    t.equal(call.arguments, '{"city":"mock","unit":"c"}');
  }
});

t.test('responses.stream().finalResponse() (text, function calls, reasoning)', async (t) => {
  const text = await client.responses.stream({ model: 'gpt-model', input: 'Stream it' }).finalResponse();
  t.equal(text.output_text, 'This is a mock reply. You said: Stream it');
  t.equal(text.status, 'completed');
  t.match(text.output[0].id, /^msg_/);
  t.equal(text.usage?.output_tokens, 9);

  const tools = [
    { type: 'function' as const, name: 'get_weather', parameters: weather.function.parameters, strict: true },
    { type: 'function' as const, name: 'get_time', parameters: { type: 'object', properties: {} }, strict: false },
  ];
  const calls = await client.responses
    .stream({ model: 'gpt-model', input: [{ role: 'user', content: 'Both [[mock: tool_calls=2]]' }], tools })
    .finalResponse();
  t.same(
    calls.output.map((o) => (o.type === 'function_call' ? [o.name, o.arguments, o.status] : o.type)),
    [
      ['get_weather', '{"city":"mock","unit":"c"}', 'completed'],
      ['get_time', '{}', 'completed'],
    ],
  );

  const reasoning = await client.responses
    .stream({ model: 'gpt-model', input: 'Why?', reasoning: { effort: 'low', summary: 'detailed' } })
    .finalResponse();
  const rs = reasoning.output[0];
  t.equal(rs.type, 'reasoning');
  if (rs.type === 'reasoning') {
    t.match(rs.id, /^rs_/);
    t.equal(rs.summary[0]?.text, 'Thinking about the request: Why? A short deterministic answer will do.');
    t.match(rs.encrypted_content, /^gAAAAAB/);
  }
  t.equal(reasoning.output_text, 'This is a mock reply. You said: Why?');
  t.equal(reasoning.usage?.output_tokens_details.reasoning_tokens, 11);
  t.equal(reasoning.reasoning?.effort, 'low', 'request settings echoed');
});

t.test('responses max_output_tokens → incomplete', async (t) => {
  const r = await client.responses.stream({ model: 'gpt-model', input: 'Long', max_output_tokens: 4 }).finalResponse();
  t.equal(r.status, 'incomplete');
  t.equal(r.incomplete_details?.reason, 'max_output_tokens');
  t.equal(r.output_text, 'This is a mock');
});

t.test('HTTP errors surface as the proper error classes', async (t) => {
  const cases: [number, any][] = [
    [400, OpenAI.BadRequestError],
    [401, OpenAI.AuthenticationError],
    [429, OpenAI.RateLimitError],
    [500, OpenAI.InternalServerError],
    [503, OpenAI.InternalServerError],
    [529, OpenAI.InternalServerError],
  ];
  for (const [status, cls] of cases) {
    const err = await client.chat.completions
      .create({ model: `chat-model#status=${status}`, messages: [{ role: 'user', content: 'x' }] })
      .catch((e) => e);
    t.ok(err instanceof cls, `chat ${status} → ${cls.name}`);
    t.equal(err.status, status);
    t.match(err.requestID, /^req_/);
    const rerr = await client.responses
      .stream({ model: 'gpt-model', input: `x [[mock: status=${status}]]` })
      .finalResponse()
      .catch((e) => e);
    t.ok(rerr instanceof cls, `responses stream ${status} → ${cls.name}`);
    t.equal(rerr.status, status);
  }
  const rl = await client.chat.completions
    .create({ model: 'chat-model#status=429', messages: [{ role: 'user', content: 'x' }] })
    .catch((e) => e);
  t.equal(rl.type, 'requests');
  t.equal(rl.code, 'rate_limit_exceeded');
  t.equal(rl.headers.get('retry-after'), '1');
});

t.test('in-stream errors and cut streams throw', async (t) => {
  const chatErr = await client.chat.completions
    .stream({ model: 'chat-model#stream_error=3', messages: [{ role: 'user', content: 'x' }] })
    .finalChatCompletion()
    .catch((e) => e);
  t.ok(chatErr instanceof OpenAI.APIError, 'chat stream_error → APIError');
  t.match(String(chatErr.message), /server had an error/);

  const chatCut = await client.chat.completions
    .stream({ model: 'chat-model#cut_after=3', messages: [{ role: 'user', content: 'x' }] })
    .finalChatCompletion()
    .then(
      () => 'resolved',
      (e) => e,
    );
  t.ok(chatCut instanceof Error, 'chat cut_after → thrown');

  const respErr = await client.responses
    .stream({ model: 'gpt-model#stream_error=4', input: 'x' })
    .finalResponse()
    .catch((e) => e);
  t.ok(respErr instanceof OpenAI.APIError, 'responses stream_error → APIError');

  const respCut = await client.responses
    .stream({ model: 'gpt-model#cut_after=4', input: 'x' })
    .finalResponse()
    .then(
      () => 'resolved',
      (e) => e,
    );
  t.ok(respCut instanceof Error, 'responses cut_after → thrown');

  const createCut = await client.chat.completions
    .create({ model: 'chat-model#cut_after=20', messages: [{ role: 'user', content: 'x' }] })
    .then(
      () => 'resolved',
      (e) => e,
    );
  t.ok(createCut instanceof Error, 'non-stream cut_after → thrown');
});

t.test('replayed transcripts go through the SDK', async (t) => {
  const c = await client.chat.completions
    .stream({
      model: 'x#replay=sse/openai-chat/dotnet-extensions.OpenAIChatClientTests.FunctionCallContent_Streaming.sse',
      messages: [{ role: 'user', content: 'x' }],
    })
    .finalChatCompletion();
  const tc = c.choices[0].message.tool_calls?.[0];
  t.equal(tc?.type === 'function' && tc.function.name, 'GetPersonAge');
  const r = await client.responses
    .stream({ model: 'x#replay=sse/openai-responses/prism.tests-Fixtures-openai.stream-basic-text-responses-1.sse', input: 'x' })
    .finalResponse();
  t.match(r.output_text, /^I am OpenAI/);
});
