/**
 * Child process for the kill -9 test (not a test itself): opens a MemoryStore on argv[2], settles
 * argv[3] requests (request i charges i + 1 micro-USD), admits one more with a recovery settlement
 * of 7 micro-USD, lets one event-loop turn pass (no fsync: the interval is far away), prints
 * "ready" and then idles until the parent kills it with SIGKILL.
 */
import { MemoryStore } from '../../core/store/memory/index.js';

const [dir, nArg] = process.argv.slice(2);
const n = Number(nArg);
const flushIntervalMs = 1_000_000;

const store = await MemoryStore.open({ path: dir, flushIntervalMs });
for (let i = 0; i < n; i++) {
  await store.admit({
    requestId: `crash-${i}`,
    reserve: 1000,
    claims: [{ kind: 'key-window', key: 'k1', window: '5h', limit: 1_000_000_000 }],
  });
  await store.settle(`crash-${i}`, {
    keyId: 'k1',
    user: 'u1',
    group: 'g1',
    model: 'm1',
    billing: 'balance',
    usage: { input: 1, output: 2, cacheRead: 0, cacheWrite: 0 },
    cost: i + 1,
    actual: i + 1,
    durationMs: 1,
    windows: ['5h'],
  });
}
// In flight at the crash: its reservation dies with the process, its recovery settlement is applied.
await store.admit({
  requestId: 'in-flight',
  reserve: 5000,
  claims: [{ kind: 'key-quota', key: 'k1', limit: 1_000_000_000 }],
  recovery: {
    keyId: 'k1',
    user: 'u1',
    group: 'g1',
    model: 'm1',
    billing: 'balance',
    usage: { input: 7, output: 0, cacheRead: 0, cacheWrite: 0 },
    cost: 7,
    actual: 7,
    durationMs: 0,
    windows: [],
  },
});
await new Promise((r) => setImmediate(r));
process.stdout.write('ready\n');
setInterval(() => {}, 60_000);
