// What changes in a gateway's CPU per request while its load never pauses: one wrk run of
// `--seconds` (the soak's shape: no rest between measurements), Linux `perf` sampling the gateway
// for 8 s at each of the `--at` times, with the requests in each window (the ledger's new lines),
// the gateway's CPU per request and the steal on its core. `report A B` (perf-profile.mjs) then
// names what grew between two windows: a structure that grows shows as its own symbols, a slower
// core as every symbol at once.
//   node bench/micro/perf-over-time.mjs [--root CHECKOUT] [--stream] [--seconds 300] [--at 20,150,280] [--out /tmp/over-time]
//        (CHECKOUT built; default .; writes OUT-0, OUT-1, … with their .json for perf-profile.mjs report)
// (not a test: a guide, like the rest of bench/micro)
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { argReader, gatewaySetup, PERF_HZ, perfRecord, processes, waitUp, wrkAsync } from './under-load.mjs';

const { opt, flag } = argReader(process.argv.slice(2));
const root = path.resolve(opt('--root', '.'));
const stream = flag('--stream');
const seconds = Number(opt('--seconds', '300'));
const at = opt('--at', '20,150,280').split(',').map(Number);
const out = opt('--out', '/tmp/over-time');
const WINDOW_S = 8;

const s = await gatewaySetup(root, 'perf-over-time', undefined, stream);
const procs = processes(s);
/** Billed requests so far: one ledger line each. */
const ledgerLines = () => {
  const dir = path.join(s.dir, 'data', 'ledger');
  let n = 0;
  for (const f of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
    if (f.endsWith('.jsonl'))
      n += Number(
        execFileSync('wc', ['-l', path.join(dir, f)])
          .toString()
          .trim()
          .split(' ')[0],
      );
  }
  return n;
};
/** Core 0's steal and total ticks (/proc/stat). */
const core0 = () => {
  const f = fs
    .readFileSync('/proc/stat', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('cpu0 '))
    .split(/\s+/)
    .slice(1)
    .map(Number);
  return { steal: f[7], all: f.reduce((a, b) => a + b, 0) };
};
/** A process's CPU time, µs (/proc/PID/stat utime + stime, 10 ms ticks). */
const cpuUs = (pid) => {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) * 10_000;
};

try {
  procs.mock();
  const pid = procs.gateway(['--perf-basic-prof']).pid;
  await waitUp(s);
  const t0 = Date.now();
  const load = wrkAsync(s, seconds, 50);
  for (const [i, t] of at.entries()) {
    await sleep(Math.max(0, t * 1000 - (Date.now() - t0)));
    const file = `${out}-${i}`;
    const [n0, c0, p0] = [ledgerLines(), core0(), cpuUs(pid)];
    const stop = await perfRecord(pid, file);
    await sleep(WINDOW_S * 1000);
    await stop();
    const [n1, c1, p1] = [ledgerLines(), core0(), cpuUs(pid)];
    const requests = n1 - n0;
    fs.writeFileSync(`${file}.json`, JSON.stringify({ side: 'gateway', stream, root, requests, seconds: WINDOW_S, hz: PERF_HZ }));
    const steal = (100 * (c1.steal - c0.steal)) / (c1.all - c0.all);
    console.log(
      `${t} s: ${requests} requests in the window, ${((p1 - p0) / requests).toFixed(0)} µs CPU each, steal ${steal.toFixed(2)} % → ${file}`,
    );
  }
  const r = await load;
  console.log(`wrk: ${r.requests} requests in ${seconds} s`);
} finally {
  await procs.stopAll();
}
