import t from 'tap';
import { RedisServer } from '../helpers/redis.js';
import { storeSuite } from './suite.js';
import { redisFactory } from './redis-factory.js';

// The behavioural suite every store passes (test/store/suite.ts), on one real redis-server.
let server: RedisServer;
t.before(async () => {
  server = await RedisServer.start();
});
t.teardown(() => server.destroy());
storeSuite(t, redisFactory('redis', () => server.url, false));

t.test('the build ships the Lua scripts next to the compiled store', async (t) => {
  const { existsSync } = await import('node:fs');
  const path = await import('node:path');
  const { ROOT } = await import('../helpers/gateway.js');
  const { SCRIPT_NAMES } = await import('../../core/store/redis/scripts.js');
  for (const name of ['lib', ...SCRIPT_NAMES]) t.ok(existsSync(path.join(ROOT, 'dist/core/store/redis', `${name}.lua`)), `${name}.lua`);
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
  t.ok(grantedUntil <= waiterUntil, `the grant ends when the dead waiter's lease would have (${grantedUntil} <= ${waiterUntil}), not a full lease after the release`);
});
