/**
 * Server processes of the benchmark besides the gateway (which runs as shipped, `bin/gateway.js
 * start`): `mock PORT` — the project's mock upstream; `sink PORT` — the upstream of the large-body
 * scenario; `proxy PORT MOCK_URL SINK_URL` — the baseline, a bare http-proxy-3 reverse proxy over
 * the same upstreams; `floor PORT MOCK_URL` — the least any gateway that routes by model and bills
 * by usage must do, and nothing else (the `floor` scenario); `floor-records PORT MOCK_URL DIR` —
 * the floor plus the records every billed request leaves, written into DIR (the `records`
 * scenario); `reference` — a fixed piece of work timed on request (the soak's measure of the
 * machine's own speed). bench/run.ts starts each pinned to its core and waits until the port
 * answers.
 */
import { createHash } from 'node:crypto';
import dc from 'node:diagnostics_channel';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import httpProxy from 'http-proxy-3';
import { startMockServer } from '../mock/server.js';
import { KEY_CHAT } from './setup.js';

const [role, port, target, sink] = process.argv.slice(2);

/** What the sink answers: a valid, minimal Chat Completions reply with usage. */
const SINK_REPLY = JSON.stringify({
  id: 'chatcmpl-sink',
  object: 'chat.completion',
  created: 1700000000,
  model: 'bench-large',
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
});

/**
 * What `floor-records` adds to the floor: what the product requires per billed request beyond
 * routing and reading usage, written as lean as Node allows — the key's SHA-256 looked up in a Map,
 * an admission line and a settlement line in a journal, a ledger record and an access line, all
 * three files written once per event-loop turn with `writeSync` (the gateway's own rule: a line is
 * on its way to the disk before the turn that made it ends), and a few counters. Lines the size and
 * shape of the gateway's. No limits, store, plugin chain or metrics registry.
 */
function floorRecords(dir: string) {
  fs.mkdirSync(dir, { recursive: true });
  const files = ['journal.jsonl', 'ledger.jsonl', 'access.jsonl'].map((f) => fs.openSync(path.join(dir, f), 'a'));
  const pending: string[][] = [[], [], []];
  const keys = new Map([[createHash('sha256').update(KEY_CHAT).digest('hex'), { name: 'bench-chat', user: 'bench', group: 'chat' }]]);
  const counters = { requests: 0, input: 0, output: 0, micros: 0 };
  let seq = 0;
  let n = 0;
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    for (let f = 0; f < 3; f++) {
      if (pending[f].length === 0) continue;
      fs.writeSync(files[f], pending[f].join(''));
      pending[f] = [];
    }
  };
  const push = (f: number, line: string) => {
    pending[f].push(line);
    if (!scheduled) {
      scheduled = true;
      setImmediate(flush);
    }
  };
  const who = new Map<string, { name: string; user: string; group: string }>();
  return {
    /** The request's id, or null for a key that is not known. */
    admit(req: http.IncomingMessage, model: string): string | null {
      const auth = req.headers.authorization ?? '';
      const k = keys.get(createHash('sha256').update(auth.slice(7)).digest('hex'));
      if (!k) return null;
      const id = `req_${(++n).toString(16).padStart(24, '0')}`;
      who.set(id, k);
      const t = Date.now();
      push(
        0,
        `[2,${++seq},${t},"${id}","${k.name}","${k.user}","${k.group}",${JSON.stringify(model)},"balance",20,20,0,0,40,0,0,"5h,1d,7d",2]\n`,
      );
      return id;
    },
    settle(id: string, model: string, stream: boolean, input: number, output: number, began: number, status: number): void {
      const k = who.get(id)!;
      who.delete(id);
      const t = Date.now();
      const micros = input + output;
      counters.requests++;
      counters.input += input;
      counters.output += output;
      counters.micros += micros;
      const m = JSON.stringify(model);
      push(
        0,
        `[1,${++seq},${t},"${id}","${k.name}","${k.user}","${k.group}",${m},"balance",${input},${output},0,0,${micros},${micros},${t - began},"5h,1d,7d",0]\n`,
      );
      push(
        1,
        `{"seq":${seq},"id":"${id}","type":"request","ts":${t},"user":"${k.user}","key":"${k.name}","group":"${k.group}","model_requested":${m},"model":${m},"provider":"bench-openai","account":"bench-openai/default","protocol_in":"openai-chat","protocol_out":"openai-chat","stream":${stream},"status":${status},"billing":"balance","input_tokens":${input},"output_tokens":${output},"cache_read_tokens":0,"cache_write_tokens":0,"reasoning_tokens":null,"usage_source":"reported","estimate_reason":null,"list_micros":${micros},"rate_ppm":1000000,"charged_micros":${micros},"duration_ms":${t - began},"ttft_ms":null,"attempts":1,"reference":null,"actor":null}\n`,
      );
      push(
        2,
        `{"level":"info","time":"${new Date(t).toISOString()}","requestId":"${id}","route":"openai-chat","method":"POST","clientIp":"127.0.0.1","path":"/v1/chat/completions","status":${status},"durationMs":${t - began},"key":"${k.name}","user":"${k.user}","group":"${k.group}","model":${m},"provider":"bench-openai","account":"bench-openai/default","attempts":1,"tokens":{"input":${input},"output":${output},"cacheRead":0,"cacheWrite":0},"costMicroUsd":${micros},"listCostMicroUsd":${micros},"msg":"request"}\n`,
      );
    },
  };
}

async function main(): Promise<void> {
  if (role === 'mock') {
    // Responses the mock has started and not yet closed: the upstream streams still open, which
    // the abandon scenario reads after the clients have gone. Counted from Node's own diagnostics
    // channel, so the mock itself is unchanged.
    // Also counts requests by path, so a scenario can check which upstream API it really used.
    let open = 0;
    const paths: Record<string, number> = {};
    dc.subscribe('http.server.request.start', (msg) => {
      const { request, response } = msg as { request: http.IncomingMessage; response: http.ServerResponse };
      open++;
      const p = (request.url ?? '').split('?')[0];
      paths[p] = (paths[p] ?? 0) + 1;
      response.once('close', () => open--);
    });
    process.on('message', (m) => {
      if (m === 'stats') process.send?.({ open, rss: process.memoryUsage().rss, paths });
    });
    await startMockServer({ port: Number(port), keepRequests: 0 });
    return;
  }
  if (role === 'reference') {
    // Always the same work (a hash over 256 KiB: arithmetic and cache, no allocation, so no GC),
    // warmed first so the JIT has settled, timed in CPU time (not wall time: it shares the server's
    // core, and waiting for it is not slowness). Every 2 s the fastest of five runs (a run the
    // server preempted, and whose caches it filled, is slower for a reason not the machine's);
    // asked with "run", the median of the samples since the last ask. Costs the core about 0.2 %.
    const buf = new Uint8Array(256 * 1024);
    for (let i = 0; i < buf.length; i++) buf[i] = (i * 2654435761) >>> 24;
    let sink = 0;
    const timed = (): number => {
      const a = process.cpuUsage();
      let h = 2166136261;
      for (let r = 0; r < 2; r++) for (let i = 0; i < buf.length; i++) h = Math.imul(h ^ buf[(i * 17) & (buf.length - 1)], 16777619);
      sink ^= h;
      const b = process.cpuUsage(a);
      return b.user + b.system;
    };
    for (let i = 0; i < 100; i++) timed();
    let samples: number[] = [];
    const sample = () => samples.push(Math.min(timed(), timed(), timed(), timed(), timed()));
    setInterval(sample, 2000);
    process.on('message', (m) => {
      if (m !== 'run') return;
      if (samples.length === 0) sample();
      const xs = samples.sort((a, b) => a - b);
      process.send?.({ us: xs[Math.floor((xs.length - 1) / 2)], samples: xs.length, sink: sink & 1 });
      samples = [];
    });
    process.send?.('ready');
    return;
  }
  if (role === 'sink') {
    // Drains the body unread and answers at once: large bodies cost the upstream (which shares its
    // core with the load generators) next to nothing, so the figures are the server under test's.
    const server = http.createServer({ requestTimeout: 0 }, (req, res) => {
      req.resume();
      req.on('end', () =>
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(SINK_REPLY) }).end(SINK_REPLY),
      );
    });
    server.keepAliveTimeout = 65_000;
    server.listen(Number(port), '127.0.0.1');
    return;
  }
  if (role === 'floor' || role === 'floor-records') {
    // What a gateway cannot skip, written as lean as Node allows: the whole request body read and
    // parsed (the model routes it; a body that is not JSON gets a 400), the upstream request sent
    // with the body's bytes on a keep-alive agent, and the answer's usage read (billing): the whole
    // answer parsed when it is JSON, the usage event found in a stream, whose bytes are forwarded
    // as they come. No key check, limits, store, metrics, log or record.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 4096 });
    const up = new URL(target);
    const USAGE = Buffer.from('"usage":{');
    const INCLUDE_USAGE = Buffer.from('{"stream_options":{"include_usage":true},');
    let billed = 0; // output tokens read from answers (GET / shows them)
    const rec = role === 'floor-records' ? floorRecords(sink) : undefined;
    const server = http.createServer((req, res) => {
      if (req.method !== 'POST') {
        req.resume();
        res.writeHead(200).end(`ok ${billed}`); // the harness's "is it up?", and the output tokens read so far
        return;
      }
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const raw = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
        let body: { model?: unknown; stream?: unknown };
        try {
          body = JSON.parse(raw.toString('utf8')) as typeof body;
        } catch {
          res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"invalid JSON"}}');
          return;
        }
        if (typeof body.model !== 'string') {
          res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"model is required"}}');
          return;
        }
        const stream = body.stream === true;
        const id = rec?.admit(req, body.model);
        if (id === null) {
          res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":{"message":"invalid key"}}');
          return;
        }
        const began = Date.now();
        // A stream's usage comes only when asked for (as the gateway asks): spliced in, not re-serialised.
        const out = stream && raw[0] === 0x7b ? Buffer.concat([INCLUDE_USAGE, raw.subarray(1)]) : raw;
        const ureq = http.request(
          {
            host: up.hostname,
            port: up.port,
            path: req.url,
            method: 'POST',
            agent,
            headers: { 'content-type': 'application/json', 'content-length': out.length, authorization: 'Bearer upstream' },
          },
          (ures) => {
            if (stream) {
              res.writeHead(ures.statusCode ?? 502, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
              let tail = '';
              ures.on('data', (c: Buffer) => {
                res.write(c);
                // The usage event: found in the bytes, parsed alone (an event cut between two chunks is joined first).
                if (tail || c.indexOf(USAGE) !== -1) {
                  tail += c.toString('utf8');
                  const at = tail.indexOf('"usage":{');
                  const start = tail.lastIndexOf('data: ', at);
                  const end = tail.indexOf('\n', at);
                  if (end === -1) return;
                  try {
                    const usage = (
                      JSON.parse(tail.slice(start + 6, end)) as { usage: { prompt_tokens: number; completion_tokens: number } }
                    ).usage;
                    billed += usage.completion_tokens;
                    if (id !== undefined)
                      rec?.settle(id, body.model as string, true, usage.prompt_tokens, usage.completion_tokens, began, 200);
                  } catch {
                    /* not the event's whole line */
                  }
                  tail = '';
                }
              });
              ures.on('end', () => res.end());
            } else {
              const parts: Buffer[] = [];
              ures.on('data', (c: Buffer) => parts.push(c));
              ures.on('end', () => {
                const answer = parts.length === 1 ? parts[0] : Buffer.concat(parts);
                try {
                  const usage = (JSON.parse(answer.toString('utf8')) as { usage: { prompt_tokens: number; completion_tokens: number } })
                    .usage;
                  billed += usage.completion_tokens;
                  if (id !== undefined)
                    rec?.settle(
                      id,
                      body.model as string,
                      false,
                      usage.prompt_tokens,
                      usage.completion_tokens,
                      began,
                      ures.statusCode ?? 502,
                    );
                } catch {
                  /* an answer without usage bills nothing here */
                }
                res.writeHead(ures.statusCode ?? 502, { 'content-type': 'application/json', 'content-length': answer.length }).end(answer);
              });
            }
          },
        );
        ureq.on('error', () => {
          if (!res.headersSent) res.writeHead(502).end();
          else res.destroy();
        });
        ureq.end(out);
      });
    });
    server.keepAliveTimeout = 5_000; // the gateway's
    server.listen(Number(port), '127.0.0.1');
    return;
  }
  if (role === 'proxy') {
    // As many upstream sockets as the gateway's bench provider allows (max_sockets), kept alive.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 4096 });
    const proxy = httpProxy.createProxyServer({ target, agent });
    proxy.on('error', (_e, _req, res) => {
      if (res instanceof http.ServerResponse && !res.headersSent) res.writeHead(502).end();
      else if (res && 'destroy' in res) res.destroy();
    });
    // The large-body scenario's requests carry `x-bench-upstream: sink` (the gateway routes them by model instead).
    const server = http.createServer((req, res) =>
      req.headers['x-bench-upstream'] === 'sink' ? proxy.web(req, res, { target: sink }) : proxy.web(req, res),
    );
    server.keepAliveTimeout = 5_000; // the gateway's
    server.listen(Number(port), '127.0.0.1');
    return;
  }
  throw new Error(`unknown role ${role}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
