// The memory store's admission and settlement in isolation, as the bench configures them (nine
// claims: balance, key quota, three key windows, two spend caps, group and user RPM; a concurrency
// slot; a recovery settlement; the journal on disk), 10 at a time with an event-loop turn per
// batch (the journal's write); CPU µs per request, best and median of 5 rounds. Compare two checkouts:
//   node bench/micro/memory-store.mjs /path/to/old/checkout; node bench/micro/memory-store.mjs .
// MICRO_LEDGER=1: with the ledger's day files (as a gateway keeps them by default). MICRO_N=n: warm
// up, do n requests and exit (bench/micro/count.mjs counts the instructions per request that way).
// (not a test; figures quoted in the perf-hot report)
import path from 'node:path';
import { oneRequest } from './request.mjs';
import { pathToFileURL } from 'node:url';
const root = path.resolve(process.argv[2] ?? '.');
const fs = await import('node:fs');
// core/store/memory/index.js; core/store/memory.js in a checkout from before the store's split
const entry =
  [`${root}/dist/core/store/memory/index.js`, `${root}/dist/core/store/memory.js`].find((f) => fs.existsSync(f)) ??
  `${root}/dist/core/store/memory/index.js`;
const { MemoryStore } = await import(pathToFileURL(entry).href);
const dir = fs.mkdtempSync(path.join((await import('node:os')).tmpdir(), 'micro-store-'));
const ledger = process.env.MICRO_LEDGER === '1' ? { ledger: { dir: path.join(dir, 'ledger'), retentionMs: 86_400_000 } } : {};
const store = await MemoryStore.open({ path: dir, flushIntervalMs: 1_000_000, ...ledger });
const one = () => oneRequest(store);
// 10 at a time, as the bench; a setImmediate per batch lets the journal reach the OS as in a server.
const batch = async (n) => {
  for (let i = 0; i < n; i += 10) {
    await Promise.all([one(), one(), one(), one(), one(), one(), one(), one(), one(), one()]);
    await new Promise((r) => setImmediate(r));
  }
};
await batch(20000);
if (process.env.MICRO_N) {
  await batch(Number(process.env.MICRO_N));
  await store.close();
  fs.rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}
const res = [];
for (let r = 0; r < 5; r++) {
  const u0 = process.cpuUsage();
  await batch(20000);
  const u = process.cpuUsage(u0);
  res.push((u.user + u.system) / 20000);
}
res.sort((a, b) => a - b);
console.log(
  `${root}: admission + settlement (9 claims, slot, recovery, journal) ${res[0].toFixed(1)} µs best of 5, median ${res[2].toFixed(1)} µs`,
);
await store.close();
fs.rmSync(dir, { recursive: true, force: true });
process.exit(0);
