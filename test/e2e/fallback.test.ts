/**
 * Fallback: the request's `models`, tried in order after `model`, at most 5 attempts, only before
 * anything reached the client; on connection errors, timeouts, 429, 5xx and 529, never on 400.
 * One answer, naming the model that answered; one usage record priced for it; one RPM count.
 */
import t from 'tap';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import {
  baseConfig,
  bearer,
  call,
  chatBody,
  KEYS,
  messagesBody,
  responsesBody,
  startGateway,
  type TestGateway,
} from '../helpers/gateway.js';
import { sseText } from '../helpers/raw.js';
import { ManualClock } from '../../core/clock.js';

let g: TestGateway;
const clock = new ManualClock(Date.UTC(2026, 5, 1, 10, 0, 5));
const upstreams: Record<string, string> = {
  'fail-503': 'fail-503#status=503',
  'fail-429': 'fail-429#status=429',
  'fail-529': 'fail-529#status=529',
  'fail-500': 'fail-500#status=500',
  'fail-502': 'fail-502#status=502',
  'bad-400': 'bad-400#status=400',
  cuts: 'cuts#cut_after=4,words=30',
  hangs: 'hangs#hang',
  'ok-a': 'ok-a',
  'ok-b': 'ok-b',
  // An HTTP 200 stream whose first event after message_start is an error (before commit).
  'event-400': 'event-400#stream_error=1,error_type=invalid_request_error',
  'event-overloaded': 'event-overloaded#stream_error=1,error_type=overloaded_error',
};

t.before(async () => {
  const cfg = baseConfig();
  cfg.server.upstream_idle_timeout = '400ms';
  cfg.server.upstream_timeout = '2s'; // the hanging upstream never sends headers: this ends it
  cfg.providers.down = { kind: 'openai', base_url: 'http://127.0.0.1:9/v1', protocols: ['openai-chat', 'openai-responses'] };
  for (const [id, upstream] of Object.entries(upstreams))
    cfg.models[id] = { provider: 'mock', upstream, price: { input: id === 'ok-b' ? 2 : 1, output: 4 } };
  cfg.models.unreachable = { provider: 'down', price: { input: 1, output: 1 } };
  const ids = [...Object.keys(upstreams), 'unreachable'];
  cfg.groups.chat.models.push(...ids);
  cfg.groups.messages.models.push(...Object.keys(upstreams));
  cfg.groups.responses.models.push(...ids);
  cfg.users.alice.rpm = 3;
  g = await startGateway(cfg, { clock });
});
t.teardown(() => g.close());

const mock = () => g.gw.mocks.get('mock')!;
const upstreamModels = (since: number) =>
  mock()
    .requests.slice(since)
    .map((r) => JSON.parse(r.body).model as string);
const usage = async (key: string) => (await call(g.url + '/v1/usage', { headers: bearer(key) })).json;

t.test('fail, fail, succeed: one answer from the model that answered, one usage record, one RPM count', async (t) => {
  clock.advance(60_000);
  const before = await usage(KEYS.chat);
  const n = mock().requests.length;
  const client = new OpenAI({ baseURL: g.url + '/v1', apiKey: KEYS.chat, maxRetries: 0 });
  const c = await client.chat.completions.create({
    model: 'fail-503',
    models: ['fail-429', 'ok-b'],
    messages: [{ role: 'user', content: 'hi' }],
  } as any);
  t.equal(c.model, 'ok-b', 'the response names the model that answered');
  t.same(upstreamModels(n), ['fail-503#status=503', 'fail-429#status=429', 'ok-b'], 'tried in order');
  t.notOk(
    mock()
      .requests.slice(n)
      .some((r) => 'models' in JSON.parse(r.body)),
    '`models` never goes upstream',
  );
  const after = await usage(KEYS.chat);
  t.equal(after.usage.total.requests, before.usage.total.requests + 1, 'one usage record');
  const stats = after.model_stats.find((m: any) => m.model === 'ok-b');
  t.equal(stats.requests, 1, 'priced and recorded for the model that answered');
  t.notOk(
    after.model_stats.some((m: any) => m.model.startsWith('fail')),
    'nothing recorded for the failed ones',
  );
  // rpm 3: the fallback request counted once, so two more fit in this minute, the next does not.
  t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() })).status, 200);
  t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() })).status, 200);
  t.equal(
    (await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() })).status,
    429,
    'one RPM count for the fallback request',
  );
});

t.test('retryable failures: 5xx, 529, 429, connection errors, timeouts', async (t) => {
  for (const first of ['fail-500', 'fail-502', 'fail-529', 'fail-429', 'unreachable', 'hangs']) {
    clock.advance(60_000);
    const r = await call(g.url + '/v1/chat/completions', {
      headers: bearer(KEYS.chat),
      json: chatBody({ model: first, models: ['ok-a'] }),
    });
    t.equal(r.status, 200, `${first} → falls back`);
    t.equal(r.json.model, 'ok-a');
  }
});

t.test('never on 400: the client error comes back and nothing else is tried', async (t) => {
  clock.advance(60_000);
  const n = mock().requests.length;
  const r = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: chatBody({ model: 'bad-400', models: ['ok-a'] }),
  });
  t.equal(r.status, 400);
  t.equal(r.json.error.type, 'invalid_request_error');
  t.equal(mock().requests.length - n, 1, 'one attempt');
});

t.test('at most 5 attempts in total', async (t) => {
  clock.advance(60_000);
  const n = mock().requests.length;
  const r = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: chatBody({ model: 'fail-503', models: ['fail-500', 'fail-502', 'fail-429', 'fail-529', 'ok-a'] }),
  });
  t.equal(mock().requests.length - n, 5, 'five upstream attempts, the sixth model never tried');
  t.equal(r.status, 503, 'the last failure (529 → 503 overloaded) is returned');
  t.equal(r.json.error.type, 'overloaded_error');
});

t.test('a failure after the first byte: in-stream error, no fallback', async (t) => {
  clock.advance(60_000);
  const n = mock().requests.length;
  const raw = await sseText(g.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ model: 'cuts', models: ['ok-a'], stream: true })),
  });
  t.equal(raw.status, 200);
  t.match(raw.text, /event: error\ndata: \{"error":\{"type":"upstream_error"/);
  t.equal(mock().requests.length - n, 1, 'no second attempt once the client had bytes');
});

t.test('streams fall back while nothing was sent', async (t) => {
  clock.advance(60_000);
  const client = new OpenAI({ baseURL: g.url + '/v1', apiKey: KEYS.chat, maxRetries: 0 });
  const final = await client.chat.completions
    .stream({ model: 'fail-503', models: ['ok-a'], messages: [{ role: 'user', content: 'hi' }] } as any)
    .finalChatCompletion();
  t.equal(final.model, 'ok-a');
  t.ok(final.choices[0].message.content);
});

t.test('the same on Messages and Responses', async (t) => {
  clock.advance(60_000);
  const anthropic = new Anthropic({ apiKey: KEYS.messages, baseURL: g.url, maxRetries: 0 });
  const m = await anthropic.messages
    .stream({ model: 'fail-529', models: ['fail-503', 'ok-b'], max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] } as any)
    .finalMessage();
  t.equal(m.model, 'ok-b', 'Messages stream');
  const mc = await call(g.url + '/v1/messages', {
    headers: bearer(KEYS.messages),
    json: messagesBody({ model: 'fail-500', models: ['ok-a'] }),
  });
  t.equal(mc.json.model, 'ok-a', 'Messages non-stream');
  clock.advance(60_000);
  const openai = new OpenAI({ baseURL: g.url + '/v1', apiKey: KEYS.responses, maxRetries: 0 });
  const r = await openai.responses.stream({ model: 'unreachable', models: ['fail-429', 'ok-b'], input: 'hi' } as any).finalResponse();
  t.equal(r.model, 'ok-b', 'Responses stream');
  const rc = await call(g.url + '/v1/responses', {
    headers: bearer(KEYS.responses),
    json: responsesBody({ model: 'fail-503', models: ['ok-a'] }),
  });
  t.equal(rc.json.model, 'ok-a', 'Responses non-stream');
});

t.test('fallback models the group does not serve are skipped', async (t) => {
  clock.advance(60_000);
  const r = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: chatBody({ model: 'fail-503', models: ['claude-model', 'ok-a'] }),
  });
  t.equal(r.status, 200);
  t.equal(r.json.model, 'ok-a');
});

t.test('an error event streamed before anything reached the client counts by its meaning', async (t) => {
  clock.advance(60_000);
  const send = (model: string) =>
    sseText(g.url + '/v1/messages', {
      method: 'POST',
      headers: { ...bearer(KEYS.messages), 'content-type': 'application/json' },
      body: JSON.stringify({ model, models: ['ok-a'], max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
  let n = mock().requests.length;
  const bad = await send('event-400');
  t.equal(bad.status, 400, 'an invalid_request_error event: a real 400, no fallback');
  t.match(bad.text, /"type":"invalid_request_error"/);
  t.equal(mock().requests.length - n, 1, 'one attempt');
  n = mock().requests.length;
  const over = await send('event-overloaded');
  t.equal(over.status, 200, 'an overloaded_error event: falls back');
  t.match(over.text, /"model":"ok-a"/);
  t.equal(mock().requests.length - n, 2);
});
