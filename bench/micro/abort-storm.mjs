// 2,000 upstream streams held open through the checkout's transport (core/upstream/transport.ts),
// then all aborted at once: how long the abort calls take, and how long until the upstream (an HTTP
// server in this process, answering each with SSE headers and one event, then holding) has seen
// every response close. Run it on two checkouts to compare transports.
//   node bench/micro/abort-storm.mjs [CHECKOUT]
// (not a test; a guide for the bench's `abandon` scenario, which measures the whole gateway)
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const root = path.resolve(process.argv[2] ?? '.');
const { Transport } = await import(pathToFileURL(path.join(root, 'dist/core/upstream/transport.js')).href);
const N = 2000;
let open = 0;
const server = http.createServer((req, res) => {
  req.resume();
  open++;
  res.on('close', () => open--);
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write('data: {}\n\n');
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const { port } = server.address();
const transport = new Transport();
const calls = [];
for (let i = 0; i < N; i++) {
  const call = transport.send({
    provider: { name: 'p', maxSockets: 2 * N },
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    headers: { 'content-type': 'application/json' },
    body: '{"stream":true}',
    timeoutMs: 60_000,
    idleTimeoutMs: 30_000,
  });
  call.response.then(
    (r) => {
      r.body.on('data', () => {});
      r.body.on('error', () => {});
    },
    () => {},
  );
  calls.push(call);
}
while (open < N) await new Promise((r) => setTimeout(r, 10));
const t0 = performance.now();
for (const c of calls) c.abort();
const t1 = performance.now();
while (open > 0) await new Promise((r) => setImmediate(r));
console.log(
  `${root}: ${N} aborts took ${(t1 - t0).toFixed(1)} ms; every upstream response closed after ${(performance.now() - t0).toFixed(1)} ms`,
);
transport.close();
server.close();
