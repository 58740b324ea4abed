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
