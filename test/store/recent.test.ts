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

t.test('ids of several prefixes (a restart replays the last process ids) are each held apart; past eight, as strings', async (t) => {
  const r = new RecentIds(100);
  r.add('plain-id');
  t.notOk(r.has('pfx_000000000001'), 'a lookup of an unknown prefix answers no');
  r.add('pfx_000000000001');
  r.add('pfy_000000000001');
  t.ok(r.has('plain-id') && r.has('pfx_000000000001') && r.has('pfy_000000000001'));
  t.notOk(r.has('pfz_000000000001'));
  // Eleven prefixes, the same counters under each: none confused with another, past the eighth too.
  const ids = Array.from({ length: 11 }, (_, i) =>
    Array.from({ length: 3 }, (_, n) => `p${i}_${(n + 7).toString(16).padStart(12, '0')}`),
  ).flat();
  const many = new RecentIds(1_000);
  for (const id of ids.filter((_, i) => i % 2 === 0)) many.add(id);
  for (const [i, id] of ids.entries()) t.equal(many.has(id), i % 2 === 0, `${id} ${i % 2 === 0 ? 'held' : 'not held'}`);
});

t.test('an id newer than every id held under its prefix is answered without a lookup, and rightly', async (t) => {
  const own = (n: number) => `req_0123456789ab${n.toString(16).padStart(12, '0')}`;
  const r = new RecentIds(10);
  r.add(own(10));
  t.notOk(r.has(own(11)), 'above the highest: not held');
  t.notOk(r.has(own(9)), 'below it, not added: not held');
  t.ok(r.has(own(10)));
  // Out of order, as settlements come: a lower id added later is found.
  r.add(own(3));
  t.ok(r.has(own(3)) && r.has(own(10)));
  // A counter that wrapped (2^48 ids later) is below the highest: looked up, and found.
  r.add(own(2 ** 48 - 1));
  r.add(own(0));
  t.ok(r.has(own(0)) && r.has(own(2 ** 48 - 1)));
  // The highest stays when its generation is dropped: ids past it are still not held, ids below are looked up.
  for (let i = 100; i < 130; i++) r.add(own(i));
  t.notOk(r.has(own(10)), 'forgotten with its generation');
  t.ok(r.has(own(129)));
});

t.test('against a plain string memory with the same generations: the same answers (seeded)', async (t) => {
  // The reference: the same two generations, every id as its string.
  class Reference {
    cur = new Set<string>();
    prev = new Set<string>();
    constructor(readonly max: number) {}
    has(id: string) {
      return this.cur.has(id) || this.prev.has(id);
    }
    add(id: string) {
      if (this.cur.size > 0 && this.cur.size >= this.max / 2) {
        this.prev = this.cur;
        this.cur = new Set();
      }
      this.cur.add(id);
    }
  }
  let seed = 29;
  const rand = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const prefixes = Array.from({ length: 10 }, (_, i) => `req_${i.toString(16).padStart(12, 'a')}`);
  const id = () => {
    const k = rand(10);
    if (k === 0) return `plain-${rand(300)}`;
    if (k === 1) return `REQ_AAAAAAAAAAAA${rand(300).toString(16).padStart(12, '0')}`; // not lowercase hex: a string
    return prefixes[rand(k < 6 ? 2 : 10)] + rand(400).toString(16).padStart(12, '0');
  };
  let differ = 0;
  for (const max of [20, 200, 2_000]) {
    const a = new RecentIds(max);
    const b = new Reference(max);
    for (let i = 0; i < 40_000; i++) {
      const x = id();
      if (rand(2) === 0) {
        a.add(x);
        b.add(x);
      } else if (a.has(x) !== b.has(x)) differ++;
      if (a.size !== b.cur.size + b.prev.size) differ++;
    }
  }
  t.equal(differ, 0, '120,000 operations, no answer and no size differs');
});
