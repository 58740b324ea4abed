// What a gateway's synchronous file writes cost it under load, in place: the gateway as the bench
// runs it (memory store, ledger on, log level info) with its stderr redirected to a file, wall time
// of every writeSync/fsyncSync by file (write-timing-preload.mjs), a separate wrk on the other
// core. Answers "cost or blocking?": blocking shows as a tail (calls over 1 ms, the journal's fsync
// running beside them), cost as a steady median.
//   node bench/micro/write-timing.mjs [CHECKOUT] [--seconds N] [--stream]    (CHECKOUT built; default .)
// (not a test: a guide, like the rest of bench/micro)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { gatewaySetup, processes, waitUp, wrk } from './under-load.mjs';

const args = process.argv.slice(2);
const secI = args.indexOf('--seconds');
const seconds = secI >= 0 ? Number(args.splice(secI, 2)[1]) : 20;
const streamI = args.indexOf('--stream');
const stream = streamI >= 0 && args.splice(streamI, 1).length > 0;
const root = path.resolve(args[0] ?? '.');
const here = path.dirname(new URL(import.meta.url).pathname);

const s = await gatewaySetup(root, 'write-timing', undefined, stream);
const dir = s.dir;
const procs = processes(s);
const statsFile = path.join(dir, 'stats.json');
try {
  procs.mock();
  const gw = procs.gateway(['--import', path.join(here, 'write-timing-preload.mjs')], { ...process.env, WRITE_TIMING_OUT: statsFile });
  await waitUp(s);
  const load = os.loadavg()[0];
  wrk(s, 5, 50); // warm-up
  process.kill(gw.pid, 'SIGUSR2'); // the timing starts again (the preload runs in node, under taskset's exec)
  await sleep(300);
  const res = wrk(s, seconds, 50);
  process.kill(gw.pid, 'SIGUSR2');
  await sleep(500);
  const rows = JSON.parse(fs.readFileSync(statsFile, 'utf8'));
  const n = res.requests;
  console.log(`${root}: ${n} requests in ${seconds} s (${Math.round(n / seconds)}/s), load average ${load.toFixed(2)} at the start`);
  console.log(
    '| call | file | calls per request | bytes per call | µs per call (mean / p50 / p99 / max) | calls > 1 ms | µs per request |',
  );
  console.log('|---|---|---|---|---|---|---|');
  for (const r of rows.sort((a, b) => b.totalUs - a.totalUs)) {
    const file = r.path.startsWith(dir) ? r.path.slice(dir.length + 1) : r.path;
    console.log(
      `| ${r.call} | ${file} | ${(r.calls / n).toFixed(3)} | ${Math.round(r.bytes / r.calls)} | ${(r.totalUs / r.calls).toFixed(1)} / ${r.p50.toFixed(1)} / ${r.p99.toFixed(1)} / ${r.max.toFixed(0)} | ${r.over1ms} | ${(r.totalUs / n).toFixed(2)} |`,
    );
  }
} finally {
  await procs.stopAll();
}
