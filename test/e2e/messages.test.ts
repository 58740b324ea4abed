/**
 * Messages end to end with @anthropic-ai/sdk 1.x (Authorization: Bearer, anthropic-version
 * 2026-10-21) and 0.x (x-api-key, 2023-06-01): create, stream → finalMessage with text, tool use
 * and thinking, countTokens, models.list, mid-stream failures as thrown errors, upstream headers.
 */
import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import Anthropic0 from 'anthropic0';
import { baseConfig, bearer, call, KEYS, messagesBody, startGateway, type TestGateway } from '../helpers/gateway.js';
import { sseText } from '../helpers/raw.js';

let g: TestGateway;
t.before(async () => {
  const cfg = baseConfig();
  cfg.providers.mock.api_key = 'provider-secret-key';
  g = await startGateway(cfg);
});
t.teardown(() => g.close());

const mock = () => g.gw.mocks.get('mock')!;
const clients = () => [
  {
    name: '@anthropic-ai/sdk 1.x',
    c: new Anthropic({ apiKey: KEYS.messages, baseURL: g.url, maxRetries: 0 }) as any,
    version: '2026-10-21',
    auth: 'authorization',
    APIError: Anthropic.APIError as any,
  },
  {
    name: '@anthropic-ai/sdk 0.x',
    c: new Anthropic0({ apiKey: KEYS.messages, baseURL: g.url, maxRetries: 0 }) as any,
    version: '2023-06-01',
    auth: 'x-api-key',
    APIError: Anthropic0.APIError as any,
  },
];
const tools = [
  {
    name: 'get_weather',
    description: 'Weather for a city',
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
];

t.test('messages.create and stream().finalMessage(): text, tools, thinking', async (t) => {
  for (const { name, c, version, auth } of clients()) {
    const m = await c.messages.create({ model: 'claude-model', max_tokens: 200, messages: [{ role: 'user', content: 'Hello' }] });
    t.equal(m.type, 'message', `${name}: create`);
    t.equal(m.content[0].type, 'text');
    t.equal(m.stop_reason, 'end_turn');
    t.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0);
    const seen = mock().requests.at(-1)!;
    t.equal(seen.headers['x-api-key'], 'provider-secret-key', `${name}: the provider's key goes upstream`);
    t.equal(seen.headers['anthropic-version'], version, `${name}: the client's anthropic-version is forwarded`);
    t.notOk(JSON.stringify(seen.headers).includes(KEYS.messages), `${name}: the client's key never goes upstream (${auth})`);

    const text = await c.messages
      .stream({ model: 'claude-model', max_tokens: 200, messages: [{ role: 'user', content: 'Stream it' }] })
      .finalMessage();
    t.equal(text.content[0].type, 'text', `${name}: stream text`);
    t.ok(text.content[0].text.length > 0);

    const tool = await c.messages
      .stream({ model: 'claude-model', max_tokens: 200, tools, messages: [{ role: 'user', content: 'Weather in Paris?' }] })
      .finalMessage();
    const use = tool.content.find((b: any) => b.type === 'tool_use');
    t.equal(tool.stop_reason, 'tool_use', `${name}: tool use`);
    t.equal(use.name, 'get_weather');
    t.type(use.input.city, 'string');

    const think = await c.messages
      .stream({
        model: 'claude-model',
        max_tokens: 2000,
        thinking: { type: 'enabled', budget_tokens: 1024 },
        messages: [{ role: 'user', content: 'Think first' }],
      })
      .finalMessage();
    t.same(
      think.content.map((b: any) => b.type),
      ['thinking', 'text'],
      `${name}: thinking then text`,
    );
    t.ok(think.content[0].signature.length > 10, 'signature present');
  }
});

t.test('thinking signatures pass through byte for byte', async (t) => {
  const raw = await sseText(g.url + '/v1/messages', {
    method: 'POST',
    headers: { ...bearer(KEYS.messages), 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(
      messagesBody({
        stream: true,
        max_tokens: 8192,
        messages: [
          { role: 'user', content: 'hi [[mock: replay=sse/anthropic/prism.tests-Fixtures-anthropic.stream-with-extended-thinking-1.sse]]' },
        ],
      }),
    ),
  });
  const m = /"signature_delta","signature":"([^"]+)"/.exec(raw.text);
  t.ok(m, 'signature_delta forwarded');
  const { readFileSync } = await import('node:fs');
  const { CONFORMANCE } = await import('../helpers/gateway.js');
  const src = readFileSync(`${CONFORMANCE}/sse/anthropic/prism.tests-Fixtures-anthropic.stream-with-extended-thinking-1.sse`, 'utf8');
  t.ok(src.includes(m![1]), 'identical to the upstream signature');
});

t.test('every frame has its event: line; usage in message_start and message_delta; one usage record', async (t) => {
  const before = (await call(g.url + '/v1/usage', { headers: bearer(KEYS.messages) })).json.usage.total.requests;
  const raw = await sseText(g.url + '/v1/messages', {
    method: 'POST',
    headers: { 'x-api-key': KEYS.messages, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(messagesBody({ stream: true })),
  });
  const frames = raw.text.trim().split('\n\n');
  t.ok(
    frames.every((f) => /^event: \S+\ndata: /.test(f)),
    'event: line on every frame',
  );
  const start = JSON.parse(frames[0].split('\ndata: ')[1]);
  t.type(start.message.usage.input_tokens, 'number');
  const delta = frames.map((f) => JSON.parse(f.split('\ndata: ')[1])).find((d) => d.type === 'message_delta');
  t.type(delta.usage.output_tokens, 'number');
  const after = (await call(g.url + '/v1/usage', { headers: bearer(KEYS.messages) })).json.usage.total.requests;
  t.equal(after, before + 1, 'one usage record for the stream');
});

t.test('count_tokens: answered as the upstream answers, no usage recorded', async (t) => {
  for (const { name, c } of clients()) {
    const before = (await call(g.url + '/v1/usage', { headers: bearer(KEYS.messages) })).json.usage.total.requests;
    const r = await c.messages.countTokens({
      model: 'claude-model',
      messages: [{ role: 'user', content: 'one two three four' }],
      system: 'sys',
    });
    t.type(r.input_tokens, 'number', `${name}: countTokens`);
    t.ok(r.input_tokens > 0);
    const after = (await call(g.url + '/v1/usage', { headers: bearer(KEYS.messages) })).json.usage.total.requests;
    t.equal(after, before, 'count_tokens is not usage');
  }
  const bad = await call(g.url + '/v1/messages/count_tokens', {
    headers: bearer(KEYS.messages),
    json: { model: 'claude-model', messages: [{ role: 'user', content: 'x [[mock: status=500]]' }] },
  });
  t.equal(bad.status, 503, 'no 502 on count_tokens: upstream failures are 503');
  t.equal(bad.json.type, 'error');
  const unknown = await call(g.url + '/v1/messages/count_tokens', {
    headers: bearer(KEYS.messages),
    json: { model: 'nope', messages: [] },
  });
  t.equal(unknown.status, 503);
});

t.test('models.list: Messages-style entries for Anthropic clients', async (t) => {
  for (const { name, c } of clients()) {
    const page = await c.models.list();
    const ids = page.data.map((m: any) => m.id);
    t.same(ids, ['claude-model', 'free-model'], `${name}: the group's models`);
    t.same(page.data[0], { id: 'claude-model', type: 'model', display_name: 'claude-model', created_at: '2024-01-01T00:00:00Z' });
  }
});

t.test('failures mid-stream are thrown by both SDKs; upstream statuses map', async (t) => {
  for (const { name, c, APIError } of clients()) {
    const cut = await c.messages
      .stream({ model: 'claude-model', max_tokens: 200, messages: [{ role: 'user', content: 'x [[mock: cut_after=4 words=20]]' }] })
      .finalMessage()
      .then(
        () => undefined,
        (e: any) => e,
      );
    t.ok(cut instanceof APIError, `${name}: cut stream throws the SDK's APIError`);
    t.match(String(cut?.message), /upstream_error|ended before completion/);
    // chunk_delay: the error frame comes after content reached the client (after commit).
    const over = await c.messages
      .stream({
        model: 'claude-model',
        max_tokens: 200,
        messages: [{ role: 'user', content: 'x [[mock: stream_error=6 words=20 chunk_delay=20]]' }],
      })
      .finalMessage()
      .then(
        () => undefined,
        (e: any) => e,
      );
    t.ok(over instanceof APIError, `${name}: upstream error event throws the SDK's APIError`);
    t.match(String(over?.message), /overloaded_error/);
    const raw = await sseText(g.url + '/v1/messages', {
      method: 'POST',
      headers: { ...bearer(KEYS.messages), 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'claude-model',
        max_tokens: 200,
        stream: true,
        messages: [{ role: 'user', content: 'x [[mock: stream_error=6 words=20 chunk_delay=20]]' }],
      }),
    });
    t.equal(raw.status, 200, `${name}: the stream had started`);
    t.match(
      raw.text,
      /text_delta[\s\S]*event: error\ndata: \{"type":"error","error":\{"type":"overloaded_error"/,
      'the error event after content',
    );
    const s529 = await c.messages
      .create({ model: 'claude-model', max_tokens: 50, messages: [{ role: 'user', content: 'x [[mock: status=529 retry_after=3]]' }] })
      .then(
        () => undefined,
        (e: any) => e,
      );
    t.equal(s529?.status, 503, `${name}: 529 → 503`);
    t.equal(s529?.error?.error?.type, 'overloaded_error');
    t.equal(s529?.headers?.get?.('retry-after') ?? s529?.headers?.['retry-after'], '3', 'retry-after passed through');
    const s429 = await c.messages
      .create({ model: 'claude-model', max_tokens: 50, messages: [{ role: 'user', content: 'x [[mock: status=429]]' }] })
      .then(
        () => undefined,
        (e: any) => e,
      );
    t.equal(s429?.status, 429);
    t.equal(s429?.error?.error?.type, 'rate_limit_error');
    const s400 = await c.messages
      .create({ model: 'claude-model', max_tokens: 50, messages: [{ role: 'user', content: 'x [[mock: status=400]]' }] })
      .then(
        () => undefined,
        (e: any) => e,
      );
    t.equal(s400?.status, 400);
    t.equal(s400?.error?.error?.type, 'invalid_request_error');
  }
});

t.test('an error before the first event is a real HTTP error (fallback could still run)', async (t) => {
  const r = await call(g.url + '/v1/messages', {
    headers: bearer(KEYS.messages),
    json: messagesBody({
      stream: true,
      messages: [{ role: 'user', content: 'x [[mock: replay=sse/anthropic/anthropic-docs.streaming.error-event.sse]]' }],
    }),
  });
  t.equal(r.status, 503);
  t.same(r.json, { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
});

t.test('Claude Code style: POST /v1/messages?beta=true with x-api-key and anthropic-beta', async (t) => {
  const r = await call(g.url + '/v1/messages?beta=true', {
    headers: {
      'x-api-key': KEYS.messages,
      'anthropic-version': '2023-06-01',
      'anthropic-beta': 'claude-code-20250219,interleaved-thinking-2025-05-14',
    },
    json: messagesBody({ system: 'x'.repeat((70 * 1024) / 2), messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(r.status, 200);
  t.equal(mock().requests.at(-1)!.headers['anthropic-beta'], 'claude-code-20250219,interleaved-thinking-2025-05-14');
});
