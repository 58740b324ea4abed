// Per-request metrics work, measured in isolation: the ~15 series updates of one non-streaming
// request (requests, duration, in-flight, upstream attempts and latency, account series, tokens and
// cost through recordRequest, two timed store calls), in a loop; CPU µs per request, best and
// median of 5 rounds. Compare two built checkouts:
//   node bench/micro/metrics.mjs /path/to/old/checkout; node bench/micro/metrics.mjs .
// (not a test; figures quoted in the perf-hot report)
import path from 'node:path';
import { pathToFileURL } from 'node:url';
const root = path.resolve(process.argv[2] ?? '.');
const { createMetrics, recordRequest, instrumentStore } = await import(pathToFileURL(`${root}/dist/core/metrics.js`).href);
const m = createMetrics({ defaultMetrics: false });
const raw = {
  kind: 'memory',
  async admit() {
    return { ok: true };
  },
  async settle() {},
};
const store = instrumentStore(raw, m);
const model = { id: 'bench-chat', provider: 'bench-openai' };
const ctx = {
  attempts: [{ model }],
  answeredModel: model,
  billed: { actual: 31 },
  usage: { input: 12, output: 20, cacheRead: 0, cacheWrite: 0 },
  group: { name: 'chat' },
  key: { id: 'k', user: 'u' },
};
const route = 'openai-chat';
async function one(i) {
  m.inFlight.inc({ route });
  await store.admit({});
  m.accountInFlight.inc({ provider: 'bench-openai', account: 'default' });
  m.upstreamLatency.observe({ provider: 'bench-openai', model: 'bench-chat' }, 0.002);
  m.upstreamAttempts.inc({ provider: 'bench-openai', model: 'bench-chat', outcome: 'ok' });
  m.accountRequests.inc({ provider: 'bench-openai', account: 'default', outcome: 'ok' });
  m.accountTtft.observe({ provider: 'bench-openai', account: 'default' }, 0.003);
  m.accountInFlight.dec({ provider: 'bench-openai', account: 'default' });
  await store.settle('x', {});
  m.inFlight.dec({ route });
  recordRequest(m, ctx, { status: 200 }, false);
  m.requests.inc({ route, status: String(200 + (i & 0)) });
  m.duration.observe({ route }, 0.004);
}
const run = async (n) => {
  for (let i = 0; i < n; i++) await one(i);
};
await run(50000);
const best = [];
for (let r = 0; r < 5; r++) {
  const u0 = process.cpuUsage();
  await run(100000);
  const u = process.cpuUsage(u0);
  best.push((u.user + u.system) / 100000);
}
best.sort((a, b) => a - b);
console.log(`${root}: metrics work of one request ${best[0].toFixed(2)} µs (best of 5), median ${best[2].toFixed(2)} µs`);
const text = await m.registry.metrics();
const line = text.split('\n').find((l) => l.startsWith('gateway_requests_total{'));
console.log('  ', line);
