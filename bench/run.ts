/**
 * `npm run bench`: load the gateway (full default chain) and a bare http-proxy-3 proxy over the
 * same mock upstream, for a fixed time each, non-streaming and streaming, and print requests/s,
 * p50/p99 latency and the gateway/bare-proxy ratios. Results are written to bench/results/.
 *
 * Each target is loaded BENCH_ROUNDS times, alternating with the other, and the medians are
 * reported: a shared machine's noise hits both sides alike instead of whichever ran during it.
 *
 * Options (env): BENCH_SECONDS per run (default 5), BENCH_ROUNDS (default 3), BENCH_CONCURRENCY (default 32), BENCH_WORDS (reply
 * length, default 20), BENCH_MODE (json | stream: run only one), BENCH_PROFILE=1 (CPU profile of
 * the gateway into bench/profiles/). The load generator runs in this process; the three servers are children.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const WORDS = Number(process.env.BENCH_WORDS ?? 20);
const KEY = 'sk-' + 'be'.repeat(32);

function startRole(role: string, arg = ''): Promise<{ url: string; child: ChildProcess }> {
  // BENCH_PROFILE=1 writes a CPU profile of the gateway process (./*.cpuprofile) for inspection.
  const flags = role === 'gateway' && process.env.BENCH_PROFILE ? ['--cpu-prof', '--cpu-prof-dir', path.join(root, 'bench/profiles')] : [];
  const child = spawn(process.execPath, [...flags, path.join(here, 'roles.js'), role, arg], { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      const m = /READY (\S+)/.exec(out);
      if (m) resolve({ url: m[1], child });
    });
    child.on('exit', (code) => reject(new Error(`${role} exited with ${code}`)));
  });
}

/** The gateway's default chain and routes, over the external mock as an openai-kind provider. */
function gatewayConfig(mockUrl: string, dataDir: string): string {
  const defaults = YAML.parse(readDefault());
  return YAML.stringify({
    version: 1,
    server: { host: '127.0.0.1', port: 0 },
    store: { kind: 'memory', path: dataDir, flush_interval: '1s' },
    providers: { bench: { kind: 'openai', base_url: `${mockUrl}/v1`, api_key: 'bench', protocols: ['openai-chat', 'openai-responses'] } },
    models: { 'bench-model': { provider: 'bench', price: { input: 0.5, output: 1.5 } } },
    groups: { bench: { kind: 'chat', passthrough: true, models: ['bench-model'], rpm: 0 } },
    users: { bench: { balance: 1_000_000, rpm: 0, concurrency: 0 } },
    keys: [{ key: KEY, name: 'bench', user: 'bench', group: 'bench', quota: 0 }],
    plugins: defaults.plugins,
    chains: defaults.chains,
    routes: defaults.routes,
  });
}

function readDefault(): string {
  return readFileSync(path.join(root, 'gateway.yaml'), 'utf8');
}

interface Result { requests: number; errors: number; rps: number; p50: number; p99: number; mean: number; cpuUsPerRequest: number }

function cpuOf(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    child.once('message', (u: any) => resolve(u.user + u.system));
    child.send('cpu');
  });
}

async function load(url: string, stream: boolean, server: ChildProcess): Promise<Result> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const u = new URL(url + '/v1/chat/completions');
  const body = JSON.stringify({ model: 'bench-model', stream, messages: [{ role: 'user', content: `benchmark [[mock: words=${WORDS}]]` }] });
  const latencies: number[] = [];
  let errors = 0;
  const deadline = Date.now() + SECONDS * 1000;
  const one = () => new Promise<void>((resolve) => {
    const t0 = process.hrtime.bigint();
    const req = http.request({
      host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      res.on('data', () => {});
      res.on('end', () => {
        if (res.statusCode === 200) latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
        else errors++;
        resolve();
      });
      res.on('error', () => { errors++; resolve(); });
    });
    req.on('error', () => { errors++; resolve(); });
    req.end(body);
  });
  const worker = async () => { while (Date.now() < deadline) await one(); };
  // warm-up
  await Promise.all(Array.from({ length: CONCURRENCY }, one));
  latencies.length = 0;
  errors = 0;
  const cpu0 = await cpuOf(server);
  const started = Date.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const elapsed = (Date.now() - started) / 1000;
  const cpu = (await cpuOf(server)) - cpu0;
  agent.destroy();
  latencies.sort((a, b) => a - b);
  const q = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? NaN;
  return {
    requests: latencies.length, errors, rps: latencies.length / elapsed,
    p50: q(0.5), p99: q(0.99), mean: latencies.reduce((a, b) => a + b, 0) / Math.max(1, latencies.length),
    cpuUsPerRequest: cpu / Math.max(1, latencies.length),
  };
}

async function main(): Promise<void> {
  const children: ChildProcess[] = [];
  const dataDir = path.join(os.tmpdir(), `gw-bench-${process.pid}`);
  try {
    const mock = await startRole('mock');
    children.push(mock.child);
    const cfgFile = path.join(os.tmpdir(), `gw-bench-${process.pid}.yaml`);
    writeFileSync(cfgFile, gatewayConfig(mock.url, dataDir));
    const [gateway, proxy] = await Promise.all([startRole('gateway', cfgFile), startRole('proxy', mock.url)]);
    children.push(gateway.child, proxy.child);

    const rows: Array<{ mode: string; target: string; r: Result }> = [];
    const modes = process.env.BENCH_MODE === 'stream' ? [true] : process.env.BENCH_MODE === 'json' ? [false] : [false, true];
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    for (const stream of modes) {
      const mode = stream ? 'streaming' : 'non-streaming';
      const runs: Record<string, Result[]> = { 'bare proxy': [], gateway: [] };
      for (let round = 0; round < ROUNDS; round++) {
        // Alternate the order so neither side always runs first.
        const order = [['bare proxy', proxy.url, proxy.child], ['gateway', gateway.url, gateway.child]] as const;
        for (const [target, url, child] of round % 2 ? [...order].reverse() : order) runs[target].push(await load(url, stream, child));
      }
      for (const target of ['bare proxy', 'gateway']) {
        const rs = runs[target];
        rows.push({
          mode, target,
          r: {
            requests: rs.reduce((a, r) => a + r.requests, 0), errors: rs.reduce((a, r) => a + r.errors, 0),
            rps: median(rs.map((r) => r.rps)), p50: median(rs.map((r) => r.p50)), p99: median(rs.map((r) => r.p99)),
            mean: median(rs.map((r) => r.mean)), cpuUsPerRequest: median(rs.map((r) => r.cpuUsPerRequest)),
          },
        });
      }
    }
    const fmt = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : '-');
    const lines: string[] = [];
    lines.push(`node ${process.version}, ${os.cpus().length} cpus (${os.cpus()[0]?.model ?? '?'}), ${ROUNDS} alternating rounds of ${SECONDS}s per target (medians), concurrency ${CONCURRENCY}, ${WORDS}-word replies`);
    lines.push('');
    lines.push('| mode | target | requests (all rounds) | errors | req/s | p50 ms | p99 ms | server CPU µs/request |');
    lines.push('|---|---|---|---|---|---|---|---|');
    for (const { mode, target, r } of rows) {
      lines.push(`| ${mode} | ${target} | ${r.requests} | ${r.errors} | ${fmt(r.rps)} | ${fmt(r.p50, 2)} | ${fmt(r.p99, 2)} | ${fmt(r.cpuUsPerRequest, 0)} |`);
    }
    lines.push('');
    for (const mode of ['non-streaming', 'streaming']) {
      if (!rows.some((x) => x.mode === mode)) continue;
      const bare = rows.find((x) => x.mode === mode && x.target === 'bare proxy')!.r;
      const gw = rows.find((x) => x.mode === mode && x.target === 'gateway')!.r;
      lines.push(`${mode}: gateway/bare-proxy throughput ratio ${fmt(gw.rps / bare.rps, 2)}, p50 latency ratio ${fmt(gw.p50 / bare.p50, 2)}, p99 latency ratio ${fmt(gw.p99 / bare.p99, 2)}, CPU per request ratio ${fmt(gw.cpuUsPerRequest / bare.cpuUsPerRequest, 2)}`);
    }
    const text = lines.join('\n');
    console.log(text);
    const dir = path.join(root, 'bench/results');
    mkdirSync(dir, { recursive: true });
    const stamp = new Date().toISOString().slice(0, 19).replace(/:/g, '-');
    writeFileSync(path.join(dir, `${stamp}.md`), `# Benchmark ${new Date().toISOString()}\n\n${text}\n`);
    writeFileSync(path.join(dir, 'latest.json'), JSON.stringify({ at: new Date().toISOString(), seconds: SECONDS, rounds: ROUNDS, concurrency: CONCURRENCY, words: WORDS, rows }, null, 2) + '\n');
  } finally {
    for (const c of children) c.kill(process.env.BENCH_PROFILE ? 'SIGINT' : 'SIGKILL');
  }
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
