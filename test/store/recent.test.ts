import t from 'tap';
import { RecentIds } from '../../core/store/recent.js';

// The settled-id memory of both stores: bounded by count (and age), constant work per insert.

t.test('keeps at least the last max / 2 ids and never more than max', async (t) => {
  const r = new RecentIds(1_000);
  for (let i = 0; i < 10_000; i++) {
    r.add(`id${i}`);
    if (r.size > 1_000) t.fail(`bounded: size ${r.size} after ${i + 1} ids`);
  }
  t.equal(r.size, 1_000, 'full, and never more than max');
  let kept = 0;
  for (let i = 10_000 - 500; i < 10_000; i++) if (r.has(`id${i}`)) kept++;
  t.equal(kept, 500, 'the last 500 are all remembered');
  t.notOk(r.has('id0'), 'the oldest are forgotten');
  t.notOk(r.has('id8000'), 'ids more than max inserts old are forgotten');
});

t.test('with an age bound: a generation older than it is retired, never one younger', async (t) => {
  const hour = 3_600_000;
  const r = new RecentIds(1_000_000, hour);
  r.add('a', 0);
  r.add('b', hour - 1);
  t.ok(r.has('a') && r.has('b'), 'both within the hour');
  r.add('c', hour); // starts a new generation: a and b become the previous one
  t.ok(r.has('a') && r.has('b') && r.has('c'), 'the previous generation is still held');
  r.add('d', 2 * hour); // and again: a, b are dropped
  t.notOk(r.has('a'), 'an id two generations old is forgotten');
  t.ok(r.has('c') && r.has('d'), 'the last hour is held');
});

t.test("the gateway's ids (a prefix and a 12-digit hex counter) are held as numbers, never confused with others", async (t) => {
  const r = new RecentIds(1_000);
  const own = (n: number) => `req_0123456789ab${n.toString(16).padStart(12, '0')}`;
  r.add(own(5));
  t.ok(r.has(own(5)), 'held');
  t.notOk(r.has(own(6)), 'a neighbour is not');
  // The same counter under another prefix, in another case, or with a different length: other ids.
  for (const other of [
    `req_fedcba987654${(5).toString(16).padStart(12, '0')}`,
    `req_0123456789a${(5).toString(16).padStart(12, '0')}`,
    `req_0123456789abc${(5).toString(16).padStart(12, '0')}`,
    own(5).toUpperCase(),
    '000000000005',
  ])
    t.notOk(r.has(other), `${other} is not ${own(5)}`);
  const mixed = ['r1', 'REQ_0123456789AB00000000000A', own(0xa), 'req_0123456789ab00000000000g', 'other-prefix-000000000005', own(2 ** 40)];
  for (const id of mixed) r.add(id);
  for (const id of mixed) t.ok(r.has(id), `${id} held`);
  t.notOk(r.has('req_0123456789ab00000000000G'), 'an uppercase hex digit is another id');
  t.equal(r.size, mixed.length + 1);

  // The bounds hold for counters as for strings, and both forms age together.
  const b = new RecentIds(1_000);
  for (let i = 0; i < 10_000; i++) {
    b.add(i % 2 ? own(i) : `id${i}`);
    if (b.size > 1_000) t.fail(`bounded: size ${b.size} after ${i + 1} ids`);
  }
  let kept = 0;
  for (let i = 10_000 - 500; i < 10_000; i++) if (b.has(i % 2 ? own(i) : `id${i}`)) kept++;
  t.equal(kept, 500, 'the last 500 of both forms are remembered');
  t.notOk(b.has(own(1)) || b.has('id0'), 'the oldest of both forms are forgotten');
});

t.test('the prefix is fixed by the first id of the shape, whichever call sees it', async (t) => {
  const r = new RecentIds(100);
  r.add('plain-id');
  t.notOk(r.has('pfx_000000000001'), 'a lookup may fix the prefix');
  r.add('pfx_000000000001');
  r.add('pfy_000000000001');
  t.ok(r.has('plain-id') && r.has('pfx_000000000001') && r.has('pfy_000000000001'));
  t.notOk(r.has('pfz_000000000001'));
});
