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
