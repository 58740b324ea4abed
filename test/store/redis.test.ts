import t, { type Test } from 'tap';
import { RedisServer } from '../helpers/redis.js';
import { storeSuite } from './suite.js';
import { redisFactory } from './redis-factory.js';

// The behavioural suite every store passes (test/store/suite.ts), on one real redis-server.
let server: RedisServer;
t.before(async () => {
  server = await RedisServer.start();
});
t.teardown(() => server.destroy());
storeSuite(
  t,
  redisFactory('redis', () => server.url, false),
);

/** A store of its own prefix on the shared server, and a plain client to look at its keys; both closed at the end of `t`. */
async function openStore(t: Test, prefix: string) {
  const { Redis } = await import('ioredis');
  const { RedisStore } = await import('../../core/store/redis/index.js');
  const db = new Redis(server.url, { maxRetriesPerRequest: null });
  const store = await RedisStore.open({ url: server.url, prefix, timeoutMs: 5_000 });
  t.teardown(async () => {
    await store.close();
    db.disconnect();
  });
  return { db, store, RedisStore };
}

/** A settlement of key k1 and user u1, billed from the balance. */
const settlement = (actual: number) => ({
  keyId: 'k1',
  user: 'u1',
  group: 'g',
  model: 'm',
  billing: 'balance' as const,
  usage: { input: 1, output: 2, cacheRead: 0, cacheWrite: 0 },
  cost: actual,
  actual,
  durationMs: 1,
  windows: [],
});

t.test('the build ships the Lua scripts next to the compiled store', async (t) => {
  const { existsSync } = await import('node:fs');
  const path = await import('node:path');
  const { ROOT } = await import('../helpers/gateway.js');
  const { SCRIPT_NAMES } = await import('../../core/store/redis/scripts.js');
  for (const name of ['lib', 'ops', ...SCRIPT_NAMES])
    t.ok(existsSync(path.join(ROOT, 'dist/core/store/redis', `${name}.lua`)), `${name}.lua`);
});

t.test('a slot freed while a dead instance still has a waiter queued: the grant lives no longer than that waiter would have', async (t) => {
  const { Redis } = await import('ioredis');
  const { RedisStore } = await import('../../core/store/redis/index.js');
  const db = new Redis(server.url, { maxRetriesPerRequest: null });
  const prefix = 'deadwaiter:';
  const open = () => RedisStore.open({ url: server.url, prefix, leaseMs: 1_000, timeoutMs: 5_000 });
  const live = await open();
  const dead = await open();
  t.teardown(async () => {
    await live.close();
    db.disconnect();
  });
  const never = new AbortController();
  const req = { scope: 'user:u', limit: 1, queueSize: 4, maxWaitMs: 60_000, signal: never.signal };
  const holder = await live.acquireSlot(req);
  t.ok(holder.ok, 'the live instance holds the only slot');
  const waiting = dead.acquireSlot(req); // queued, then its instance dies
  const held = `${prefix}{u:u}:slot:held`;
  const waiters = `${prefix}{u:u}:slot:waiters`;
  let waiterId = '';
  for (let i = 0; i < 100 && !waiterId; i++) {
    waiterId = (await db.zrange(waiters, '0', '0'))[0] ?? '';
    if (!waiterId) await new Promise((r) => setTimeout(r, 20));
  }
  t.ok(waiterId, 'the waiter is queued');
  dead.crash();
  void waiting.catch(() => undefined);
  const waiterUntil = Number(await db.zscore(waiters, waiterId));
  await new Promise((r) => setTimeout(r, 300)); // time passes: a fresh lease would now end later
  if (holder.ok) holder.release();
  let grantedUntil = 0;
  for (let i = 0; i < 100 && !grantedUntil; i++) {
    grantedUntil = Number(await db.zscore(held, waiterId)) || 0;
    if (!grantedUntil) await new Promise((r) => setTimeout(r, 10));
  }
  t.ok(grantedUntil > 0, 'the queue head (the dead waiter) was granted the freed slot, FIFO');
  t.ok(
    grantedUntil <= waiterUntil,
    `the grant ends when the dead waiter's lease would have (${grantedUntil} <= ${waiterUntil}), not a full lease after the release`,
  );
});

t.test('the operations of one event-loop turn go to Redis together: fewer scripts than operations, every outcome exact', async (t) => {
  const prefix = 'batch:';
  const { db, store, RedisStore } = await openStore(t, prefix);
  const scripts = async () => {
    let n = 0;
    for (const m of (await db.info('commandstats')).matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) n += Number(m[1]);
    return n;
  };
  // Quota 1000 µ$, reservations of 100: exactly ten of forty admissions racing in one turn fit.
  const claims = [
    { kind: 'key-quota' as const, key: 'k1', limit: 1_000 },
    { kind: 'balance' as const, user: 'u1', credit: 1_000_000, free: false, freeRpm: 0 },
    { kind: 'rpm' as const, scope: 'user' as const, id: 'u1', limit: 1_000 },
  ];
  const before = await scripts();
  const results = await Promise.all(Array.from({ length: 40 }, (_, i) => store.admit({ requestId: `b${i}`, reserve: 100, claims })));
  const admitted = results.map((r, i) => (r.ok ? `b${i}` : '')).filter(Boolean);
  t.equal(admitted.length, 10, 'exactly the ten that fit the quota');
  t.ok(
    results.filter((r) => !r.ok).every((r) => !r.ok && r.held),
    'the others are held back by reservations in flight',
  );
  t.equal((await store.keyState('k1')).reserved, 1_000, 'ten reservations held');
  await Promise.all(admitted.map((id) => store.settle(id, settlement(37))));
  const used = (await scripts()) - before;
  t.ok(used < 50, `40 admissions and 10 settlements in fewer scripts (${used})`);
  const state = await store.keyState('k1');
  t.equal(state.used, 370, 'every settlement charged once');
  t.equal(state.reserved, 0, 'every reservation released');
  t.equal(await store.balanceSpent('u1'), 370);
  t.equal(Number(await db.hget(`${prefix}{k:k1}:totals`, 'requests')), 10, 'ten requests recorded');

  // An id admitted twice in one batch: that admission fails, the others in the batch go through.
  const [again, fresh] = await Promise.allSettled([
    store.admit({ requestId: 'b-dup', reserve: 0, claims: [] }),
    store.admit({ requestId: 'b-new', reserve: 0, claims: [] }),
  ]);
  t.equal(again.status, 'fulfilled');
  t.equal(fresh.status, 'fulfilled');
  const dupStore = await RedisStore.open({ url: server.url, prefix, timeoutMs: 5_000 });
  t.teardown(() => dupStore.close());
  const [dup, other] = await Promise.allSettled([
    dupStore.admit({ requestId: 'b-dup', reserve: 0, claims: [] }), // known to Redis, not to this instance
    dupStore.admit({ requestId: 'b-other', reserve: 0, claims: [] }),
  ]);
  t.equal(dup.status, 'rejected', 'the id Redis already holds is refused');
  t.match(dup.status === 'rejected' ? String(dup.reason) : '', /already admitted/);
  t.equal(other.status, 'fulfilled', 'the other admission of the same batch is not');
});

t.test('behind a batch in Redis, fewer than a full batch wait for its reply; a full one goes at once; a third waits', async (t) => {
  const net = await import('node:net');
  const { RedisStore } = await import('../../core/store/redis/index.js');
  // A relay between the store and Redis that can hold Redis's replies: what the store sends while
  // its first batch is unanswered is what it pipelines.
  const port = Number(new URL(server.url).port);
  let sent = '';
  let hold = false;
  const held: Array<() => void> = [];
  const relay = net.createServer((client) => {
    const up = net.connect(port, '127.0.0.1');
    client.on('data', (d) => {
      sent += d.toString('latin1');
      up.write(d);
    });
    up.on('data', (d) => (hold ? held.push(() => client.write(d)) : client.write(d)));
    client.on('close', () => up.destroy());
    up.on('close', () => client.destroy());
    client.on('error', () => up.destroy());
    up.on('error', () => client.destroy());
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', () => r()));
  const relayPort = (relay.address() as { port: number }).port;
  const store = await RedisStore.open({ url: `redis://127.0.0.1:${relayPort}`, prefix: 'pipe:', timeoutMs: 5_000 });
  t.teardown(async () => {
    hold = false;
    for (const f of held.splice(0)) f();
    await store.close();
    relay.close();
  });
  const turn = () => new Promise((r) => setImmediate(r));
  const until = async (what: string) => {
    for (let i = 0; i < 200 && !sent.includes(what); i++) await new Promise((r) => setTimeout(r, 10));
    return sent.includes(what);
  };

  hold = true;
  const admit = (id: string) => store.admit({ requestId: id, reserve: 0, claims: [] });
  const settle = async () => {
    await turn();
    await turn();
    await new Promise((r) => setTimeout(r, 50));
  };
  const first = admit('pipe-1');
  t.ok(await until('pipe-1'), 'the first batch went to Redis');
  const few = [admit('pipe-2'), admit('pipe-3')];
  await settle();
  t.notOk(sent.includes('pipe-2'), 'two operations wait while the first batch is unanswered');
  // 32 more: with the two waiting, a full batch (32) and two over.
  const full = Array.from({ length: 32 }, (_, i) => admit(`pipe-full-${i}`));
  t.ok(await until('pipe-full-29'), 'a full batch went at once, the first still unanswered');
  t.ok(sent.includes('pipe-2') && sent.includes('pipe-3'), 'with the operations that waited before it (first come, first sent)');
  t.notOk(sent.includes('pipe-full-30'), 'what is over a full batch waits');
  const more = Array.from({ length: 32 }, (_, i) => admit(`pipe-more-${i}`));
  await settle();
  t.notOk(sent.includes('pipe-more-0'), 'no third batch while two are in Redis, full or not');
  hold = false;
  for (const f of held.splice(0)) f();
  const results = await Promise.all([first, ...few, ...full, ...more]);
  t.equal(results.length, 67);
  t.ok(
    results.every((r) => r.ok),
    'every operation gets its own outcome',
  );
  t.ok(sent.includes('pipe-full-31') && sent.includes('pipe-more-31'), 'the waiting ones went once batches were answered');
});

t.test(
  "done markers: the markers of a process's consecutive request ids share one hash with a TTL, and still make every end happen once",
  async (t) => {
    const prefix = 'marks:';
    const { db, store } = await openStore(t, prefix);
    const claims = [{ kind: 'balance' as const, user: 'u1', credit: 1_000_000, free: false, freeRpm: 0 }];
    // Ids as the gateway makes them (server.ts): req_, a per-process random part, a counter in hex.
    const id = (n: number) => `req_a1b2c3d4e5f6${n.toString(16).padStart(12, '0')}`;
    const ids = [...Array.from({ length: 300 }, (_, i) => id(i)), id(0x10000), `${id(7)}:account:1:a`, 'short-id'];
    for (const r of await Promise.all(ids.map((requestId) => store.admit({ requestId, reserve: 10, claims })))) t.ok(r.ok, 'admitted');
    await Promise.all(ids.map((rid) => store.settle(rid, settlement(5))));
    t.equal(await store.balanceSpent('u1'), 5 * ids.length, 'each settled once');

    const markers = (await db.keys(`${prefix}{q}:done:*`)).sort();
    const hash = (n: number) => `${prefix}{q}:done:${id(n).slice(0, -1)}`; // the id less its last hex digit
    t.same(
      markers,
      [...Array.from({ length: 19 }, (_, i) => hash(i * 16)), hash(0x10000), `${prefix}{q}:done:short-id`].sort(),
      'one hash per 16 consecutive ids (an id too short to share one has its own)',
    );
    t.equal(await db.hlen(hash(0)), 17, 'the first holds its 16 ids and the pool attempt of one of them');
    t.equal(await db.hlen(hash(299)), 12, 'the last of the 300 holds the 12 ids left');
    t.equal(await db.hget(hash(299), 'b'), 's', 'a marker: the rest of the id, the mode that ended it');
    t.equal(await db.hget(hash(7), '7:account:1:a'), 's');
    let bytes = 0;
    for (const k of markers) {
      t.equal(await db.type(k), 'hash');
      const ttl = await db.pttl(k);
      t.ok(ttl > 86_400_000 - 60_000 && ttl <= 86_400_000, `${k} lives a day past its last marker (${ttl} ms)`);
      if (k !== hash(0x10000) && !k.endsWith('short-id')) bytes += Number(await db.call('MEMORY', 'USAGE', k, 'SAMPLES', '0'));
    }
    t.ok(bytes / 301 < 40, `about ${Math.round(bytes / 301)} bytes a marker with its share of the hash (a key each took about 160)`);

    // Every end still happens once: a settlement sent again, a cancel after the settlement.
    await store.settle(id(5), settlement(5));
    await store.settle(`${id(7)}:account:1:a`, settlement(5));
    await store.settle('short-id', settlement(5));
    await store.cancel(id(6));
    t.equal(await store.balanceSpent('u1'), 5 * ids.length, 'a settlement or cancel sent again changes nothing');
    t.equal(await db.hget(hash(6), '6'), 's', 'a cancel after the settlement leaves the settlement its marker');

    // A cancelled admission: its marker refuses the same id's admission again; nothing stays reserved.
    t.ok((await store.admit({ requestId: id(400), reserve: 10, claims })).ok);
    await store.cancel(id(400));
    t.equal(await db.hget(hash(400), '0'), 'c');
    await t.rejects(store.admit({ requestId: id(400), reserve: 10, claims }), /already admitted/);
    t.equal((await db.hget(`${prefix}{u:u1}:wallet`, 'res')) ?? '0', '0', 'nothing left reserved');
    t.equal(await store.balanceSpent('u1'), 5 * ids.length);
  },
);
