// The settled-ids structure in isolation (issue 29): the Map used as a FIFO that the memory store
// kept until the soak found it (insert, then delete the oldest once `CAP` are held) against
// core/store/recent.ts's two generations of sets, fed the same ids at the same rate of inserts.
// Prints the mean µs per insert over each window of WINDOW inserts: the FIFO's cost jumps once the
// cap is reached and swings as V8 rehashes the table; RecentIds stays flat.
//
//   node bench/micro/recent-ids.mjs [built checkout, default .]
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const root = path.resolve(process.argv[2] ?? '.');
const { RecentIds } = await import(pathToFileURL(path.join(root, 'dist/core/store/recent.js')).href);

const CAP = 200_000; // the memory store's cap before issue 29
const TOTAL = 1_000_000;
const WINDOW = 100_000;

function mapFifo() {
  const m = new Map();
  return (id) => {
    m.set(id, 1);
    if (m.size > CAP) {
      for (const k of m.keys()) {
        m.delete(k);
        break;
      }
    }
  };
}

function recent() {
  const r = new RecentIds(2 * CAP);
  return (id) => {
    if (!r.has(id)) r.add(id, 0);
  };
}

function run(name, insert) {
  const ids = Array.from({ length: TOTAL }, (_, i) => `req_${(0x1000000 + i).toString(16)}00000000000000`);
  const out = [];
  for (let w = 0; w < TOTAL; w += WINDOW) {
    const t0 = process.hrtime.bigint();
    for (let i = w; i < w + WINDOW; i++) insert(ids[i]);
    out.push((Number(process.hrtime.bigint() - t0) / 1000 / WINDOW).toFixed(2));
  }
  console.log(`${name.padEnd(22)} µs per insert, each ${WINDOW.toLocaleString('en')}: ${out.join(' ')}`);
}

run('Map as FIFO (cap 200k)', mapFifo());
run('RecentIds (400k)', recent());
