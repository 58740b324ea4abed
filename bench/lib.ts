/**
 * The benchmark's pure parts: command-line options, statistics (medians of per-round ratios and
 * their spread), parsing what wrk and /proc print, and the markdown report. No I/O here, so
 * test/bench/lib.test.ts can check them without generating load.
 */

/** Every scenario, in the order a full run performs them. */
export const SCENARIOS = [
  'json',
  'stream',
  'minimal',
  'convert',
  'ttft',
  'memory',
  'abandon',
  'bodies',
  'redis',
  'ledger',
  'noise',
  'floor',
  'records',
  'soak',
] as const;
export type Scenario = (typeof SCENARIOS)[number];

export const SCENARIO_TITLES: Record<Scenario, string> = {
  json: 'Non-streaming chat (wrk)',
  stream: 'Streaming chat, SSE (wrk)',
  minimal: 'Minimal upstream answer: a 10-word reply, non-streaming and streaming (wrk)',
  convert: 'Converted stream: Chat client → Messages upstream, vs a passthrough Chat stream (both through the gateway)',
  ttft: 'Time to first token at idle (one request at a time)',
  memory: 'Memory per idle open stream',
  abandon: 'Upstream streams left open 1 s after the clients left',
  bodies: 'Small-request latency before and during large request bodies',
  redis: 'Redis store (non-streaming and streaming chat, wrk)',
  ledger: 'The usage ledger: the gateway with its ledger on (the default) against the same gateway with `ledger.enabled: false` (wrk)',
  noise: 'Noise floor: two identical gateways (ledger on), compared the way `ledger` compares its two (wrk)',
  floor:
    'The floor: a relay that only reads the body and the answer (what routing by model and billing by usage require), against the bare proxy (wrk)',
  records:
    'The floor with records: the floor relay plus what the product writes for each billed request (key check, two journal lines, a ledger record, an access line), against the bare proxy (wrk)',
  soak: 'Soak: unbroken load for minutes, measured per slice (wrk)',
};

export interface Options {
  /** Scenarios to run, in run order. */
  only: Scenario[];
  /** Alternating rounds of the throughput and TTFT scenarios. */
  rounds: number;
  /** Rounds of the memory, abandon and large-body scenarios (each restarts or holds thousands of streams). */
  heavyRounds: number;
  /** Seconds of load per target per round (throughput scenarios, and each large-body phase). */
  duration: number;
  /** wrk connections for the throughput scenarios. */
  concurrency: number;
  /** Reply length in words (the mock's `words=` directive). */
  words: number;
  /** Streams held open by the memory and abandon scenarios. */
  streams: number;
  /** Requests per target per round in the TTFT scenario. */
  ttftRequests: number;
  /** wrk connections of the small-request probe in the large-body scenario. */
  probeConcurrency: number;
  /** Variants of the large-body scenario to run (default: all of BODY_VARIANTS). */
  bodiesVariants?: string[];
  /** Minutes of unbroken measured load per side and variant in the soak scenario (after its warm-up). */
  soakMinutes: number;
  /** Seconds per soak slice (one wrk run; the next starts milliseconds after). */
  soakSlice: number;
  /** Variants of the soak scenario to run (default: all of SOAK_VARIANTS). */
  soakVariants?: string[];
  /** Soaked gateways run with bench/probe.ts (CPU profile per minute, loop utilisation, GC) writing here. */
  soakProfile?: string;
  /**
   * The Redis variants: keys shaped as the store's done-marker hashes (16 fields, a day's TTL)
   * written into the fresh redis-server before the soak, so it starts at a size a Redis in service
   * holds instead of empty (0: empty, the default).
   */
  soakRedisKeys: number;
  /** Pin the server under test, the upstream and the load to separate cores (taskset). */
  pin: boolean;
  /** Results folder; null: print only, write nothing. */
  out: string | null;
  help: boolean;
}

/** The large-body scenario's variants: 1 MiB and 64 MiB bodies; eight 200 MiB bodies, passthrough and converted. */
export const BODY_VARIANTS = ['mixed', '8x200', '8x200-converted'] as const;

/** The soak scenario's variants: the store (memory, redis) and the request (json: non-streaming, stream). */
export const SOAK_VARIANTS = ['memory-json', 'memory-stream', 'redis-json', 'redis-stream'] as const;

/** Words in the reply of the `minimal` scenario (the mock's output tokens: one per word). */
export const MINIMAL_WORDS = 10;

/** Seconds of load each target of a throughput scenario gets before its first round (at most --duration). */
export const WARMUP_S = 5;

export const DEFAULTS: Readonly<Options> = Object.freeze({
  only: [...SCENARIOS],
  rounds: 5,
  heavyRounds: 3,
  duration: 6,
  concurrency: 50,
  words: 20,
  streams: 2000,
  ttftRequests: 200,
  probeConcurrency: 8,
  soakMinutes: 5,
  soakSlice: 15,
  soakRedisKeys: 0,
  pin: true,
  out: 'bench/results',
  help: false,
});

/** `--quick`: a smoke run (about a minute) that checks every scenario works; its figures mean little. */
export const QUICK: Partial<Options> = {
  rounds: 1,
  heavyRounds: 1,
  duration: 2,
  streams: 200,
  ttftRequests: 50,
  soakMinutes: 0.25,
  soakSlice: 5,
};

export const USAGE = `usage: npm run bench -- [options]

  --only LIST          scenarios to run, comma-separated (default: all):
                       ${SCENARIOS.join(', ')}
  --skip LIST          scenarios to leave out
  --rounds N           alternating rounds of json, stream, minimal, convert, ttft, redis, ledger, noise, floor (default ${DEFAULTS.rounds})
  --heavy-rounds N     rounds of memory, abandon, bodies (default ${DEFAULTS.heavyRounds})
  --duration S         seconds of load per target per round (default ${DEFAULTS.duration})
  --concurrency N      wrk connections for throughput (default ${DEFAULTS.concurrency})
  --words N            reply length in words (default ${DEFAULTS.words})
  --streams N          streams held open by memory and abandon (default ${DEFAULTS.streams})
  --ttft-requests N    requests per target per TTFT round (default ${DEFAULTS.ttftRequests})
  --probe-concurrency N  small-request connections during large bodies (default ${DEFAULTS.probeConcurrency})
  --bodies LIST        variants of the bodies scenario (default: all): ${BODY_VARIANTS.join(', ')}
  --soak-minutes M     minutes of unbroken load per side and soak variant, after warm-up (default ${DEFAULTS.soakMinutes}; decimals allowed)
  --soak-slice S       seconds per soak slice (default ${DEFAULTS.soakSlice})
  --soak LIST          variants of the soak scenario (default: all): ${SOAK_VARIANTS.join(', ')}
  --soak-redis-keys N  the Redis variants start from a redis-server holding N keys shaped as the
                       store's done-marker hashes (16 fields, a day's TTL), as one in service does,
                       instead of an empty one (default ${DEFAULTS.soakRedisKeys})
  --soak-profile DIR   soaked servers (gateway and bare proxy) write a CPU profile per minute, loop
                       utilisation and GC per 15 s there (bench/probe.ts), summarised in
                       DIR/<variant>/<side>/summary.md; for explaining a curve, not for the figures
                       (the probe costs the server a little)
  --quick              smoke run: 1 round of 2 s, 200 streams, 50 TTFT requests, 15 s soaks in 5 s slices
  --no-pin             do not pin processes to cores
  --out DIR            results folder (default ${DEFAULTS.out}); --no-save writes nothing
  --help`;

function positiveInt(flag: string, v: string | undefined, min = 1): number {
  const n = Number(v);
  if (v === undefined || v === '' || !Number.isInteger(n) || n < min)
    throw new Error(`${flag} needs an integer ≥ ${min}, got ${v ?? 'nothing'}`);
  return n;
}

function positiveNumber(flag: string, v: string | undefined): number {
  const n = Number(v);
  if (v === undefined || v === '' || !Number.isFinite(n) || n <= 0) throw new Error(`${flag} needs a number > 0, got ${v ?? 'nothing'}`);
  return n;
}

function variantList(flag: string, v: string | undefined, known: readonly string[]): string[] {
  const names = (v ?? '')
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
  const unknown = names.filter((x) => !known.includes(x));
  if (names.length === 0 || unknown.length > 0) throw new Error(`${flag} needs a comma-separated list of ${known.join(', ')}`);
  return names;
}

function scenarioList(flag: string, v: string | undefined): Scenario[] {
  if (!v) throw new Error(`${flag} needs a comma-separated list of scenarios (${SCENARIOS.join(', ')})`);
  const names = v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const n of names) {
    if (!(SCENARIOS as readonly string[]).includes(n)) throw new Error(`${flag}: unknown scenario '${n}' (known: ${SCENARIOS.join(', ')})`);
  }
  return names as Scenario[];
}

/** Parses the command line (`--flag value` or `--flag=value`); throws an Error with a clear message on bad input. */
export function parseArgs(argv: readonly string[]): Options {
  const args: string[] = [];
  for (const a of argv) {
    const eq = a.startsWith('--') ? a.indexOf('=') : -1;
    if (eq > 0) args.push(a.slice(0, eq), a.slice(eq + 1));
    else args.push(a);
  }
  const o: Options = { ...DEFAULTS, only: [...DEFAULTS.only] };
  if (args.includes('--quick')) Object.assign(o, QUICK);
  let only: Scenario[] | undefined;
  let skip: Scenario[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const next = () => args[++i];
    switch (a) {
      case '--quick':
        break;
      case '--only':
        only = scenarioList(a, next());
        break;
      case '--skip':
        skip = scenarioList(a, next());
        break;
      case '--rounds':
        o.rounds = positiveInt(a, next());
        break;
      case '--heavy-rounds':
        o.heavyRounds = positiveInt(a, next());
        break;
      case '--duration':
        o.duration = positiveInt(a, next());
        break;
      case '--concurrency':
        o.concurrency = positiveInt(a, next());
        break;
      case '--words':
        o.words = positiveInt(a, next());
        break;
      case '--streams':
        o.streams = positiveInt(a, next());
        break;
      case '--ttft-requests':
        o.ttftRequests = positiveInt(a, next(), 2);
        break;
      case '--probe-concurrency':
        o.probeConcurrency = positiveInt(a, next());
        break;
      case '--bodies':
        o.bodiesVariants = variantList(a, next(), BODY_VARIANTS);
        break;
      case '--soak':
        o.soakVariants = variantList(a, next(), SOAK_VARIANTS);
        break;
      case '--soak-minutes':
        o.soakMinutes = positiveNumber(a, next());
        break;
      case '--soak-profile': {
        const v = next();
        if (!v) throw new Error('--soak-profile needs a folder');
        o.soakProfile = v;
        break;
      }
      case '--soak-slice':
        o.soakSlice = positiveInt(a, next());
        break;
      case '--soak-redis-keys':
        o.soakRedisKeys = positiveInt(a, next(), 0);
        break;
      case '--no-pin':
        o.pin = false;
        break;
      case '--out': {
        const v = next();
        if (!v) throw new Error('--out needs a folder');
        o.out = v;
        break;
      }
      case '--no-save':
        o.out = null;
        break;
      case '-h':
      case '--help':
        o.help = true;
        break;
      default:
        throw new Error(`unknown option '${a}'\n${USAGE}`);
    }
  }
  const chosen = only ?? [...SCENARIOS];
  // Run order is always the canonical one, whatever order the list was given in.
  o.only = SCENARIOS.filter((s) => chosen.includes(s) && !skip.includes(s));
  if (o.only.length === 0) throw new Error('no scenario left to run');
  return o;
}

// ---------------------------------------------------------------------------------------------
// Statistics

/** Quantile of a sample by linear interpolation between order statistics (R type 7); NaN when empty. */
export function quantile(xs: readonly number[], q: number): number {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const h = (s.length - 1) * Math.min(1, Math.max(0, q));
  const lo = Math.floor(h);
  const hi = Math.ceil(h);
  return s[lo] + (s[hi] - s[lo]) * (h - lo);
}

export function median(xs: readonly number[]): number {
  return quantile(xs, 0.5);
}

/** A figure over rounds: the median (what the README quotes) and how far the rounds spread. */
export interface Spread {
  median: number;
  min: number;
  max: number;
  q1: number;
  q3: number;
  n: number;
}

export function spread(xs: readonly number[]): Spread {
  const f = xs.filter((x) => Number.isFinite(x));
  return {
    median: quantile(f, 0.5),
    min: f.length ? Math.min(...f) : NaN,
    max: f.length ? Math.max(...f) : NaN,
    q1: quantile(f, 0.25),
    q3: quantile(f, 0.75),
    n: f.length,
  };
}

/** Per-round ratios subject[i] / baseline[i] (rounds where either side is missing or the baseline is 0 give NaN). */
export function roundRatios(subject: readonly number[], baseline: readonly number[]): number[] {
  return subject.map((s, i) => {
    const b = baseline[i];
    return Number.isFinite(s) && Number.isFinite(b) && b !== 0 ? s / b : NaN;
  });
}

/** Per-round differences subject[i] − baseline[i]. */
export function roundDiffs(subject: readonly number[], baseline: readonly number[]): number[] {
  return subject.map((s, i) => (Number.isFinite(s) && Number.isFinite(baseline[i]) ? s - baseline[i] : NaN));
}

/** The order of the two sides in round i: alternating, so neither side always runs first. */
export function roundOrder<T>(sides: readonly T[], round: number): T[] {
  if (sides.length === 0) return [];
  const k = round % sides.length;
  return [...sides.slice(k), ...sides.slice(0, k)];
}

// ---------------------------------------------------------------------------------------------
// What wrk and /proc print

/** One wrk run, as bench/wrk.lua's done() prints it on a `BENCH_JSON` line. */
export interface WrkRun {
  requests: number;
  durationUs: number;
  bytes: number;
  errors: { connect: number; read: number; write: number; status: number; timeout: number };
  latencyUs: { p50: number; p90: number; p99: number; max: number; mean: number };
}

export function parseWrk(stdout: string): WrkRun {
  const line = stdout.split('\n').find((l) => l.startsWith('BENCH_JSON '));
  if (!line) throw new Error(`wrk printed no BENCH_JSON line:\n${stdout.slice(0, 2000)}`);
  const r = JSON.parse(line.slice('BENCH_JSON '.length)) as WrkRun;
  if (typeof r.requests !== 'number' || typeof r.durationUs !== 'number' || !r.errors || !r.latencyUs)
    throw new Error(`unexpected wrk summary: ${line}`);
  return r;
}

/** Requests that succeeded per second (wrk counts non-2xx/3xx answers in errors.status). */
export function wrkRps(r: WrkRun): number {
  return r.durationUs > 0 ? (r.requests - r.errors.status) / (r.durationUs / 1e6) : NaN;
}

export function wrkErrors(r: WrkRun): number {
  const e = r.errors;
  return e.connect + e.read + e.write + e.status + e.timeout;
}

/** /proc/PID/stat: parent pid and CPU time (user + system) in clock ticks. The command name may hold spaces and parentheses. */
export function parseProcStat(text: string): { pid: number; ppid: number; ticks: number } {
  const close = text.lastIndexOf(')');
  if (close < 0) throw new Error('not a /proc/PID/stat line');
  const pid = Number(text.slice(0, text.indexOf(' ')));
  const f = text
    .slice(close + 2)
    .trim()
    .split(/\s+/); // f[0] is field 3 (state)
  return { pid, ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) };
}

/**
 * From a Prometheus text scrape, prom-client's default metrics: heap used (bytes) and the event
 * loop's delay p99 since the previous scrape (ms). Absent figures stay undefined.
 */
export function parseGauges(text: string): { heapUsed?: number; lagP99Ms?: number } {
  const value = (name: string): number | undefined => {
    const m = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)`, 'm').exec(text);
    const v = m ? Number(m[1]) : NaN;
    return Number.isFinite(v) ? v : undefined;
  };
  const lag = value('nodejs_eventloop_lag_p99_seconds');
  return { heapUsed: value('nodejs_heap_size_used_bytes'), lagP99Ms: lag === undefined ? undefined : lag * 1000 };
}

/** Resident set size in bytes from /proc/PID/status (VmRSS, in kB). */
export function parseVmRss(text: string): number {
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(text);
  if (!m) throw new Error('no VmRSS line');
  return Number(m[1]) * 1024;
}

/** Ticks of some cores from `/proc/stat`, summed: busy (user, nice, system, irq, softirq), idle (idle, iowait), steal. */
export interface CoreTicks {
  busy: number;
  idle: number;
  steal: number;
}

/**
 * The `cpuN` lines of `/proc/stat` for `cores` (the aggregate `cpu` line when `cores` is empty),
 * summed. Steal is time the hypervisor ran something else while this guest's vCPU wanted to run:
 * on a shared host, the machine slowing under a benchmark shows there, not in the process.
 */
export function parseCoreTicks(text: string, cores: readonly number[]): CoreTicks {
  const want = new Set(cores.length ? cores.map((c) => `cpu${c}`) : ['cpu']);
  const out: CoreTicks = { busy: 0, idle: 0, steal: 0 };
  let found = 0;
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (!want.has(f[0])) continue;
    found++;
    const n = f.slice(1).map(Number); // user nice system idle iowait irq softirq steal guest guest_nice
    out.busy += n[0] + n[1] + n[2] + (n[5] ?? 0) + (n[6] ?? 0);
    out.idle += n[3] + (n[4] ?? 0);
    out.steal += n[7] ?? 0;
  }
  if (found !== want.size) throw new Error(`/proc/stat has no line for ${[...want].join(', ')}`);
  return out;
}

/** One kind of tick as a share of all the cores' ticks between two readings, in %. */
function tickPct(a: CoreTicks, b: CoreTicks, kind: keyof CoreTicks): number {
  const total = b.busy - a.busy + (b.idle - a.idle) + (b.steal - a.steal);
  return total > 0 ? (100 * (b[kind] - a[kind])) / total : NaN;
}

/** Steal as a share of all the cores' ticks between two readings, in %. */
export const stealPct = (a: CoreTicks, b: CoreTicks): number => tickPct(a, b, 'steal');

/** Busy time as a share of all the cores' ticks between two readings, in %. */
export const busyPct = (a: CoreTicks, b: CoreTicks): number => tickPct(a, b, 'busy');

/** A cpu list as /proc/self/status `Cpus_allowed_list` or taskset print it: "0-3,6,8-9". */
export function parseCpuList(text: string): number[] {
  const out: number[] = [];
  for (const part of text.trim().split(',')) {
    if (!part) continue;
    const [a, b] = part.split('-').map(Number);
    if (!Number.isInteger(a) || (b !== undefined && !Number.isInteger(b))) throw new Error(`bad cpu list '${text}'`);
    for (let c = a; c <= (b ?? a); c++) out.push(c);
  }
  return out;
}

/** Which cores run what: the server under test alone; the upstream (mock, Redis) and the load generators on the rest. */
export interface Pinning {
  server: number[];
  upstream: number[];
  load: number[];
}

/**
 * ≥ 3 cores: server, upstream and load each apart (the load gets the rest). 2 cores: the server on
 * one, the upstream and the load share the other (as the issue measured). 1 core: no pinning.
 */
export function planPinning(cpus: readonly number[]): Pinning | null {
  if (cpus.length < 2) return null;
  if (cpus.length === 2) return { server: [cpus[0]], upstream: [cpus[1]], load: [cpus[1]] };
  return { server: [cpus[0]], upstream: [cpus[1]], load: cpus.slice(2) };
}

// ---------------------------------------------------------------------------------------------
// Soak

/** One slice of unbroken load on one side (one wrk run). */
export interface SoakSlice {
  /** Seconds from the start of the measured load (after the warm-up) to this slice's start. */
  t: number;
  /** Requests answered 2xx in the slice. */
  requests: number;
  /** The slice's length as wrk measured it. */
  seconds: number;
  /** Failed requests (wrk: connect, read, write, timeout, non-2xx). */
  errors: number;
  /** Server CPU (user + system, the process and its children) per request served. */
  cpuUsPerReq: number;
  /** Server RSS at the slice's end, bytes. */
  rss: number;
  /** The gateway's `nodejs_heap_size_used_bytes` at the slice's end. */
  heapUsed?: number;
  /** The gateway's `nodejs_eventloop_lag_p99_seconds` over the slice (prom-client resets it at each scrape), ms. */
  lagP99Ms?: number;
  /** 1-minute load average at the slice's end. */
  loadavg1: number;
  /** The server's core(s): time the hypervisor stole over the slice, % of their ticks. */
  stealPct?: number;
  /**
   * The reference work over the slice: CPU µs of a fixed piece of work (bench/roles.ts `reference`)
   * timed on the server's core every 2 s, the slice's median. The machine's own speed: it
   * rises when the vCPU slows, whatever the server does.
   */
  refUs?: number;
  /** The Redis variants' gateway: redis-server's CPU (INFO cpu, user + system) per request served in the slice, µs. */
  redisUsPerReq?: number;
  /**
   * The same reference work timed on the load's core (wrk and the mock upstream, and redis-server
   * for the Redis variants): whether that core slowed, when the server's did not.
   */
  loadRefUs?: number;
  /** The load's core: its busy ticks over the slice, % of its ticks (near 100: the load may be what limits). */
  loadBusyPct?: number;
}

/** One side of a soak: its slices, and its memory when the warm-up ended. */
export interface SoakSide {
  side: string;
  warmRss: number;
  warmHeapUsed?: number;
  slices: SoakSlice[];
}

/** One soak variant (store and request kind), every side soaked in turn over the same span. */
export interface SoakCurve {
  variant: string;
  sides: SoakSide[];
}

/** Requests per second over consecutive slices: all their requests over all their time. */
export function sliceRate(slices: readonly SoakSlice[]): number {
  let req = 0;
  let s = 0;
  for (const x of slices) {
    req += x.requests;
    s += x.seconds;
  }
  return s > 0 ? req / s : NaN;
}

/**
 * The slices of the first and the last minute (as many slices as fit in 60 s, at least one; a
 * soak of a minute or less has the same first and last minute), their rates and last ÷ first.
 */
export function soakSummary(slices: readonly SoakSlice[], sliceSeconds: number): { first: number; last: number; ratio: number } {
  const n = Math.max(1, Math.min(slices.length, Math.round(60 / sliceSeconds)));
  const first = sliceRate(slices.slice(0, n));
  const last = sliceRate(slices.slice(slices.length - n));
  return { first, last, ratio: Number.isFinite(first) && first > 0 ? last / first : NaN };
}

/** The curve's table: a line per slice, each side's figures side by side. */
export function soakTable(c: SoakCurve): string[] {
  const MiB = 1024 * 1024;
  const cols: { head: string; cell: (s: SoakSlice) => number }[] = [
    { head: 'req/s', cell: (s) => (s.seconds > 0 ? s.requests / s.seconds : NaN) },
    { head: 'CPU µs/req', cell: (s) => s.cpuUsPerReq },
    { head: 'RSS MiB', cell: (s) => s.rss / MiB },
  ];
  const gw = (side: SoakSide) => side.slices.some((s) => s.heapUsed !== undefined);
  const machine = (side: SoakSide) => side.slices.some((s) => s.refUs !== undefined || s.stealPct !== undefined);
  const redis = (side: SoakSide) => side.slices.some((s) => s.redisUsPerReq !== undefined);
  const loadCore = (side: SoakSide) => side.slices.some((s) => s.loadRefUs !== undefined);
  const head: string[] = [];
  for (const side of c.sides) {
    for (const col of cols) head.push(`${side.side} ${col.head}`);
    if (gw(side)) head.push(`${side.side} heap MiB`, `${side.side} loop delay p99 ms`);
    if (machine(side)) head.push(`${side.side} steal %`, `${side.side} reference µs`);
    if (redis(side)) head.push(`${side.side} redis-server CPU µs/req`);
    if (loadCore(side)) head.push(`${side.side} load core reference µs`, `${side.side} load core busy %`);
    head.push(`${side.side} load avg`);
  }
  const lines = [`| slice | from s | ${head.join(' | ')} |`, `|---|---|${head.map(() => '---').join('|')}|`];
  const n = Math.max(...c.sides.map((s) => s.slices.length));
  for (let i = 0; i < n; i++) {
    const cells: string[] = [];
    let t = NaN;
    for (const side of c.sides) {
      const s = side.slices[i];
      if (s && !Number.isFinite(t)) t = s.t;
      for (const col of cols) cells.push(s ? fmt(col.cell(s)) : '–');
      if (gw(side)) cells.push(fmt(s?.heapUsed !== undefined ? s.heapUsed / MiB : NaN), fmt(s?.lagP99Ms));
      if (machine(side)) cells.push(s?.stealPct !== undefined ? s.stealPct.toFixed(2) : '–', fmt(s?.refUs));
      if (redis(side)) cells.push(fmt(s?.redisUsPerReq));
      if (loadCore(side)) cells.push(fmt(s?.loadRefUs), fmt(s?.loadBusyPct));
      cells.push(s ? s.loadavg1.toFixed(2) : '–');
    }
    lines.push(`| ${i + 1} | ${Number.isFinite(t) ? Math.round(t) : '–'} | ${cells.join(' | ')} |`);
  }
  return lines;
}

// ---------------------------------------------------------------------------------------------
// The report

/** A headline figure: each side's median over rounds, and the median of the per-round ratio or difference. */
export interface Row {
  metric: string;
  unit: string;
  baseline?: Spread;
  subject?: Spread;
  /** Per-round subject / baseline. */
  ratio?: Spread;
  /** Per-round subject − baseline (in `unit`). */
  diff?: Spread;
  /** The issue's goal, as text; `met` says whether the median meets it (undefined: no goal or not checkable). */
  goal?: string;
  met?: boolean;
}

/** One side of one round: its figures, by name. */
export interface RoundSide {
  side: string;
  figures: Record<string, number>;
}

export interface RoundRecord {
  round: number;
  /** 1-minute load average when the round started. */
  loadavg1: number;
  sides: RoundSide[];
}

export interface ScenarioResult {
  name: Scenario;
  title: string;
  /** Column names of the two compared sides, e.g. ["bare proxy", "gateway"]. */
  columns: [string, string];
  rows: Row[];
  rounds: RoundRecord[];
  notes: string[];
  /** Why the scenario did not run (it then has no rows). */
  skipped?: string;
  /** The soak scenario's curves: one table per variant, a line per slice. */
  curves?: SoakCurve[];
  elapsedS?: number;
}

export interface Report {
  harness: string;
  startedAt: string;
  finishedAt: string;
  elapsedS: number;
  command: string;
  machine: {
    cpus: number;
    cpuModel: string;
    memGiB: number;
    kernel: string;
    node: string;
    wrk: string;
    commit: string;
  };
  options: Omit<Options, 'help' | 'out'>;
  pinning: Pinning | null;
  loadavg: { start: number[]; end: number[] };
  scenarios: ScenarioResult[];
  warnings: string[];
}

/** A number for a table: 3 significant digits, thousands as "k", NaN as "–". */
export function fmt(x: number | undefined, unit = ''): string {
  if (x === undefined || !Number.isFinite(x)) return '–';
  const sign = x < 0 ? '-' : '';
  const a = Math.abs(x);
  let s: string;
  if (a >= 10_000) s = `${(a / 1000).toPrecision(3)}k`;
  else if (a >= 100) s = a.toFixed(0);
  else if (a >= 10) s = a.toFixed(1);
  else if (a >= 1) s = a.toFixed(2);
  else if (a === 0) s = '0';
  else s = a.toPrecision(2);
  return `${sign}${s}${unit}`;
}

/** "median (min–max)", or just the median for a single round. */
export function fmtSpread(s: Spread | undefined, unit = '', signed = false): string {
  if (!s || s.n === 0) return '–';
  const f = (x: number) => (signed && x > 0 ? '+' : '') + fmt(x, unit);
  if (s.n === 1 || s.min === s.max) return f(s.median);
  return `${f(s.median)} (${f(s.min)} – ${f(s.max)})`;
}

function ratioText(r: Row): string {
  if (r.ratio) return fmtSpread(r.ratio, '×');
  if (r.diff) return fmtSpread(r.diff, r.unit ? ` ${r.unit}` : '', true);
  return '–';
}

function goalText(r: Row): string {
  if (!r.goal) return '';
  return r.met === undefined ? r.goal : `${r.goal} ${r.met ? '(met)' : '(missed)'}`;
}

/** The per-round table of one scenario: one line per side per round, one column per figure. */
function roundsTable(s: ScenarioResult): string[] {
  const keys: string[] = [];
  for (const r of s.rounds) for (const side of r.sides) for (const k of Object.keys(side.figures)) if (!keys.includes(k)) keys.push(k);
  if (keys.length === 0) return [];
  const lines = [`| round | load avg | side | ${keys.join(' | ')} |`, `|---|---|---|${keys.map(() => '---').join('|')}|`];
  for (const r of s.rounds) {
    for (const side of r.sides)
      lines.push(`| ${r.round + 1} | ${r.loadavg1.toFixed(2)} | ${side.side} | ${keys.map((k) => fmt(side.figures[k])).join(' | ')} |`);
  }
  return lines;
}

export function renderMarkdown(rep: Report): string {
  const m = rep.machine;
  const o = rep.options;
  const out: string[] = [];
  out.push(`# Benchmark ${rep.startedAt}`, '');
  out.push(
    `- machine: ${m.cpus} cpus (${m.cpuModel}), ${m.memGiB.toFixed(0)} GiB, Linux ${m.kernel}; Node ${m.node}; ${m.wrk}; commit ${m.commit}`,
  );
  out.push(
    `- pinning: ${rep.pinning ? `server under test on cpu ${rep.pinning.server.join(',')}, upstream on cpu ${rep.pinning.upstream.join(',')}, load generators on cpu ${rep.pinning.load.join(',')}` : 'none'}`,
  );
  out.push(
    `- load average (1, 5, 15 min): ${rep.loadavg.start.map((x) => x.toFixed(2)).join(', ')} at the start, ${rep.loadavg.end.map((x) => x.toFixed(2)).join(', ')} at the end`,
  );
  out.push(
    `- ${o.rounds} alternating rounds (${o.heavyRounds} for memory, abandon, bodies), ${o.duration} s per target per round after ${Math.min(WARMUP_S, o.duration)} s of warm-up per target, ${o.concurrency} connections, ${o.words}-word replies, ${o.streams} held streams, ${o.ttftRequests} TTFT requests per round${o.only.includes('soak') ? `; soaks of ${o.soakMinutes} min per side in ${o.soakSlice} s slices` : ''}`,
  );
  out.push(`- run: \`${rep.command}\`, ${Math.round(rep.elapsedS)} s`);
  out.push(
    '',
    'Each figure is the median over rounds, with the lowest and highest round in brackets; ratios and differences are computed per round (both sides measured back to back) and then their median taken.',
    '',
  );
  for (const w of rep.warnings) out.push(`> **Warning:** ${w}`, '');
  for (const s of rep.scenarios) {
    out.push(`## ${s.title}`, '');
    if (s.skipped) {
      out.push(`Skipped: ${s.skipped}`, '');
      continue;
    }
    out.push(`| metric | ${s.columns[0]} | ${s.columns[1]} | ratio or difference | goal |`, '|---|---|---|---|---|');
    for (const r of s.rows) {
      out.push(`| ${r.metric} | ${fmtSpread(r.baseline)} | ${fmtSpread(r.subject)} | ${ratioText(r)} | ${goalText(r)} |`);
    }
    out.push('');
    for (const n of s.notes) out.push(`- ${n}`);
    if (s.notes.length) out.push('');
    const rt = roundsTable(s);
    if (rt.length) out.push('<details><summary>per round</summary>', '', ...rt, '', '</details>', '');
    for (const c of s.curves ?? []) out.push(`### Soak curve: ${c.variant}`, '', ...soakTable(c), '');
  }
  return out.join('\n');
}
