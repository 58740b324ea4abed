// What Redis holds per request: the gateway as the bench runs it, on the Redis store (a
// redis-server of its own, no persistence), under wrk from the other core; Redis's used_memory and
// its keys by kind before and after a run, after a warm-up that creates the per-key and per-user
// hashes. What stays per request is what an operator sizes `maxmemory` for (docs/operations.md).
//   node bench/micro/redis-memory.mjs [CHECKOUT] [--seconds N]     (CHECKOUT built; default .)
// (not a test: a guide, like the rest of bench/micro)
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort, gatewaySetup, processes, waitUp, wrk } from './under-load.mjs';

const args = process.argv.slice(2);
const secI = args.indexOf('--seconds');
const seconds = secI >= 0 ? Number(args.splice(secI, 2)[1]) : 20;
const root = path.resolve(args[0] ?? '.');
const { Redis } = await import(path.join(root, 'node_modules/ioredis/built/index.js'));

const redisPort = await freePort();
const s = await gatewaySetup(root, 'redis-memory', { kind: 'redis', url: `redis://127.0.0.1:${redisPort}/0`, prefix: 'gw:' });
const procs = processes(s);
let db;
try {
  procs.start('taskset', ['-c', '1', 'redis-server', '--port', String(redisPort), '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  procs.mock();
  await sleep(300);
  db = new Redis(redisPort, '127.0.0.1');
  procs.gateway();
  await waitUp(s);
  const used = async () => Number(/^used_memory:(\d+)/m.exec(await db.info('memory'))[1]);
  /** Keys by kind: the name with its ids (hex runs, numbers) taken out. */
  const kinds = async () => {
    const m = new Map();
    for await (const batch of db.scanStream({ match: 'gw:*', count: 1000 }))
      for (const k of batch) {
        const kind = k.replace(/[0-9a-f]{6,}.*$/, '…').replace(/\d+/g, 'N');
        m.set(kind, (m.get(kind) ?? 0) + 1);
      }
    return m;
  };
  const load = os.loadavg()[0];
  wrk(s, 3, 10); // warm-up: the key's, user's and group's hashes exist after it
  await sleep(2000); // settlements and the ledger's drain done
  const [m0, k0] = [await used(), await kinds()];
  const res = wrk(s, seconds, 10);
  await sleep(2000);
  const [m1, k1] = [await used(), await kinds()];
  const n = res.requests;
  const version = execFileSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD']).toString().trim();
  console.log(`${root} (${version}): ${n} requests in ${seconds} s, load average ${load.toFixed(2)} at the start`);
  console.log(`Redis used_memory ${m0} → ${m1}: **${((m1 - m0) / n).toFixed(1)} bytes per request**`);
  console.log('| key kind | before | after | per 1,000 requests |');
  console.log('|---|---:|---:|---:|');
  for (const kind of [...new Set([...k0.keys(), ...k1.keys()])].sort((a, b) => (k1.get(b) ?? 0) - (k1.get(a) ?? 0)))
    console.log(
      `| \`${kind}\` | ${k0.get(kind) ?? 0} | ${k1.get(kind) ?? 0} | ${((((k1.get(kind) ?? 0) - (k0.get(kind) ?? 0)) * 1000) / n).toFixed(1)} |`,
    );
} finally {
  db?.disconnect();
  await procs.stopAll();
}
