// What V8's optimizing compiler does in a gateway under rounds of load: per wrk round, the functions
// TurboFan finished, the milliseconds its jobs took (on the gateway's own core: the whole process is
// pinned, the compiler's thread included), the deoptimizations, and where the code deoptimized.
// A profile's window that still holds compile work measures warm-up, not the request path; a deopt
// that comes back every few rounds is work the bench pays again and again.
//
//   node bench/micro/jit-over-time.mjs [--root CHECKOUT] [--stream] [--rounds N] [--seconds S] [--rest S]
//        [--verbose]                 (CHECKOUT built; default .; --verbose: V8's full deopt trace in the log)
// Each round is a new wrk process, as in the bench; `--rest` leaves the gateway idle between rounds
// (the bench's other side runs then). The V8 trace is kept in a temporary file (printed).
// (not a test: a guide, like the rest of bench/micro)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { argReader, gatewaySetup, processes, waitUp, wrk } from './under-load.mjs';

const args = process.argv.slice(2);
const { opt, flag } = argReader(args);
const root = path.resolve(opt('--root', '.'));
const rounds = Number(opt('--rounds', '10'));
const seconds = Number(opt('--seconds', '5'));
const rest = Number(opt('--rest', '0'));
const stream = flag('--stream');
const verbose = flag('--verbose');

const s = await gatewaySetup(root, 'jit-over-time', undefined, stream);
const procs = processes(s);
const trace = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'jit-trace-')), 'v8.log');
try {
  procs.mock();
  // V8 writes its traces to stdout.
  procs.gateway(['--trace-opt', verbose ? '--trace-deopt-verbose' : '--trace-deopt'], process.env, fs.openSync(trace, 'w'));
  await waitUp(s);
  let read = 0;
  for (let i = 0; i < rounds; i++) {
    const r = wrk(s, seconds, 50);
    const text = fs.readFileSync(trace, 'utf8').slice(read);
    read += text.length;
    const optimized = (text.match(/\[completed optimizing/g) ?? []).length;
    // "took A, B, C ms": graph building, optimization, code generation of one job.
    const ms = [...text.matchAll(/took ([\d.]+), ([\d.]+), ([\d.]+) ms/g)].reduce(
      (a, m) => a + Number(m[1]) + Number(m[2]) + Number(m[3]),
      0,
    );
    const deopts = (text.match(/\[bailout \(kind/g) ?? []).length;
    const where = [...new Set([...text.matchAll(/deoptimizing [^<]*<JSFunction ([^ (]*) ?\(sfi/g)].map((m) => m[1] || '(anonymous)'))];
    console.log(
      `round ${i + 1}: ${r.requests} requests, ${optimized} optimized in ${ms.toFixed(0)} ms, ${deopts} deopts` +
        (where.length ? ` (${where.slice(0, 8).join(', ')}${where.length > 8 ? ', …' : ''})` : ''),
    );
    if (rest) await sleep(rest * 1000);
  }
  console.log(`V8 trace: ${trace}`);
} finally {
  await procs.stopAll();
}
