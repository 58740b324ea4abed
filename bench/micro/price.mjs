// One request's pricing in isolation (core/money.ts `priceUsage`): the reservation's two prices
// (the input as input, then as cache write) and the settlement's, at a Claude-like price, ×1 rate.
// Compare two checkouts under callgrind:
//   node bench/micro/count.mjs bench/micro/price.mjs ../other; node bench/micro/count.mjs bench/micro/price.mjs .
// MICRO_N=n: warm up, do n requests and exit. (not a test; figures in bench/results/)
import path from 'node:path';
import { pathToFileURL } from 'node:url';
const root = path.resolve(process.argv[2] ?? '.');
const { priceUsage } = await import(pathToFileURL(path.join(root, 'dist/core/money.js')).href);
const n = Number(process.env.MICRO_N ?? 1_000_000);
const price = { input: 3_000_000, output: 15_000_000, cacheRead: 300_000, cacheWrite: 3_750_000 };
let sum = 0;
const one = (i) => {
  const input = 20 + (i & 7);
  sum += priceUsage({ input, output: 20, cacheRead: 0, cacheWrite: 0 }, price, 1_000_000).actual;
  sum += priceUsage({ input: 0, output: 20, cacheRead: 0, cacheWrite: input }, price, 1_000_000).actual;
  sum += priceUsage({ input, output: 9, cacheRead: 0, cacheWrite: 0 }, price, 1_000_000).actual;
};
for (let i = 0; i < 20_000; i++) one(i);
const t0 = process.hrtime.bigint();
for (let i = 0; i < n; i++) one(i);
if (!process.env.MICRO_N) console.log(`${(Number(process.hrtime.bigint() - t0) / n).toFixed(0)} ns per request (3 prices); ${sum}`);
