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
