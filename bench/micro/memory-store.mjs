// The memory store's admission and settlement in isolation, as the bench configures them (nine
// claims: balance, key quota, three key windows, two spend caps, group and user RPM; a concurrency
// slot; a recovery settlement; the journal on disk), 10 at a time with an event-loop turn per
// batch (the journal's write); CPU µs per request, best and median of 5 rounds. Compare two checkouts:
//   node bench/micro/memory-store.mjs /path/to/old/checkout; node bench/micro/memory-store.mjs .
// (not a test; figures quoted in the perf-hot report)
import path from 'node:path';
import { pathToFileURL } from 'node:url';
const root = path.resolve(process.argv[2] ?? '.');
const { MemoryStore } = await import(pathToFileURL(`${root}/dist/core/store/memory.js`).href);
const fs = await import('node:fs');
const dir = fs.mkdtempSync(path.join((await import('node:os')).tmpdir(), 'micro-store-'));
const store = await MemoryStore.open({ path: dir, flushIntervalMs: 1_000_000 });
const BIG = 1e15;
const claims = [
  { kind: 'balance', user: 'bench', credit: BIG, free: false, freeRpm: 0 },
  { kind: 'key-quota', key: 'bench-chat', limit: BIG },
  { kind: 'key-window', key: 'bench-chat', window: '5h', limit: BIG },
  { kind: 'key-window', key: 'bench-chat', window: '1d', limit: BIG },
  { kind: 'key-window', key: 'bench-chat', window: '7d', limit: BIG },
  { kind: 'spend-cap', user: 'bench', period: 'weekly', limit: BIG },
  { kind: 'spend-cap', user: 'bench', period: 'monthly', limit: BIG },
  { kind: 'rpm', scope: 'group', id: 'chat', limit: 1e9 },
  { kind: 'rpm', scope: 'user', id: 'bench', limit: 1e9 },
];
const signal = new AbortController().signal;
let seq = 0;
const settlement = (actual) => ({ keyId: 'bench-chat', user: 'bench', group: 'chat', model: 'bench-chat', billing: 'balance', usage: { input: 12, output: 20, cacheRead: 0, cacheWrite: 0 }, cost: actual, actual, durationMs: 3, windows: ['5h', '1d', '7d'] });
const one = async () => {
  const id = `req_${++seq}`;
  const r = await store.admit({ requestId: id, reserve: 5000, claims, recovery: settlement(4), slot: { scope: 'user:bench', limit: 10000, queueSize: 16, maxWaitMs: 30000, signal } });
  const s = await r.slot;
  await store.settle(id, settlement(31));
};
// 10 at a time, as the bench; a setImmediate per batch lets the journal reach the OS as in a server.
const batch = async (n) => { for (let i = 0; i < n; i += 10) { await Promise.all([one(), one(), one(), one(), one(), one(), one(), one(), one(), one()]); await new Promise((r) => setImmediate(r)); } };
await batch(20000);
const res = [];
for (let r = 0; r < 5; r++) { const u0 = process.cpuUsage(); await batch(20000); const u = process.cpuUsage(u0); res.push((u.user + u.system) / 20000); }
res.sort((a, b) => a - b);
console.log(`${root}: admission + settlement (9 claims, slot, recovery, journal) ${res[0].toFixed(1)} µs best of 5, median ${res[2].toFixed(1)} µs`);
await store.close(); fs.rmSync(dir, { recursive: true, force: true }); process.exit(0);
