/**
 * Redis faults as a client sees them (docs/operations.md, "Scale out"): Redis stopped, frozen, or
 * absent at start. Money paths fail closed with 503 billing_service_error; RPM and concurrency
 * run at the per-instance share; /healthz stays up; a metric and a log line say the gateway is
 * degraded; it recovers by itself, and what was queued meanwhile counts exactly once.
 */
import t from 'tap';
import { createLogger } from '../../core/log.js';
import type { InstrumentedStore } from '../../core/metrics.js';
import { RedisStore } from '../../core/store/redis/index.js';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';
import { freePort, RedisServer } from '../helpers/redis.js';
import { until as poll } from '../helpers/upstream.js';
import { roomInMinute } from '../helpers/minute.js';

/** Multi-process waits are longer than the shared default. */
const until = (cond: () => Promise<boolean> | boolean, ms = 20_000) => poll(cond, ms, 50);

const OPEN_KEY = `sk-${'0e'.repeat(32)}`;

function config(url: string, prefix: string) {
  const cfg = baseConfig();
  cfg.store = { kind: 'redis', url, prefix, instances_hint: 2, timeout: '300ms', lease: '2s' };
  cfg.server.admin_token = 'admin-secret';
  // A plan group without allowances and a key without quota: its requests carry no money claim,
  // only the group RPM — served while Redis is away, at the per-instance share.
  cfg.groups.open = { kind: 'chat', passthrough: true, billing: 'plan', models: ['chat-model'], rpm: 10 };
  cfg.users.alice.subscriptions.push({ group: 'open', expires_at: '2099-01-01T00:00:00Z' });
  cfg.users.bob = {
    balance: 100,
    concurrency: 4,
    queue: { size: 0 },
    subscriptions: [{ group: 'open', expires_at: '2099-01-01T00:00:00Z' }],
  };
  cfg.keys.push({ key: OPEN_KEY, name: 'open', user: 'alice', group: 'open' });
  cfg.keys.push({ key: `sk-${'0b'.repeat(32)}`, name: 'bob-open', user: 'bob', group: 'open' });
  return cfg;
}

async function start(url: string, prefix: string) {
  const lines: Record<string, any>[] = [];
  const log = createLogger('info', (l) => lines.push(JSON.parse(l)));
  const g: TestGateway = await startGateway(config(url, prefix), { log });
  return { g, lines };
}

const chat = (g: TestGateway, key = KEYS.chat, extra: Record<string, unknown> = {}) =>
  call(`${g.url}/v1/chat/completions`, { headers: bearer(key), json: chatBody(extra) });

async function metric(g: TestGateway, name: string): Promise<number> {
  const text = (await call(`${g.url}/metrics`)).text;
  return Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
}

t.test('Redis stopped: money fails closed, RPM per instance, /healthz up; back by itself, the queued usage counted once', async (t) => {
  const redis = await RedisServer.start({ persist: true });
  t.teardown(() => redis.destroy());
  const { g, lines } = await start(redis.url, 'f1:');
  t.teardown(() => g.close());
  t.equal((await chat(g)).status, 200, 'served while Redis is up');
  t.equal(await metric(g, 'gateway_store_degraded'), 0);

  await redis.stop();
  const began = Date.now();
  const refused = await chat(g);
  t.comment(`first money request while Redis is down answered in ${Date.now() - began} ms`);
  t.equal(refused.status, 503);
  t.equal(refused.json.error.type, 'billing_service_error', 'the money check fails closed');
  t.equal((await call(`${g.url}/healthz`)).status, 200, '/healthz does not depend on Redis');
  const ready = await call(`${g.url}/readyz`);
  t.same([ready.status, ready.json.status, ready.json.store], [503, 'unavailable', 'redis'], '/readyz reports it');
  t.match(ready.json.reason, /redis unreachable: money paths refused, RPM and concurrency at 1\/2/);
  t.equal(await metric(g, 'gateway_store_degraded'), 1, 'the metric says degraded');
  t.ok(
    lines.some((l) => l.level === 'warn' && /store degraded/.test(l.msg)),
    'a log line says degraded',
  );
  t.same(await g.gw.store.health(), {
    ready: false,
    degraded: 'redis unreachable: money paths refused, RPM and concurrency at 1/2 of each limit per instance',
  });
  t.equal((await call(`${g.url}/v1/usage`, { headers: bearer(OPEN_KEY) })).status, 503, 'usage reads fail closed too');
  const reset = await call(`${g.url}/admin/keys/chat/reset-quota`, { method: 'POST', headers: bearer('admin-secret') });
  t.same([reset.status, reset.json.error.type], [503, 'billing_service_error'], 'an admin quota reset too');

  // Group RPM 10 over instances_hint 2: this instance alone admits 5 in the minute. The degraded
  // counter counts per clock minute, so the burst must not straddle two (a run that did admitted 6).
  await roomInMinute(3_000);
  const open = await Promise.all(Array.from({ length: 7 }, () => chat(g, OPEN_KEY)));
  t.same(open.map((r) => r.status).sort(), [200, 200, 200, 200, 200, 429, 429], 'RPM-only requests served at the per-instance share');

  await redis.restart();
  t.ok(await until(async () => (await chat(g)).status === 200), 'serves money paths again without a restart');
  t.equal(await metric(g, 'gateway_store_degraded'), 0);
  t.ok(
    lines.some((l) => l.level === 'info' && /store recovered/.test(l.msg)),
    'a log line says recovered',
  );
  t.same(await g.gw.store.health(), { ready: true });
  t.same((await call(`${g.url}/readyz`)).json, { status: 'ready', store: 'redis' }, '/readyz: ready again');
  await g.gw.store.flush();
  const usage = await call(`${g.url}/v1/usage`, { headers: bearer(OPEN_KEY) });
  t.equal(usage.status, 200);
  t.equal(usage.json.usage.total.requests, 5, 'the requests served during the outage were recorded once Redis was back');
  await new Promise((r) => setTimeout(r, 300));
  const again = await call(`${g.url}/v1/usage`, { headers: bearer(OPEN_KEY) });
  t.equal(again.json.usage.total.requests, 5, 'and only once');
  t.equal(((g.gw.store as InstrumentedStore).inner as RedisStore).pendingCount, 0, 'nothing left queued');
});

t.test('Redis frozen: every call is bounded by the timeout; thawed, it serves again', async (t) => {
  const redis = await RedisServer.start();
  t.teardown(() => redis.destroy());
  const { g } = await start(redis.url, 'f2:');
  t.teardown(() => g.close());
  t.equal((await chat(g)).status, 200);
  redis.pause();
  const began = Date.now();
  const answers = await Promise.all(Array.from({ length: 5 }, () => chat(g)));
  t.comment(`5 money requests against a frozen Redis answered within ${Date.now() - began} ms (timeout 300ms)`);
  t.same(
    answers.map((a) => [a.status, a.json?.error?.type]),
    Array(5).fill([503, 'billing_service_error']),
    'refused, not hanging',
  );
  t.equal((await call(`${g.url}/healthz`)).status, 200);
  redis.resume();
  t.ok(await until(async () => (await chat(g)).status === 200), 'serves again once Redis answers');
});

t.test('concurrency while Redis is away: the per-instance share of the slots', async (t) => {
  const redis = await RedisServer.start();
  t.teardown(() => redis.destroy());
  const { g } = await start(redis.url, 'f3:');
  t.teardown(() => g.close());
  const mock = g.gw.mocks.get('mock')!;
  await redis.stop();
  mock.resetPeak();
  // bob: concurrency 4, no queue; instances_hint 2 → 2 slots here while Redis is away.
  const slow = await Promise.all(
    Array.from({ length: 4 }, () =>
      chat(g, `sk-${'0b'.repeat(32)}`, { messages: [{ role: 'user', content: '[[mock: delay=600]] Hello' }] }),
    ),
  );
  t.same(slow.map((r) => r.status).sort(), [200, 200, 429, 429]);
  t.ok(
    slow.filter((r) => r.status === 429).every((r) => /Too many pending requests/.test(r.json.error.message)),
    'the queue-full answer',
  );
  t.equal(mock.peakInFlight, 2, 'two upstream calls at once');
});

t.test('starts while Redis is down, refuses money paths, and recovers by itself', async (t) => {
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  const { g, lines } = await start(url, 'f4:');
  t.teardown(() => g.close());
  t.equal((await call(`${g.url}/healthz`)).status, 200, 'listening and alive');
  const r = await chat(g);
  t.same([r.status, r.json.error.type], [503, 'billing_service_error']);
  t.ok(lines.some((l) => /store degraded/.test(l.msg)));
  const redis = await RedisServer.start({ port });
  t.teardown(() => redis.destroy());
  t.ok(await until(async () => (await chat(g)).status === 200), 'serves once Redis is there');
  t.same(await g.gw.store.health(), { ready: true });
});
