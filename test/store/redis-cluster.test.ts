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
storeSuite(t, redisFactory('redis-cluster', () => cluster.url, true));
