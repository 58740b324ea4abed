import t from 'tap';
import { RedisCluster } from '../helpers/redis.js';
import { storeSuite } from './suite.js';
import { redisFactory } from './redis-factory.js';

// The behavioural suite every store passes (test/store/suite.ts), on a three-master Redis Cluster.
let cluster: RedisCluster;
t.before(async () => {
  cluster = await RedisCluster.start();
});
t.teardown(() => cluster.destroy());
storeSuite(
  t,
  redisFactory('redis-cluster', () => cluster.url, true),
);

// ---- cluster only: a group's RPM lives in its own slot, apart from every user's ----------------

t.test('redis-cluster: group RPM shared by many users — exact across users, compensated when a user slot refuses', async (t) => {
  const { RedisStore } = await import('../../core/store/redis/index.js');
  const { ManualClock } = await import('../../core/clock.js');
  const clock = new ManualClock(Date.UTC(2026, 0, 5, 12, 0, 10));
  const store = await RedisStore.open({ url: cluster.url, cluster: true, prefix: 'grp:', clock, timeoutMs: 5_000 });
  t.teardown(() => store.close());
  const group = { kind: 'rpm', scope: 'group', id: 'shared', limit: 10 } as const;
  const rich = (u: string) => ({ kind: 'balance', user: u, credit: 1_000, free: false, freeRpm: 0 }) as const;
  const results = await Promise.all(
    Array.from({ length: 30 }, (_, i) => store.admit({ requestId: `g-${i}`, reserve: 1, claims: [group, rich(`user-${i % 10}`)] })),
  );
  t.equal(results.filter((r) => r.ok).length, 10, '30 racing requests of 10 users: exactly 10 pass the group RPM');

  clock.advance(60_000);
  // Refused in the user's slot (no money): the group count taken in the other slot is given back.
  for (let i = 0; i < 5; i++) {
    t.same(
      await store.admit({
        requestId: `broke-${i}`,
        reserve: 1,
        claims: [group, { kind: 'balance', user: 'broke', credit: 0, free: false, freeRpm: 0 }],
      }),
      { ok: false, index: 1 },
    );
  }
  const after = await Promise.all(
    Array.from({ length: 11 }, (_, i) => store.admit({ requestId: `r-${i}`, reserve: 1, claims: [group, rich(`user-${i}`)] })),
  );
  t.equal(after.filter((r) => r.ok).length, 10, 'the refused requests left the whole minute to the others');
  // And a refusal by the group (the first claim) reserves nothing in the user's slot.
  t.equal((await store.admit({ requestId: 'late', reserve: 500, claims: [group, rich('user-0')] })).ok, false);
  t.equal(await store.balanceSpent('user-0'), 0);
  // A wallet of 400 passes only if the refused request's reservation of 500 was taken back.
  const probe = await store.admit({
    requestId: 'probe',
    reserve: 0,
    claims: [{ kind: 'balance', user: 'user-0', credit: 400, free: false, freeRpm: 0 }],
  });
  t.ok(probe.ok, 'user-0 holds nothing for the refused request');
});
