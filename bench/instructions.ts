/**
 * `npm run bench:instructions [-- options]`: CPU instructions the server executes per request,
 * the gateway (as `run.ts` runs it) against the bare proxy, counted by valgrind's callgrind.
 *
 * Wall-clock figures on a shared machine move by more than most single changes; instruction counts
 * much less, though not nothing: a major collection inside or outside the counted window moves
 * them by several percent at the default 2,000 requests (repeat, or count the part alone with
 * bench/micro/count.mjs, for a change of a few percent). So this is the guide for per-request work:
 * each server runs under callgrind, gets `--warmup` requests (JIT, sockets, caches), then its
 * counters are zeroed, exactly `--requests` requests are sent by this (separate) process, and the
 * counters are dumped. Instructions per request = the dump's total / requests. Everything the
 * process does counts: JavaScript, Node and libuv, V8's compiler and GC threads, the kernel
 * boundary (not the kernel itself).
 *
 * The callgrind files stay in `--out` (default: a temporary folder, printed) for
 * `callgrind_annotate`; JIT-compiled JavaScript shows there as addresses.
 *
 * `--cpu-prof` answers where the time goes instead: each server runs under V8's sampling profiler
 * (no valgrind), gets the same warm-up, then the counted requests in `--rounds` slices with the
 * sides taking turns, and the microseconds of CPU per counted request are reported by where they
 * are spent (the gateway's own modules, the store, metrics, logging, Node's http/stream/event
 * internals, syscalls, GC), gateway beside proxy, with each side's total per round.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { AUTH_CHAT, AUTH_CONVERTED, chatBody, freePort, gatewayConfig, gatewayEnv } from './setup.js';
import { categorize } from './profile.js';

const here = path.dirname(fileURLToPath(import.meta.url)); // dist/bench
const root = path.resolve(here, '../..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const USAGE = `npm run bench:instructions -- [options]
  --requests N      requests counted per scenario (default 2000)
  --warmup N        requests before counting (default 1500)
  --concurrency N   requests in flight at once (default 10)
  --words N         words per reply (default 20)
  --only LIST       scenarios: json, stream, convert (default json,stream)
  --sides LIST      proxy, floor, floor-records, gateway (default proxy,gateway; floor: the relay
                    that only reads the body and the answer, floor-records: it plus the records every
                    billed request leaves, bench/roles.ts)
  --out DIR         keep the callgrind files there (default: a temporary folder)
  --gateway-root DIR  run the gateway of another checkout (built), to compare two versions
  --cpu-prof        V8's sampling profiler instead of callgrind: CPU microseconds per request by
                    where they are spent (more requests by default: 20000 after 5000)
  --rounds N        with --cpu-prof: the counted requests in N slices, the sides taking turns
                    (default 5), so the machine's drift falls on every side alike
  --store KIND      the gateway's store: memory (default) or redis (a throwaway redis-server,
                    started here, on another core than the gateway where taskset is available)
  --ledger off      the gateway with \`ledger.enabled: false\` (default: on, as shipped; the same as
                    --without ledger)
  --without LIST    the gateway with parts of the product turned off, to see what each costs:
                    ledger (no ledger records), log (GATEWAY_LOG_LEVEL=warn: no access line), journal
                    (store.path "": no journal, snapshot or ledger files), limits (the model-call
                    chain reduced to auth, converter and metering, the user's and keys' limits
                    removed: the balance alone is checked)`;

/** What `--without` can turn off. */
const WITHOUT = ['ledger', 'log', 'journal', 'limits'];

/** The bench's gateway config with the `--without` parts turned off. */
function without(c: Record<string, any>, parts: string[]): Record<string, any> {
  if (parts.includes('ledger')) c.ledger = { enabled: false };
  if (parts.includes('journal')) c.store = { ...c.store, path: '' };
  if (parts.includes('limits')) {
    c.chains = { ...c.chains, 'model-call': ['auth', 'converter', 'metering'] };
    for (const g of Object.values<Record<string, unknown>>(c.groups)) delete g.rpm;
    for (const u of Object.values<Record<string, unknown>>(c.users)) {
      for (const k of ['rpm', 'concurrency', 'queue', 'spend_caps']) delete u[k];
    }
    for (const k of c.keys as Record<string, unknown>[]) {
      delete k.quota;
      delete k.windows;
    }
  }
  return c;
}

interface Opts {
  requests: number;
  warmup: number;
  concurrency: number;
  words: number;
  only: string[];
  sides: string[];
  out?: string;
  gatewayRoot: string;
  cpuProf: boolean;
  /** --cpu-prof: slices of the counted requests, the sides taking turns. */
  rounds: number;
  store: 'memory' | 'redis';
  /** --without (and --ledger off): the parts turned off. */
  without: string[];
  /** Set once the redis-server runs (`--store redis`). */
  redisUrl?: string;
}

function parse(argv: string[]): Opts {
  const o: Opts = {
    requests: 0,
    warmup: 0,
    concurrency: 10,
    words: 20,
    only: ['json', 'stream'],
    sides: ['proxy', 'gateway'],
    gatewayRoot: root,
    cpuProf: false,
    rounds: 5,
    store: 'memory',
    without: [],
  };
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
    else if (a === '--sides') {
      o.sides = v().split(',');
      const unknown = o.sides.filter((x) => !['proxy', 'floor', 'floor-records', 'gateway'].includes(x));
      if (unknown.length) throw new Error(`--sides takes proxy, floor, floor-records, gateway (not ${unknown.join(', ')})\n${USAGE}`);
    } else if (a === '--out') o.out = v();
    else if (a === '--gateway-root') o.gatewayRoot = path.resolve(v());
    else if (a === '--cpu-prof') o.cpuProf = true;
    else if (a === '--rounds') {
      o.rounds = Number(v());
      if (!Number.isInteger(o.rounds) || o.rounds < 1) throw new Error(`--rounds takes a whole number of at least 1\n${USAGE}`);
    } else if (a === '--store') {
      const k = v();
      if (k !== 'memory' && k !== 'redis') throw new Error(`--store takes memory or redis\n${USAGE}`);
      o.store = k;
    } else if (a === '--ledger') {
      const k = v();
      if (k !== 'on' && k !== 'off') throw new Error(`--ledger takes on or off\n${USAGE}`);
      o.without = o.without.filter((x) => x !== 'ledger');
      if (k === 'off') o.without.push('ledger');
    } else if (a === '--without') {
      const parts = v().split(',');
      const unknown = parts.filter((x) => !WITHOUT.includes(x));
      if (unknown.length) throw new Error(`--without takes ${WITHOUT.join(', ')} (not ${unknown.join(', ')})\n${USAGE}`);
      o.without = [...new Set([...o.without, ...parts])];
    } else if (a === '--help' || a === '-h') throw new Error(USAGE);
    else throw new Error(`unknown option ${a}\n${USAGE}`);
  }
  o.requests ||= o.cpuProf ? 20_000 : 2000;
  o.warmup ||= o.cpuProf ? 5000 : 1500;
  return o;
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
      http
        .get(url, (res) => {
          res.resume();
          resolve(res.statusCode === 200);
        })
        .on('error', () => resolve(false));
    });
    if (ok) return;
    await sleep(500);
  }
  throw new Error(`${url}: not up within ${timeoutMs} ms\n${fs.readFileSync(log, 'utf8').slice(-2000)}`);
}

/**
 * Sends `n` requests, `concurrency` at a time on keep-alive connections. A few may fail on a busy
 * machine (a server under valgrind is some fifty times slower, and timeouts can fire): they are
 * reported, and the run goes on unless more than 1 % failed.
 */
async function load(url: string, auth: string, body: string, n: number, concurrency: number): Promise<void> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  let sent = 0;
  let failed = 0;
  const statuses: Record<string, number> = {};
  const one = () =>
    new Promise<void>((resolve) => {
      const req = http.request(
        url,
        {
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', authorization: auth, 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          if (res.statusCode !== 200) {
            failed++;
            statuses[res.statusCode ?? 0] = (statuses[res.statusCode ?? 0] ?? 0) + 1;
          }
          res.resume();
          res.on('end', resolve);
          res.on('error', () => {
            failed++;
            resolve();
          });
        },
      );
      req.on('error', () => {
        failed++;
        statuses.error = (statuses.error ?? 0) + 1;
        resolve();
      });
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
  if (failed === 0) return;
  const what = `${failed} of ${n} requests to ${url} failed (${JSON.stringify(statuses)})`;
  if (failed > n / 100) throw new Error(what);
  console.error(`warning: ${what}`);
}

/**
 * Of the newest callgrind dump whose name starts with `prefix`: the total instructions (Ir), and
 * those spent in V8's optimising compilers (TurboFan, Maglev; mostly on background threads). A
 * server that has run for a while compiles next to nothing, but reaching that state under
 * callgrind takes far more requests than is practical; the figure without compilation is the
 * better estimate of the steady state.
 */
function lastDump(dir: string, prefix: string): { total: number; compile: number } {
  const files = fs
    .readdirSync(dir)
    .filter((f) => f.startsWith(prefix))
    .map((f) => path.join(dir, f));
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

/** The server of one side: command, arguments and environment (`wrap` runs it under valgrind or the profiler). */
function serverCommand(
  o: Opts,
  side: string,
  port: number,
  work: string,
  mockUrl: string,
  wrap: string[],
): { cmd: string; args: string[]; env: NodeJS.ProcessEnv } {
  const [cmd, ...pre] = wrap.length && !wrap[0].startsWith('-') ? wrap : [process.execPath, ...wrap];
  if (side === 'gateway') {
    const dataDir = path.join(work, `gateway-data-${port}`);
    fs.mkdirSync(dataDir, { recursive: true });
    const cfg = path.join(work, `gateway-${port}.yaml`);
    // A fresh prefix per server: one run's counters and leases never meet another's. A longer call
    // timeout than the shipped 500 ms: on a busy machine a stall of a second or two would otherwise
    // mark Redis away and fail the run; what a call costs the gateway's CPU is the same.
    const store = o.redisUrl ? { kind: 'redis', url: o.redisUrl, prefix: `bench${port}:`, timeout: '5s' } : undefined;
    fs.writeFileSync(
      cfg,
      YAML.stringify(
        without(
          gatewayConfig({
            root: o.gatewayRoot,
            port,
            dataDir,
            upstreams: { mock: mockUrl, sink: mockUrl },
            concurrency: 10_000,
            store,
          }),
          o.without,
        ),
      ),
    );
    const env = gatewayEnv();
    if (o.without.includes('log')) env.GATEWAY_LOG_LEVEL = 'warn';
    return { cmd, args: [...pre, path.join(o.gatewayRoot, 'bin/gateway.js'), 'start', '--config', cfg], env };
  }
  if (side === 'floor') return { cmd, args: [...pre, path.join(here, 'roles.js'), 'floor', String(port), mockUrl], env: process.env };
  if (side === 'floor-records') {
    const dir = path.join(work, `floor-data-${port}`);
    return { cmd, args: [...pre, path.join(here, 'roles.js'), 'floor-records', String(port), mockUrl, dir], env: process.env };
  }
  return { cmd, args: [...pre, path.join(here, 'roles.js'), 'proxy', String(port), mockUrl, mockUrl], env: process.env };
}

async function main(): Promise<void> {
  const o = parse(process.argv.slice(2));
  if (!o.cpuProf) execFileSync('sh', ['-c', 'command -v valgrind && command -v callgrind_control'], { stdio: 'pipe' });
  const work = o.out ? path.resolve(o.out) : fs.mkdtempSync(path.join(os.tmpdir(), o.cpuProf ? 'llm-gw-prof-' : 'llm-gw-instr-'));
  fs.mkdirSync(work, { recursive: true });
  const mockPort = await freePort();
  const mockLog = path.join(work, 'mock.log');
  const mock = launch(process.execPath, [path.join(here, 'roles.js'), 'mock', String(mockPort)], mockLog);
  const mockUrl = `http://127.0.0.1:${mockPort}`;
  await waitFor(mockUrl + '/', mock, mockLog, 30_000);
  if (o.store === 'redis') o.redisUrl = await startRedis(work);
  const targets: Record<string, { auth: string; body: string }> = {
    json: { auth: AUTH_CHAT, body: chatBody('bench-chat', false, o.words) },
    stream: { auth: AUTH_CHAT, body: chatBody('bench-chat', true, o.words) },
    convert: { auth: AUTH_CONVERTED, body: chatBody('bench-claude', true, o.words) },
  };
  if (o.cpuProf) {
    await profileAll(o, work, mockUrl, targets);
    for (const c of children) c.kill('SIGKILL'); // the mock and redis-server
    return;
  }
  const results: Record<string, Record<string, number>> = {};
  for (const side of o.sides) {
    const port = await freePort();
    const prefix = `callgrind-${side}.out`;
    const { cmd, args, env } = serverCommand(o, side, port, work, mockUrl, [
      'valgrind',
      '--tool=callgrind',
      `--callgrind-out-file=${path.join(work, prefix)}`,
      process.execPath,
    ]);
    const log = path.join(work, `${side}.log`);
    const child = launch(cmd, args, log, env);
    const url = `http://127.0.0.1:${port}`;
    try {
      // Under valgrind a gateway takes minutes to start (config validation, module compilation), more on a busy machine.
      await waitFor(url + (side === 'gateway' ? '/healthz' : '/'), child, log, 900_000);
      const scenarios = o.only.filter((name) => name !== 'convert' || side === 'gateway');
      // Every scenario is warmed before any is counted: code they share is compiled by then.
      for (const name of scenarios)
        await load(url + '/v1/chat/completions', targets[name].auth, targets[name].body, o.warmup, o.concurrency);
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
        console.error(
          `${side} ${name}: ${per(ir.total).toLocaleString('en')} instructions per request, ${per(ir.total - ir.compile).toLocaleString('en')} without JIT compilation`,
        );
      }
    } finally {
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    }
  }
  for (const c of children) c.kill('SIGKILL'); // the mock and redis-server
  console.log(`| scenario | ${o.sides.join(' | ')} | ratio |`);
  console.log(`|---|${o.sides.map(() => '---').join('|')}|---|`);
  for (const [name, r] of Object.entries(results)) {
    const ratio = r.proxy && r.gateway ? (r.gateway / r.proxy).toFixed(2) : '';
    console.log(`| ${name} | ${o.sides.map((s) => (r[s] ? Math.round(r[s] / 1000) + 'k' : '')).join(' | ')} | ${ratio} |`);
  }
  console.log(
    `(instructions per request without JIT compilation; ${o.requests} requests after ${o.warmup} warm-up, ${o.concurrency} at a time; callgrind files in ${work})`,
  );
}

/** Pause around the counted requests: the warm-up's last timers and writes settle before, the counted ones' after. */
const GAP_MS = 1500;

/**
 * `--cpu-prof`: per scenario, one server process per side under `--cpu-prof`, all started and warmed
 * first; then the counted requests in `rounds` slices, the sides taking turns (a pause before each
 * slice), so a drift of the machine falls on every side alike instead of on whichever ran last
 * (the writes row moved by a third between runs: results/2026-11-27T04-00-writes-noise.md); then
 * SIGTERM (the profile is written at exit). Only the samples taken while a side's slices ran count.
 */
async function profileAll(o: Opts, work: string, mockUrl: string, targets: Record<string, { auth: string; body: string }>): Promise<void> {
  const pin = os.availableParallelism() > 1 && hasTaskset() ? ['taskset', '-c', '0', process.execPath] : [process.execPath];
  /** Per scenario: each side's mean per category, and each side's total in each round. */
  const per: Record<string, { sides: Record<string, Map<string, number>>; spread: string[] }> = {};
  const slice = Math.ceil(o.requests / o.rounds);
  for (const name of o.only) {
    const t = targets[name];
    const sides = o.sides.filter((side) => name !== 'convert' || side === 'gateway');
    const servers: { side: string; url: string; dir: string; child: ChildProcess; windows: [number, number][] }[] = [];
    try {
      for (const side of sides) {
        const port = await freePort();
        const dir = path.join(work, `${side}-${name}`);
        // The proxy role has no SIGTERM handler of its own: exit normally so the profile is written.
        const exit = 'data:text/javascript,process.once("SIGTERM",()=>process.exit(0))';
        const { cmd, args, env } = serverCommand(o, side, port, work, mockUrl, [
          ...pin,
          '--import',
          exit,
          '--cpu-prof',
          '--cpu-prof-dir',
          dir,
        ]);
        const log = path.join(work, `${side}-${name}.log`);
        const child = launch(cmd, args, log, env);
        const url = `http://127.0.0.1:${port}`;
        servers.push({ side, url, dir, child, windows: [] });
        await waitFor(url + (side === 'gateway' ? '/healthz' : '/'), child, log, 60_000);
        await load(url + '/v1/chat/completions', t.auth, t.body, o.warmup, o.concurrency);
      }
      for (let r = 0; r < o.rounds; r++) {
        for (const s of servers) {
          await sleep(GAP_MS);
          const from = monotonicUs();
          await load(s.url + '/v1/chat/completions', t.auth, t.body, slice, o.concurrency);
          s.windows.push([from, monotonicUs()]);
        }
      }
      await sleep(GAP_MS);
      for (const s of servers) s.child.kill('SIGTERM');
      await Promise.all(servers.map((s) => new Promise((r) => (s.child.exitCode !== null ? r(null) : s.child.once('exit', r)))));
    } finally {
      for (const s of servers) s.child.kill('SIGKILL');
    }
    const spread: string[] = [];
    for (const s of servers) {
      const file = fs.readdirSync(s.dir).find((f) => f.endsWith('.cpuprofile'));
      if (!file) throw new Error(`${s.side} ${name}: no profile written in ${s.dir}`);
      const rounds = categorize(JSON.parse(fs.readFileSync(path.join(s.dir, file), 'utf8')), slice, s.windows);
      const mean = new Map<string, number>();
      for (const m of rounds) for (const [c, v] of m) mean.set(c, (mean.get(c) ?? 0) + v / rounds.length);
      (per[name] ??= { sides: {}, spread }).sides[s.side] = mean;
      const totals = rounds.map((m) => [...m.values()].reduce((a, b) => a + b, 0).toFixed(0));
      spread.push(`${s.side} ${totals.join(', ')}`);
    }
  }
  for (const [name, { sides, spread }] of Object.entries(per)) {
    const cats = new Set<string>();
    for (const m of Object.values(sides)) for (const k of m.keys()) cats.add(k);
    const cols = o.sides.filter((s) => sides[s]);
    const total = (s: string) => [...(sides[s]?.values() ?? [])].reduce((a, b) => a + b, 0);
    const rows = [...cats].map((c) => [c, ...cols.map((s) => sides[s].get(c) ?? 0)] as [string, ...number[]]);
    rows.sort((a, b) => (b[b.length - 1] as number) - (a[a.length - 1] as number));
    console.log(
      `\n${name}: CPU microseconds per request (${slice * o.rounds} requests in ${o.rounds} rounds, the sides taking turns, after ${o.warmup} warm-up, ${o.concurrency} at a time)`,
    );
    console.log(`| where | ${cols.join(' | ')} |`);
    console.log(`|---|${cols.map(() => '---:').join('|')}|`);
    console.log(`| **total** | ${cols.map((s) => total(s).toFixed(1)).join(' | ')} |`);
    for (const [c, ...v] of rows) if (v.some((x) => x >= 0.5)) console.log(`| ${c} | ${v.map((x) => x.toFixed(1)).join(' | ')} |`);
    console.log(`\ntotal per round, µs per request: ${spread.join('; ')}`);
  }
  console.log(`\n(profiles in ${work}; open a .cpuprofile in Chrome DevTools for the call tree)`);
}

/**
 * `--store redis`: a throwaway redis-server without persistence, on core 1 (the gateway under the
 * profiler is on core 0), as `run.ts` runs it beside the mock upstream. Killed with the other children.
 */
async function startRedis(work: string): Promise<string> {
  const port = await freePort();
  const pin = os.availableParallelism() > 1 && hasTaskset() ? ['taskset', '-c', '1'] : [];
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', work];
  const log = path.join(work, 'redis.log');
  const child = pin.length ? launch(pin[0], [...pin.slice(1), 'redis-server', ...args], log) : launch('redis-server', args, log);
  const t0 = Date.now();
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited\n${fs.readFileSync(log, 'utf8').slice(-2000)}`);
    const up = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.end();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (up) return `redis://127.0.0.1:${port}`;
    if (Date.now() - t0 > 30_000) throw new Error(`redis-server: not up within 30 s\n${fs.readFileSync(log, 'utf8').slice(-2000)}`);
    await sleep(100);
  }
}

function hasTaskset(): boolean {
  try {
    execFileSync('sh', ['-c', 'command -v taskset'], { stdio: 'pipe' });
    return true;
  } catch {
    return false;
  }
}

/** This process's reading of the system's monotonic clock, µs: the clock V8's profiles are timed by (both CLOCK_MONOTONIC on Linux). */
function monotonicUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  for (const c of children) c.kill('SIGKILL');
  process.exitCode = 1;
});
