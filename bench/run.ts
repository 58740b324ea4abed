/**
 * `npm run bench [-- options]`: the gateway as shipped against a bare http-proxy-3 proxy over the
 * same mock upstream. Method (bench/README.md has the why):
 *
 * - The gateway runs as `node bin/gateway.js start` with the shipped gateway.yaml's server, store,
 *   metrics, log level, plugins, chains and routes; only the deployment data (providers pointing at
 *   the external mock, models, groups, users, keys) is the bench's own, with every limit configured,
 *   non-zero and too high to reject. Its logs (the access log included) go to a file.
 * - Load comes from separate processes: wrk for throughput, bench/client.js for what wrk cannot do.
 * - Where the machine has ≥ 2 cores the server under test runs alone on one; the mock upstream and
 *   the load generators run on the other(s) (taskset).
 * - Every scenario alternates the compared sides within each round and reports the median of the
 *   per-round ratios with their spread, and the load average, so a busy moment hits one round of
 *   both sides instead of a whole side.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import YAML from 'yaml';
import {
  parseArgs,
  parseCoreTicks,
  busyPct,
  parseCpuList,
  parseGauges,
  parseProcStat,
  parseVmRss,
  parseWrk,
  planPinning,
  renderMarkdown,
  roundDiffs,
  roundOrder,
  roundRatios,
  spread,
  quantile,
  median,
  wrkErrors,
  wrkRps,
  soakSummary,
  stealPct,
  MINIMAL_WORDS,
  SCENARIO_TITLES,
  SOAK_VARIANTS,
  USAGE,
  WARMUP_S,
  type CoreTicks,
  type Options,
  type Pinning,
  type Report,
  type RoundRecord,
  type Row,
  type Scenario,
  type ScenarioResult,
  type SoakCurve,
  type SoakSide,
  type SoakSlice,
} from './lib.js';
import { selfTime, type CpuProfile } from './profile.js';
import { AUTH_CHAT, AUTH_CONVERTED, AUTH_LARGE_MESSAGES, chatBody as benchChatBody, freePort, gatewayConfig, gatewayEnv } from './setup.js';

const here = path.dirname(fileURLToPath(import.meta.url)); // dist/bench
const root = path.resolve(here, '../..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const MiB = 1024 * 1024;

let opts: Options;
let pinning: Pinning | null = null;
let work = '';
const children = new Set<ChildProcess>();
let clkTck = 100;

// ---------------------------------------------------------------------------------------------
// Processes

function pinned(cpus: number[] | undefined, cmd: string, args: string[]): [string, string[]] {
  return pinning && cpus ? ['taskset', ['-c', cpus.join(','), cmd, ...args]] : [cmd, args];
}

function launch(
  cpus: number[] | undefined,
  cmd: string,
  args: string[],
  logName: string,
  ipc = false,
  env: NodeJS.ProcessEnv = process.env,
): { child: ChildProcess; log: string } {
  const log = path.join(work, logName);
  const fd = fs.openSync(log, 'a'); // O_APPEND: the harness may truncate it between rounds
  const [c, a] = pinned(cpus, cmd, args);
  const child = spawn(c, a, { stdio: ['ignore', fd, fd, ...(ipc ? ['ipc' as const] : [])], env, cwd: root });
  fs.closeSync(fd);
  children.add(child);
  child.once('exit', () => children.delete(child));
  return { child, log };
}

function tail(file: string, n = 2000): string {
  try {
    const s = fs.readFileSync(file, 'utf8');
    return s.slice(-n);
  } catch {
    return '';
  }
}

function get(url: string): Promise<number> {
  return new Promise((resolve) => {
    const req = http.get(url, { agent: false, timeout: 2000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(0));
  });
}

async function waitUntil(what: string, child: ChildProcess, log: string, ready: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`${what} exited (${child.exitCode ?? child.signalCode}):\n${tail(log)}`);
    if (await ready()) return;
    await sleep(100);
  }
  throw new Error(`${what} not ready after ${timeoutMs / 1000} s:\n${tail(log)}`);
}

async function stop(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM', graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill(signal);
  if (await Promise.race([exited.then(() => true), sleep(graceMs).then(() => false)])) return;
  child.kill('SIGKILL');
  await exited;
}

/** Request/reply over IPC, one at a time. */
function ask(child: ChildProcess, msg: unknown, timeoutMs = 300_000): Promise<any> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no answer to ${JSON.stringify(msg).slice(0, 80)}`)), timeoutMs);
    child.once('message', (m: any) => {
      clearTimeout(t);
      if (m && m.ok === false) reject(new Error(m.error));
      else resolve(m);
    });
    child.send(msg as any);
  });
}

interface Server {
  name: string;
  url: string;
  child: ChildProcess;
  log: string;
  /** A gateway's store folder (the ledger's day files are under it). */
  dataDir?: string;
  close(): Promise<void>;
}

interface Mock extends Server {
  /** Upstream responses open now, the mock's RSS, and requests received so far by path. */
  stats(): Promise<{ open: number; rss: number; paths: Record<string, number> }>;
}

/**
 * A bench/roles.ts server on a free port (`role PORT ...args`), pinned to `cpus`, once its `/`
 * answers 200. `node` goes before the script (preloads: the probe, a SIGTERM handler); `stopWith`
 * is the signal `close` sends.
 */
async function startRole(
  role: string,
  args: string[],
  cpus: number[] | undefined,
  o: { name?: string; ipc?: boolean; node?: string[]; env?: NodeJS.ProcessEnv; stopWith?: NodeJS.Signals } = {},
): Promise<Server> {
  const port = await freePort();
  const name = o.name ?? role;
  const { child, log } = launch(
    cpus,
    process.execPath,
    [...(o.node ?? []), path.join(here, 'roles.js'), role, String(port), ...args],
    `${role}-${port}.log`,
    o.ipc,
    o.env,
  );
  const url = `http://127.0.0.1:${port}`;
  await waitUntil(`the ${name}`, child, log, async () => (await get(url + '/')) === 200);
  return { name, url, child, log, close: () => stop(child, o.stopWith ?? 'SIGKILL') };
}

async function startMock(): Promise<Mock> {
  const server = await startRole('mock', [], pinning?.upstream, { ipc: true });
  return { ...server, stats: () => ask(server.child, 'stats', 10_000) };
}

const startSink = (): Promise<Server> => startRole('sink', [], pinning?.upstream);

/** Where the upstreams are: every gateway and proxy is started over the same pair. */
let upstreams: { mock: string; sink: string };

/** The bare proxy; with `probeDir`, under bench/probe.ts as a probed gateway is (then stopped with SIGTERM, so its last period is written). */
function startProxy(probeDir?: string): Promise<Server> {
  return startRole('proxy', [upstreams.mock, upstreams.sink], pinning?.server, {
    name: 'bare proxy',
    ...(probeDir && {
      // The proxy role has no SIGTERM handler: one that exits normally, so the probe writes its last period.
      node: [
        '--import',
        'data:text/javascript,process.once("SIGTERM",()=>process.exit(0))',
        '--import',
        pathToFileURL(path.join(here, 'probe.js')).href,
      ],
      env: { ...process.env, BENCH_PROBE_DIR: probeDir },
      stopWith: 'SIGTERM' as const,
    }),
  });
}

/** The `floor` relay (bench/roles.ts): what any billing gateway must do per request, and nothing else. */
const startFloor = (): Promise<Server> => startRole('floor', [upstreams.mock], pinning?.server);

/** The `floor-records` relay: the floor plus the records the product writes per billed request, into `dir`. */
const startFloorRecords = (dir: string): Promise<Server> => startRole('floor-records', [upstreams.mock, dir], pinning?.server);

/**
 * The soak's measure of the machine: bench/roles.ts `reference` on the given cores (the server's,
 * and the load's), asked for at each slice's end for the median of its timings during the slice
 * (CPU µs of a fixed piece of work, sampled every 2 s).
 */
async function startReference(
  cores: number[] | undefined,
  logName: string,
): Promise<{ time: () => Promise<number>; close: () => Promise<void> }> {
  const { child, log } = launch(cores, process.execPath, [path.join(here, 'roles.js'), 'reference'], logName, true);
  await new Promise<void>((resolve, reject) => {
    child.once('message', () => resolve());
    child.once('exit', (code) => reject(new Error(`the reference process exited (${code}): ${tail(log)}`)));
  });
  return {
    time: async () => ((await ask(child, 'run', 10_000)) as { us: number }).us,
    close: () => stop(child, 'SIGKILL'),
  };
}

/** The server's cores' ticks (every core's when unpinned). */
function coreTicks(): CoreTicks {
  return parseCoreTicks(fs.readFileSync('/proc/stat', 'utf8'), pinning?.server ?? []);
}

/** The load's cores' ticks (undefined when unpinned: then they are every core, the server's too). */
function loadTicks(): CoreTicks | undefined {
  return pinning?.load ? parseCoreTicks(fs.readFileSync('/proc/stat', 'utf8'), pinning.load) : undefined;
}

let gatewayCount = 0;
async function startGateway(
  store?: Record<string, unknown>,
  label = 'gateway',
  overrides?: Record<string, unknown>,
  probeDir?: string,
): Promise<Server> {
  const port = await freePort();
  const n = ++gatewayCount;
  const dataDir = path.join(work, `gateway-${n}-data`);
  fs.mkdirSync(dataDir, { recursive: true });
  const cfgFile = path.join(work, `gateway-${n}.yaml`);
  const concurrency = Math.max(10_000, 2 * (opts.streams + opts.concurrency + opts.probeConcurrency));
  fs.writeFileSync(cfgFile, YAML.stringify(gatewayConfig({ root, port, dataDir, upstreams, concurrency, store, overrides })));
  const probe = probeDir ? ['--import', pathToFileURL(path.join(here, 'probe.js')).href] : [];
  const { child, log } = launch(
    pinning?.server,
    process.execPath,
    [...probe, path.join(root, 'bin/gateway.js'), 'start', '--config', cfgFile],
    `gateway-${n}.log`,
    false,
    probeDir ? { ...gatewayEnv(), BENCH_PROBE_DIR: probeDir } : gatewayEnv(),
  );
  const url = `http://127.0.0.1:${port}`;
  await waitUntil('the gateway', child, log, async () => (await get(url + '/healthz')) === 200);
  return {
    name: label,
    url,
    child,
    log,
    dataDir,
    close: async () => {
      await stop(child, 'SIGTERM');
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Bytes of the files under `dir` (0 when it does not exist). */
function treeBytes(dir: string): number {
  let n = 0;
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const e of entries) {
    const f = path.join(dir, e.name);
    if (e.isDirectory()) n += treeBytes(f);
    else if (e.isFile()) n += fs.statSync(f).size;
  }
  return n;
}

/** GET a text body (the gateway's /metrics). */
function getText(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: false, timeout: 5000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`${url}: ${res.statusCode}`))));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`${url}: no answer in 5 s`)));
    req.on('error', reject);
  });
}

/** CPU ticks and RSS of a process and its descendants (gateway workers included). */
function usage(pid: number): { ticks: number; rss: number } {
  const stats = new Map<number, { ppid: number; ticks: number }>();
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const s = parseProcStat(fs.readFileSync(`/proc/${d}/stat`, 'utf8'));
      stats.set(s.pid, s);
    } catch {
      /* gone meanwhile */
    }
  }
  const tree = [pid];
  for (let i = 0; i < tree.length; i++) for (const [p, s] of stats) if (s.ppid === tree[i]) tree.push(p);
  let ticks = 0;
  let rss = 0;
  for (const p of tree) {
    ticks += stats.get(p)?.ticks ?? 0;
    try {
      rss += parseVmRss(fs.readFileSync(`/proc/${p}/status`, 'utf8'));
    } catch {
      /* gone */
    }
  }
  return { ticks, rss };
}

/** RSS of a process tree: the median of a few samples, a moment apart. */
async function rssOf(pid: number, samples = 3): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < samples; i++) {
    if (i) await sleep(200);
    xs.push(usage(pid).rss);
  }
  return median(xs);
}

async function startClient(): Promise<ChildProcess> {
  const { child, log } = launch(pinning?.load, process.execPath, [path.join(here, 'client.js')], 'client.log', true);
  await new Promise<void>((resolve, reject) => {
    child.once('message', () => resolve());
    child.once('exit', (c) => reject(new Error(`client exited (${c}):\n${tail(log)}`)));
  });
  return child;
}

// ---------------------------------------------------------------------------------------------
// Load

function chatBody(model: string, stream: boolean, directives = '', pad = 0): string {
  return benchChatBody(model, stream, opts.words, directives, pad);
}

function bodyFile(name: string, body: string): string {
  const f = path.join(work, `${name}.json`);
  fs.writeFileSync(f, body);
  return f;
}

/** One side of a comparison: where to send what. */
interface Target {
  side: string;
  server: Server;
  auth: string;
  body: string;
  path?: string;
}

async function wrk(t: Target, seconds: number, connections: number): Promise<ReturnType<typeof parseWrk>> {
  const threads = Math.max(1, Math.min(pinning?.load.length ?? Math.max(1, os.availableParallelism() - 1), connections));
  const [cmd, args] = pinned(pinning?.load, 'wrk', [
    '-t',
    String(threads),
    '-c',
    String(connections),
    '-d',
    `${seconds}s`,
    '--timeout',
    '30s',
    '-s',
    path.join(root, 'bench/wrk.lua'),
    t.server.url + (t.path ?? '/v1/chat/completions'),
  ]);
  const env = { ...process.env, BENCH_BODY_FILE: bodyFile(`wrk-${t.side.replace(/\W+/g, '-')}`, t.body), BENCH_AUTH: t.auth };
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  children.add(child);
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  children.delete(child);
  if (code !== 0) throw new Error(`wrk exited ${code}: ${err || out}`);
  return parseWrk(out);
}

/**
 * One wrk run against one side, with the server's CPU time, the load's core's busy share (when
 * pinned) and (for the gateway) log bytes around it.
 */
async function measure(t: Target, seconds: number, connections: number): Promise<Record<string, number>> {
  const pid = t.server.child.pid!;
  if (t.server.name !== 'bare proxy') fs.truncateSync(t.server.log, 0);
  const before = usage(pid);
  const loadBefore = loadTicks();
  const r = await wrk(t, seconds, connections);
  const after = usage(pid);
  const loadAfter = loadTicks();
  const ok = r.requests - r.errors.status;
  const figures: Record<string, number> = {
    'req/s': wrkRps(r),
    'p50 ms': r.latencyUs.p50 / 1000,
    'p99 ms': r.latencyUs.p99 / 1000,
    'CPU µs/req': ((after.ticks - before.ticks) * (1e6 / clkTck)) / Math.max(1, ok),
    errors: wrkErrors(r),
  };
  // Near 100 %, the load side (wrk and the mock share that core) may be what limits the side's rate.
  if (loadBefore && loadAfter) figures['load core busy %'] = busyPct(loadBefore, loadAfter);
  if (t.server.name !== 'bare proxy' && !t.server.name.startsWith('floor'))
    figures['log B/req'] = fs.statSync(t.server.log).size / Math.max(1, r.requests);
  return figures;
}

function loadavg1(): number {
  return os.loadavg()[0];
}

function pick(rounds: RoundRecord[], side: string, key: string): number[] {
  return rounds.map((r) => r.sides.find((s) => s.side === side)?.figures[key] ?? NaN);
}

/** A row comparing one figure of the two sides: both medians, and the median per-round ratio (or difference). */
function compare(
  rounds: RoundRecord[],
  columns: [string, string],
  key: string,
  metric: string,
  how: 'ratio' | 'diff',
  goal?: { text: string; ok: (x: number) => boolean },
  unit = '',
): Row {
  const base = pick(rounds, columns[0], key);
  const subj = pick(rounds, columns[1], key);
  const row: Row = { metric, unit, baseline: spread(base), subject: spread(subj) };
  if (how === 'ratio') row.ratio = spread(roundRatios(subj, base));
  else row.diff = spread(roundDiffs(subj, base));
  if (goal) {
    row.goal = goal.text;
    const m = (row.ratio ?? row.diff)!.median;
    row.met = Number.isFinite(m) ? goal.ok(m) : undefined;
  }
  return row;
}

function errorNotes(rounds: RoundRecord[]): string[] {
  const notes: string[] = [];
  for (const r of rounds)
    for (const s of r.sides) {
      if ((s.figures.errors ?? 0) > 0)
        notes.push(
          `round ${r.round + 1}, ${s.side}: ${s.figures.errors} failed requests (wrk errors: connect, read, write, timeout or non-2xx)`,
        );
      if (s.figures['log B/req'] === 0)
        notes.push(`round ${r.round + 1}, ${s.side}: the gateway wrote no log bytes (is the access log off?)`);
    }
  return notes;
}

// ---------------------------------------------------------------------------------------------
// Scenarios

interface Servers {
  mock: Mock;
  proxy: Server;
  gateway: Server;
}

function result(name: Scenario, columns: [string, string]): ScenarioResult {
  return { name, title: SCENARIO_TITLES[name], columns, rows: [], rounds: [], notes: [] };
}

/** Alternating wrk rounds of two targets (each warmed first); the headline rows compare them. */
async function throughput(
  res: ScenarioResult,
  targets: [Target, Target],
  goals: { rps?: number; cpu?: number } = {},
  connections = opts.concurrency,
): Promise<ScenarioResult> {
  // Warm-up: JIT, sockets, connection pools. A fresh gateway needs about 4 s at full load to reach
  // its steady CPU per request (over twice that in its first 2 s); 2 s left the first round warming.
  for (const t of targets) await wrk(t, Math.min(WARMUP_S, opts.duration), connections);
  for (let round = 0; round < opts.rounds; round++) {
    const rec: RoundRecord = { round, loadavg1: loadavg1(), sides: [] };
    for (const t of roundOrder(targets, round)) rec.sides.push({ side: t.side, figures: await measure(t, opts.duration, connections) });
    rec.sides.sort((a, b) => targets.findIndex((t) => t.side === a.side) - targets.findIndex((t) => t.side === b.side));
    res.rounds.push(rec);
    progress(res.name, round, rec);
  }
  const cols = res.columns;
  res.rows.push(
    compare(
      res.rounds,
      cols,
      'req/s',
      'requests/s',
      'ratio',
      goals.rps ? { text: `≥ ${goals.rps}×`, ok: (x) => x >= goals.rps! } : undefined,
    ),
  );
  res.rows.push(
    compare(
      res.rounds,
      cols,
      'CPU µs/req',
      'server CPU per request, µs',
      'ratio',
      goals.cpu ? { text: `≤ ${goals.cpu}×`, ok: (x) => x <= goals.cpu! } : undefined,
    ),
  );
  res.rows.push(compare(res.rounds, cols, 'p50 ms', 'latency p50, ms', 'ratio'));
  res.rows.push(compare(res.rounds, cols, 'p99 ms', 'latency p99, ms', 'ratio'));
  res.notes.push(...errorNotes(res.rounds));
  return res;
}

/**
 * The same comparison non-streaming, then streaming: `targets(stream)` gives both sides; the rows
 * are prefixed, and the rounds numbered on (non-streaming first).
 */
async function jsonAndStream(
  res: ScenarioResult,
  targets: (stream: boolean) => [Target, Target],
  goals: { json?: { rps?: number; cpu?: number }; stream?: { rps?: number; cpu?: number } } = {},
): Promise<ScenarioResult> {
  const json = await throughput(result(res.name, res.columns), targets(false), goals.json);
  const stream = await throughput(result(res.name, res.columns), targets(true), goals.stream);
  res.rows.push(
    ...json.rows.map((r) => ({ ...r, metric: `non-streaming: ${r.metric}` })),
    ...stream.rows.map((r) => ({ ...r, metric: `streaming: ${r.metric}` })),
  );
  res.rounds.push(...json.rounds, ...stream.rounds.map((r) => ({ ...r, round: r.round + json.rounds.length })));
  res.notes.push(`rounds 1–${json.rounds.length} non-streaming, then streaming`, ...json.notes, ...stream.notes);
  return res;
}

function progress(name: string, round: number, rec: RoundRecord): void {
  const parts = rec.sides.map(
    (s) =>
      `${s.side}: ${Object.entries(s.figures)
        .map(([k, v]) => `${k} ${Number.isFinite(v) ? +v.toFixed(2) : v}`)
        .join(', ')}`,
  );
  console.error(`[${name}] round ${round + 1} (load ${rec.loadavg1.toFixed(2)}) ${parts.join(' | ')}`);
}

const scenarios: Record<Scenario, (s: Servers) => Promise<ScenarioResult>> = {
  json: (s) =>
    throughput(
      result('json', ['bare proxy', 'gateway']),
      [
        { side: 'bare proxy', server: s.proxy, auth: AUTH_CHAT, body: chatBody('bench-chat', false) },
        { side: 'gateway', server: s.gateway, auth: AUTH_CHAT, body: chatBody('bench-chat', false) },
      ],
      { rps: 0.8, cpu: 1.25 },
    ),

  stream: (s) =>
    throughput(
      result('stream', ['bare proxy', 'gateway']),
      [
        { side: 'bare proxy', server: s.proxy, auth: AUTH_CHAT, body: chatBody('bench-chat', true) },
        { side: 'gateway', server: s.gateway, auth: AUTH_CHAT, body: chatBody('bench-chat', true) },
      ],
      { rps: 0.9 },
    ),

  minimal: async (s) => {
    const res = await jsonAndStream(
      result('minimal', ['bare proxy', 'gateway']),
      (stream) => [
        { side: 'bare proxy', server: s.proxy, auth: AUTH_CHAT, body: benchChatBody('bench-chat', stream, MINIMAL_WORDS) },
        { side: 'gateway', server: s.gateway, auth: AUTH_CHAT, body: benchChatBody('bench-chat', stream, MINIMAL_WORDS) },
      ],
      { json: { rps: 0.8, cpu: 1.25 }, stream: { rps: 0.9 } },
    );
    res.notes.push(
      `the mock answers ${MINIMAL_WORDS} words (${MINIMAL_WORDS} output tokens; streamed as ${MINIMAL_WORDS} content events) to a one-word prompt, so the fixed per-request work dominates`,
    );
    return res;
  },

  // Not a goal: the reference for what the goals ask. A relay that reads the body and the answer
  // (as routing by model and billing by usage require) and does nothing else, against the proxy;
  // the gateway's own figures against the proxy come from `json`, `stream` and `minimal`.
  floor: async (s) => {
    const floor = await startFloor();
    try {
      const res = await jsonAndStream(result('floor', ['bare proxy', 'floor']), (stream) => [
        { side: 'bare proxy', server: s.proxy, auth: AUTH_CHAT, body: chatBody('bench-chat', stream) },
        { side: 'floor', server: floor, auth: AUTH_CHAT, body: chatBody('bench-chat', stream) },
      ]);
      const minimal = await throughput(result('floor', res.columns), [
        { side: 'bare proxy', server: s.proxy, auth: AUTH_CHAT, body: benchChatBody('bench-chat', false, MINIMAL_WORDS) },
        { side: 'floor', server: floor, auth: AUTH_CHAT, body: benchChatBody('bench-chat', false, MINIMAL_WORDS) },
      ]);
      res.rows.push(...minimal.rows.map((r) => ({ ...r, metric: `minimal answer, non-streaming: ${r.metric}` })));
      res.rounds.push(...minimal.rounds.map((r) => ({ ...r, round: r.round + res.rounds.length })));
      res.notes.push(
        `the last ${minimal.rounds.length} rounds: non-streaming with a minimal answer (${MINIMAL_WORDS} words)`,
        ...minimal.notes,
        "the floor (bench/roles.ts `floor`): reads and parses the whole request body, sends its bytes upstream on a keep-alive agent, parses a non-streaming answer whole for its usage or finds the usage event in a stream it forwards as it comes; nothing else (no key, limits, store, metrics, log or record). What a gateway that routes by model and bills by usage cannot skip, on Node: its CPU per request over the proxy's is the part of the ≤ 1.25× budget no design removes",
      );
      return res;
    } finally {
      await floor.close();
    }
  },

  // Not a goal either: the floor plus the durable records and the access line every billed
  // request leaves (bench/roles.ts `floorRecords`), written the gateway's way (once per event-loop
  // turn). What the product's records cost beyond the floor; the rest of the gateway's figure is
  // its key check, limits, plugin chain and the structure around them.
  records: async (s) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-records-'));
    const floor = await startFloorRecords(dir);
    try {
      const res = await jsonAndStream(result('records', ['bare proxy', 'floor with records']), (stream) => [
        { side: 'bare proxy', server: s.proxy, auth: AUTH_CHAT, body: chatBody('bench-chat', stream) },
        { side: 'floor with records', server: floor, auth: AUTH_CHAT, body: chatBody('bench-chat', stream) },
      ]);
      res.notes.push(
        "the floor with records (bench/roles.ts `floor-records`): the floor, plus the API key's SHA-256 looked up in a Map (401 when unknown), an admission and a settlement line in a journal, a ledger record and an access line the size and shape of the gateway's, each file written once per event-loop turn with `writeSync`. No limits, store, plugin chain or metrics registry",
      );
      return res;
    } finally {
      await floor.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  },

  convert: async (s) => {
    const before = (await s.mock.stats()).paths;
    const res = await throughput(
      result('convert', ['passthrough', 'converted']),
      [
        { side: 'passthrough', server: s.gateway, auth: AUTH_CHAT, body: chatBody('bench-chat', true) },
        { side: 'converted', server: s.gateway, auth: AUTH_CONVERTED, body: chatBody('bench-claude', true) },
      ],
      { rps: 0.85 },
    );
    // Which upstream API each side really reached, counted by the mock: a check on the method.
    const after = (await s.mock.stats()).paths;
    const n = (p: string) => (after[p] ?? 0) - (before[p] ?? 0);
    res.notes.push(
      `the mock received ${n('/v1/messages')} Messages and ${n('/v1/chat/completions')} Chat Completions requests during this scenario`,
    );
    if (n('/v1/messages') === 0) res.notes.push('**the converted side never reached the Messages API: this comparison is void**');
    return res;
  },

  ttft: async (s) => {
    const res = result('ttft', ['bare proxy', 'gateway']);
    const body = chatBody('bench-chat', true);
    const targets = [
      { side: 'mock', url: s.mock.url },
      { side: 'bare proxy', url: s.proxy.url },
      { side: 'gateway', url: s.gateway.url },
    ];
    const client = await startClient();
    try {
      for (let round = 0; round < opts.rounds; round++) {
        const rec: RoundRecord = { round, loadavg1: loadavg1(), sides: [] };
        for (const t of roundOrder(targets, round)) {
          const r = await ask(client, {
            op: 'ttft',
            url: t.url + '/v1/chat/completions',
            auth: AUTH_CHAT,
            body,
            n: opts.ttftRequests,
            warmup: round === 0 ? 50 : 10,
          });
          rec.sides.push({ side: t.side, figures: { 'p50 ms': quantile(r.ms, 0.5), 'p99 ms': quantile(r.ms, 0.99), errors: r.errors } });
        }
        const mock = rec.sides.find((x) => x.side === 'mock')!.figures;
        for (const x of rec.sides)
          if (x.side !== 'mock') {
            x.figures['p50 added ms'] = x.figures['p50 ms'] - mock['p50 ms'];
            x.figures['p99 added ms'] = x.figures['p99 ms'] - mock['p99 ms'];
          }
        rec.sides.sort((a, b) => targets.findIndex((t) => t.side === a.side) - targets.findIndex((t) => t.side === b.side));
        res.rounds.push(rec);
        progress('ttft', round, rec);
      }
    } finally {
      await stop(client, 'SIGKILL');
    }
    const cols = res.columns;
    const p50 = compare(
      res.rounds,
      cols,
      'p50 added ms',
      'TTFT p50 added over the mock, ms',
      'diff',
      { text: '≤ +0.5 ms over the bare proxy', ok: (x) => x <= 0.5 },
      'ms',
    );
    const p99 = compare(res.rounds, cols, 'p99 added ms', 'TTFT p99 added over the mock, ms', 'diff', undefined, 'ms');
    res.rows.push(p50, p99);
    res.notes.push(
      `the mock alone: p50 ${median(pick(res.rounds, 'mock', 'p50 ms')).toFixed(2)} ms, p99 ${median(pick(res.rounds, 'mock', 'p99 ms')).toFixed(2)} ms (time from sending the request to the first content delta, one request at a time, ${opts.ttftRequests} per side per round)`,
      'the difference column is the gateway minus the bare proxy, per round',
    );
    for (const r of res.rounds)
      for (const x of r.sides) if (x.figures.errors) res.notes.push(`round ${r.round + 1}, ${x.side}: ${x.figures.errors} failed requests`);
    return res;
  },

  memory: async (s) => {
    const res = result('memory', ['bare proxy', 'gateway']);
    const variants = [
      { name: 'small', pad: 0 },
      { name: '64k', pad: 64 * 1024 },
    ];
    const kinds = ['bare proxy', 'gateway'];
    for (let round = 0; round < opts.heavyRounds; round++) {
      const rec: RoundRecord = { round, loadavg1: loadavg1(), sides: kinds.map((k) => ({ side: k, figures: {} })) };
      for (const v of variants) {
        for (const kind of roundOrder(kinds, round)) {
          // A fresh server each time: what an idle stream costs, not what an earlier round left in the heap.
          const server = kind === 'gateway' ? await startGateway() : await startProxy();
          try {
            await wrk({ side: kind, server, auth: AUTH_CHAT, body: chatBody('bench-chat', true) }, 1, 10); // warm: JIT, sockets
            const h = await holdStreams(s.mock, server, chatBody('bench-chat', true, 'hang_after=3', v.pad));
            const f = rec.sides.find((x) => x.side === kind)!.figures;
            f[`${v.name}: base MiB`] = h.rssBase / MiB;
            f[`${v.name}: open MiB`] = h.rssOpen / MiB;
            f[`${v.name}: KiB/stream`] = h.opened ? (h.rssOpen - h.rssBase) / h.opened / 1024 : NaN;
            f[`${v.name}: opened`] = h.opened;
            f[`${v.name}: failed`] = h.failed;
            f[`${v.name}: upstream open`] = h.upstreamOpen;
            f[`${v.name}: open s`] = h.openMs / 1000;
          } finally {
            await server.close();
          }
        }
      }
      res.rounds.push(rec);
      progress('memory', round, rec);
    }
    const cols = res.columns;
    res.rows.push(
      compare(res.rounds, cols, 'small: KiB/stream', `RSS per idle open stream, KiB (${opts.streams} streams)`, 'ratio', {
        text: '≤ 1.1×',
        ok: (x) => x <= 1.1,
      }),
    );
    res.rows.push(compare(res.rounds, cols, '64k: KiB/stream', `RSS per idle open stream with a 64 KiB request body, KiB`, 'ratio'));
    res.notes.push(
      'each measurement starts a fresh server, warms it with 1 s of streaming load, takes its RSS, opens the streams (the mock sends two content deltas, then stays silent with the stream open), and takes the RSS again once every stream has delivered its first token',
    );
    for (const r of res.rounds)
      for (const x of r.sides)
        for (const v of variants) {
          if (x.figures[`${v.name}: failed`])
            res.notes.push(`round ${r.round + 1}, ${x.side}, ${v.name}: ${x.figures[`${v.name}: failed`]} streams failed to open`);
        }
    return res;
  },

  abandon: async (s) => {
    const res = result('abandon', ['bare proxy', 'gateway']);
    const servers = [s.proxy, s.gateway];
    for (let round = 0; round < opts.heavyRounds; round++) {
      const rec: RoundRecord = { round, loadavg1: loadavg1(), sides: [] };
      for (const server of roundOrder(servers, round)) {
        const h = await holdStreams(s.mock, server, chatBody('bench-chat', true, 'hang_after=3'), true);
        rec.sides.push({
          side: server.name,
          figures: {
            opened: h.opened,
            failed: h.failed,
            'upstream open before': h.upstreamOpen,
            'left open after 1 s': h.leftAfter1s!,
            'all closed after ms': h.drainedMs ?? NaN,
          },
        });
      }
      rec.sides.sort((a, b) => (a.side === 'gateway' ? 1 : 0) - (b.side === 'gateway' ? 1 : 0));
      res.rounds.push(rec);
      progress('abandon', round, rec);
    }
    const row = compare(
      res.rounds,
      res.columns,
      'left open after 1 s',
      `upstream streams still open 1 s after ${opts.streams} clients left`,
      'diff',
    );
    res.rows.push(
      compare(res.rounds, res.columns, 'all closed after ms', 'ms until the last upstream stream closed', 'diff', undefined, 'ms'),
    );
    row.goal = '0';
    row.met = pick(res.rounds, 'gateway', 'left open after 1 s').every((x) => x === 0);
    res.rows.push(row);
    res.rows.reverse();
    res.notes.push(
      'the clients are one process holding every stream; it is killed, so all of them leave at once; the mock counts its open responses (polled every 10 ms during the first second)',
    );
    return res;
  },

  bodies: async (s) => {
    const res = result('bodies', ['bare proxy', 'gateway']);
    const targets: Target[] = [
      { side: 'bare proxy', server: s.proxy, auth: AUTH_CHAT, body: chatBody('bench-chat', false) },
      { side: 'gateway', server: s.gateway, auth: AUTH_CHAT, body: chatBody('bench-chat', false) },
    ];
    // mixed: the first measurement (1 MiB and 64 MiB bodies); 8x200: issue 10's case, eight 200 MiB
    // bodies in flight at all times, passthrough and converted (Messages client, Chat upstream).
    const variants = [
      {
        name: 'mixed',
        path: '/v1/chat/completions',
        auth: AUTH_CHAT,
        format: 'chat',
        loads: [
          { bytes: 1 * MiB, everyMs: 100, maxInFlight: 4 },
          { bytes: 64 * MiB, everyMs: 2000, maxInFlight: 1 },
        ],
      },
      {
        name: '8x200',
        path: '/v1/chat/completions',
        auth: AUTH_CHAT,
        format: 'chat',
        loads: [{ bytes: 200 * MiB, everyMs: 50, maxInFlight: 8 }],
      },
      {
        name: '8x200-converted',
        path: '/v1/messages',
        auth: AUTH_LARGE_MESSAGES,
        format: 'messages',
        loads: [{ bytes: 200 * MiB, everyMs: 50, maxInFlight: 8 }],
      },
    ].filter((v) => !opts.bodiesVariants || opts.bodiesVariants.includes(v.name));
    const client = await startClient();
    try {
      for (const t of targets) await wrk(t, 1, opts.probeConcurrency);
      for (let round = 0; round < opts.heavyRounds; round++) {
        const rec: RoundRecord = { round, loadavg1: loadavg1(), sides: targets.map((t) => ({ side: t.side, figures: {} })) };
        for (const v of variants) {
          for (const t of roundOrder(targets, round)) {
            const before = await wrk(t, opts.duration, opts.probeConcurrency);
            await ask(client, {
              op: 'bodies',
              url: t.server.url + v.path,
              auth: v.auth,
              model: 'bench-large',
              headers: { 'x-bench-upstream': 'sink' },
              loads: v.loads,
              format: v.format,
            });
            let peak = 0;
            const sampler = setInterval(() => (peak = Math.max(peak, usage(t.server.child.pid!).rss)), 200);
            await sleep(500);
            const during = await wrk(t, opts.duration, opts.probeConcurrency);
            clearInterval(sampler);
            const done = (await ask(client, { op: 'stop' })).completed;
            const big = (b: number) => done[String(b)] ?? { ok: 0, failed: 0, statuses: {} };
            for (const l of v.loads)
              if (big(l.bytes).failed)
                res.notes.push(
                  `round ${round + 1}, ${t.side}, ${v.name}: ${l.bytes / MiB} MiB bodies answered ${JSON.stringify(big(l.bytes).statuses)} (status: count; 0 = connection error)`,
                );
            const f = rec.sides.find((x) => x.side === t.side)!.figures;
            const k = (name: string) => `${v.name}: ${name}`;
            Object.assign(f, {
              [k('p50 before ms')]: before.latencyUs.p50 / 1000,
              [k('p99 before ms')]: before.latencyUs.p99 / 1000,
              [k('p50 during ms')]: during.latencyUs.p50 / 1000,
              [k('p99 during ms')]: during.latencyUs.p99 / 1000,
              [k('p99 during/before')]: during.latencyUs.p99 / before.latencyUs.p99,
              [k('small req/s before')]: wrkRps(before),
              [k('small req/s during')]: wrkRps(during),
              [k('small errors')]: wrkErrors(before) + wrkErrors(during),
              [k('large ok')]: v.loads.reduce((a, l) => a + big(l.bytes).ok, 0),
              [k('large failed')]: v.loads.reduce((a, l) => a + big(l.bytes).failed, 0),
              [k('peak RSS MiB')]: peak / MiB,
            });
            for (const l of v.loads) f[k(`${l.bytes / MiB} MiB ok`)] = big(l.bytes).ok;
          }
        }
        res.rounds.push(rec);
        progress('bodies', round, rec);
      }
    } finally {
      await stop(client, 'SIGKILL');
    }
    const cols = res.columns;
    for (const v of variants) {
      const k = (name: string) => `${v.name}: ${name}`;
      const what =
        v.name === 'mixed' ? '1 MiB and 64 MiB bodies' : v.name === '8x200' ? '8 × 200 MiB bodies' : '8 × 200 MiB converted bodies';
      res.rows.push(
        compare(
          res.rounds,
          cols,
          k('p99 before ms'),
          `${v.name}: small-request p99 alone, ms (${opts.probeConcurrency} connections)`,
          'ratio',
        ),
      );
      const during = compare(res.rounds, cols, k('p99 during ms'), `${v.name}: small-request p99 during ${what}, ms`, 'ratio');
      if (v.name !== 'mixed') {
        during.goal = 'gateway < 100 ms';
        during.met = median(pick(res.rounds, 'gateway', k('p99 during ms'))) < 100;
      }
      res.rows.push(during);
      res.rows.push(compare(res.rounds, cols, k('p99 during/before'), `${v.name}: p99 during / p99 alone`, 'ratio'));
      for (const l of v.loads)
        res.rows.push(
          compare(
            res.rounds,
            cols,
            k(`${l.bytes / MiB} MiB ok`),
            `${v.name}: ${l.bytes / MiB} MiB bodies completed in ${opts.duration} s`,
            'ratio',
          ),
        );
      res.rows.push(compare(res.rounds, cols, k('peak RSS MiB'), `${v.name}: server peak RSS during large bodies, MiB`, 'ratio'));
      res.notes.push(
        `${v.name}: ${v.loads.map((l) => `a ${l.bytes / MiB} MiB ${v.format === 'messages' ? 'Messages' : 'Chat'} request every ${l.everyMs} ms (at most ${l.maxInFlight} at a time)`).join(' and ')}`,
      );
    }
    res.notes.push(
      "large bodies come from a separate client process, starting 0.5 s before and running through the second wrk phase; their bulk is a base64 image; they go to a sink upstream that drains them and answers at once (model bench-large, a Chat upstream: Messages bodies are converted by the gateway; the bare proxy routes them by a header and forwards them as they are), so the upstream's own parsing does not stall the small requests",
    );
    for (const r of res.rounds)
      for (const x of r.sides)
        for (const v of variants) {
          const k = (name: string) => `${v.name}: ${name}`;
          if (x.figures[k('small errors')] || x.figures[k('large failed')])
            res.notes.push(
              `round ${r.round + 1}, ${x.side}, ${v.name}: ${x.figures[k('small errors')]} small and ${x.figures[k('large failed')]} large requests failed`,
            );
        }
    return res;
  },

  redis: async (s) => {
    const res = result('redis', ['bare proxy', 'gateway (redis store)']);
    const skip = await redisUnavailable();
    if (skip) return { ...res, skipped: skip };
    return withRedis(async (url) => {
      const gw = await startGateway({ kind: 'redis', url }, 'gateway (redis store)');
      try {
        const before = redisCalls(url);
        await jsonAndStream(res, (stream) => [
          { side: 'bare proxy', server: s.proxy, auth: AUTH_CHAT, body: chatBody('bench-chat', stream) },
          { side: 'gateway (redis store)', server: gw, auth: AUTH_CHAT, body: chatBody('bench-chat', stream) },
        ]);
        const after = redisCalls(url);
        const served = after.requests - before.requests;
        if (served > 0) {
          const per = (n: number) => (n / served).toFixed(2);
          res.notes.push(
            `store round trips per request served by the gateway: ${per(after.scripts - before.scripts)} Lua scripts ` +
              `(${served} requests recorded; at most 2: the admission, which takes the concurrency slot, and the settlement, which frees it, each one script or part of one batch script with the others of its event-loop turn; plus heartbeats); ` +
              `redis-server spent ${per(after.usec - before.usec)} µs per request running them (INFO commandstats), on the upstream's core`,
          );
        }
        return res;
      } finally {
        await gw.close();
      }
    });
  },

  // The ledger's comparison with nothing to compare: what two identical gateways measured the same
  // way differ by on this machine. A difference between two sides smaller than this spread is not
  // resolved by one run.
  noise: async () => {
    const res = result('noise', ['gateway A', 'gateway B']);
    const a = await startGateway(undefined, 'gateway A');
    const b = await startGateway(undefined, 'gateway B');
    try {
      await jsonAndStream(res, (stream) => [
        { side: 'gateway A', server: a, auth: AUTH_CHAT, body: chatBody('bench-chat', stream) },
        { side: 'gateway B', server: b, auth: AUTH_CHAT, body: chatBody('bench-chat', stream) },
      ]);
      res.notes.push(
        'two fresh gateways with the same configuration (as `ledger on`), alternated per round: the spread of B ÷ A is the noise floor of the `ledger` comparison',
      );
      return res;
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  },

  ledger: async (s) => {
    const res = result('ledger', ['ledger off', 'ledger on']);
    // Two fresh gateways, the same but for the ledger, each idle while the other is measured.
    const off = await startGateway(undefined, 'ledger off', { ledger: { enabled: false } });
    const on = await startGateway(undefined, 'ledger on');
    try {
      const ledgerBytes = () => [off, on].map((g) => treeBytes(path.join(g.dataDir!, 'ledger')));
      const served = async () => (await s.mock.stats()).paths['/v1/chat/completions'] ?? 0;
      const [offBefore, onBefore] = ledgerBytes();
      const upstreamBefore = await served();
      await jsonAndStream(
        res,
        (stream) => [
          { side: 'ledger off', server: off, auth: AUTH_CHAT, body: chatBody('bench-chat', stream) },
          { side: 'ledger on', server: on, auth: AUTH_CHAT, body: chatBody('bench-chat', stream) },
        ],
        { json: { cpu: 1.05 }, stream: { cpu: 1.05 } },
      );
      await sleep(1500); // the store's flush interval: the last turn's lines are written
      const [offAfter, onAfter] = ledgerBytes();
      const requests = (await served()) - upstreamBefore;
      res.notes.push(
        'goal (issue 25): the file sink costs under 5 % of the CPU per request: ledger on ≤ 1.05× ledger off, per round',
        `ledger day files written during the scenario: ${offAfter - offBefore} bytes with the ledger off, ${onAfter - onBefore} bytes with it on (about ${Math.round((onAfter - onBefore) / Math.max(1, requests / 2))} bytes per record, if half of the ${requests} upstream requests were the on side's)`,
      );
      if (onAfter - onBefore === 0) res.notes.push('**the ledger-on gateway wrote no ledger record: this comparison is void**');
      if (offAfter - offBefore > 0) res.notes.push('**the ledger-off gateway wrote ledger records: this comparison is void**');
      return res;
    } finally {
      await Promise.all([off.close(), on.close()]);
    }
  },

  soak: async (_s) => {
    const res = result('soak', ['bare proxy', 'gateway']);
    res.curves = [];
    const variants = SOAK_VARIANTS.filter((v) => !opts.soakVariants || opts.soakVariants.includes(v));
    const redisSkip = variants.some((v) => v.startsWith('redis')) ? await redisUnavailable() : null;
    const reference = await startReference(pinning?.server, 'reference.log');
    // The load's core too (wrk, the mock, redis-server): a soak's slide may be that core's.
    const loadReference = pinning?.load ? await startReference(pinning.load, 'reference-load.log') : undefined;
    try {
      for (const [i, variant] of variants.entries()) {
        const redis = variant.startsWith('redis');
        if (redis && redisSkip) {
          res.notes.push(`${variant}: skipped (${redisSkip})`);
          continue;
        }
        const stream = variant.endsWith('stream');
        const body = chatBody('bench-chat', stream);
        const run = async (redisUrl?: string): Promise<SoakCurve> => {
          const curve: SoakCurve = { variant, sides: [] };
          // A fresh server per side, soaked alone; which side goes first alternates between variants.
          const kinds = roundOrder(['bare proxy', 'gateway'], i);
          for (const kind of kinds) {
            const probeDir = opts.soakProfile ? path.resolve(root, opts.soakProfile, variant, kind.replace(' ', '-')) : undefined;
            if (probeDir) fs.rmSync(probeDir, { recursive: true, force: true });
            const server =
              kind === 'gateway'
                ? await startGateway(
                    redisUrl ? { kind: 'redis', url: redisUrl } : undefined,
                    redisUrl ? 'gateway (redis store)' : 'gateway',
                    undefined,
                    probeDir,
                  )
                : await startProxy(probeDir);
            try {
              const before = redisUrl && kind === 'gateway' ? redisMemory(redisUrl) : undefined;
              curve.sides.push(
                await soakSide(
                  { side: kind, server, auth: AUTH_CHAT, body },
                  kind === 'gateway',
                  { server: reference, load: loadReference },
                  kind === 'gateway' ? redisUrl : undefined,
                ),
              );
              if (redisUrl && before !== undefined) {
                const after = redisMemory(redisUrl);
                res.notes.push(
                  `${variant}: redis-server memory (INFO memory, used_memory) ${(before / MiB).toFixed(1)} MiB before the gateway's soak, ${(after / MiB).toFixed(1)} MiB after`,
                );
              }
            } finally {
              await server.close();
            }
            if (probeDir) {
              fs.writeFileSync(path.join(probeDir, 'summary.md'), probeSummary(probeDir, `${variant}, ${kind}`));
              res.notes.push(`${variant}: the probed ${kind}'s profiles and their summary are in ${path.join(probeDir, 'summary.md')}`);
            }
          }
          curve.sides.sort((a, b) => (a.side === 'gateway' ? 1 : 0) - (b.side === 'gateway' ? 1 : 0));
          return curve;
        };
        const curve = redis
          ? await withRedis((url) => {
              if (opts.soakRedisKeys > 0) res.notes.push(`${variant}: ${fillRedis(url, opts.soakRedisKeys)}`);
              return run(url);
            })
          : await run();
        res.curves.push(curve);
        soakRows(res, curve);
      }
    } finally {
      await reference.close();
      await loadReference?.close();
    }
    res.notes.push(
      `each side: a fresh server, ${Math.min(WARMUP_S, opts.soakSlice)} s of warm-up, then ${opts.soakMinutes} min of unbroken load in ${opts.soakSlice} s slices (wrk, ${opts.concurrency} connections; the next slice starts milliseconds after the last ends); the first and last minute are the first and last ${Math.min(Math.max(1, Math.round((opts.soakMinutes * 60) / opts.soakSlice)), Math.max(1, Math.round(60 / opts.soakSlice)))} slices; CPU per request from /proc, heap used and the event loop's delay p99 (over each slice) from the gateway's /metrics; the machine itself per slice: the steal time of the server's core (/proc/stat) and the reference work's CPU µs (a fixed piece of work timed in CPU time on the server's core every 2 s, the slice's median; it rises when the vCPU slows, whatever the server does); the load's core (wrk, the mock, redis-server) the same way, with its busy share`,
    );
    return res;
  },
};

/** The headline rows of one soak variant: each minute's rate beside the proxy's, last ÷ first, CPU and memory. */
function soakRows(res: ScenarioResult, c: SoakCurve): void {
  const MiB_ = 1024 * 1024;
  const proxy = c.sides.find((x) => x.side === 'bare proxy');
  const gw = c.sides.find((x) => x.side === 'gateway');
  if (!proxy || !gw) return;
  const one = (x: number) => spread([x]);
  const ps = soakSummary(proxy.slices, opts.soakSlice);
  const gs = soakSummary(gw.slices, opts.soakSlice);
  const v = c.variant;
  const pair = (metric: string, p: number, g: number, goal?: { text: string; met: boolean }): Row => ({
    metric: `${v}: ${metric}`,
    unit: '',
    baseline: one(p),
    subject: one(g),
    ratio: one(g / p),
    ...(goal ? { goal: goal.text, met: goal.met } : {}),
  });
  const n = Math.max(1, Math.round(60 / opts.soakSlice));
  const cpu = (side: SoakSide, last: boolean) => {
    const xs = last ? side.slices.slice(-n) : side.slices.slice(0, n);
    const req = xs.reduce((a, x) => a + x.requests, 0);
    return req > 0 ? xs.reduce((a, x) => a + x.cpuUsPerReq * x.requests, 0) / req : NaN;
  };
  const end = (side: SoakSide) => side.slices[side.slices.length - 1];
  /** `of` over a figure of the first (or last) minute's slices, those that have it. */
  const minute = (side: SoakSide, last: boolean, f: (x: SoakSlice) => number | undefined, of: (xs: number[]) => number) => {
    const xs = (last ? side.slices.slice(-n) : side.slices.slice(0, n))
      .map(f)
      .filter((x): x is number => x !== undefined && Number.isFinite(x));
    return xs.length > 0 ? of(xs) : NaN;
  };
  const minuteMedian = (side: SoakSide, last: boolean, field: 'rss' | 'heapUsed') => minute(side, last, (x) => x[field], median);
  res.rows.push(
    pair('requests/s, first minute', ps.first, gs.first),
    pair('requests/s, last minute', ps.last, gs.last),
    {
      metric: `${v}: requests/s, last minute ÷ first minute`,
      unit: '',
      baseline: one(ps.ratio),
      subject: one(gs.ratio),
      goal: 'gateway ≥ 0.95',
      met: Number.isFinite(gs.ratio) ? gs.ratio >= 0.95 : undefined,
    },
    pair('server CPU per request, first minute, µs', cpu(proxy, false), cpu(gw, false)),
    pair('server CPU per request, last minute, µs', cpu(proxy, true), cpu(gw, true)),
    pair('RSS at the end of the warm-up, MiB', proxy.warmRss / MiB_, gw.warmRss / MiB_),
    pair('RSS at the end, MiB', end(proxy).rss / MiB_, end(gw).rss / MiB_),
    pair(
      "RSS, median of the first minute's slices → of the last minute's, MiB (gateway)",
      minuteMedian(gw, false, 'rss') / MiB_,
      minuteMedian(gw, true, 'rss') / MiB_,
    ),
    // One sample of a sawtooth says little: the median of each minute's slices.
    {
      metric: `${v}: gateway heap used, median of the first minute's slices → of the last minute's, MiB`,
      unit: 'MiB',
      baseline: one(minuteMedian(gw, false, 'heapUsed') / MiB_),
      subject: one(minuteMedian(gw, true, 'heapUsed') / MiB_),
      diff: one((minuteMedian(gw, true, 'heapUsed') - minuteMedian(gw, false, 'heapUsed')) / MiB_),
    },
  );
  const r0 = minute(gw, false, (x) => x.redisUsPerReq, median);
  if (Number.isFinite(r0)) {
    const r1 = minute(gw, true, (x) => x.redisUsPerReq, median);
    // redis-server shares the load's core: when its own cost per request rises, the gateway waits longer.
    res.rows.push({
      metric: `${v}: redis-server CPU per request during the gateway's soak, first minute → last minute (medians of the slices), µs`,
      unit: 'µs',
      baseline: one(r0),
      subject: one(r1),
      ratio: one(r1 / r0),
    });
  }
  // The machine, per side (each soaked in its own minutes): did the vCPU slow between the first and last minute?
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  for (const side of c.sides) {
    const r0 = minute(side, false, (x) => x.refUs, median);
    const r1 = minute(side, true, (x) => x.refUs, median);
    const rate = soakSummary(side.slices, opts.soakSlice);
    // On a saturated core, requests/s follow the core's speed: taken out, what is left is the server's own.
    res.rows.push({
      metric: `${v}, ${side.side}: requests/s, last minute ÷ first minute, × the reference's last ÷ first (the machine's drift taken out; an estimate)`,
      unit: '',
      // In the column of its side.
      ...(side.side === 'gateway' ? { subject: one(rate.ratio * (r1 / r0)) } : { baseline: one(rate.ratio * (r1 / r0)) }),
    });
    const s0 = minute(side, false, (x) => x.stealPct, mean);
    const s1 = minute(side, true, (x) => x.stealPct, mean);
    res.rows.push(
      {
        metric: `${v}, during the ${side.side}'s soak: the reference work's CPU µs, first minute → last minute (the machine's speed; > 1× is a slower vCPU)`,
        unit: 'µs',
        baseline: one(r0),
        subject: one(r1),
        ratio: one(r1 / r0),
      },
      {
        metric: `${v}, during the ${side.side}'s soak: steal on the server's core, first minute → last minute, %`,
        unit: '%',
        baseline: one(s0),
        subject: one(s1),
        diff: one(s1 - s0),
      },
    );
    const l0 = minute(side, false, (x) => x.loadRefUs, median);
    if (Number.isFinite(l0)) {
      const l1 = minute(side, true, (x) => x.loadRefUs, median);
      const b0 = minute(side, false, (x) => x.loadBusyPct, mean);
      const b1 = minute(side, true, (x) => x.loadBusyPct, mean);
      res.rows.push(
        {
          metric: `${v}, during the ${side.side}'s soak: the reference work's CPU µs on the load's core (wrk, the mock${v.startsWith('redis') ? ', redis-server' : ''}), first minute → last minute`,
          unit: 'µs',
          baseline: one(l0),
          subject: one(l1),
          ratio: one(l1 / l0),
        },
        {
          metric: `${v}, during the ${side.side}'s soak: the load's core busy, first minute → last minute, %`,
          unit: '%',
          baseline: one(b0),
          subject: one(b1),
          diff: one(b1 - b0),
        },
      );
    }
  }
  for (const side of c.sides) {
    const failed = side.slices.reduce((a, x) => a + x.errors, 0);
    if (failed) res.notes.push(`${v}, ${side.side}: ${failed} failed requests over the soak`);
  }
}

/**
 * What bench/probe.ts wrote for one soaked gateway, as markdown: CPU µs per request by category
 * for each profile period (a minute), then the 15 s samples (loop utilisation, GC, heap, handles).
 */
function probeSummary(dir: string, variant: string): string {
  const out = [`# Probe of the gateway: soak ${variant}`, ''];
  const periods: { label: string; perReq: Map<string, number>; total: number }[] = [];
  for (let i = 1; fs.existsSync(path.join(dir, `cpu-${i}.cpuprofile`)); i++) {
    const meta = JSON.parse(fs.readFileSync(path.join(dir, `cpu-${i}.json`), 'utf8')) as { requests: number; fromS: number; toS: number };
    const t = selfTime(JSON.parse(fs.readFileSync(path.join(dir, `cpu-${i}.cpuprofile`), 'utf8')) as CpuProfile);
    const perReq = new Map([...t].map(([k, v]) => [k, v / Math.max(1, meta.requests)]));
    periods.push({
      label: `${Math.round(meta.fromS)}–${Math.round(meta.toS)} s (${meta.requests} req)`,
      perReq,
      total: [...perReq.values()].reduce((a, b) => a + b, 0),
    });
  }
  if (periods.length) {
    const cats = new Map<string, number>();
    for (const p of periods) for (const [k, v] of p.perReq) cats.set(k, Math.max(cats.get(k) ?? 0, v));
    const rows = [...cats].filter(([, max]) => max >= 0.5).sort((a, b) => b[1] - a[1]);
    out.push('CPU microseconds per request received, by where they are spent, per profile period:', '');
    out.push(`| where | ${periods.map((p) => p.label).join(' | ')} |`, `|---|${periods.map(() => '---:').join('|')}|`);
    out.push(`| **total (busy)** | ${periods.map((p) => p.total.toFixed(1)).join(' | ')} |`);
    for (const [c] of rows) out.push(`| ${c} | ${periods.map((p) => (p.perReq.get(c) ?? 0).toFixed(1)).join(' | ')} |`);
    out.push('');
  }
  const probeFile = path.join(dir, 'probe.jsonl');
  if (fs.existsSync(probeFile)) {
    const lines = fs
      .readFileSync(probeFile, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, any>);
    out.push(
      'Every sample (over the interval since the one before): event-loop utilisation, garbage collections by kind, requests received, heap, libuv handles and requests:',
      '',
      '| s | ELU | scavenges (ms) | mark-compacts (ms) | incremental (ms) | requests | heap used MiB | heap total MiB | external MiB | RSS MiB | handles | libuv requests |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|',
    );
    let prevReq = 0;
    for (const l of lines) {
      const g = (k: string) => (l.gc?.[k] ? `${l.gc[k].count} (${l.gc[k].ms})` : '0');
      out.push(
        `| ${l.t} | ${l.elu} | ${g('scavenge')} | ${g('mark-compact')} | ${g('incremental')} | ${l.requests - prevReq} | ${(l.heapUsed / MiB).toFixed(1)} | ${(l.heapTotal / MiB).toFixed(1)} | ${(l.external / MiB).toFixed(1)} | ${(l.rss / MiB).toFixed(0)} | ${l.handles} | ${l.libuvRequests} |`,
      );
      prevReq = l.requests;
    }
    out.push('');
  }
  return out.join('\n');
}

/**
 * Soaks one side: warm-up, then `--soak-minutes` of load in back-to-back wrk slices (the next is
 * started as soon as one ends, before anything is read), with the server's CPU ticks and RSS at
 * each boundary and, for the gateway, its /metrics (heap used; the event loop's delay p99, which
 * prom-client resets at each scrape, so each slice reads its own).
 */
async function soakSide(
  t: Target,
  gateway: boolean,
  reference: { server: { time: () => Promise<number> }; load?: { time: () => Promise<number> } },
  redisUrl?: string,
): Promise<SoakSide> {
  const pid = t.server.child.pid!;
  const sliceS = opts.soakSlice;
  const n = Math.max(1, Math.round((opts.soakMinutes * 60) / sliceS));
  const scrape = async (): Promise<{ heapUsed?: number; lagP99Ms?: number }> => {
    if (!gateway) return {};
    try {
      return parseGauges(await getText(t.server.url + '/metrics'));
    } catch {
      return {};
    }
  };
  await wrk(t, Math.min(WARMUP_S, sliceS), opts.concurrency);
  const t0 = Date.now();
  let current = wrk(t, sliceS, opts.concurrency);
  let before = usage(pid);
  let coresBefore = coreTicks();
  let loadBefore = loadTicks();
  let redisBefore = redisUrl ? redisCpuUs(redisUrl) : NaN;
  const warm = await scrape(); // also resets the loop-delay histogram: the first slice reads its own
  const side: SoakSide = { side: t.side, warmRss: before.rss, warmHeapUsed: warm.heapUsed, slices: [] };
  let sliceStart = t0;
  for (let i = 0; i < n; i++) {
    const r = await current;
    const nextStart = Date.now();
    if (i + 1 < n) current = wrk(t, sliceS, opts.concurrency);
    const after = usage(pid);
    const coresAfter = coreTicks();
    const loadAfter = loadTicks();
    const redisAfter = redisUrl ? redisCpuUs(redisUrl) : NaN;
    // The access log would grow by gigabytes over a soak: emptied at each slice (O_APPEND).
    if (gateway) fs.truncateSync(t.server.log, 0);
    const g = await scrape();
    const refUs = await reference.server.time();
    const loadRefUs = reference.load ? await reference.load.time() : undefined;
    const ok = r.requests - r.errors.status;
    const slice: SoakSlice = {
      t: (sliceStart - t0) / 1000,
      requests: ok,
      seconds: r.durationUs / 1e6,
      errors: wrkErrors(r),
      cpuUsPerReq: ((after.ticks - before.ticks) * (1e6 / clkTck)) / Math.max(1, ok),
      rss: after.rss,
      heapUsed: g.heapUsed,
      lagP99Ms: g.lagP99Ms,
      loadavg1: loadavg1(),
      stealPct: stealPct(coresBefore, coresAfter),
      refUs,
      ...(redisUrl ? { redisUsPerReq: (redisAfter - redisBefore) / Math.max(1, ok) } : {}),
      ...(loadBefore && loadAfter ? { loadRefUs, loadBusyPct: busyPct(loadBefore, loadAfter) } : {}),
    };
    side.slices.push(slice);
    console.error(
      `[soak] ${t.side} slice ${i + 1}/${n}: ${(ok / slice.seconds).toFixed(0)} req/s, ${slice.cpuUsPerReq.toFixed(0)} µs/req, RSS ${(after.rss / MiB).toFixed(0)} MiB` +
        (g.heapUsed !== undefined ? `, heap ${(g.heapUsed / MiB).toFixed(0)} MiB, loop delay p99 ${g.lagP99Ms?.toFixed(1)} ms` : '') +
        `, steal ${slice.stealPct?.toFixed(2)} %, reference ${refUs} µs` +
        (slice.redisUsPerReq !== undefined ? `, redis-server ${slice.redisUsPerReq.toFixed(0)} µs/req` : '') +
        (slice.loadRefUs !== undefined ? `, load core: reference ${slice.loadRefUs} µs, busy ${slice.loadBusyPct?.toFixed(0)} %` : '') +
        `, load ${slice.loadavg1.toFixed(2)}`,
    );
    before = after;
    coresBefore = coresAfter;
    loadBefore = loadAfter;
    redisBefore = redisAfter;
    sliceStart = nextStart;
  }
  return side;
}

interface Held {
  opened: number;
  failed: number;
  /** How long opening them all took. */
  openMs: number;
  rssBase: number;
  rssOpen: number;
  upstreamOpen: number;
  leftAfter1s?: number;
  drainedMs?: number;
}

/** Waits until the mock has no stream open (what earlier work left behind), up to `ms`; returns how long it took, or NaN. */
async function untilUpstreamIdle(mock: Mock, ms = 15_000): Promise<number> {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    if ((await mock.stats()).open === 0) return Date.now() - t0;
    await sleep(50);
  }
  return NaN;
}

/**
 * Opens `opts.streams` streams through `server` from a fresh client process and waits until each
 * has delivered its first token; measures the server's RSS before and with them open; then kills
 * the client (every client leaves at once) and, for the abandon scenario, counts the upstream
 * streams still open 1 s later.
 */
async function holdStreams(mock: Mock, server: Server, body: string, abandon = false): Promise<Held> {
  await untilUpstreamIdle(mock);
  const pid = server.child.pid!;
  await sleep(500);
  const rssBase = await rssOf(pid);
  const client = await startClient();
  let h: Held;
  let left = 0;
  try {
    const r = await ask(client, {
      op: 'hold',
      url: server.url + '/v1/chat/completions',
      auth: AUTH_CHAT,
      body,
      n: opts.streams,
      batch: 100,
    });
    await sleep(1000);
    const rssOpen = await rssOf(pid);
    h = { opened: r.opened, failed: r.failed, openMs: r.ms, rssBase, rssOpen, upstreamOpen: (await mock.stats()).open };
  } finally {
    left = Date.now();
    await stop(client, 'SIGKILL');
  }
  if (!abandon) {
    await untilUpstreamIdle(mock);
    return h;
  }
  // From the moment the clients left: the open upstream streams at the first poll past 1 s, and when the last one closed.
  for (;;) {
    const open = (await mock.stats()).open;
    const t = Date.now() - left;
    if (h.leftAfter1s === undefined && (t >= 1000 || open === 0)) h.leftAfter1s = open;
    if (open === 0) {
      h.drainedMs = t;
      break;
    }
    if (t > 30_000) break;
    await sleep(t < 1000 ? 10 : 100);
  }
  return h;
}

/**
 * Why the Redis scenario cannot run here, or null: it needs `redis-server` (Debian's package) and a
 * build whose config accepts `store.kind: redis` (asked of `gateway check` itself).
 */
async function redisUnavailable(): Promise<string | null> {
  try {
    execFileSync('sh', ['-c', 'command -v redis-server'], { stdio: 'pipe' });
  } catch {
    return 'redis-server is not installed (apt-get install redis-server)';
  }
  const file = path.join(work, 'redis-check.yaml');
  fs.writeFileSync(
    file,
    YAML.stringify(
      gatewayConfig({
        root,
        port: 0,
        dataDir: path.join(work, 'redis-check'),
        upstreams,
        concurrency: 10_000,
        store: { kind: 'redis', url: 'redis://127.0.0.1:6379' },
      }),
    ),
  );
  try {
    execFileSync(process.execPath, [path.join(root, 'bin/gateway.js'), 'check', file], { stdio: 'pipe', env: gatewayEnv() });
    return null;
  } catch (e: any) {
    return `this build does not accept store.kind: redis (gateway check: ${
      String(e.stderr ?? e.message)
        .trim()
        .split('\n')
        .slice(-1)[0]
    })`;
  }
}

/**
 * Scripts Redis has run so far (INFO commandstats: EVALSHA and EVAL; the commands a script runs
 * inside are counted there too, so only the scripts are round trips) and the requests recorded for
 * the chat key.
 */
function redisCalls(url: string): { scripts: number; usec: number; requests: number } {
  const cli = (...args: string[]) => execFileSync('redis-cli', ['-u', url, ...args], { stdio: 'pipe' }).toString();
  let scripts = 0;
  let usec = 0;
  for (const m of cli('INFO', 'commandstats').matchAll(/^cmdstat_(evalsha|eval):calls=(\d+),usec=(\d+)/gm)) {
    scripts += Number(m[2]);
    usec += Number(m[3]);
  }
  const requests = Number(cli('HGET', 'gw:{k:bench-chat}:totals', 'requests').trim()) || 0;
  return { scripts, usec, requests };
}

/** A numeric field of one section of redis-server's INFO (NaN when absent). */
function redisInfo(url: string, section: string, field: string): number {
  const info = execFileSync('redis-cli', ['-u', url, 'INFO', section], { stdio: 'pipe' }).toString();
  return Number(new RegExp(`^${field}:([\\d.]+)`, 'm').exec(info)?.[1] ?? NaN);
}

/** redis-server's CPU so far (INFO cpu: user + system, its main thread and the others), µs. */
function redisCpuUs(url: string): number {
  return (redisInfo(url, 'cpu', 'used_cpu_user') + redisInfo(url, 'cpu', 'used_cpu_sys')) * 1e6;
}

/**
 * Writes `n` keys shaped as the store's done-marker hashes (core/store/redis/keys.ts `done`: 16
 * fields, a day's TTL) under a name of their own: the size a Redis in service holds (a day of
 * markers), which an empty one reaches only as the soak fills it. Returns what it did.
 */
function fillRedis(url: string, n: number): string {
  const t0 = Date.now();
  const lua =
    "for i = 1, tonumber(ARGV[2]) do local k = 'bench-fill:' .. ARGV[1] .. ':' .. i " +
    "for f = 1, 16 do redis.call('HSET', k, string.format('%x', f), '1') end redis.call('PEXPIRE', k, 86400000) end return 1";
  const batch = 20_000;
  for (let b = 0; b * batch < n; b++) {
    execFileSync('redis-cli', ['-u', url, 'EVAL', lua, '0', String(b), String(Math.min(batch, n - b * batch))], { stdio: 'pipe' });
  }
  return `redis-server filled with ${n} keys shaped as done-marker hashes (16 fields, a day's TTL) before the soak: ${(redisMemory(url) / MiB).toFixed(1)} MiB used, in ${((Date.now() - t0) / 1000).toFixed(0)} s (--soak-redis-keys)`;
}

/** redis-server's `used_memory`, bytes. */
function redisMemory(url: string): number {
  return redisInfo(url, 'memory', 'used_memory');
}

/** Runs `fn` with a throwaway redis-server (no persistence) on the upstream core. */
async function withRedis<T>(fn: (url: string) => Promise<T>): Promise<T> {
  const port = await freePort();
  const { child, log } = launch(
    pinning?.upstream,
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', work],
    'redis.log',
  );
  try {
    await waitUntil(
      'redis-server',
      child,
      log,
      () =>
        new Promise((resolve) => {
          const s = net.connect(port, '127.0.0.1', () => {
            s.end();
            resolve(true);
          });
          s.on('error', () => resolve(false));
        }),
    );
    return await fn(`redis://127.0.0.1:${port}`);
  } finally {
    await stop(child, 'SIGTERM');
  }
}

// ---------------------------------------------------------------------------------------------

function sh(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { stdio: 'pipe', cwd: root }).toString().trim();
  } catch (e: any) {
    return String(e.stdout ?? '').trim();
  }
}

function allowedCpus(): number[] {
  const m = /^Cpus_allowed_list:\s*(\S+)/m.exec(fs.readFileSync('/proc/self/status', 'utf8'));
  return m ? parseCpuList(m[1]) : Array.from({ length: os.cpus().length }, (_, i) => i);
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  try {
    opts = parseArgs(argv);
  } catch (e) {
    console.error((e as Error).message);
    process.exitCode = 2;
    return;
  }
  if (opts.help) {
    console.log(USAGE);
    return;
  }
  const wrkVersion = sh('sh', ['-c', 'wrk -v 2>&1 | head -1']).replace(/\s*\[.*$/, '');
  if (!wrkVersion.startsWith('wrk')) throw new Error('wrk is not installed: run scripts/ensure-wrk.sh (npm run bench does)');
  const cpus = os.availableParallelism(); // before the harness pins itself below
  const hasTaskset = sh('sh', ['-c', 'command -v taskset']) !== '';
  pinning = opts.pin && hasTaskset ? planPinning(allowedCpus()) : null;
  if (pinning) sh('taskset', ['-a', '-p', '-c', pinning.load.join(','), String(process.pid)]); // the harness itself stays off the server's core
  clkTck = Number(sh('getconf', ['CLK_TCK'])) || 100;

  const startedAt = new Date();
  const loadStart = os.loadavg();
  const warnings: string[] = [];
  if (loadStart[0] > 0.25 * cpus) {
    warnings.push(
      `the machine was not quiet: load average ${loadStart.map((x) => x.toFixed(2)).join(', ')} at the start. These figures are noisy; record an official run on an idle machine.`,
    );
  }
  if (!pinning)
    warnings.push(
      opts.pin ? 'processes were not pinned to cores (one core, or no taskset)' : 'processes were not pinned to cores (--no-pin)',
    );
  console.error(
    `bench: ${opts.only.join(', ')}; pinning ${pinning ? JSON.stringify(pinning) : 'none'}; load average ${loadStart.map((x) => x.toFixed(2)).join(' ')}`,
  );

  work = fs.mkdtempSync(path.join(os.tmpdir(), 'llm-gw-bench-'));
  const results: ScenarioResult[] = [];
  let servers: Servers | undefined;
  let sink: Server | undefined;
  try {
    const mock = await startMock();
    sink = await startSink();
    upstreams = { mock: mock.url, sink: sink.url };
    const [proxy, gateway] = await Promise.all([startProxy(), startGateway()]);
    servers = { mock, proxy, gateway };
    for (const name of opts.only) {
      const t0 = Date.now();
      let r: ScenarioResult;
      try {
        r = await scenarios[name](servers);
      } catch (e) {
        const msg = (e as Error).message.split('\n')[0];
        warnings.push(`scenario ${name} failed: ${msg}`);
        console.error(`[${name}] failed:`, e);
        r = { ...result(name, ['', '']), skipped: `failed: ${msg}` };
      }
      r.elapsedS = (Date.now() - t0) / 1000;
      results.push(r);
    }
  } finally {
    if (servers) await Promise.all([servers.gateway.close(), servers.proxy.close(), servers.mock.close()]);
    await sink?.close();
    for (const c of children) c.kill('SIGKILL');
    fs.rmSync(work, { recursive: true, force: true });
  }

  const finishedAt = new Date();
  const { help: _h, out: _o, ...shownOptions } = opts;
  const report: Report = {
    harness: 'bench/run.ts (wrk, separate processes, pinned)',
    startedAt: startedAt.toISOString(),
    finishedAt: finishedAt.toISOString(),
    elapsedS: (finishedAt.getTime() - startedAt.getTime()) / 1000,
    command: `npm run bench${argv.length ? ' -- ' + argv.join(' ') : ''}`,
    machine: {
      cpus,
      cpuModel: os.cpus()[0]?.model?.trim() ?? '?',
      memGiB: os.totalmem() / 1024 ** 3,
      kernel: os.release(),
      node: process.version,
      wrk: wrkVersion,
      commit: `${sh('git', ['rev-parse', '--short', 'HEAD']) || '?'}${sh('git', ['status', '--porcelain', '--untracked-files=no']) ? ' (with local changes)' : ''}`,
    },
    options: shownOptions,
    pinning,
    loadavg: { start: loadStart, end: os.loadavg() },
    scenarios: results,
    warnings,
  };
  const md = renderMarkdown(report);
  console.log(md);
  if (opts.out) {
    const dir = path.resolve(root, opts.out);
    fs.mkdirSync(dir, { recursive: true });
    const stamp = startedAt.toISOString().slice(0, 19).replace(/:/g, '-');
    const json = JSON.stringify(report, null, 2) + '\n';
    fs.writeFileSync(path.join(dir, `${stamp}.json`), json);
    fs.writeFileSync(path.join(dir, `${stamp}.md`), md);
    fs.writeFileSync(path.join(dir, 'latest.json'), json);
    fs.writeFileSync(path.join(dir, 'latest.md'), md);
    console.error(`bench: written ${path.relative(root, path.join(dir, stamp))}.{json,md} and latest.{json,md}`);
  }
}

for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    for (const c of children) c.kill('SIGKILL');
    if (work) fs.rmSync(work, { recursive: true, force: true });
    process.exit(130);
  });
}

main().catch((e) => {
  console.error(e);
  for (const c of children) c.kill('SIGKILL');
  if (work) fs.rmSync(work, { recursive: true, force: true });
  process.exitCode = 1;
});
