// Two checkouts' gateways under the same load, in alternating rounds: the CPU each uses per request
// (its process's user and system time over a wrk run, divided by the run's requests) and its
// requests/s, per round, then the median of B ÷ A. For a change smaller than the bench's
// round-to-round spread against the bare proxy: both sides are the gateway as the bench runs it,
// measured back to back in the same minutes, so the machine's drift falls on both; the order
// within a round alternates. Each checkout must be built; each side's load is its checkout's
// bench/wrk.lua (compare checkouts whose load is the same).
//
//   node bench/micro/ab.mjs --a CHECKOUT --b CHECKOUT [--stream] [--rounds N] [--seconds S] [--warm S]
// (not a test: a guide, like the rest of bench/micro; quote the bench's recorded runs)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { argReader, gatewaySetup, processes, waitUp, wrk } from './under-load.mjs';

const args = process.argv.slice(2);
const { opt, flag } = argReader(args);
const roots = { A: path.resolve(opt('--a', '.')), B: path.resolve(opt('--b', '.')) };
const stream = flag('--stream');
const rounds = Number(opt('--rounds', '10'));
const seconds = Number(opt('--seconds', '6'));
const warm = Number(opt('--warm', '3'));

/** User and system CPU of a process so far, in µs (/proc: clock ticks). */
function cpuOf(pid) {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return (ticks * 1e6) / 100;
}

const sides = {};
const all = [];
try {
  for (const [name, root] of Object.entries(roots)) {
    const s = await gatewaySetup(root, `ab-${name}`, undefined, stream);
    const procs = processes(s);
    all.push(procs);
    procs.mock();
    const pid = procs.gateway().pid;
    await waitUp(s);
    sides[name] = { s, pid, rows: [] };
  }
  for (let i = 0; i < 2; i++) for (const name of ['A', 'B']) wrk(sides[name].s, warm, 50);
  const ratios = { cpu: [], rps: [] };
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? ['A', 'B'] : ['B', 'A'];
    const got = {};
    for (const name of order) {
      const side = sides[name];
      const before = cpuOf(side.pid);
      const w = wrk(side.s, seconds, 50);
      const cpu = (cpuOf(side.pid) - before) / w.requests;
      got[name] = { cpu, rps: w.requests / seconds };
    }
    ratios.cpu.push(got.B.cpu / got.A.cpu);
    ratios.rps.push(got.B.rps / got.A.rps);
    console.log(
      `round ${r + 1} (load ${os.loadavg()[0].toFixed(2)}): A ${got.A.rps.toFixed(0)} req/s ${got.A.cpu.toFixed(1)} µs/req | ` +
        `B ${got.B.rps.toFixed(0)} req/s ${got.B.cpu.toFixed(1)} µs/req | B÷A CPU ${(got.B.cpu / got.A.cpu).toFixed(3)}`,
    );
  }
  const median = (xs) => {
    const v = [...xs].sort((x, y) => x - y);
    return v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
  };
  console.log(
    `${stream ? 'streaming' : 'non-streaming'}, ${rounds} rounds of ${seconds} s: B÷A CPU per request median ${median(ratios.cpu).toFixed(3)} ` +
      `(${Math.min(...ratios.cpu).toFixed(3)}–${Math.max(...ratios.cpu).toFixed(3)}), req/s median ${median(ratios.rps).toFixed(3)}`,
  );
} finally {
  for (const p of all) await p.stopAll();
}
