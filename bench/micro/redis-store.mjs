// The Redis store's admission and settlement in isolation, as the bench configures them (nine
// claims: balance, key quota, three key windows, two spend caps, group and user RPM; a concurrency
// slot; a recovery settlement), 10 at a time, against a throwaway redis-server (no persistence).
// Reports, per request (admission + settlement): redis-server's own CPU (INFO cpu), the time
// Redis spent in the scripts (INFO commandstats) and this process's CPU; best and median of 5 rounds.
// Compare two checkouts:
//   node bench/micro/redis-store.mjs /path/to/old/checkout; node bench/micro/redis-store.mjs .
// (not a test; needs redis-server on PATH: scripts/ensure-redis.sh)
import path from 'node:path';
import { oneRequest } from './request.mjs';
import os from 'node:os';
import fs from 'node:fs';
import net from 'node:net';
import { spawn, execFileSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
const root = path.resolve(process.argv[2] ?? '.');
const { RedisStore } = await import(pathToFileURL(`${root}/dist/core/store/redis/index.js`).href);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'micro-redis-'));
const port = await new Promise((r) => {
  const s = net.createServer().listen(0, '127.0.0.1', () => {
    const p = s.address().port;
    s.close(() => r(p));
  });
});
const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], {
  stdio: 'ignore',
});
const url = `redis://127.0.0.1:${port}`;
const cli = (...a) => execFileSync('redis-cli', ['-u', url, ...a], { stdio: 'pipe' }).toString();
for (let i = 0; i < 100; i++) {
  try {
    cli('PING');
    break;
  } catch {
    await new Promise((r) => setTimeout(r, 50));
  }
}
const store = await RedisStore.open({ url, prefix: 'micro:' });
const one = () => oneRequest(store);
const C = Number(process.env.CONC ?? 10);
const batch = async (n) => {
  for (let i = 0; i < n; i += C) await Promise.all(Array.from({ length: C }, one));
};
const redisCpu = () => {
  const m = cli('INFO', 'cpu');
  const g = (k) => Number(new RegExp(`^${k}:([0-9.]+)`, 'm').exec(m)[1]);
  return (g('used_cpu_user') + g('used_cpu_sys')) * 1e6;
};
const scriptUsec = () => {
  let u = 0;
  for (const m of cli('INFO', 'commandstats').matchAll(/^cmdstat_(?:evalsha|eval):calls=\d+,usec=(\d+)/gm)) u += Number(m[1]);
  return u;
};
const N = 10000;
await batch(N);
const rows = [];
for (let r = 0; r < 5; r++) {
  const c0 = redisCpu(),
    s0 = scriptUsec(),
    u0 = process.cpuUsage();
  await batch(N);
  const u = process.cpuUsage(u0);
  rows.push({ redis: (redisCpu() - c0) / N, scripts: (scriptUsec() - s0) / N, node: (u.user + u.system) / N });
}
const med = (k) => rows.map((x) => x[k]).sort((a, b) => a - b);
const show = (k) => `${med(k)[0].toFixed(1)} best, ${med(k)[2].toFixed(1)} median`;
console.log(`${root}: per request (admission + settlement, 9 claims, slot, recovery):`);
console.log(`  redis-server CPU µs  ${show('redis')}`);
console.log(`  in scripts µs        ${show('scripts')}`);
console.log(`  this process CPU µs  ${show('node')}`);
await store.close();
redis.kill('SIGTERM');
fs.rmSync(dir, { recursive: true, force: true });
process.exit(0);
