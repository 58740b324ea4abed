/**
 * The benchmark harness's pure parts (bench/lib.ts): options, the statistics the README quotes,
 * parsing wrk's and /proc's output, and the report. No load is generated here (performance is
 * measured by `npm run bench`, never asserted in tests); this catches a harness broken by a change.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import {
  DEFAULTS,
  SCENARIOS,
  fmt,
  fmtSpread,
  median,
  parseArgs,
  parseCoreTicks,
  parseCpuList,
  parseGauges,
  parseProcStat,
  parseVmRss,
  parseWrk,
  planPinning,
  quantile,
  renderMarkdown,
  roundDiffs,
  roundOrder,
  roundRatios,
  soakSummary,
  soakTable,
  spread,
  stealPct,
  busyPct,
  wrkErrors,
  wrkRps,
  type Report,
  type RoundRecord,
  type SoakSlice,
} from '../../bench/lib.js';

t.test('options: defaults, selection, presets, errors', async (t) => {
  const d = parseArgs([]);
  t.same(d.only, [...SCENARIOS], 'every scenario by default');
  t.equal(d.rounds, DEFAULTS.rounds);
  t.equal(d.out, 'bench/results');
  t.equal(d.pin, true);

  t.same(parseArgs(['--only', 'stream']).only, ['stream']);
  t.same(parseArgs(['--only=bodies,json']).only, ['json', 'bodies'], 'run in the canonical order whatever the order given');
  t.same(
    parseArgs(['--skip', 'redis,memory']).only,
    SCENARIOS.filter((s) => s !== 'redis' && s !== 'memory'),
  );
  t.same(parseArgs(['--only', 'json,stream', '--skip', 'stream']).only, ['json']);

  const q = parseArgs(['--rounds', '3', '--quick']);
  t.equal(q.rounds, 3, 'an explicit flag wins over --quick, wherever it stands');
  t.equal(q.duration, 2, '--quick shortens the rest');
  t.equal(q.streams, 200);

  const o = parseArgs(['--duration=4', '--concurrency', '10', '--streams', '50', '--no-pin', '--no-save', '--heavy-rounds', '2']);
  t.match(o, { duration: 4, concurrency: 10, streams: 50, pin: false, out: null, heavyRounds: 2 });
  t.equal(parseArgs(['--out', '/tmp/x']).out, '/tmp/x');
  t.equal(parseArgs(['--help']).help, true);

  t.throws(() => parseArgs(['--only', 'fast']), /unknown scenario 'fast'/);
  t.throws(() => parseArgs(['--rounds', '0']), /--rounds needs an integer ≥ 1, got 0/);
  t.throws(() => parseArgs(['--rounds', '1.5']), /--rounds needs an integer/);
  t.throws(() => parseArgs(['--duration']), /--duration needs an integer ≥ 1, got nothing/);
  t.throws(() => parseArgs(['--ttft-requests', '1']), /≥ 2/);
  t.throws(() => parseArgs(['--frobnicate']), /unknown option '--frobnicate'/);
  t.throws(() => parseArgs(['--only', 'json', '--skip', 'json']), /no scenario left/);

  t.match(parseArgs([]), { soakMinutes: 5, soakSlice: 15 }, 'soaks of 5 minutes in 15 s slices by default');
  t.match(parseArgs(['--soak-minutes', '0.5', '--soak-slice=10', '--soak', 'redis-json,memory-stream']), {
    soakMinutes: 0.5,
    soakSlice: 10,
    soakVariants: ['redis-json', 'memory-stream'],
  });
  t.throws(() => parseArgs(['--soak-minutes', '0']), /--soak-minutes needs a number > 0, got 0/);
  t.throws(() => parseArgs(['--soak', 'disk-json']), /--soak needs a comma-separated list of memory-json/);
  t.ok(parseArgs(['--quick']).soakMinutes < 1, '--quick shortens the soaks too');
  t.equal(parseArgs([]).soakRedisKeys, 0, 'the Redis soaks start from an empty redis-server by default');
  t.equal(parseArgs(['--soak-redis-keys', '1000000']).soakRedisKeys, 1_000_000);
  t.throws(() => parseArgs(['--soak-redis-keys', '-1']), /--soak-redis-keys needs an integer ≥ 0, got -1/);
});

t.test('statistics: medians of per-round ratios and their spread', async (t) => {
  t.equal(median([3, 1, 2]), 2);
  t.equal(median([4, 1, 3, 2]), 2.5, 'even count: the mean of the middle two');
  t.equal(median([5, NaN, 1]), 3, 'a missing round is left out');
  t.ok(Number.isNaN(median([])));
  t.equal(quantile([1, 2, 3, 4, 5], 0.25), 2);
  t.equal(quantile([10, 20], 0.99), 19.9);

  t.same(spread([8, 6, 7, 9]), { median: 7.5, min: 6, max: 9, q1: 6.75, q3: 8.25, n: 4 });

  t.same(roundRatios([2, 3, 5], [1, 2, 0]).slice(0, 2), [2, 1.5]);
  t.ok(Number.isNaN(roundRatios([5], [0])[0]), 'a zero baseline gives no ratio');
  t.same(roundDiffs([2.5, 4], [1, 1]), [1.5, 3]);
  // The median of per-round ratios is not the ratio of the medians.
  const gw = [100, 50, 90];
  const bare = [200, 60, 100];
  t.equal(median(roundRatios(gw, bare)), 0.8333333333333334);
  t.equal(median(gw) / median(bare), 0.9);

  t.same(roundOrder(['a', 'b'], 0), ['a', 'b']);
  t.same(roundOrder(['a', 'b'], 1), ['b', 'a'], 'alternating rounds');
  t.same(roundOrder(['a', 'b', 'c'], 4), ['b', 'c', 'a']);
});

t.test('parsing wrk and /proc', async (t) => {
  const out =
    'Running 2s test @ http://127.0.0.1:1/v1/chat/completions\n' +
    'BENCH_JSON {"requests":1000,"durationUs":2000000,"bytes":500000,"errors":{"connect":0,"read":1,"write":0,"status":100,"timeout":2},' +
    '"latencyUs":{"p50":1500.0,"p90":2500.0,"p99":9000.5,"max":12000.0,"mean":1700.2}}\n';
  const r = parseWrk(out);
  t.equal(r.latencyUs.p99, 9000.5);
  t.equal(wrkRps(r), 450, 'non-2xx answers are not counted as served');
  t.equal(wrkErrors(r), 103);
  t.throws(() => parseWrk('wrk: connection refused\n'), /no BENCH_JSON line/);

  // bench/wrk.lua prints that line: every field the parser reads must be in its format string.
  const lua = readFileSync(new URL('../../../bench/wrk.lua', import.meta.url), 'utf8');
  t.match(lua, /BENCH_JSON \{/);
  for (const f of [
    'requests',
    'durationUs',
    'bytes',
    'errors',
    'connect',
    'read',
    'write',
    'status',
    'timeout',
    'latencyUs',
    'p50',
    'p90',
    'p99',
    'max',
    'mean',
  ]) {
    t.ok(lua.includes(`"${f}":`), `wrk.lua prints ${f}`);
  }

  const stat =
    '4242 (node (my) worker) S 4000 4242 4000 0 -1 4194560 5000 0 0 0 731 129 0 0 20 0 11 0 1234 1100000000 20000 18446744073709551615';
  t.same(parseProcStat(stat), { pid: 4242, ppid: 4000, ticks: 860 }, 'user + system ticks, a command name with spaces and parentheses');
  t.equal(parseVmRss('Name:\tnode\nVmPeak:\t  900 kB\nVmRSS:\t   51200 kB\n'), 51200 * 1024);
  t.throws(() => parseVmRss('Name: node\n'), /no VmRSS/);

  t.same(parseCpuList('0-3,6,8-9\n'), [0, 1, 2, 3, 6, 8, 9]);
  t.throws(() => parseCpuList('a-b'), /bad cpu list/);
  t.equal(planPinning([0]), null, 'one core: nothing to separate');
  t.same(planPinning([0, 1]), { server: [0], upstream: [1], load: [1] }, 'two cores: the server alone, upstream and load together');
  t.same(planPinning([2, 3, 4, 5]), { server: [2], upstream: [3], load: [4, 5] });
});

t.test("/proc/stat: a core's steal between two readings", async (t) => {
  const stat = (cpu0: string, cpu1: string) => `cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 ${cpu0}\ncpu1 ${cpu1}\nintr 648 0 0\nctxt 12\n`;
  const a = stat('1000 10 300 500 20 0 70 100 0 0', '900 5 200 800 0 0 30 50 0 0');
  const b = stat('1800 10 400 500 20 0 70 200 0 0', '1000 5 200 1600 0 0 30 150 0 0');
  t.same(
    parseCoreTicks(a, [0]),
    { busy: 1380, idle: 520, steal: 100 },
    'user, nice, system, irq and softirq are busy; idle and iowait idle',
  );
  t.same(parseCoreTicks(a, [0, 1]), { busy: 1380 + 1135, idle: 520 + 800, steal: 150 }, 'several cores summed');
  t.same(parseCoreTicks(a, []), { busy: 1 + 2 + 3 + 6 + 7, idle: 9, steal: 8 }, 'no core named: the aggregate line');
  t.equal(stealPct(parseCoreTicks(a, [0]), parseCoreTicks(b, [0])), 10, '100 stolen of 1,000 ticks on core 0');
  t.equal(stealPct(parseCoreTicks(a, [1]), parseCoreTicks(b, [1])), (100 * 100) / 1000, 'core 1: 100 of 1,000');
  t.ok(Number.isNaN(stealPct(parseCoreTicks(a, [0]), parseCoreTicks(a, [0]))), 'no ticks between: no figure');
  t.equal(busyPct(parseCoreTicks(a, [0]), parseCoreTicks(b, [0])), 90, 'core 0 busy 900 of 1,000 ticks');
  t.equal(busyPct(parseCoreTicks(a, [1]), parseCoreTicks(b, [1])), 10, 'core 1 busy 100 of 1,000 (800 idle, 100 stolen)');
  t.ok(Number.isNaN(busyPct(parseCoreTicks(a, [1]), parseCoreTicks(a, [1]))), 'no ticks between: no figure');
  t.throws(() => parseCoreTicks(a, [2]), /no line for cpu2/, 'a core the machine lacks is an error, not a zero');
});

t.test('soak: first and last minute, the curve', async (t) => {
  const slice = (i: number, requests: number, extra: Partial<SoakSlice> = {}): SoakSlice => ({
    t: i * 15,
    requests,
    seconds: 15,
    errors: 0,
    cpuUsPerReq: 300,
    rss: 100 * 1024 * 1024,
    loadavg1: 0.5,
    ...extra,
  });
  // Five minutes of 15 s slices: the first minute is slices 1-4, the last slices 17-20.
  const slices = Array.from({ length: 20 }, (_, i) => slice(i, i < 4 ? 150_000 : i >= 16 ? 120_000 : 90_000));
  slices[3] = slice(3, 90_000, { seconds: 15 });
  const s = soakSummary(slices, 15);
  t.equal(s.first, (3 * 150_000 + 90_000) / 60, 'all requests of the first four slices over their time');
  t.equal(s.last, 8000);
  t.equal(s.ratio, s.last / s.first);
  t.same(
    soakSummary(slices.slice(0, 2), 15),
    { first: 10_000, last: 10_000, ratio: 1 },
    'under a minute: first and last minute are the same',
  );
  t.ok(Number.isNaN(soakSummary([], 15).ratio));

  const rows = soakTable({
    variant: 'memory-json',
    sides: [
      { side: 'bare proxy', warmRss: 0, slices: [slice(0, 300_000)] },
      { side: 'gateway', warmRss: 0, slices: [slice(0, 150_000, { heapUsed: 40 * 1024 * 1024, lagP99Ms: 12.5 }), slice(1, 120_000)] },
    ],
  });
  t.match(
    rows[0],
    /^\| slice \| from s \| bare proxy req\/s \| bare proxy CPU µs\/req \| bare proxy RSS MiB \| bare proxy load avg \| gateway req\/s \|/,
  );
  t.match(
    rows[0],
    /gateway heap MiB \| gateway loop delay p99 ms \| gateway load avg \|$/,
    'heap and loop delay for the side that has them',
  );
  t.equal(rows[2], '| 1 | 0 | 20.0k | 300 | 100 | 0.50 | 10.0k | 300 | 100 | 40.0 | 12.5 | 0.50 |');
  t.equal(rows[3], '| 2 | 15 | – | – | – | – | 8000 | 300 | 100 | – | – | 0.50 |', 'a side with fewer slices shows dashes');

  const machine = soakTable({
    variant: 'memory-stream',
    sides: [{ side: 'gateway', warmRss: 0, slices: [slice(0, 150_000, { stealPct: 0.375, refUs: 3412 }), slice(1, 150_000)] }],
  });
  t.match(machine[0], /\| gateway steal % \| gateway reference µs \| gateway load avg \|$/, "the machine's columns when a side has them");
  t.equal(machine[2], '| 1 | 0 | 10.0k | 300 | 100 | 0.38 | 3412 | 0.50 |');
  t.equal(machine[3], '| 2 | 15 | 10.0k | 300 | 100 | – | – | 0.50 |');

  const redis = soakTable({
    variant: 'redis-json',
    sides: [{ side: 'gateway', warmRss: 0, slices: [slice(0, 150_000, { redisUsPerReq: 81.4 }), slice(1, 150_000)] }],
  });
  t.match(redis[0], /\| gateway redis-server CPU µs\/req \| gateway load avg \|$/, "redis-server's cost per request when the side has it");
  t.equal(redis[2], '| 1 | 0 | 10.0k | 300 | 100 | 81.4 | 0.50 |');
  t.equal(redis[3], '| 2 | 15 | 10.0k | 300 | 100 | – | 0.50 |');

  const loadCore = soakTable({
    variant: 'memory-stream',
    sides: [{ side: 'gateway', warmRss: 0, slices: [slice(0, 150_000, { loadRefUs: 571, loadBusyPct: 97.4 }), slice(1, 150_000)] }],
  });
  t.match(
    loadCore[0],
    /\| gateway load core reference µs \| gateway load core busy % \| gateway load avg \|$/,
    "the load core's columns when the side has them",
  );
  t.equal(loadCore[2], '| 1 | 0 | 10.0k | 300 | 100 | 571 | 97.4 | 0.50 |');
  t.equal(loadCore[3], '| 2 | 15 | 10.0k | 300 | 100 | – | – | 0.50 |');

  const scrape =
    '# HELP nodejs_heap_size_used_bytes Process heap size used from Node.js in bytes.\n' +
    '# TYPE nodejs_heap_size_used_bytes gauge\n' +
    'nodejs_heap_size_used_bytes 41943040\n' +
    'nodejs_eventloop_lag_p99_seconds 0.0125\n' +
    'nodejs_eventloop_lag_p90_seconds 0.004\n';
  t.same(parseGauges(scrape), { heapUsed: 41943040, lagP99Ms: 12.5 });
  t.same(parseGauges('gateway_requests_total{route="x"} 3\n'), { heapUsed: undefined, lagP99Ms: undefined }, 'absent: undefined');
});

t.test('the report', async (t) => {
  t.equal(fmt(14400), '14.4k');
  t.equal(fmt(250.4), '250');
  t.equal(fmt(0.7349), '0.73');
  t.equal(fmt(NaN), '–');
  t.equal(fmtSpread(spread([0.5, 0.4, 0.6]), '×'), '0.50× (0.40× – 0.60×)');
  t.equal(fmtSpread(spread([0.5])), '0.50', 'one round: no spread to show');
  t.equal(fmtSpread(spread([0.84, 1.2]), ' ms', true), '+1.02 ms (+0.84 ms – +1.20 ms)');

  const rep: Report = {
    harness: 'test',
    startedAt: '2026-01-01T00:00:00.000Z',
    finishedAt: '2026-01-01T00:05:00.000Z',
    elapsedS: 300,
    command: 'npm run bench -- --only json,redis',
    machine: { cpus: 2, cpuModel: 'EPYC', memGiB: 24, kernel: '6.1', node: 'v20.0.0', wrk: 'wrk 4.1.0', commit: 'abc1234' },
    options: { ...DEFAULTS, only: ['json', 'redis'] },
    pinning: { server: [0], upstream: [1], load: [1] },
    loadavg: { start: [0.1, 0.2, 0.3], end: [1.5, 0.9, 0.4] },
    warnings: ['the machine was not quiet'],
    scenarios: [
      {
        name: 'json',
        title: 'Non-streaming chat (wrk)',
        columns: ['bare proxy', 'gateway'],
        notes: ['a note'],
        rows: [
          {
            metric: 'requests/s',
            unit: '',
            baseline: spread([14000, 15000]),
            subject: spread([10000, 12000]),
            ratio: spread([0.71, 0.8]),
            goal: '≥ 0.8×',
            met: false,
          },
        ],
        rounds: [0, 1].map((round): RoundRecord => ({
          round,
          loadavg1: 0.5,
          sides: [
            { side: 'bare proxy', figures: { 'req/s': 14000 + round * 1000 } },
            { side: 'gateway', figures: { 'req/s': 10000 + round * 2000, 'log B/req': 270 } },
          ],
        })),
      },
      { name: 'redis', title: 'Redis store', columns: ['', ''], rows: [], rounds: [], notes: [], skipped: 'redis-server is not installed' },
    ],
  };
  const md = renderMarkdown(rep);
  t.match(md, /pinning: server under test on cpu 0, upstream on cpu 1, load generators on cpu 1/);
  t.match(md, /load average \(1, 5, 15 min\): 0\.10, 0\.20, 0\.30 at the start/);
  t.match(md, /> \*\*Warning:\*\* the machine was not quiet/);
  t.match(
    md,
    /\| requests\/s \| 14\.5k \(14\.0k – 15\.0k\) \| 11\.0k \(10\.0k – 12\.0k\) \| 0\.76× \(0\.71× – 0\.80×\) \| ≥ 0\.8× \(missed\) \|/,
  );
  t.match(md, /\| round \| load avg \| side \| req\/s \| log B\/req \|/);
  t.match(md, /\| 2 \| 0\.50 \| gateway \| 12\.0k \| 270 \|/);
  t.match(md, /## Redis store\n\nSkipped: redis-server is not installed/);
  t.match(md, /- a note/);

  const soak = renderMarkdown({
    ...rep,
    options: { ...DEFAULTS, only: ['soak'] },
    scenarios: [
      {
        name: 'soak',
        title: 'Soak',
        columns: ['bare proxy', 'gateway'],
        rows: [],
        rounds: [],
        notes: [],
        curves: [{ variant: 'redis-stream', sides: [{ side: 'gateway', warmRss: 0, slices: [] }] }],
      },
    ],
  });
  t.match(soak, /soaks of 5 min per side in 15 s slices/);
  t.match(soak, /### Soak curve: redis-stream\n\n\| slice \| from s \| gateway req\/s/, 'a table per soak curve');
});
