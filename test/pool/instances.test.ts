/**
 * Per-account limits hold across gateway instances: two gateways share one store and one
 * upstream; an account's `concurrency` is never exceeded in total (the mock's per-credential
 * in-flight gauge) and its `rpm` counts the requests of both.
 *
 * Every store implementation must pass this file: the memory store is shared as one object by
 * both instances; on Redis each instance opens its own store (its own connections, its own
 * leases) on one real redis-server, as two gateway machines would.
 */
import t from 'tap';
import { baseConfig, bearer, call, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { MemoryStore } from '../../core/store/memory/index.js';
import { ManualClock } from '../../core/clock.js';
import { RedisStore } from '../../core/store/redis/index.js';
import { RedisServer } from '../helpers/redis.js';
import type { Store } from '../../core/store/types.js';
import { runPool } from './helpers.js';
import { KEYS } from '../helpers/gateway.js';

interface StoreKind {
  name: string;
  /** One store per instance (or the same one twice), and a cleanup. */
  open(clock: ManualClock): Promise<{ stores: [Store, Store]; close: () => Promise<void> }>;
}

const STORES: StoreKind[] = [
  {
    name: 'memory (shared by both instances)',
    async open(clock) {
      const s = await MemoryStore.open({ clock });
      return { stores: [s, s], close: () => s.close() };
    },
  },
  {
    name: 'redis (one store per instance, one redis-server)',
    async open(clock) {
      const server = await RedisServer.start();
      const open = () => RedisStore.open({ url: server.url, prefix: 'pool-test:', clock, timeoutMs: 5_000 });
      const a = await open();
      const b = await open();
      return {
        stores: [a, b],
        close: async () => {
          await a.close();
          await b.close();
          await server.stop();
        },
      };
    },
  },
];

for (const kind of STORES) {
  t.test(`per-account limits across two instances: ${kind.name}`, async (t) => {
    const clock = new ManualClock(Date.UTC(2026, 5, 1, 10, 0, 5));
    const mock: MockServer = await startMockServer();
    const { stores, close } = await kind.open(clock);
    const cfg = baseConfig();
    cfg.providers.up = {
      kind: 'openai',
      base_url: `${mock.url}/v1`,
      protocols: ['openai-chat'],
      accounts: [
        { name: 'a', api_key: 'key-a', concurrency: 2 },
        { name: 'b', api_key: 'key-b', concurrency: 1 },
      ],
    };
    cfg.providers.metered = {
      kind: 'openai',
      base_url: `${mock.url}/v1`,
      protocols: ['openai-chat'],
      accounts: [{ name: 'm', api_key: 'key-m', rpm: 3 }],
    };
    cfg.models['up-model'] = { provider: 'up', price: { input: 1, output: 1 } };
    cfg.models['metered-model'] = { provider: 'metered', price: { input: 1, output: 1 } };
    cfg.groups.chat.models.push('up-model', 'metered-model');
    const gws: TestGateway[] = [await startGateway(cfg, { store: stores[0], clock }), await startGateway(cfg, { store: stores[1], clock })];
    t.teardown(async () => {
      for (const g of gws) await g.close();
      await mock.close();
      await close();
    });
    const ask = (i: number, model: string) =>
      call(gws[i % 2].url + '/v1/chat/completions', {
        headers: bearer(KEYS.chat),
        json: { model, messages: [{ role: 'user', content: `request ${i}` }] },
      });

    mock.script('key-a', { always: 'delay=300' });
    mock.script('key-b', { always: 'delay=300' });
    const replies = await runPool(24, 24, (i) => ask(i, 'up-model'));
    t.equal(mock.credential('key-a').maxInFlight, 2, 'account a: at most 2 in flight over both instances (and it got there)');
    t.equal(mock.credential('key-b').maxInFlight, 1, 'account b: at most 1');
    t.ok(replies.some((r) => r.status === 200) && replies.some((r) => r.status === 503), 'the rest refused with 503');

    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await ask(i, 'metered-model')).status);
    t.same(statuses.slice(0, 3), [200, 200, 200], 'rpm 3: three requests over both instances');
    t.equal(mock.credential('key-m').requests, 3, 'no more reached the upstream this minute');
    const refused = await ask(7, 'metered-model');
    t.equal(refused.status, 429);
    t.match(refused.json.error.message, /^No available accounts for model 'metered-model' right now/);
    t.ok(
      Number(refused.headers.get('retry-after')) >= 1 && Number(refused.headers.get('retry-after')) <= 60,
      'Retry-After: the rest of the minute',
    );
    clock.advance(60_000);
    t.equal((await ask(8, 'metered-model')).status, 200, 'the next minute has room again');
  });
}
