// The client side of one upstream request, alone: Node's `http.request` on a keep-alive `Agent`
// (what the gateway used until core/upstream/h1.ts, and what the bare proxy uses) against the
// checkout's own HTTP/1.1 client (h1.ts `Pool`), each POSTing the bench's request body to a server
// in another process that answers the bench's non-streaming reply, 50 requests in flight, paced at
// RATE requests/s (default 8000, about the gateway's rate in the bench; unpaced, the faster client
// would batch more per wake-up and look better still). Prints this process's CPU µs per request,
// alternating the two clients for ROUNDS rounds (default 3) of SECONDS (default 6).
//   node bench/micro/upstream-client.mjs [CHECKOUT]
// (not a test; a guide for the transport's cost)
import http from 'node:http';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { pathToFileURL } from 'node:url';

if (process.argv[2] === '--serve') {
  const body = JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1,
    model: 'bench-chat',
    choices: [{ index: 0, message: { role: 'assistant', content: 'Hello there, how can I help?' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 10, completion_tokens: 10, total_tokens: 20 },
  });
  const server = http.createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
  });
  server.listen(0, '127.0.0.1', () => process.stdout.write(`${server.address().port}\n`));
} else {
  const root = path.resolve(process.argv[2] ?? '.');
  const { Pool, requestHead } = await import(pathToFileURL(path.join(root, 'dist/core/upstream/h1.js')).href);
  const RATE = Number(process.env.RATE ?? 8000);
  const ROUNDS = Number(process.env.ROUNDS ?? 3);
  const SECONDS = Number(process.env.SECONDS ?? 6);
  const server = spawn(process.execPath, [new URL(import.meta.url).pathname, '--serve'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const [first] = await once(server.stdout, 'data');
  const port = Number(String(first).trim());
  const reqBody = JSON.stringify({ model: 'bench-chat', messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 10 });
  const headers = [
    'host',
    `127.0.0.1:${port}`,
    'content-type',
    'application/json',
    'accept',
    'application/json',
    'user-agent',
    'llm-gateway/0.1',
    'x-request-id',
    'req_0123456789abcdef',
    'authorization',
    'Bearer sk-bench',
    'content-length',
    String(Buffer.byteLength(reqBody)),
  ];
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 64, scheduling: 'lifo' });
  const viaNode = () =>
    new Promise((resolve, reject) => {
      const r = http.request({ hostname: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST', agent, headers }, (res) => {
        const parts = [];
        res.on('data', (c) => parts.push(c));
        res.on('end', () => resolve(Buffer.concat(parts).toString()));
        res.on('error', reject);
      });
      r.on('error', reject);
      r.end(reqBody, 'latin1');
    });
  const pool = new Pool({ secure: false, hostname: '127.0.0.1', port }, 256, 64);
  const viaH1 = () =>
    new Promise((resolve, reject) => {
      const { head } = requestHead('/v1/chat/completions', headers);
      pool.send({
        write: (socket, sent) => socket.write(head + reqBody, 'latin1', sent),
        onResponse: (res) => {
          const parts = [];
          res.on('data', (c) => parts.push(c));
          res.on('end', () => resolve(Buffer.concat(parts).toString()));
          res.on('error', reject);
        },
        onError: reject,
      });
    });

  /** One round: 1 s of warm-up, then SECONDS measured. */
  async function round(one) {
    let n = 0;
    let stop = false;
    let tokens = 0;
    const waiting = [];
    const pace = setInterval(() => {
      tokens = Math.min(50, tokens + RATE / 1000);
      while (tokens >= 1 && waiting.length) {
        tokens--;
        waiting.shift()();
      }
    }, 1);
    const slot = () => (tokens >= 1 ? (tokens--, undefined) : new Promise((r) => waiting.push(r)));
    const worker = async () => {
      while (!stop) {
        const w = slot();
        if (w) await w;
        JSON.parse(await one());
        n++;
      }
    };
    const workers = Array.from({ length: 50 }, worker);
    await new Promise((r) => setTimeout(r, 1000));
    n = 0;
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, SECONDS * 1000));
    const c = process.cpuUsage(c0);
    const dt = performance.now() - t0;
    stop = true;
    clearInterval(pace);
    for (const w of waiting.splice(0)) w();
    await Promise.all(workers);
    return { rps: Math.round((n / dt) * 1000), us: (c.user + c.system) / n };
  }

  for (let r = 1; r <= ROUNDS; r++) {
    for (const [name, one] of [
      ['http.request + Agent', viaNode],
      ['h1.ts Pool', viaH1],
    ]) {
      const { rps, us } = await round(one);
      console.log(`round ${r}  ${name.padEnd(22)} ${String(rps).padStart(6)} req/s  ${us.toFixed(1).padStart(6)} CPU µs/req`);
    }
  }
  agent.destroy();
  pool.close();
  server.kill();
}
