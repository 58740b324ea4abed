// Where a server's CPU goes under load, per request, by symbol: Linux `perf` sampling the whole
// process (kernel, V8's builtins and collector, Node's C++, JavaScript named through
// `--perf-basic-prof`) while a separate wrk loads it. V8's own sampler (`bench:instructions
// -- --cpu-prof`) sees only JavaScript frames and folds native work into whichever frame was on the
// stack: it put 2.8 µs a request on the key's SHA-256, which costs 0.34 µs. perf names the builtin
// itself (a Set lookup, a scavenge, a regular expression, the kernel waking a peer).
// `perf` comes from Debian's linux-perf; on a VM without hardware counters the software clock
// (`cpu-clock`) is used, which is all this needs.
//
//   node bench/micro/perf-profile.mjs record --out FILE [--root CHECKOUT] [--side gateway|proxy|floor|floor-records]
//        [--stream] [--seconds N] [--callers]         (CHECKOUT built; default .; FILE.json gets the request count)
//   node bench/micro/perf-profile.mjs report A [B] [--top N]   µs per request by symbol; with B, B − A, largest first
//   node bench/micro/perf-profile.mjs frames FILE [--under NAME] [--top N]   (recorded with --callers) µs per request by the
//        JavaScript function nearest each sample's leaf; with --under, what the samples of the functions named NAME did
// (not a test: a guide, like the rest of bench/micro)
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { argReader, gatewaySetup, PERF_HZ, perfRecord, perfSymbols, processes, roleArgs, waitUp, wrk } from './under-load.mjs';

const args = process.argv.slice(2);
const { opt, flag } = argReader(args);

if (args[0] === 'record') {
  const out = path.resolve(opt('--out', 'perf.data'));
  const root = path.resolve(opt('--root', '.'));
  const side = opt('--side', 'gateway');
  const seconds = Number(opt('--seconds', '8'));
  const stream = flag('--stream');
  const callers = flag('--callers');
  const s = await gatewaySetup(root, 'perf-profile', undefined, stream);
  const procs = processes(s);
  try {
    procs.mock();
    let pid;
    if (side === 'gateway') {
      pid = procs.gateway(['--perf-basic-prof']).pid;
      await waitUp(s);
    } else {
      pid = procs.start(
        'taskset',
        ['-c', '0', process.execPath, '--perf-basic-prof', 'dist/bench/roles.js', side, String(s.gwPort), ...roleArgs(s, side)],
        {
          stdio: 'ignore',
        },
      ).pid;
      await sleep(1500);
    }
    // Warm-up: JIT, pools, and the store's structures at their working size, over three wrk runs.
    // The first time the load's connections close and new ones open, Node's stream code (and the
    // gateway's with it) deoptimizes and is compiled again: 340–430 ms of TurboFan in the next run
    // after one warm-up run, 41–78 ms after two or three (bench/micro/jit-over-time.mjs). One
    // warm-up run left that inside the recorded window (16–28 µs per request for the gateway).
    for (let i = 0; i < 3; i++) wrk(s, 5, 50);
    const stop = await perfRecord(pid, out, callers);
    const r = wrk(s, seconds, 50);
    await stop();
    fs.writeFileSync(`${out}.json`, JSON.stringify({ side, stream, root, requests: r.requests, seconds, hz: PERF_HZ }));
    console.log(`${side}${stream ? ' stream' : ''}: ${r.requests} requests in ${seconds} s recorded to ${out}`);
  } finally {
    await procs.stopAll();
  }
} else if (args[0] === 'report') {
  const top = Number(opt('--top', '50'));
  const [a, b] = args.slice(1);
  const read = (file) => {
    const meta = JSON.parse(fs.readFileSync(`${file}.json`, 'utf8'));
    return perfSymbols(file, meta.hz, meta.requests);
  };
  const total = (m) => [...m.values()].reduce((x, y) => x + y, 0);
  const A = read(a);
  if (!b) {
    console.log(`total ${total(A).toFixed(1)} µs per request`);
    for (const [k, v] of [...A].sort((x, y) => y[1] - x[1]).slice(0, top)) console.log(`${v.toFixed(2).padStart(8)}  ${k}`);
  } else {
    const B = read(b);
    console.log(`total µs per request: A ${total(A).toFixed(1)}, B ${total(B).toFixed(1)}`);
    console.log('   B − A        A        B  symbol');
    const rows = [...new Set([...A.keys(), ...B.keys()])].map((k) => [k, A.get(k) ?? 0, B.get(k) ?? 0]);
    rows.sort((x, y) => Math.abs(y[2] - y[1]) - Math.abs(x[2] - x[1]));
    for (const [k, x, y] of rows.slice(0, top))
      console.log(`${(y - x).toFixed(2).padStart(8)} ${x.toFixed(2).padStart(8)} ${y.toFixed(2).padStart(8)}  ${k}`);
  }
} else if (args[0] === 'frames') {
  // Each sample charged to the JavaScript function nearest its leaf (builtins, V8's runtime and
  // the kernel below it included): what a function costs in place, its own code and what it
  // calls that is not JavaScript. With --under NAME, what the samples charged to the functions
  // whose frame contains NAME were doing (the frame it called, and the leaf).
  const file = args[1];
  const top = Number(opt('--top', '40'));
  const under = opt('--under', '');
  const meta = JSON.parse(fs.readFileSync(`${file}.json`, 'utf8'));
  const us = (n) => ((n * 1e6) / meta.hz / meta.requests).toFixed(2).padStart(7);
  const script = execFileSync('perf', ['script', '-i', file], { maxBuffer: 1 << 30, stdio: ['ignore', 'pipe', 'ignore'] }).toString();
  const counts = new Map();
  let total = 0;
  for (const block of script.split('\n\n')) {
    const frames = block
      .split('\n')
      .slice(1)
      .map((l) =>
        l
          .trim()
          .replace(/^[0-9a-f]+ /, '')
          .replace(/\+0x[0-9a-f]+ .*$/, '')
          .replace(/ \(.*\)$/, ''),
      )
      .filter(Boolean)
      .map((f) => f.replace(/file:\/\/\/\S*?\/dist\//, '').replace(/^JS:[*~^]?/, 'JS:'));
    if (!frames.length) continue;
    total++;
    const js = frames.findIndex((f) => f.startsWith('JS:'));
    let key;
    if (!under) key = js < 0 ? `(no JavaScript) ${frames[0]}` : frames[js];
    else if (js >= 0 && frames[js].includes(under))
      key = js === 0 ? '(its own code)' : js === 1 ? frames[0] : `${frames[js - 1]} … ${frames[0]}`;
    else continue;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  const shown = [...counts.values()].reduce((x, y) => x + y, 0);
  console.log(`${us(total)} µs per request in all${under ? `, ${us(shown)} charged to ${under}` : ''}`);
  for (const [k, v] of [...counts].sort((x, y) => y[1] - x[1]).slice(0, top)) console.log(`${us(v)}  ${k.slice(0, 200)}`);
} else {
  console.error(
    'usage: perf-profile.mjs record --out FILE [--root DIR] [--side gateway|proxy|floor|floor-records] [--stream] [--seconds N] [--callers]',
  );
  console.error('       perf-profile.mjs report A [B] [--top N]');
  console.error('       perf-profile.mjs frames FILE [--under NAME] [--top N]   (FILE recorded with --callers)');
  process.exit(2);
}
