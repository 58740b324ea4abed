/**
 * Account health through a real gateway: a 429 with retry-after takes an account out for exactly
 * that long while clients see 200s; every account cooling gives the documented 429; a provider
 * 401 disables the account (loudly, without ever logging its key) until a reload; a slow account
 * stops winning new sessions.
 */
import t from 'tap';
import { KEYS, call, startGateway, type TestGateway } from '../helpers/gateway.js';
import { createLogger } from '../../core/log.js';
import { sleep } from '../helpers/upstream.js';
import { ADMIN_TOKEN, accountsView, chatCall, counts, cred, delta, poolConfig, runPool } from './helpers.js';

let g: TestGateway;
const lines: string[] = [];

t.before(async () => {
  g = await startGateway(
    poolConfig({
      rl: { accounts: [{ name: 'a' }, { name: 'b' }] },
      cool: { accounts: [{ name: 'a' }, { name: 'b' }] },
      auth: { accounts: [{ name: 'a' }, { name: 'b' }] },
      dead: { accounts: [{ name: 'a' }, { name: 'b' }] },
      slow: { accounts: [{ name: 'slow' }, { name: 'fast' }] },
    }),
    { log: createLogger('info', (l) => lines.push(l)) },
  );
});
t.teardown(() => g.close());

t.test('429 with retry-after: 2 → no request to that account for 2 s, clients all see 200, traffic returns', async (t) => {
  const mock = g.gw.mocks.get('rl')!;
  const a = mock.credential(cred('rl', 'a'));
  mock.script(cred('rl', 'a'), { next: ['status=429 retry_after=2'] });
  const statuses: number[] = [];
  const deadline = Date.now() + 15_000;
  let returned = false;
  for (let i = 0; Date.now() < deadline && !returned; i++) {
    statuses.push((await chatCall(g.url, KEYS.chat, 'rl-model', `turn ${i}`)).status);
    returned = a.arrivals.length >= 2 && a.arrivals[a.arrivals.length - 1] - a.arrivals[0] >= 2000;
    if (a.requests === 1) await sleep(10);
  }
  t.ok(
    statuses.every((s) => s === 200),
    `every client got 200 (${statuses.length} requests)`,
  );
  t.ok(a.requests >= 2, 'the account was asked again afterwards');
  t.ok(a.arrivals[1] - a.arrivals[0] >= 2000, `nothing reached it for 2 s (next after ${a.arrivals[1] - a.arrivals[0]} ms)`);
  t.ok(returned, 'traffic returned to it');
});

t.test('every account cooling → 429 rate_limit_error with Retry-After, nothing sent upstream', async (t) => {
  const mock = g.gw.mocks.get('cool')!;
  mock.script(cred('cool', 'a'), { next: ['status=429 retry_after=5'] });
  mock.script(cred('cool', 'b'), { next: ['status=429 retry_after=5'] });
  const first = await chatCall(g.url, KEYS.chat, 'cool-model', 'first');
  t.equal(first.status, 429, 'both accounts answered 429: the provider rate limit reaches the client');
  t.same(counts(mock, 'cool', ['a', 'b']), { a: 1, b: 1 }, 'each account tried once');
  const second = await chatCall(g.url, KEYS.chat, 'cool-model', 'second');
  t.equal(second.status, 429);
  t.equal(second.json.error.type, 'rate_limit_error');
  t.match(second.json.error.message, /^No available accounts for model 'cool-model' right now: every account is cooling down/);
  const ra = Number(second.headers.get('retry-after'));
  t.ok(ra >= 1 && ra <= 5, `Retry-After ${ra}: until the first account comes back`);
  t.ok(Number(second.headers.get('retry-after-ms')) <= 5000);
  t.equal(second.headers.get('x-should-retry'), null, 'retryable');
  t.same(counts(mock, 'cool', ['a', 'b']), { a: 1, b: 1 }, 'nothing sent upstream');
  const view = await accountsView(g.gw);
  t.equal(view.cool.a.state, 'cooling');
  t.equal(view.cool.a.cooldown_reason, 'rate_limited');
  t.ok(Date.parse(view.cool.a.cooling_until) > Date.now());
});

t.test('a provider 401 disables the account until reload, loudly, without logging its key', async (t) => {
  const mock = g.gw.mocks.get('auth')!;
  const a = mock.credential(cred('auth', 'a'));
  mock.script(cred('auth', 'a'), { next: ['status=401'] });
  const statuses: number[] = [];
  for (let i = 0; i < 40 && a.requests === 0; i++) statuses.push((await chatCall(g.url, KEYS.chat, 'auth-model', `before ${i}`)).status);
  t.equal(a.requests, 1, 'the account got its 401');
  t.ok(
    statuses.every((s) => s === 200),
    'the client never noticed: failover',
  );
  const before = counts(mock, 'auth', ['a', 'b']);
  const after = await runPool(30, 4, (i) => chatCall(g.url, KEYS.chat, 'auth-model', `after ${i}`));
  t.ok(after.every((r) => r.status === 200));
  t.same(delta(counts(mock, 'auth', ['a', 'b']), before), { a: 0, b: 30 }, 'the disabled account gets nothing');
  const view = await accountsView(g.gw);
  t.equal(view.auth.a.state, 'disabled');
  t.equal(view.auth.a.disabled.status, 401);
  t.equal(view.auth.a.available, false);
  t.equal(view.auth.b.state, 'available');
  const loud = lines.map((l) => JSON.parse(l)).find((l) => l.level === 'error' && /DISABLED/.test(l.msg));
  t.ok(loud, 'logged at error level');
  t.equal(loud?.account, 'auth/a', 'naming the account');
  t.notOk(
    lines.some((l) => l.includes(cred('auth', 'a'))),
    'the key is never logged',
  );

  const r = await call(g.url + '/admin/reload', { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  t.equal(r.status, 200);
  t.equal((await accountsView(g.gw)).auth.a.state, 'available', 'a reload puts it back');
  const back = counts(mock, 'auth', ['a', 'b']);
  await runPool(40, 4, (i) => chatCall(g.url, KEYS.chat, 'auth-model', `reloaded ${i}`));
  t.ok(delta(counts(mock, 'auth', ['a', 'b']), back).a > 0, 'and it takes requests again');
});

t.test('every account disabled → 503 api_error that says not to retry', async (t) => {
  const mock = g.gw.mocks.get('dead')!;
  mock.script(cred('dead', 'a'), { always: 'status=401' });
  mock.script(cred('dead', 'b'), { always: 'status=403' });
  const first = await chatCall(g.url, KEYS.chat, 'dead-model', 'first');
  t.equal(first.status, 502, "the provider refused the gateway's credentials");
  const second = await chatCall(g.url, KEYS.chat, 'dead-model', 'second');
  t.equal(second.status, 503);
  t.equal(second.json.error.type, 'api_error');
  t.match(second.json.error.message, /^No available accounts for model 'dead-model'/);
  t.equal(second.headers.get('x-should-retry'), 'false');
  t.same(counts(mock, 'dead', ['a', 'b']), { a: 1, b: 1 });
});

t.test('a slow account (TTFT 2 s against 50 ms) gets under 10 % of new sessions after warm-up', async (t) => {
  const mock = g.gw.mocks.get('slow')!;
  mock.script(cred('slow', 'slow'), { always: 'delay=2000' });
  mock.script(cred('slow', 'fast'), { always: 'delay=50' });
  let warm = 0;
  for (let round = 0; round < 10; round++) {
    await runPool(8, 8, (i) => chatCall(g.url, KEYS.chat, 'slow-model', `warm-up ${round}/${i}`));
    warm += 8;
    if ((await accountsView(g.gw)).slow.slow.demoted) break;
  }
  const view = await accountsView(g.gw);
  t.ok(
    view.slow.slow.demoted,
    `demoted after ${warm} warm-up requests (TTFT ${view.slow.slow.ttft_ms} ms against ${view.slow.fast.ttft_ms} ms)`,
  );
  t.notOk(view.slow.fast.demoted);
  const before = counts(mock, 'slow', ['slow', 'fast']);
  const replies = await runPool(100, 10, (i) => chatCall(g.url, KEYS.chat, 'slow-model', `new session ${i}`));
  t.ok(replies.every((r) => r.status === 200));
  const d = delta(counts(mock, 'slow', ['slow', 'fast']), before);
  t.ok(d.slow < 10, `the slow account got ${d.slow} of 100 new sessions`);
});
