/**
 * Requests per minute per group and per user (issue item 6): 429 rate_limit_exceeded with
 * Retry-After = seconds left in the clock minute (exact with a ManualClock); counted once per
 * request — fallback attempts, count_tokens, /v1/models and /v1/usage do not count; rejected
 * requests do not count either.
 */
import t from 'tap';
import { baseConfig, bearer, call, startGateway, type TestGateway } from '../helpers/gateway.js';
import { ManualClock } from '../../core/clock.js';
import { assertError, key, modelCall } from './helpers.js';

const K = { a1: key(0x400), a2: key(0x401), aMsg: key(0x402), b: key(0x403), c: key(0x404), fb: key(0x405) };
const clock = new ManualClock(Date.UTC(2026, 0, 5, 10, 0, 20));
let g: TestGateway;

t.before(async () => {
  const cfg = baseConfig();
  cfg.models['rpm-fail'] = { provider: 'mock', upstream: 'rpm-fail#status=503', price: { input: 1, output: 1 } };
  cfg.groups.limited = { kind: 'chat', passthrough: true, models: ['chat-model', 'free-model', 'rpm-fail'], rpm: 4 };
  cfg.groups.fbgroup = { kind: 'chat', passthrough: true, models: ['chat-model', 'rpm-fail'] };
  cfg.users.u1 = { balance: 10, rpm: 2 };
  cfg.users.u2 = { balance: 10 };
  cfg.users.u3 = { balance: 10, rpm: 1 };
  cfg.users.u4 = { balance: 10, rpm: 2 };
  cfg.keys.push(
    { key: K.a1, name: 'a1', user: 'u1', group: 'limited' },
    { key: K.a2, name: 'a2', user: 'u1', group: 'limited' },
    { key: K.aMsg, name: 'a-msg', user: 'u1', group: 'messages' },
    { key: K.b, name: 'b', user: 'u2', group: 'limited' },
    { key: K.c, name: 'c', user: 'u3', group: 'messages' },
    { key: K.fb, name: 'fb', user: 'u4', group: 'fbgroup' },
  );
  g = await startGateway(cfg, { clock });
});
t.teardown(() => g.close());

const rpm = (retryAfter: string, scope: 'group' | 'user') => ({
  status: 429,
  type: 'rate_limit_exceeded',
  retryAfter,
  message: new RegExp(scope),
});

t.test("user RPM across the user's keys and groups, then group RPM across users; Retry-After = rest of the minute", async (t) => {
  t.equal((await modelCall(g, K.a1, 'chat', 'chat-model')).status, 200);
  t.equal((await modelCall(g, K.a2, 'chat', 'chat-model')).status, 200, 'another key of the same user');
  const r = await modelCall(g, K.a1, 'chat', 'chat-model');
  assertError(t, r, rpm('40', 'user'), 'user limit at :20');
  t.equal(r.json.error.code, 'rate_limit_exceeded');
  t.equal(r.headers.get('retry-after-ms'), '40000');
  t.not(r.headers.get('x-should-retry'), 'false', 'retryable');
  assertError(t, await modelCall(g, K.aMsg, 'messages', 'claude-model'), rpm('40', 'user'), 'the user limit spans groups');
  t.equal((await call(g.url + '/v1/models', { headers: bearer(K.a1) })).status, 200, '/v1/models is not limited');
  t.equal((await call(g.url + '/v1/usage', { headers: bearer(K.a1) })).status, 200, '/v1/usage is not limited');

  t.equal((await modelCall(g, K.b, 'chat', 'chat-model')).status, 200, 'group: 3 of 4');
  t.equal((await modelCall(g, K.b, 'chat', 'free-model')).status, 200, 'group: 4 of 4');
  clock.advance(29_500);
  assertError(t, await modelCall(g, K.b, 'chat', 'chat-model'), rpm('11', 'group'), 'group limit at :49.5 → 10.5 s → 11');
  assertError(t, await modelCall(g, K.a1, 'chat', 'chat-model'), rpm('11', 'group'), 'group first, then user');
  clock.set(Date.UTC(2026, 0, 5, 10, 0, 59, 999));
  assertError(t, await modelCall(g, K.b, 'chat', 'chat-model'), rpm('1', 'group'), 'a millisecond left → 1');
  clock.set(Date.UTC(2026, 0, 5, 10, 1, 0));
  for (const k of [K.a1, K.a2]) t.equal((await modelCall(g, k, 'chat', 'chat-model')).status, 200, 'a new minute');
  t.equal((await modelCall(g, K.b, 'chat', 'chat-model')).status, 200);
  t.equal((await modelCall(g, K.b, 'chat', 'chat-model')).status, 200, 'rejected requests did not count');
  assertError(t, await modelCall(g, K.b, 'chat', 'chat-model'), rpm('60', 'group'));
});

t.test('count_tokens takes no RPM and is not limited by it', async (t) => {
  clock.set(Date.UTC(2026, 0, 5, 11, 0, 0));
  const ct = () =>
    call(g.url + '/v1/messages/count_tokens', {
      headers: bearer(K.c),
      json: { model: 'claude-model', messages: [{ role: 'user', content: 'hi' }] },
    });
  for (let i = 0; i < 4; i++) t.equal((await ct()).status, 200, `count_tokens ${i + 1}`);
  t.equal((await modelCall(g, K.c, 'messages', 'claude-model')).status, 200, 'the one request of the minute');
  assertError(t, await modelCall(g, K.c, 'messages', 'claude-model'), rpm('60', 'user'));
  t.equal((await ct()).status, 200, 'count_tokens still answers at the limit');
});

t.test('a fallback request counts once', async (t) => {
  clock.set(Date.UTC(2026, 0, 5, 12, 0, 30));
  const r = await modelCall(g, K.fb, 'chat', 'rpm-fail', {}, { models: ['rpm-fail', 'chat-model'] });
  t.equal(r.status, 200, 'answered by the fallback model');
  t.equal(r.json.model, 'chat-model');
  t.equal((await modelCall(g, K.fb, 'chat', 'chat-model')).status, 200, 'second request of the minute');
  assertError(t, await modelCall(g, K.fb, 'chat', 'chat-model'), rpm('30', 'user'), 'third');
});

t.test('a request that reached a failing upstream counts; one refused before the upstream does not', async (t) => {
  clock.set(Date.UTC(2026, 0, 5, 13, 0, 10));
  const failed = await modelCall(g, K.fb, 'chat', 'rpm-fail');
  t.equal(failed.status, 502, 'the upstream failed (503 → 502)');
  const bad = await call(g.url + '/v1/chat/completions', {
    headers: bearer(K.fb),
    json: { model: 'chat-model', messages: 'not an array' },
  });
  t.equal(bad.status, 400, 'refused before admission: never counted');
  t.equal((await modelCall(g, K.fb, 'chat', 'chat-model')).status, 200, 'second request of the minute');
  assertError(t, await modelCall(g, K.fb, 'chat', 'chat-model'), rpm('50', 'user'), 'the failed one counted');
});
