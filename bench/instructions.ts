/**
 * `npm run bench:instructions [-- options]`: CPU instructions the server executes per request,
 * the gateway (as `run.ts` runs it) against the bare proxy, counted by valgrind's callgrind.
 *
 * Wall-clock figures on a shared machine move by more than most single changes; instruction counts
 * do not (a few tenths of a percent between runs). So this is the guide for per-request work:
 * each server runs under callgrind, gets `--warmup` requests (JIT, sockets, caches), then its
 * counters are zeroed, exactly `--requests` requests are sent by this (separate) process, and the
 * counters are dumped. Instructions per request = the dump's total / requests. Everything the
 * process does counts: JavaScript, Node and libuv, V8's compiler and GC threads, the kernel
 * boundary (not the kernel itself).
 *
 * The callgrind files stay in `--out` (default: a temporary folder, printed) for
 * `callgrind_annotate`; JIT-compiled JavaScript shows there as addresses, so use `--cpu-prof` on
 * the gateway (bench/README.md) to see which JavaScript functions the instructions are in.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { AUTH_CHAT, AUTH_CONVERTED, chatBody, gatewayConfig, gatewayEnv } from './setup.js';

const here = path.dirname(fileURLToPath(import.meta.url)); // dist/bench
const root = path.resolve(here, '../..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const USAGE = `npm run bench:instructions -- [options]
  --requests N      requests counted per scenario (default 2000)
  --warmup N        requests before counting (default 1500)
  --concurrency N   requests in flight at once (default 10)
  --words N         words per reply (default 20)
  --only LIST       scenarios: json, stream, convert (default json,stream)
  --sides LIST      proxy, gateway (default both)
  --out DIR         keep the callgrind files there (default: a temporary folder)
  --gateway-root DIR  run the gateway of another checkout (built), to compare two versions`;

interface Opts { requests: number; warmup: number; concurrency: number; words: number; only: string[]; sides: string[]; out?: string; gatewayRoot: string }

function parse(argv: string[]): Opts {
  const o: Opts = { requests: 2000, warmup: 1500, concurrency: 10, words: 20, only: ['json', 'stream'], sides: ['proxy', 'gateway'], gatewayRoot: root };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = () => {
      const x = argv[++i];
      if (x === undefined) throw new Error(`${a} needs a value\n${USAGE}`);
      return x;
    };
    if (a === '--requests') o.requests = Number(v());
    else if (a === '--warmup') o.warmup = Number(v());
    else if (a === '--concurrency') o.concurrency = Number(v());
    else if (a === '--words') o.words = Number(v());
    else if (a === '--only') o.only = v().split(',');
    else if (a === '--sides') o.sides = v().split(',');
    else if (a === '--out') o.out = v();
    else if (a === '--gateway-root') o.gatewayRoot = path.resolve(v());
    else if (a === '--help' || a === '-h') throw new Error(USAGE);
    else throw new Error(`unknown option ${a}\n${USAGE}`);
  }
  return o;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address() as net.AddressInfo;
      s.close(() => resolve(a.port));
    });
  });
}

const children = new Set<ChildProcess>();

function launch(cmd: string, args: string[], log: string, env = process.env): ChildProcess {
  const fd = fs.openSync(log, 'a');
  const child = spawn(cmd, args, { stdio: ['ignore', fd, fd], env, cwd: root });
  fs.closeSync(fd);
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

async function waitFor(url: string, child: ChildProcess, log: string, timeoutMs: number): Promise<void> {
  const t0 = Date.now();
  while (Date.now() - t0 < timeoutMs) {
    if (child.exitCode !== null) throw new Error(`${url}: exited\n${fs.readFileSync(log, 'utf8').slice(-2000)}`);
    const ok = await new Promise<boolean>((resolve) => {
      http.get(url, (res) => { res.resume(); resolve(res.statusCode === 200); }).on('error', () => resolve(false));
    });
    if (ok) return;
    await sleep(500);
  }
  throw new Error(`${url}: not up within ${timeoutMs} ms\n${fs.readFileSync(log, 'utf8').slice(-2000)}`);
}

/** Sends `n` requests, `concurrency` at a time on keep-alive connections; every one must answer 200 in full. */
async function load(url: string, auth: string, body: string, n: number, concurrency: number): Promise<void> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  let sent = 0;
  let failed = 0;
  const one = () => new Promise<void>((resolve) => {
    const req = http.request(url, { method: 'POST', agent, headers: { 'content-type': 'application/json', authorization: auth, 'content-length': Buffer.byteLength(body) } }, (res) => {
      if (res.statusCode !== 200) failed++;
      res.resume();
      res.on('end', resolve);
      res.on('error', () => { failed++; resolve(); });
    });
    req.on('error', () => { failed++; resolve(); });
    req.end(body);
  });
  const worker = async () => {
    while (sent < n) {
      sent++;
      await one();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  agent.destroy();
  if (failed) throw new Error(`${failed} of ${n} requests to ${url} failed`);
}

/**
 * Of the newest callgrind dump whose name starts with `prefix`: the total instructions (Ir), and
 * those spent in V8's optimising compilers (TurboFan, Maglev; mostly on background threads). A
 * server that has run for a while compiles next to nothing, but reaching that state under
 * callgrind takes far more requests than is practical; the figure without compilation is the
 * better estimate of the steady state.
 */
function lastDump(dir: string, prefix: string): { total: number; compile: number } {
  const files = fs.readdirSync(dir).filter((f) => f.startsWith(prefix)).map((f) => path.join(dir, f));
  files.sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs);
  const text = fs.readFileSync(files[0], 'utf8');
  const m = /^(?:summary|totals):\s*(\d+)/m.exec(text);
  if (!m) throw new Error(`no totals in ${files[0]}`);
  // Self cost per function: the cost lines after `fn=`, except the one after each `calls=` (a call's inclusive cost).
  const names = new Map<string, string>();
  const COMPILER = /v8::internal::(compiler|maglev|turboshaft)::|OptimizingCompile|Maglev|TurboFan/;
  let compiling = false;
  let afterCall = false;
  let compile = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('fn=')) {
      const d = /^fn=\((\d+)\)(?: (.*))?/.exec(line);
      let name = line.slice(3);
      if (d) {
        if (d[2] !== undefined) names.set(d[1], d[2]);
        name = names.get(d[1]) ?? '';
      }
      compiling = COMPILER.test(name);
    } else if (line.startsWith('cfn=')) {
      const d = /^cfn=\((\d+)\) (.*)/.exec(line);
      if (d) names.set(d[1], d[2]);
    } else if (line.startsWith('calls=')) afterCall = true;
    else if (/^[0-9+*-]/.test(line)) {
      if (afterCall) afterCall = false;
      else if (compiling) compile += Number(line.split(' ')[1] ?? 0);
    }
  }
  return { total: Number(m[1]), compile };
}

async function main(): Promise<void> {
  const o = parse(process.argv.slice(2));
  execFileSync('sh', ['-c', 'command -v valgrind && command -v callgrind_control'], { stdio: 'pipe' });
  const work = o.out ? path.resolve(o.out) : fs.mkdtempSync(path.join(os.tmpdir(), 'llm-gw-instr-'));
  fs.mkdirSync(work, { recursive: true });
  const mockPort = await freePort();
  const mockLog = path.join(work, 'mock.log');
  const mock = launch(process.execPath, [path.join(here, 'roles.js'), 'mock', String(mockPort)], mockLog);
  const mockUrl = `http://127.0.0.1:${mockPort}`;
  await waitFor(mockUrl + '/', mock, mockLog, 30_000);
  const upstreams = { mock: mockUrl, sink: mockUrl };
  const targets: Record<string, { auth: string; body: string }> = {
    json: { auth: AUTH_CHAT, body: chatBody('bench-chat', false, o.words) },
    stream: { auth: AUTH_CHAT, body: chatBody('bench-chat', true, o.words) },
    convert: { auth: AUTH_CONVERTED, body: chatBody('bench-claude', true, o.words) },
  };
  const results: Record<string, Record<string, number>> = {};
  for (const side of o.sides) {
    const port = await freePort();
    const prefix = `callgrind-${side}.out`;
    const vg = ['--tool=callgrind', `--callgrind-out-file=${path.join(work, prefix)}`];
    let args: string[];
    let env = process.env;
    if (side === 'gateway') {
      const dataDir = path.join(work, 'gateway-data');
      fs.mkdirSync(dataDir, { recursive: true });
      const cfg = path.join(work, 'gateway.yaml');
      fs.writeFileSync(cfg, YAML.stringify(gatewayConfig({ root: o.gatewayRoot, port, dataDir, upstreams, concurrency: 10_000 })));
      args = [...vg, process.execPath, path.join(o.gatewayRoot, 'bin/gateway.js'), 'start', '--config', cfg];
      env = gatewayEnv();
    } else {
      args = [...vg, process.execPath, path.join(here, 'roles.js'), 'proxy', String(port), mockUrl, mockUrl];
    }
    const log = path.join(work, `${side}.log`);
    const child = launch('valgrind', args, log, env);
    const url = `http://127.0.0.1:${port}`;
    try {
      await waitFor(url + (side === 'gateway' ? '/healthz' : '/'), child, log, 300_000);
      const scenarios = o.only.filter((name) => name !== 'convert' || side === 'gateway');
      // Every scenario is warmed before any is counted: code they share is compiled by then.
      for (const name of scenarios) await load(url + '/v1/chat/completions', targets[name].auth, targets[name].body, o.warmup, o.concurrency);
      for (const name of scenarios) {
        const t = targets[name];
        await sleep(1500); // timers of the last requests, the store's journal flush
        execFileSync('callgrind_control', ['-z', String(child.pid)], { stdio: 'pipe' });
        await load(url + '/v1/chat/completions', t.auth, t.body, o.requests, o.concurrency);
        await sleep(1500);
        execFileSync('callgrind_control', ['-d', `${side}-${name}`, String(child.pid)], { stdio: 'pipe' });
        const ir = lastDump(work, prefix);
        const per = (n: number) => Math.round(n / o.requests);
        (results[name] ??= {})[side] = per(ir.total - ir.compile);
        console.error(`${side} ${name}: ${per(ir.total).toLocaleString('en')} instructions per request, ${per(ir.total - ir.compile).toLocaleString('en')} without JIT compilation`);
      }
    } finally {
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    }
  }
  mock.kill('SIGKILL');
  console.log(`| scenario | ${o.sides.join(' | ')} | ratio |`);
  console.log(`|---|${o.sides.map(() => '---').join('|')}|---|`);
  for (const [name, r] of Object.entries(results)) {
    const ratio = r.proxy && r.gateway ? (r.gateway / r.proxy).toFixed(2) : '';
    console.log(`| ${name} | ${o.sides.map((s) => (r[s] ? Math.round(r[s] / 1000) + 'k' : '')).join(' | ')} | ${ratio} |`);
  }
  console.log(`(instructions per request without JIT compilation; ${o.requests} requests after ${o.warmup} warm-up, ${o.concurrency} at a time; callgrind files in ${work})`);
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  for (const c of children) c.kill('SIGKILL');
  process.exitCode = 1;
});
