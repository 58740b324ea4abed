/**
 * Chat Completions end to end with the official openai SDK (6.x) against the gateway and its mock
 * upstream: completions, streams (`.stream()` → `finalChatCompletion()`), tools, the usage chunk,
 * upstream failures mapped per wire-notes, and mid-stream death as a thrown error.
 */
import t from 'tap';
import OpenAI from 'openai';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';
import { rawRequest, sseText } from '../helpers/raw.js';

let g: TestGateway;
let client: OpenAI;

t.before(async () => {
  const cfg = baseConfig();
  cfg.models['chat-upstream-named'] = { provider: 'mock', upstream: 'vendor/Real-Model-7B', price: { input: 1, output: 1 } };
  cfg.groups.chat.models.push('chat-upstream-named');
  g = await startGateway(cfg);
  client = new OpenAI({ baseURL: g.url + '/v1', apiKey: KEYS.chat, maxRetries: 0 });
});
t.teardown(() => g.close());

const mock = () => g.gw.mocks.get('mock')!;

t.test('chat.completions.create', async (t) => {
  const c = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'Say hello' }] });
  t.equal(c.object, 'chat.completion');
  t.equal(c.choices[0].message.role, 'assistant');
  t.type(c.choices[0].message.content, 'string');
  t.ok(c.choices[0].message.content!.length > 0);
  t.equal(c.choices[0].finish_reason, 'stop');
  t.ok(c.usage!.prompt_tokens > 0 && c.usage!.completion_tokens > 0);
  t.equal(c.usage!.total_tokens, c.usage!.prompt_tokens + c.usage!.completion_tokens);
});

t.test('a non-streaming answer is sent with its content-length, not chunked (as the providers send it)', async (t) => {
  // The mock echoes the prompt's first words: a non-ASCII answer, whose length is in bytes.
  const r = await rawRequest(g.url + '/v1/chat/completions', {
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ messages: [{ role: 'user', content: 'Grüße 世界' }] })),
  });
  t.equal(r.status, 200);
  t.ok(Buffer.byteLength(r.text) > r.text.length, 'the answer has multi-byte characters');
  t.equal(r.headers['transfer-encoding'], undefined, 'not chunked');
  t.equal(r.headers['content-length'], String(Buffer.byteLength(r.text)), "content-length is the body's length in bytes");
  t.equal(r.json.object, 'chat.completion');
});

t.test('chat.completions.stream → finalChatCompletion, ending with a usage chunk and [DONE]', async (t) => {
  const stream = client.chat.completions.stream({ model: 'chat-model', messages: [{ role: 'user', content: 'Stream please' }] });
  let deltas = '';
  for await (const chunk of stream) deltas += chunk.choices[0]?.delta?.content ?? '';
  const final = await stream.finalChatCompletion();
  t.equal(final.choices[0].message.content, deltas);
  t.equal(final.choices[0].finish_reason, 'stop');
  t.ok(final.usage && final.usage.completion_tokens > 0, 'usage reached the client although it did not ask');
  const upstreamBody = JSON.parse(mock().requests.at(-1)!.body);
  t.same(upstreamBody.stream_options, { include_usage: true }, 'usage always requested upstream');

  const raw = await sseText(g.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ stream: true })),
  });
  t.equal(raw.status, 200);
  t.match(raw.headers.get('content-type'), /text\/event-stream/);
  const frames = raw.text.trim().split('\n\n');
  t.equal(frames.at(-1), 'data: [DONE]');
  const usageChunk = JSON.parse(frames.at(-2)!.slice(6));
  t.same(usageChunk.choices, []);
  t.ok(usageChunk.usage.total_tokens > 0);
  t.notMatch(raw.text, /^event:/m, 'no named events in a healthy Chat stream');
});

t.test('tools: a streamed tool call survives intact', async (t) => {
  const tools = [
    {
      type: 'function' as const,
      function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
    },
  ];
  const nonStream = await client.chat.completions.create({
    model: 'chat-model',
    messages: [{ role: 'user', content: 'weather? [[mock: tools]]' }],
    tools,
  });
  const call0 = nonStream.choices[0].message.tool_calls![0] as any;
  t.equal(nonStream.choices[0].finish_reason, 'tool_calls');
  t.equal(call0.function.name, 'get_weather');
  t.doesNotThrow(() => JSON.parse(call0.function.arguments));
  const stream = client.chat.completions.stream({
    model: 'chat-model',
    messages: [{ role: 'user', content: 'weather? [[mock: tools]]' }],
    tools,
  });
  const final = await stream.finalChatCompletion();
  const sc = final.choices[0].message.tool_calls![0] as any;
  t.equal(sc.function.name, 'get_weather');
  t.same(JSON.parse(sc.function.arguments), JSON.parse(call0.function.arguments), 'same arguments streamed and not');
});

t.test('passthrough: the upstream gets the client body unchanged but for model', async (t) => {
  const body =
    '{ "model" : "chat-upstream-named",  "models": ["chat-model"], "messages":[{"role":"user","content":"exact bytes"}], "seed": 12345678901234567890, "temperature": 1.0, "x_custom": {"keep": [1, 2.50]} }';
  const r = await call(g.url + '/v1/chat/completions', {
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body,
    method: 'POST',
  });
  t.equal(r.status, 200);
  const sent = mock().requests.at(-1)!;
  const expected =
    '{ "model" : "vendor/Real-Model-7B",  "messages":[{"role":"user","content":"exact bytes"}], "seed": 12345678901234567890, "temperature": 1.0, "x_custom": {"keep": [1, 2.50]} }';
  t.equal(sent.body, expected, 'byte-equivalent except model (and models removed)');
  t.notOk(JSON.stringify(sent.headers).includes(KEYS.chat), 'the client key never goes upstream');
});

t.test('model names of the form <provider>/<model> resolve', async (t) => {
  const r = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody({ model: 'mock/chat-model' }) });
  t.equal(r.status, 200);
  const r2 = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: chatBody({ model: 'mock/vendor/Real-Model-7B' }),
  });
  t.equal(r2.status, 200, 'by upstream name');
  const r3 = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody({ model: 'mock/claude-model' }) });
  t.equal(r3.status, 503, 'still only models the group serves');
});

t.test('upstream failures map per wire-notes and reach the SDK as its error classes', async (t) => {
  const ask = (directive: string) =>
    client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: `x [[mock: ${directive}]]` }] });
  const cases: Array<[string, number, any, string]> = [
    ['status=400', 400, OpenAI.BadRequestError, 'invalid_request_error'],
    ['status=422', 400, OpenAI.BadRequestError, 'invalid_request_error'],
    ['status=401', 502, OpenAI.InternalServerError, 'upstream_error'],
    ['status=403', 502, OpenAI.InternalServerError, 'upstream_error'],
    ['status=429 retry_after=7', 429, OpenAI.RateLimitError, 'rate_limit_error'],
    ['status=500', 502, OpenAI.InternalServerError, 'upstream_error'],
    ['status=503', 502, OpenAI.InternalServerError, 'upstream_error'],
    ['status=529', 503, OpenAI.InternalServerError, 'overloaded_error'],
  ];
  for (const [d, status, cls, type] of cases) {
    const err: any = await ask(d).then(
      () => undefined,
      (e) => e,
    );
    t.ok(err instanceof cls, `${d}: ${cls.name}`);
    t.equal(err?.status, status, `${d}: status ${status}`);
    t.equal(err?.type, type, `${d}: type`);
  }
  const limited = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: chatBody({ messages: [{ role: 'user', content: '[[mock: status=429 retry_after=7]]' }] }),
  });
  t.equal(limited.headers.get('retry-after'), '7', 'provider retry-after passed through');
  t.ok(
    [...limited.headers.keys()].some((h) => h.startsWith('x-ratelimit-')),
    'provider x-ratelimit-* passed through',
  );
});

t.test("the upstream's own in-stream error after content: a named error event, and the SDK throws", async (t) => {
  const text = 'x [[mock: stream_error=6 words=20 chunk_delay=20]]';
  const err = await client.chat.completions
    .stream({ model: 'chat-model', messages: [{ role: 'user', content: text }] })
    .finalChatCompletion()
    .then(
      () => undefined,
      (e) => e,
    );
  t.ok(err instanceof OpenAI.APIError, "finalChatCompletion rejects with the SDK's APIError");
  const raw = await sseText(g.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ stream: true, messages: [{ role: 'user', content: text }] })),
  });
  t.equal(raw.status, 200, 'the stream had started');
  t.match(
    raw.text,
    /"content":"[\s\S]*event: error\ndata: \{"error":\{"type":"server_error"/,
    "event: error, then the upstream's error (wire-notes)",
  );
  t.notMatch(raw.text, /\n\ndata: \{"error"/, 'never the bare data: frame');
  t.notMatch(raw.text, /\[DONE\]/);
});

t.test('an upstream that dies mid-stream: the SDK throws, never a silent success', async (t) => {
  const stream = client.chat.completions.stream({
    model: 'chat-model',
    messages: [{ role: 'user', content: 'long [[mock: cut_after=3 words=30]]' }],
  });
  const err = await stream.finalChatCompletion().then(
    () => undefined,
    (e) => e,
  );
  t.ok(err instanceof OpenAI.APIError, "finalChatCompletion rejects with the SDK's APIError");
  t.match(String(err?.message), /upstream|ended/i);
  const raw = await sseText(g.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ stream: true, messages: [{ role: 'user', content: '[[mock: cut_after=3 words=30]]' }] })),
  });
  t.equal(raw.status, 200);
  t.match(raw.text, /event: error\ndata: \{"error":\{"type":"upstream_error"/);
  t.notMatch(raw.text, /\[DONE\]/);
});

t.test('an upstream that forgets usage or [DONE]: the client still gets both', async (t) => {
  for (const d of ['no_usage', 'no_done', 'no_usage no_done']) {
    const raw = await sseText(g.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
      body: JSON.stringify(chatBody({ stream: true, messages: [{ role: 'user', content: `[[mock: ${d}]]` }] })),
    });
    const frames = raw.text.trim().split('\n\n');
    t.equal(frames.at(-1), 'data: [DONE]', `${d}: ends with [DONE]`);
    const usage = JSON.parse(frames.at(-2)!.slice(6));
    t.ok(usage.usage.total_tokens > 0, `${d}: usage chunk before it`);
    // A usage chunk the gateway makes up carries the stream's own id, model and time.
    const first = JSON.parse(frames[0].slice(6));
    t.same([usage.id, usage.model, usage.created], [first.id, first.model, first.created], `${d}: the stream's id, model and created`);
  }
});

t.test('a request the upstream never answers times out as 502', async (t) => {
  const cfg = baseConfig();
  cfg.server.upstream_idle_timeout = '300ms';
  cfg.server.upstream_timeout = '600ms'; // waiting for the headers is upstream_timeout's, not the idle timeout's
  const g2 = await startGateway(cfg);
  t.teardown(() => g2.close());
  const r = await call(g2.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: chatBody({ messages: [{ role: 'user', content: '[[mock: hang]]' }] }),
  });
  t.equal(r.status, 502);
  t.equal(r.json.error.type, 'upstream_error');
  t.match(r.json.error.message, /timed out/);
  const s = await sseText(g2.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ stream: true, messages: [{ role: 'user', content: '[[mock: hang_after=2 words=5]]' }] })),
  });
  t.match(s.text, /event: error\ndata: .*idle timeout/, 'a stream that goes silent gets an error event');
});

t.test('a silent upstream: the preamble is released after preamble_hold, keepalive comments bridge the silence', async (t) => {
  const cfg = baseConfig();
  cfg.server.preamble_hold = '150ms';
  cfg.server.stream_keepalive = '100ms';
  cfg.server.upstream_idle_timeout = '900ms';
  const g2 = await startGateway(cfg);
  t.teardown(() => g2.close());
  const res = await fetch(g2.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ stream: true, messages: [{ role: 'user', content: '[[mock: hang_after=1]]' }] })),
  });
  t.equal(res.status, 200, 'headers sent although no content came (an idle failure before commit would be a 502)');
  const text = await res.text();
  t.match(text, /^data: \{.*"role":"assistant"/, 'the held preamble first');
  t.match(text, /\n: keepalive\n\n/, 'keepalive comments during the silence');
  t.match(text, /event: error\ndata: .*idle timeout/, 'then the idle timeout as an error event');
});
