/**
 * /healthz (alive) and /readyz (config loaded, store ready and not degraded, not shutting down),
 * without a key; `server.shutdown_delay`: readiness off at once while requests are still served,
 * cut short by a second close (a second SIGTERM).
 */
import t from 'tap';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway } from '../helpers/gateway.js';
import { MemoryStore } from '../../core/store/memory/index.js';
import type { Store, StoreHealth } from '../../core/store/types.js';

t.test('health and readiness answer without a key, GET and HEAD', async (t) => {
  const g = await startGateway();
  t.teardown(() => g.close());
  for (const p of ['/healthz', '/']) {
    const r = await call(g.url + p);
    t.equal(r.status, 200, p);
    t.same(r.json, { status: 'ok' });
    t.equal((await call(g.url + p, { method: 'HEAD' })).status, 200, `HEAD ${p}`);
  }
  const ready = await call(g.url + '/readyz');
  t.equal(ready.status, 200);
  t.same(ready.json, { status: 'ready', store: 'memory' });
  t.equal(ready.headers.get('cache-control'), 'no-store');
  t.equal((await call(g.url + '/readyz', { method: 'HEAD' })).status, 200);
  t.equal((await call(g.url + '/readyz?verbose=1')).status, 200, 'a query string does not matter');
  t.equal((await call(g.url + '/readyz', { method: 'POST', json: {} })).status, 404, 'only GET and HEAD');
});

/** A memory store whose health() answers what the test says. */
async function storeWith(health: () => Promise<StoreHealth>): Promise<Store> {
  const store = await MemoryStore.open({});
  return new Proxy(store, { get: (s, p) => (p === 'health' ? health : Reflect.get(s, p)) });
}

t.test('readiness follows the store: not ready, degraded, unreachable', async (t) => {
  let health: () => Promise<StoreHealth> = async () => ({ ready: true });
  const store = await storeWith(() => health());
  const g = await startGateway(baseConfig(), { store });
  t.teardown(async () => {
    await g.close();
    await store.close();
  });
  t.equal((await call(g.url + '/readyz')).status, 200);

  health = async () => ({ ready: true, degraded: 'redis unreachable: per-instance RPM and concurrency' });
  const degraded = await call(g.url + '/readyz');
  t.equal(degraded.status, 503);
  t.same(degraded.json, { status: 'degraded', store: 'memory', reason: 'redis unreachable: per-instance RPM and concurrency' });
  t.equal((await call(g.url + '/healthz')).status, 200, 'still alive');

  health = async () => ({ ready: false });
  const down = await call(g.url + '/readyz');
  t.equal(down.status, 503);
  t.equal(down.json.status, 'unavailable');

  health = async () => {
    throw new Error('connection refused');
  };
  const unreachable = await call(g.url + '/readyz');
  t.equal(unreachable.status, 503);
  t.same(unreachable.json, { status: 'unavailable', store: 'memory', reason: 'the store did not answer' });
  t.notMatch(unreachable.text, /connection refused/, 'the cause stays in the log');

  health = async () => ({ ready: true });
  t.equal((await call(g.url + '/readyz')).status, 200, 'ready again');
});

t.test('shutdown_delay: /readyz turns 503 at once, requests are still served, a second close cuts it short', async (t) => {
  const cfg = baseConfig();
  // Long enough that only the second close() can end it: the test never waits on the clock.
  cfg.server.shutdown_delay = '10m';
  const g = await startGateway(cfg);
  t.equal((await call(g.url + '/readyz')).status, 200);
  let closed = false;
  const first = g.gw.close().then(() => {
    closed = true;
  });
  const draining = await call(g.url + '/readyz');
  t.equal(draining.status, 503);
  t.same(draining.json, { status: 'draining' });
  t.equal((await call(g.url + '/healthz')).status, 200, 'alive while draining');
  const served = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() });
  t.equal(served.status, 200, 'traffic that still arrives is served');
  t.notOk(closed, 'still in the delay');
  await g.gw.close();
  await first;
  t.ok(closed, 'both calls resolve once closed');
  await t.rejects(fetch(g.url + '/healthz'), 'the listener is closed');
});

t.test('without a delay, close stops accepting at once', async (t) => {
  const g = await startGateway();
  await g.gw.close();
  await t.rejects(fetch(g.url + '/readyz'));
});
