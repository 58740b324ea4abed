// Instructions per operation of a micro-benchmark, counted by valgrind's callgrind: exact whatever
// the machine's load. The script runs twice, with MICRO_N=N and MICRO_N=3N (it warms up the same
// way both times, then does MICRO_N operations and exits); the difference of the two totals over
// 2N is the cost of one operation, start-up, warm-up and compilation cancelling out.
//   node bench/micro/count.mjs [--n N] SCRIPT [ARGS…]
//   node bench/micro/count.mjs bench/micro/memory-store.mjs ../other     # a checkout's store, per request
//   MICRO_LEDGER=1 node bench/micro/count.mjs bench/micro/memory-store.mjs .  # with the ledger's day files
// (not a test; a guide for per-request work, as bench/instructions.ts is for the whole server)
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const args = process.argv.slice(2);
let n = 20000;
if (args[0] === '--n') {
  n = Number(args[1]);
  args.splice(0, 2);
}
if (!args[0] || !(n > 0)) {
  console.error('usage: node bench/micro/count.mjs [--n N] SCRIPT [ARGS…]');
  process.exit(2);
}
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'micro-count-'));
const total = (ops) => {
  const out = path.join(dir, `cg-${ops}.out`);
  execFileSync('valgrind', ['--tool=callgrind', `--callgrind-out-file=${out}`, process.execPath, ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, MICRO_N: String(ops) },
  });
  const m = /^(?:summary|totals):\s*(\d+)/m.exec(fs.readFileSync(out, 'utf8'));
  if (!m) throw new Error(`no totals in ${out}`);
  return Number(m[1]);
};
const a = total(n);
const b = total(3 * n);
console.log(
  `${args.join(' ')}: ${Math.round((b - a) / (2 * n)).toLocaleString('en')} instructions per operation (${n} and ${3 * n} operations)`,
);
fs.rmSync(dir, { recursive: true, force: true });
