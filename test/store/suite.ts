/**
 * The behavioural suite of the `Store` interface (core/store/types.ts), run against every store:
 * memory (memory.test.ts), a single Redis (redis.test.ts) and a Redis Cluster
 * (redis-cluster.test.ts). A store passes when it behaves exactly like this, so the stores cannot
 * drift apart. Store-specific matters (the memory store's files, Redis faults) are tested apart.
 */
import type { Test } from 'tap';
import { ManualClock } from '../../core/clock.js';
import type {
  AdmitResult,
  AuditInput,
  Claim,
  KeyRecord,
  Settlement,
  SlotRequest,
  SlotResult,
  Store,
  UserRecord,
} from '../../core/store/types.js';
import type { Window } from '../../core/config/types.js';
import type { LedgerRecord } from '../../core/ledger/record.js';

export interface StoreFactory {
  name: string;
  /** A fresh, empty store whose periods follow `clock`. */
  open(clock: ManualClock): Promise<Store>;
  /**
   * Makes `store` die the way a killed process does (admissions in flight, nothing said), and
   * returns a live store over the same state once it has resolved the dead one's admissions.
   * Undefined: not wired for this store yet (the case is reported as todo, never passed).
   */
  die?: (store: Store, clock: ManualClock) => Promise<Store>;
  /**
   * Every ledger record (core/ledger) the store has made so far, as its reader gets them: the
   * memory store's day files; a shared store's records taken (takeLedger) and acknowledged,
   * added to what was taken before from the same keys. Undefined: the case is todo.
   */
  ledger?: (store: Store) => Promise<LedgerRecord[]>;
  /** Lets other work run: a store answering over the network needs real time between steps. */
  tick(): Promise<void>;
}

const HOUR = 3_600_000;
const DAY = 86_400_000;
/** Monday 2026-01-05 12:00:00 UTC */
export const T0 = Date.UTC(2026, 0, 5, 12, 0, 0);

export function settlement(over: Partial<Settlement> = {}): Settlement {
  return {
    keyId: 'k1',
    user: 'u1',
    group: 'g1',
    model: 'm1',
    billing: 'balance',
    usage: { input: 10, output: 5, cacheRead: 2, cacheWrite: 1 },
    cost: 100,
    actual: 100,
    durationMs: 50,
    windows: [],
    ...over,
  };
}

export const quota = (limit: number, key = 'k1'): Claim => ({ kind: 'key-quota', key, limit });
export const win = (window: Window, limit: number, key = 'k1'): Claim => ({ kind: 'key-window', key, window, limit });
export const rpm = (limit: number, id = 'u1', scope: 'user' | 'group' | 'account' = 'user'): Claim => ({ kind: 'rpm', scope, id, limit });
export const cap = (period: 'weekly' | 'monthly', limit: number, user = 'u1'): Claim => ({ kind: 'spend-cap', user, period, limit });
export const plan = (daily: number, weekly: number, monthly: number): Claim => ({
  kind: 'plan',
  user: 'u1',
  group: 'g1',
  limits: { daily, weekly, monthly },
});
export const balance = (credit: number, free = false, freeRpm = 0): Claim => ({ kind: 'balance', user: 'u1', credit, free, freeRpm });

/** Deterministic PRNG (mulberry32). */
function rng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let x = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

/** Waits until `cond` holds (the store answers asynchronously); fails the test after `ms`. */
export async function eventually(t: Test, cond: () => boolean | Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) {
      t.fail(`timed out waiting: ${what}`);
      return;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
}

export interface RaceOptions {
  /** The store's name (request ids) and how it lets other work run (StoreFactory). */
  name: string;
  tick: () => Promise<void>;
  n: number;
  limit: number;
  reserve: number;
  claims: Claim[];
  billing: 'balance' | 'plan';
  windows?: Window[];
  /** Actual charge of request i. */
  actual: (i: number) => number;
  /** Requests cancelled instead of settled. */
  cancels?: (i: number) => boolean;
  /** Admit everything before anything settles. */
  burst?: boolean;
  seed: number;
}

/**
 * Runs n concurrent requests (admit → settle twice at once / cancel) with random interleaving and
 * returns what the test needs to check the bound on spend. A store admits while used + reserved <
 * limit, so after the last admission x it applies, used ends at most at
 *   limit − 1 + actual(x) + Σ overrun(j) over the requests j in flight when x was applied
 * (each in-flight j held its reserve; what it settled above it is its overrun).
 *
 * The test sees when each call began and when its answer arrived, not when the store applied it:
 * a Redis Cluster applies an admission in its claims' slot and answers only once the instance
 * index, written in another slot, has answered too, so a settlement applied after an admission
 * can be answered before it. So `bound` takes the store's order only as far as the calls pin it
 * down: x may have been applied anywhere between its call and its answer, and is a possible last
 * admission unless another admission was called after x's answer; j may have been in flight then
 * if its admission was called before x's answer and its settlement answered after x's call. The
 * bound is the largest over the possible x. `answerOrderBound` is the same bound taken at the
 * admission answered last, with the requests whose answers say they were in flight then: right
 * only for a store that answers in the order it applies (test/store/race-oracle.test.ts).
 */
export async function race(store: Store, o: RaceOptions) {
  const random = rng(o.seed);
  const ticks = async (n: number) => {
    for (let i = 0; i < n; i++) await o.tick();
  };
  // Interleaved: arrivals spread out, so settlements land between admissions.
  const delays = Array.from({ length: o.n }, (_, i) => [Math.floor(random() * 4) + Math.floor(i / 8), Math.floor(random() * 6)]);
  // Events numbered in the order the test sees them: each request's admission called and
  // answered, its settlement (or cancel) answered.
  let seq = 0;
  const calls: { admitCall: number; admitDone: number; finishDone: number }[] = [];
  const inFlight = new Set<number>();
  let admitted = 0;
  let settledSum = 0;
  let answerOrderBound = 0;
  const charge = (i: number) => (o.cancels?.(i) ? 0 : o.actual(i));
  const overrun = (i: number) => Math.max(0, charge(i) - o.reserve);
  const finish = async (i: number, id: string) => {
    if (o.cancels?.(i)) {
      await store.cancel(id);
    } else {
      const s = settlement({ actual: o.actual(i), billing: o.billing, windows: o.windows ?? [] });
      await Promise.all([store.settle(id, s), store.settle(id, s)]);
      settledSum += o.actual(i);
    }
    calls[i].finishDone = ++seq;
    inFlight.delete(i);
  };
  const admitOne = async (i: number) => {
    const id = `race-${o.name}-${o.seed}-${i}`;
    const admitCall = ++seq;
    const r = await store.admit({ requestId: id, reserve: o.reserve, claims: o.claims });
    if (!r.ok) return undefined;
    calls[i] = { admitCall, admitDone: ++seq, finishDone: Infinity };
    admitted++;
    let inflightOverrun = 0;
    for (const j of inFlight) inflightOverrun += overrun(j);
    answerOrderBound = o.limit - 1 + charge(i) + inflightOverrun;
    inFlight.add(i);
    return id;
  };
  if (o.burst) {
    const ids = await Promise.all(Array.from({ length: o.n }, (_, i) => admitOne(i)));
    await Promise.all(ids.map((id, i) => (id ? finish(i, id) : Promise.resolve())));
  } else {
    await Promise.all(
      Array.from({ length: o.n }, async (_, i) => {
        await ticks(delays[i][0]);
        const id = await admitOne(i);
        if (!id) return;
        await ticks(delays[i][1]);
        await finish(i, id);
      }),
    );
  }
  const done = [...calls.keys()].filter((i) => calls[i]);
  const lastCall = Math.max(...done.map((i) => calls[i].admitCall));
  let bound = 0;
  for (const x of done) {
    const cx = calls[x];
    if (cx.admitDone < lastCall) continue; // an admission called after x's answer came after x
    let b = o.limit - 1 + charge(x);
    for (const j of done) {
      const cj = calls[j];
      if (j !== x && cj.admitCall < cx.admitDone && cj.finishDone > cx.admitCall) b += overrun(j);
    }
    bound = Math.max(bound, b);
  }
  return { admitted, settledSum, bound, answerOrderBound };
}

export function storeSuite(tap: Test, f: StoreFactory): void {
  let nextId = 0;
  const rid = () => `${f.name}-req-${++nextId}`;
  const lastId = () => `${f.name}-req-${nextId}`;
  const ticks = async (n: number) => {
    for (let i = 0; i < n; i++) await f.tick();
  };

  const open = async (clock = new ManualClock(T0)) => ({ store: await f.open(clock), clock });

  /** Admits one request; returns its id alongside the result. */
  async function admit(store: Store, reserve: number, ...claims: Claim[]): Promise<AdmitResult & { id: string }> {
    const id = rid();
    return { id, ...(await store.admit({ requestId: id, reserve, claims })) };
  }

  /** Charges `actual` without a prior admission. */
  async function charge(store: Store, actual: number, over: Partial<Settlement> = {}) {
    await store.settle(rid(), settlement({ actual, ...over }));
  }

  const test = (name: string, fn: (t: Test) => Promise<void>) => tap.test(`${f.name}: ${name}`, fn);

  // ---- claims ----------------------------------------------------------------------------------

  test('balance: priced requests need available > 0, reservations count', async (t) => {
    const { store } = await open();
    const a = await admit(store, 600, balance(1000));
    t.ok(a.ok);
    const b = await admit(store, 600, balance(1000)); // available 400
    t.ok(b.ok);
    t.same(
      await admit(store, 1, balance(1000)),
      { ok: false, index: 0, held: true, id: lastId() },
      'available -200, but only because of reservations: held',
    );
    await store.settle(a.id, settlement({ actual: 500 }));
    t.equal(await store.balanceSpent('u1'), 500);
    t.notOk((await admit(store, 1, balance(1000))).ok, 'spent 500 + reserved 600');
    await store.cancel(b.id);
    t.ok((await admit(store, 0, balance(1000))).ok, 'cancel released the reservation');
    await charge(store, 500);
    const r = await admit(store, 0, balance(1000));
    t.same([r.ok, (r as { retryAfterMs?: number }).retryAfterMs], [false, undefined], 'available exactly 0 fails, no retry-after');
    await store.close();
  });

  test('balance: free models at zero balance fall under freeRpm', async (t) => {
    const { store, clock } = await open();
    clock.set(T0 + 15_000);
    t.ok((await admit(store, 0, balance(0, true, 2))).ok);
    const second = await admit(store, 0, balance(0, true, 2));
    t.ok(second.ok);
    t.same(await admit(store, 0, balance(0, true, 2)), { id: lastId(), ok: false, index: 0, retryAfterMs: 45_000 });
    await store.cancel(second.id);
    t.ok((await admit(store, 0, balance(0, true, 2))).ok, 'cancel in the same minute gives the call back');
    t.notOk((await admit(store, 0, balance(0, true, 2))).ok);
    clock.set(T0 + 60_000);
    t.ok((await admit(store, 0, balance(0, true, 2))).ok, 'next clock minute');
    t.notOk((await admit(store, 0, balance(0, false, 2))).ok, 'priced at zero balance fails');

    for (let i = 0; i < 20; i++) t.ok((await admit(store, 0, balance(0, true, 0))).ok, 'freeRpm 0 = unlimited');
    await store.close();
    // With money left, free calls are not counted against freeRpm.
    const { store: s2 } = await open();
    for (let i = 0; i < 5; i++) t.ok((await admit(s2, 0, balance(1000, true, 1))).ok);
    t.ok((await admit(s2, 0, balance(0, true, 1))).ok, 'first free call at zero balance still available');
    await s2.close();
  });

  test('key-quota: used + reserved < limit', async (t) => {
    const { store } = await open();
    const a = await admit(store, 50, quota(100));
    const b = await admit(store, 50, quota(100));
    t.ok(a.ok && b.ok);
    t.same(
      await admit(store, 0, quota(100)),
      { id: lastId(), ok: false, index: 0, held: true },
      'reserved 100 = limit: held, not exhausted',
    );
    t.same((await store.keyState('k1')).reserved, 100);
    await store.settle(a.id, settlement({ actual: 49 }));
    await store.settle(b.id, settlement({ actual: 50 }));
    t.same(await store.keyState('k1'), {
      used: 99,
      reserved: 0,
      windows: { '5h': { used: 0, reserved: 0 }, '1d': { used: 0, reserved: 0 }, '7d': { used: 0, reserved: 0 } },
    });
    t.ok((await admit(store, 0, quota(100))).ok, 'used 99 < 100');
    await charge(store, 1);
    t.notOk((await admit(store, 0, quota(100))).ok, 'used 100');
    t.ok((await admit(store, 0, quota(100, 'k2'))).ok, 'other key unaffected');
    await store.resetKeyQuota('k1');
    t.ok((await admit(store, 0, quota(100))).ok, 'reset');
    t.equal((await store.keyState('k1')).used, 0);
    await store.close();
  });

  test('key-window: starts at first use, resets exactly at start + duration', async (t) => {
    const { store, clock } = await open();
    t.same((await store.keyState('k1')).windows['5h'], { used: 0, reserved: 0 }, 'unused window has no start');
    const a = await admit(store, 10, win('5h', 100));
    t.ok(a.ok);
    t.same((await store.keyState('k1')).windows['5h'], { start: T0, used: 0, reserved: 10 }, 'started by the admission');
    clock.advance(HOUR);
    await store.settle(a.id, settlement({ actual: 100, windows: ['5h'] }));
    t.same((await store.keyState('k1')).windows['5h'], { start: T0, used: 100, reserved: 0 });
    clock.set(T0 + 5 * HOUR - 1);
    t.same(await admit(store, 1, win('5h', 100)), { id: lastId(), ok: false, index: 0 }, 'one ms before the reset');
    clock.set(T0 + 5 * HOUR);
    t.same((await store.keyState('k1')).windows['5h'], { used: 0, reserved: 0 }, 'expired window reads as unused');
    t.ok((await admit(store, 1, win('5h', 100))).ok, 'exactly at start + duration');
    t.equal((await store.keyState('k1')).windows['5h'].start, T0 + 5 * HOUR, 'restarted at now');

    // The 1d window is independent, and a settlement starts a window that was never started.
    t.same((await store.keyState('k1')).windows['1d'], { used: 0, reserved: 0 });
    await charge(store, 7, { windows: ['1d'] });
    t.same((await store.keyState('k1')).windows['1d'], { start: T0 + 5 * HOUR, used: 7, reserved: 0 });
    t.equal((await store.keyState('k1')).used, 107, 'the key quota counts every settlement');
    await store.close();
  });

  test('key-window: in-flight reservation survives a reset and settles into the new window', async (t) => {
    const { store, clock } = await open();
    const a = await admit(store, 80, win('5h', 100));
    t.ok(a.ok);
    clock.advance(5 * HOUR + 1000);
    t.same((await store.keyState('k1')).windows['5h'], { used: 0, reserved: 80 }, 'reserved kept across the reset');
    const b = await admit(store, 30, win('5h', 100)); // 0 + 80 < 100
    t.ok(b.ok);
    t.notOk((await admit(store, 1, win('5h', 100))).ok, '80 + 30 reserved');
    await store.settle(a.id, settlement({ actual: 70, windows: ['5h'] }));
    t.same((await store.keyState('k1')).windows['5h'], { start: T0 + 5 * HOUR + 1000, used: 70, reserved: 30 });
    await store.cancel(b.id);
    t.same((await store.keyState('k1')).windows['5h'], { start: T0 + 5 * HOUR + 1000, used: 70, reserved: 0 });
    // 7d window
    const c = await admit(store, 5, win('7d', 10));
    clock.advance(7 * DAY);
    t.same((await store.keyState('k1')).windows['7d'], { used: 0, reserved: 5 });
    await store.settle(c.id, settlement({ actual: 5, windows: ['7d'] }));
    t.same((await store.keyState('k1')).windows['7d'], { start: clock.now(), used: 5, reserved: 0 });
    await store.close();
  });

  test('plan: daily / weekly / monthly limits at their UTC boundaries', async (t) => {
    const { store, clock } = await open();
    const planCharge = (n: number) => charge(store, n, { billing: 'plan' });

    // daily
    await planCharge(99);
    t.ok((await admit(store, 0, plan(100, 0, 0))).ok, 'daily used 99');
    const r = await admit(store, 1, plan(100, 0, 0));
    t.ok(r.ok, 'reserve 1 on top of 99');
    t.same(await admit(store, 0, plan(100, 0, 0)), { id: lastId(), ok: false, index: 0, held: true }, '99 + 1 reserved: held');
    await store.settle(r.id, settlement({ billing: 'plan', actual: 1 }));
    t.same(await store.planUsage('u1', 'g1'), { daily: 100, weekly: 100, monthly: 100 });
    clock.set(Date.UTC(2026, 0, 5, 23, 59, 59, 999));
    t.notOk((await admit(store, 0, plan(100, 0, 0))).ok, 'last ms of the day');
    clock.set(Date.UTC(2026, 0, 6));
    t.ok((await admit(store, 0, plan(100, 0, 0))).ok, 'new UTC day');
    t.same(await store.planUsage('u1', 'g1'), { daily: 0, weekly: 100, monthly: 100 });

    // weekly: Monday 00:00 UTC (2026-01-12)
    await planCharge(150);
    t.notOk((await admit(store, 0, plan(0, 250, 0))).ok, 'weekly used 250');
    t.ok((await admit(store, 0, plan(0, 251, 0))).ok);
    clock.set(Date.UTC(2026, 0, 11, 23, 59, 59, 999));
    t.notOk((await admit(store, 0, plan(0, 250, 0))).ok, 'Sunday still the same ISO week');
    clock.set(Date.UTC(2026, 0, 12));
    t.ok((await admit(store, 0, plan(0, 250, 0))).ok, 'Monday resets the week');
    t.same(await store.planUsage('u1', 'g1'), { daily: 0, weekly: 0, monthly: 250 });

    // monthly: 2026-02-01
    t.notOk((await admit(store, 0, plan(0, 0, 250))).ok, 'monthly used 250');
    clock.set(Date.UTC(2026, 0, 31, 23, 59, 59, 999));
    t.notOk((await admit(store, 0, plan(0, 0, 250))).ok);
    clock.set(Date.UTC(2026, 1, 1));
    t.ok((await admit(store, 0, plan(1, 1, 1))).ok, 'the 1st resets the month');
    t.same(await store.planUsage('u1', 'g1'), { daily: 0, weekly: 0, monthly: 0 });

    // plan usage is per (user, group); balance billing does not count
    await charge(store, 5, { billing: 'balance' });
    t.same(await store.planUsage('u1', 'g1'), { daily: 0, weekly: 0, monthly: 0 });
    await charge(store, 5, { billing: 'plan', group: 'g2' });
    t.same(await store.planUsage('u1', 'g2'), { daily: 5, weekly: 5, monthly: 5 });
    t.same(await store.planUsage('u1', 'g1'), { daily: 0, weekly: 0, monthly: 0 });

    // leap day and year end: the calendar is UTC's
    clock.set(Date.UTC(2028, 1, 29, 12));
    await planCharge(3);
    t.same(await store.planUsage('u1', 'g1'), { daily: 3, weekly: 3, monthly: 3 }, '2028-02-29');
    clock.set(Date.UTC(2028, 2, 1));
    t.same(await store.planUsage('u1', 'g1'), { daily: 0, weekly: 3, monthly: 0 }, 'March 1st, same ISO week');
    clock.set(Date.UTC(2026, 11, 31, 12));
    await planCharge(4);
    clock.set(Date.UTC(2027, 0, 1));
    t.same(await store.planUsage('u1', 'g1'), { daily: 0, weekly: 4, monthly: 0 }, 'New Year inside an ISO week');
    await store.close();
  });

  test('spend-cap: week from Monday, month from the 1st, retry-after until the reset', async (t) => {
    const clock = new ManualClock(Date.UTC(2026, 0, 11, 23, 0, 0)); // Sunday 23:00
    const { store } = await open(clock);
    await charge(store, 99);
    t.ok((await admit(store, 0, cap('weekly', 100))).ok, 'used 99');
    await charge(store, 1);
    t.same(await admit(store, 0, cap('weekly', 100)), { id: lastId(), ok: false, index: 0, retryAfterMs: HOUR });
    await charge(store, 50, { billing: 'plan' });
    t.same(await store.spendCapUsage('u1'), { weekly: 100, monthly: 100 }, 'plan billing does not count');
    clock.set(Date.UTC(2026, 0, 12));
    t.ok((await admit(store, 0, cap('weekly', 100))).ok, 'Monday 00:00 UTC');
    t.same(await store.spendCapUsage('u1'), { weekly: 0, monthly: 100 });

    clock.set(Date.UTC(2026, 0, 31, 12));
    const r = await admit(store, 0, cap('monthly', 100));
    t.same(r, { id: r.id, ok: false, index: 0, retryAfterMs: 12 * HOUR }, 'until Feb 1st');
    const held = await admit(store, 60, cap('monthly', 200));
    t.ok(held.ok);
    t.notOk((await admit(store, 0, cap('monthly', 160))).ok, '100 used + 60 reserved');
    clock.set(Date.UTC(2026, 1, 1));
    t.ok((await admit(store, 0, cap('monthly', 100))).ok, 'Feb 1st: 0 used + 60 still reserved');
    t.notOk((await admit(store, 0, cap('monthly', 60))).ok, 'reservation survives the reset');
    await store.settle(held.id, settlement({ actual: 60 }));
    t.same(await store.spendCapUsage('u1'), { weekly: 60, monthly: 60 }, 'settled into the new month');
    clock.set(Date.UTC(2026, 11, 31, 12));
    t.same(await admit(store, 0, cap('monthly', 1)), { id: lastId(), ok: true }, 'December, nothing spent');
    await charge(store, 1);
    const dec = await admit(store, 0, cap('monthly', 1));
    t.same(dec, { id: dec.id, ok: false, index: 0, retryAfterMs: 12 * HOUR }, 'until January 1st of the next year');
    await store.close();
  });

  test('rpm: per clock minute, per scope', async (t) => {
    const { store, clock } = await open();
    clock.set(T0 + 10_000);
    for (let i = 0; i < 3; i++) t.ok((await admit(store, 0, rpm(3))).ok);
    t.same(await admit(store, 0, rpm(3)), { id: lastId(), ok: false, index: 0, retryAfterMs: 50_000 });
    t.ok((await admit(store, 0, rpm(3, 'u1', 'group'))).ok, 'group u1 is another counter');
    for (let i = 0; i < 3; i++) t.ok((await admit(store, 0, rpm(3, 'prov/u1', 'account'))).ok, 'so is an upstream account');
    t.notOk((await admit(store, 0, rpm(3, 'prov/u1', 'account'))).ok);
    clock.set(T0 + 59_999);
    t.same(await admit(store, 0, rpm(3)), { id: lastId(), ok: false, index: 0, retryAfterMs: 1 });
    clock.set(T0 + 60_000);
    const a = await admit(store, 0, rpm(3));
    t.ok(a.ok, 'next minute');
    await admit(store, 0, rpm(3));
    await admit(store, 0, rpm(3));
    t.notOk((await admit(store, 0, rpm(3))).ok);
    await store.cancel(a.id);
    t.ok((await admit(store, 0, rpm(3))).ok, 'cancel gives the count back within the minute');
    const b = await admit(store, 0, rpm(1, 'other'));
    clock.advance(60_000);
    t.ok((await admit(store, 0, rpm(1, 'other'))).ok);
    await store.cancel(b.id);
    t.notOk((await admit(store, 0, rpm(1, 'other'))).ok, 'a cancel from an earlier minute does not touch this one');
    const c = await admit(store, 0, rpm(10, 'kept'));
    await store.cancel(c.id, { keepCounts: true });
    for (let i = 0; i < 9; i++) t.ok((await admit(store, 0, rpm(10, 'kept'))).ok);
    t.notOk((await admit(store, 0, rpm(10, 'kept'))).ok, 'a cancel with keepCounts still counts the request');
    await store.close();
  });

  test('held: a claim refused only by reservations in flight is transient; exhaustion anywhere wins', async (t) => {
    const { store } = await open();
    await charge(store, 50);
    const a = await admit(store, 60, quota(100), win('1d', 1000), balance(1000), cap('weekly', 1000));
    t.ok(a.ok);
    t.same(await admit(store, 1, quota(100)), { id: lastId(), ok: false, index: 0, held: true }, 'quota: 50 used + 60 held');
    const w = await admit(store, 0, win('1d', 60));
    t.same(w, { id: w.id, ok: false, index: 0, held: true }, 'window: 0 used + 60 held');
    const c = await admit(store, 0, cap('weekly', 110));
    t.same(c, { id: c.id, ok: false, index: 0, held: true }, 'cap: 50 used + 60 held, no retry-after of a week');
    const b = await admit(store, 0, balance(110));
    t.same(b, { id: b.id, ok: false, index: 0, held: true }, 'wallet: 110 − 50 spent − 60 held');
    const x = await admit(store, 0, quota(100), quota(50, 'k1'));
    t.same(x, { id: x.id, ok: false, index: 1 }, 'a later claim that is exhausted outright wins over an earlier held one');
    const y = await admit(store, 0, balance(110), rpm(5), quota(50));
    t.same(y, { id: y.id, ok: false, index: 2 }, 'also when the claims live apart (user, key)');
    await store.settle(a.id, settlement({ actual: 10 }));
    t.ok((await admit(store, 0, quota(100))).ok, 'passes once the request in flight settled');
    await store.close();
  });

  test('claims are checked in order, the first failure wins, a failure applies nothing', async (t) => {
    const { store } = await open();
    await charge(store, 100);
    const claims = [rpm(5), win('5h', 1000), quota(100), balance(0), cap('weekly', 1, 'nobody')];
    t.same(await admit(store, 10, ...claims), { id: lastId(), ok: false, index: 2 });
    t.same(await admit(store, 10, rpm(5), win('5h', 1000), quota(1000), balance(0), rpm(0)), { id: lastId(), ok: false, index: 3 });
    const st = await store.keyState('k1');
    t.same(st.reserved, 0, 'nothing reserved');
    t.same(st.windows['5h'], { used: 0, reserved: 0 }, 'window not started by a rejected admission');
    for (let i = 0; i < 5; i++) t.ok((await admit(store, 0, rpm(5))).ok, 'no rpm counted by the rejected admissions');
    t.same(await admit(store, 0, rpm(100, 'x'), cap('weekly', 100), rpm(5)), {
      id: lastId(),
      ok: false,
      index: 1,
      retryAfterMs: 6.5 * DAY,
    });
    const ok = await admit(store, 7, quota(1000), win('1d', 1000), cap('monthly', 1000), plan(1000, 1000, 1000), balance(1000));
    t.ok(ok.ok, 'all pass');
    t.same((await store.keyState('k1')).reserved, 7);
    t.same((await store.keyState('k1')).windows['1d'], { start: T0, used: 0, reserved: 7 });
    await store.cancel(ok.id);
    await store.cancel(ok.id);
    t.same((await store.keyState('k1')).reserved, 0, 'cancel is idempotent');
    t.same((await store.keyState('k1')).windows['1d'].reserved, 0);
    t.ok(
      (await admit(store, 0, quota(1000), win('1d', 1000), cap('monthly', 1000), plan(1000, 1000, 1000), balance(1000))).ok,
      'the cancelled reservation no longer holds',
    );
    await store.close();
  });

  test('settle is idempotent and valid without an admission; bad amounts throw', async (t) => {
    const { store } = await open();
    const a = await admit(store, 300, quota(1000), balance(1000));
    await store.settle(a.id, settlement({ actual: 120 }));
    await store.settle(a.id, settlement({ actual: 120 }));
    await store.cancel(a.id);
    t.equal(await store.balanceSpent('u1'), 120);
    t.same(await store.keyState('k1'), {
      used: 120,
      reserved: 0,
      windows: { '5h': { used: 0, reserved: 0 }, '1d': { used: 0, reserved: 0 }, '7d': { used: 0, reserved: 0 } },
    });
    t.equal((await store.keyStats('k1', '2026-01-01', '2026-12-31')).total.requests, 1);
    await store.settle('never-admitted', settlement({ actual: 5 }));
    t.equal(await store.balanceSpent('u1'), 125);
    await Promise.all([store.settle('twice-at-once', settlement({ actual: 1 })), store.settle('twice-at-once', settlement({ actual: 1 }))]);
    t.equal(await store.balanceSpent('u1'), 126, 'two settlements of one id racing count once');
    await t.rejects(store.admit({ requestId: a.id, reserve: 1, claims: [] }), /already admitted/, 'a settled id cannot be admitted again');
    const b = await admit(store, 10, quota(1000));
    await t.rejects(
      store.admit({ requestId: b.id, reserve: 10, claims: [quota(1000)] }),
      /already admitted/,
      'a live id cannot be admitted again',
    );
    t.equal((await store.keyState('k1')).reserved, 10, 'the failed re-admission reserved nothing');
    await t.rejects(store.admit({ requestId: 'f', reserve: 1.5, claims: [] }), TypeError);
    await t.rejects(store.admit({ requestId: 'n', reserve: -1, claims: [] }), TypeError);
    await t.rejects(store.settle('f', settlement({ actual: 0.5 })), TypeError);
    await store.close();
    await store.close();
    await t.rejects(store.settle('late', settlement()), /closed/);
  });

  // ---- races -----------------------------------------------------------------------------------

  test('race: 200 requests against a key quota, a window, a plan limit, a balance', async (t) => {
    const R = 100;
    type Case = { name: string; claims: Claim[]; billing: 'balance' | 'plan'; windows?: Window[]; used: (s: Store) => Promise<number> };
    const L = 2_000;
    const cases: Case[] = [
      { name: 'key quota', claims: [quota(L)], billing: 'balance', used: async (s) => (await s.keyState('k1')).used },
      {
        name: '5h window',
        claims: [win('5h', L)],
        billing: 'balance',
        windows: ['5h'],
        used: async (s) => (await s.keyState('k1')).windows['5h'].used,
      },
      { name: 'plan daily', claims: [plan(L, 0, 0)], billing: 'plan', used: async (s) => (await s.planUsage('u1', 'g1')).daily },
      { name: 'balance', claims: [balance(L)], billing: 'balance', used: (s) => s.balanceSpent('u1') },
      { name: 'spend cap', claims: [cap('weekly', L)], billing: 'balance', used: async (s) => (await s.spendCapUsage('u1')).weekly },
    ];
    const profiles = [
      { name: 'A ≤ R', actual: (i: number) => 40 + ((i * 37) % 61), cancels: (i: number) => i % 9 === 4 },
      {
        name: 'some A > R',
        actual: (i: number) => (i % 5 === 0 ? 130 + (i % 3) * 10 : 60 + (i % 41)),
        cancels: (i: number) => i % 11 === 3,
      },
      { name: 'A = R', actual: () => R },
    ];
    let seed = 1;
    for (const c of cases) {
      for (const p of profiles) {
        for (const burst of [true, false]) {
          const { store } = await open();
          const res = await race(store, {
            name: f.name,
            tick: () => f.tick(),
            n: 200,
            limit: L,
            reserve: R,
            claims: c.claims,
            billing: c.billing,
            windows: c.windows,
            actual: p.actual,
            cancels: p.cancels,
            burst,
            seed: seed++,
          });
          const used = await c.used(store);
          const label = `${c.name}, ${p.name}, ${burst ? 'burst' : 'interleaved'}`;
          t.equal(used, res.settledSum, `${label}: recorded spend = sum of settled actuals (${used})`);
          t.equal((await store.keyState('k1')).used, res.settledSum, `${label}: key used = sum of actuals`);
          t.ok(
            used <= res.bound,
            `${label}: used ${used} ≤ limit - 1 + last request + overrun of the requests in flight at it (${res.bound})`,
          );
          if (p.name !== 'some A > R') t.ok(used < L + R, `${label}: used ${used} < limit + one request`);
          if (burst) t.equal(res.admitted, Math.ceil(L / R), `${label}: burst admits exactly ceil(L/R)`);
          else if (p.name === 'A ≤ R')
            t.ok(res.admitted > Math.ceil(L / R), `${label}: settlements interleaved with admissions (${res.admitted} admitted)`);
          const st = await store.keyState('k1');
          t.equal(st.reserved + st.windows['5h'].reserved, 0, `${label}: nothing left reserved`);
          await store.close();
        }
      }
    }
  });

  test('race: sequential admit/settle with overruns exceeds the limit by one request only', async (t) => {
    const { store } = await open();
    let admitted = 0;
    for (let i = 0; i < 200; i++) {
      const r = await admit(store, 100, quota(1000));
      if (!r.ok) continue;
      admitted++;
      await store.settle(r.id, settlement({ actual: 170 }));
    }
    const used = (await store.keyState('k1')).used;
    t.equal(admitted, 6);
    t.equal(used, 1020);
    t.ok(used < 1000 + 170);
    await store.close();
  });

  // ---- slots -----------------------------------------------------------------------------------

  function track(p: Promise<SlotResult>) {
    const box: { r?: SlotResult } = {};
    void p.then((r) => (box.r = r));
    return box;
  }
  const rel = (b: { r?: SlotResult }) => (b.r as { ok: true; release: () => void }).release;

  test('slots: C ok at once, Q wait FIFO, the rest queue_full; release hands over, idempotent', async (t) => {
    const { store } = await open();
    const C = 3;
    const Q = 4;
    const never = new AbortController();
    const req = { scope: 'user:u1', limit: C, queueSize: Q, maxWaitMs: 30_000, signal: never.signal };
    const boxes = Array.from({ length: 3 * (C + Q) }, () => track(store.acquireSlot(req)));
    await eventually(t, () => boxes.filter((b) => b.r).length === 3 * (C + Q) - Q, 'every call but the waiters answered');
    await ticks(5);
    const ok = boxes.filter((b) => b.r?.ok);
    const full = boxes.filter((b) => b.r && !b.r.ok && b.r.reason === 'queue_full');
    const waiting = boxes.filter((b) => !b.r);
    t.equal(ok.length, C);
    t.equal(waiting.length, Q);
    t.equal(full.length, 3 * (C + Q) - C - Q);
    t.same(
      boxes.slice(C, C + Q).map((b) => b.r),
      [undefined, undefined, undefined, undefined],
      'the next Q in call order wait',
    );

    rel(ok[0])();
    rel(ok[0])(); // idempotent: frees one slot only
    await eventually(t, () => boxes[C].r !== undefined, 'the first waiter is served');
    t.ok(boxes[C].r?.ok, 'first waiter got the slot');
    await ticks(5);
    t.equal(boxes[C + 1].r, undefined, 'second still waits');
    const other = track(store.acquireSlot({ ...req, scope: 'user:u2' }));
    await eventually(t, () => other.r !== undefined, 'another scope answers');
    t.ok(other.r?.ok, 'per scope');
    rel(other)();

    rel(ok[1])();
    rel(ok[2])();
    rel(boxes[C])();
    await eventually(t, () => [1, 2, 3].every((i) => boxes[C + i].r !== undefined), 'the rest of the queue is served');
    t.ok(boxes[C + 1].r?.ok && boxes[C + 2].r?.ok && boxes[C + 3].r?.ok, 'the rest of the queue in FIFO order');
    for (const i of [1, 2, 3]) rel(boxes[C + i])();
    // all released: C slots free again, none more
    await ticks(5);
    const again = [];
    for (let i = 0; i < C + 1; i++) again.push(await store.acquireSlot({ ...req, queueSize: 0 }));
    t.same(
      again.map((r) => r.ok),
      [true, true, true, false],
    );
    for (const r of again) if (r.ok) r.release();

    const unlimited = await store.acquireSlot({ ...req, limit: 0, queueSize: 0 });
    t.ok(unlimited.ok, 'limit 0 = unlimited');
    if (unlimited.ok) unlimited.release();
    await store.close();
  });

  test('slots: waiting past maxWaitMs times out and leaves the queue', async (t) => {
    const { store } = await open();
    const signal = new AbortController().signal;
    const held = await store.acquireSlot({ scope: 'user:u1', limit: 1, queueSize: 2, maxWaitMs: 20, signal });
    t.ok(held.ok);
    const results = await Promise.all([
      store.acquireSlot({ scope: 'user:u1', limit: 1, queueSize: 2, maxWaitMs: 20, signal }),
      store.acquireSlot({ scope: 'user:u1', limit: 1, queueSize: 2, maxWaitMs: 40, signal }),
    ]);
    t.same(results, [
      { ok: false, reason: 'timeout' },
      { ok: false, reason: 'timeout' },
    ]);
    const w = track(store.acquireSlot({ scope: 'user:u1', limit: 1, queueSize: 1, maxWaitMs: 30_000, signal }));
    await ticks(5);
    t.equal(w.r, undefined, 'the queue has room again');
    if (held.ok) held.release();
    await eventually(t, () => w.r !== undefined, 'the waiter is served on release');
    t.ok(w.r?.ok, 'waiter served on release');
    if (w.r?.ok) w.r.release();
    await store.close();
  });

  test('slots: abort removes the waiter at once; slot count stays right', async (t) => {
    const { store } = await open();
    const base = { scope: 'user:u1', limit: 2, queueSize: 1, maxWaitMs: 60_000 };
    const keep = new AbortController();
    const a = await store.acquireSlot({ ...base, signal: keep.signal });
    const b = await store.acquireSlot({ ...base, signal: keep.signal });
    const ac = new AbortController();
    const waiter = track(store.acquireSlot({ ...base, signal: ac.signal }));
    await ticks(5);
    t.equal(waiter.r, undefined);
    t.same(await store.acquireSlot({ ...base, signal: keep.signal }), { ok: false, reason: 'queue_full' });
    ac.abort();
    await f.tick();
    t.same(waiter.r, { ok: false, reason: 'aborted' }, 'aborted without waiting for a slot or the timer');
    const next = track(store.acquireSlot({ ...base, signal: keep.signal }));
    await ticks(5);
    t.equal(next.r, undefined, 'its queue place is free');
    if (a.ok) a.release();
    await eventually(t, () => next.r !== undefined, 'served on release');
    t.ok(next.r?.ok);
    if (b.ok) b.release();
    if (next.r?.ok) next.r.release();
    const aborted = new AbortController();
    aborted.abort();
    t.same(await store.acquireSlot({ ...base, signal: aborted.signal }), { ok: false, reason: 'aborted' }, 'already aborted');
    await ticks(5);
    const all = await Promise.all([
      store.acquireSlot({ ...base, signal: keep.signal }),
      store.acquireSlot({ ...base, signal: keep.signal }),
    ]);
    t.same(
      all.map((r) => r.ok),
      [true, true],
      'both slots free after everything was released',
    );
    for (const r of all) if (r.ok) r.release();
    await store.close();
  });

  // ---- a slot taken with the admission (AdmitRequest.slot) -------------------------------------

  /** Admits with a slot; the slot's outcome is tracked in `box` as it arrives. */
  async function admitSlot(
    store: Store,
    slot: Omit<SlotRequest, 'signal'> & { signal?: AbortSignal },
    reserve: number,
    ...claims: Claim[]
  ) {
    const id = rid();
    const r = await store.admit({ requestId: id, reserve, claims, slot: { signal: new AbortController().signal, ...slot } });
    const box: { r?: SlotResult } = {};
    if (r.ok) {
      if (!r.slot) throw new Error('admitted without the slot outcome');
      void Promise.resolve(r.slot).then((x) => (box.r = x));
    }
    return { id, r, box };
  }
  /** The slots of `scope` still free: how many a fresh caller gets at once (given back after). */
  async function freeSlots(store: Store, scope: string, limit: number): Promise<number> {
    const got: SlotResult[] = [];
    for (let i = 0; i <= limit; i++)
      got.push(await store.acquireSlot({ scope, limit, queueSize: 0, maxWaitMs: 0, signal: new AbortController().signal }));
    for (const g of got) if (g.ok) g.release();
    await ticks(5);
    return got.filter((g) => g.ok).length;
  }

  test('admission slot: taken after the claims, freed by the settlement or the cancel; release() after it frees nothing', async (t) => {
    const { store } = await open();
    const slot = { scope: 'user:u1', limit: 2, queueSize: 0, maxWaitMs: 30_000 };
    const a = await admitSlot(store, slot, 100, quota(10_000));
    const b = await admitSlot(store, slot, 100, quota(10_000));
    await eventually(t, () => a.box.r !== undefined && b.box.r !== undefined, 'both slots answered');
    t.same([a.r.ok, a.box.r?.ok, b.r.ok, b.box.r?.ok], [true, true, true, true], 'two admissions, two slots');
    const full = await admitSlot(store, slot, 100, quota(10_000));
    await eventually(t, () => full.box.r !== undefined, 'the third slot answered');
    t.same([full.r.ok, full.box.r], [true, { ok: false, reason: 'queue_full' }], 'no slot and no queue: admitted, the slot refused');
    t.equal((await store.keyState('k1')).reserved, 300, 'a refused slot leaves its admission to the caller');
    await store.cancel(full.id);
    t.equal(await freeSlots(store, 'user:u1', 2), 0, 'both slots held by their admissions');

    await store.settle(a.id, settlement({ actual: 50 }));
    await ticks(5);
    t.equal(await freeSlots(store, 'user:u1', 2), 1, 'the settlement freed its slot');
    rel(a.box)(); // after the settlement: a no-op
    rel(a.box)();
    const other = await store.acquireSlot({ ...slot, signal: new AbortController().signal });
    t.ok(other.ok, 'the slot the settlement freed');
    t.same(
      await store.acquireSlot({ ...slot, signal: new AbortController().signal }),
      { ok: false, reason: 'queue_full' },
      'release() after the settlement freed no other slot',
    );

    await store.cancel(b.id);
    await ticks(5);
    t.equal(await freeSlots(store, 'user:u1', 2), 1, 'the cancel freed its slot');
    rel(b.box)();
    if (other.ok) other.release();
    await ticks(5);
    t.equal(await freeSlots(store, 'user:u1', 2), 2, 'all free, none counted twice');
    t.same((await store.keyState('k1')).reserved, 0);
    await store.close();
  });

  test('admission slot: checked last — a refused claim takes no slot and no queue place', async (t) => {
    const { store } = await open();
    const keep = new AbortController();
    const holder = await store.acquireSlot({ scope: 'user:u1', limit: 1, queueSize: 1, maxWaitMs: 30_000, signal: keep.signal });
    t.ok(holder.ok);
    const slot = { scope: 'user:u1', limit: 1, queueSize: 1, maxWaitMs: 30_000 };
    t.ok((await admit(store, 0, rpm(1))).ok, 'the RPM of this minute used up');
    const refused = await admitSlot(store, slot, 100, quota(10_000), rpm(1));
    t.same(refused.r, { ok: false, index: 1, retryAfterMs: 60_000 }, 'refused by RPM (checked before concurrency), no slot outcome');
    const broke = await admitSlot(store, slot, 100, balance(0), quota(10_000));
    t.same(broke.r, { ok: false, index: 0 }, 'refused by the balance');
    t.equal((await store.keyState('k1')).reserved, 0, 'nothing reserved by the refused admissions');
    const waiter = track(store.acquireSlot({ ...slot, signal: keep.signal }));
    await ticks(5);
    t.equal(waiter.r, undefined, 'the one queue place is still free: the refused admissions did not queue');
    t.same(await store.acquireSlot({ ...slot, signal: keep.signal }), { ok: false, reason: 'queue_full' });
    if (holder.ok) holder.release();
    await eventually(t, () => waiter.r !== undefined, 'the waiter is served');
    t.ok(waiter.r?.ok);
    rel(waiter)();
    await store.close();
  });

  test('admission slot: queued FIFO with other waiters, max_wait, release() before the settlement, a cancel leaves the queue', async (t) => {
    const { store } = await open();
    const keep = new AbortController();
    const base = { scope: 'user:u1', limit: 1, queueSize: 3, maxWaitMs: 30_000 };
    const holder = await store.acquireSlot({ ...base, signal: keep.signal });
    t.ok(holder.ok);
    const a = await admitSlot(store, base, 100, quota(10_000));
    await ticks(5);
    const w = track(store.acquireSlot({ ...base, signal: keep.signal }));
    await ticks(5);
    const late = await admitSlot(store, { ...base, maxWaitMs: 20 }, 100, quota(10_000));
    await eventually(t, () => late.box.r !== undefined, 'the short wait ends');
    t.same(late.box.r, { ok: false, reason: 'timeout' }, 'waited past maxWaitMs');
    t.same([a.box.r, w.r], [undefined, undefined], 'the others still wait');
    t.equal((await store.keyState('k1')).reserved, 200, 'a timed-out slot leaves its admission to the caller');
    await store.cancel(late.id);

    if (holder.ok) holder.release();
    await eventually(t, () => a.box.r !== undefined, 'the first in the queue is served');
    t.ok(a.box.r?.ok, 'FIFO: the admission queued first gets the slot');
    await ticks(5);
    t.equal(w.r, undefined, 'the next still waits');
    rel(a.box)(); // before its settlement: frees the slot at once
    await eventually(t, () => w.r !== undefined, 'release() hands the slot over at once');
    t.ok(w.r?.ok);
    await store.settle(a.id, settlement());
    await ticks(5);
    t.same(
      await store.acquireSlot({ ...base, queueSize: 0, signal: keep.signal }),
      { ok: false, reason: 'queue_full' },
      'the settlement after release() frees nothing more',
    );

    // Queued, then cancelled: it leaves the queue, and its wait ends.
    const q = await admitSlot(store, { ...base, queueSize: 1 }, 100, quota(10_000));
    await ticks(5);
    t.equal(q.box.r, undefined, 'queued');
    t.same(
      await store.acquireSlot({ ...base, queueSize: 1, signal: keep.signal }),
      { ok: false, reason: 'queue_full' },
      'it holds the one queue place',
    );
    await store.cancel(q.id);
    await eventually(t, () => q.box.r !== undefined, 'its wait ends');
    t.same(q.box.r, { ok: false, reason: 'aborted' });
    const next = track(store.acquireSlot({ ...base, queueSize: 1, signal: keep.signal }));
    await ticks(5);
    t.equal(next.r, undefined, 'its queue place is free');
    rel(w)();
    await eventually(t, () => next.r !== undefined, 'the next waiter is served');
    t.ok(next.r?.ok, 'the cancelled admission was not served first');
    rel(next)();
    t.equal(await freeSlots(store, 'user:u1', 1), 1, 'nothing left held');
    t.equal((await store.keyState('k1')).reserved, 0);
    await store.close();
  });

  test('admission slot: a client gone while queued leaves the queue at once; unlimited and already-aborted slots', async (t) => {
    const { store } = await open();
    const keep = new AbortController();
    const base = { scope: 'user:u1', limit: 1, queueSize: 1, maxWaitMs: 30_000 };
    const holder = await store.acquireSlot({ ...base, signal: keep.signal });
    const ac = new AbortController();
    const q = await admitSlot(store, { ...base, signal: ac.signal }, 0, quota(10_000));
    await ticks(5);
    t.equal(q.box.r, undefined, 'queued');
    ac.abort();
    await eventually(t, () => q.box.r !== undefined, 'the wait ends at once');
    t.same(q.box.r, { ok: false, reason: 'aborted' });
    const next = track(store.acquireSlot({ ...base, signal: keep.signal }));
    await ticks(5);
    t.equal(next.r, undefined, 'its queue place is free');
    await store.cancel(q.id);
    if (holder.ok) holder.release();
    await eventually(t, () => next.r !== undefined, 'the next waiter is served');
    t.ok(next.r?.ok);
    rel(next)();

    const unlimited = await admitSlot(store, { ...base, limit: 0 }, 0, quota(10_000));
    await eventually(t, () => unlimited.box.r !== undefined, 'answered');
    t.ok(unlimited.box.r?.ok, 'limit 0 = unlimited');
    const gone = new AbortController();
    gone.abort();
    const g = await admitSlot(store, { ...base, signal: gone.signal }, 0, quota(10_000));
    await eventually(t, () => g.box.r !== undefined, 'answered');
    t.same([g.r.ok, g.box.r], [true, { ok: false, reason: 'aborted' }], 'a client already gone: admitted, no slot');
    await store.cancel(unlimited.id);
    await store.cancel(g.id);
    t.equal(await freeSlots(store, 'user:u1', 1), 1, 'nothing left held');
    await store.close();
  });

  // ---- stats -----------------------------------------------------------------------------------

  test('keyStats: today, total, byModel over a day range, rpm/tpm over the last 60 s', async (t) => {
    const { store, clock } = await open();
    const day = (d: number) => Date.UTC(2026, 0, d, 10);
    const u = (input: number, output: number) => ({ input, output, cacheRead: 1, cacheWrite: 2 });
    clock.set(day(5));
    await charge(store, 10, { model: 'a', usage: u(100, 10), cost: 20, durationMs: 100 });
    clock.set(day(6));
    await charge(store, 11, { model: 'a', usage: u(200, 20), cost: 22, durationMs: 200 });
    await charge(store, 12, { model: 'b', usage: u(300, 30), cost: 24, durationMs: 300 });
    clock.set(day(7));
    await charge(store, 13, { model: 'b', usage: u(400, 40), cost: 26, durationMs: 400 });
    await charge(store, 99, { keyId: 'k2' });

    const c = (requests: number, input: number, output: number, cost: number, actual: number, durationMs: number) => ({
      requests,
      input,
      output,
      cacheRead: requests,
      cacheWrite: 2 * requests,
      cost,
      actual,
      durationMs,
    });
    const s = await store.keyStats('k1', '2026-01-06', '2026-01-06');
    t.same(s.byModel, { a: c(1, 200, 20, 22, 11, 200), b: c(1, 300, 30, 24, 12, 300) }, 'one day');
    t.same(s.today, c(1, 400, 40, 26, 13, 400), 'today = day of clock');
    t.same(s.total, c(4, 1000, 100, 92, 46, 1000), 'all time');
    t.same(
      (await store.keyStats('k1', '2026-01-05', '2026-01-07')).byModel,
      { a: c(2, 300, 30, 42, 21, 300), b: c(2, 700, 70, 50, 25, 700) },
      'inclusive bounds',
    );
    t.same((await store.keyStats('k1', '2026-01-07', '2026-01-31')).byModel, { b: c(1, 400, 40, 26, 13, 400) });
    t.same((await store.keyStats('k1', '2025-12-01', '2026-01-04')).byModel, {}, 'before any use');
    t.same(
      (await store.keyStats('k1', '2026-01-01', '2026-01-06')).byDay,
      { '2026-01-05': c(1, 100, 10, 20, 10, 100), '2026-01-06': c(2, 500, 50, 46, 23, 500) },
      'byDay: the days of the range with usage, every model of each',
    );
    t.same(await store.keyStats('nope', '2026-01-01', '2026-01-31'), {
      today: c(0, 0, 0, 0, 0, 0),
      total: c(0, 0, 0, 0, 0, 0),
      byModel: {},
      byDay: {},
      rpm: 0,
      tpm: 0,
    });

    t.same([s.rpm, s.tpm], [1, 443], 'the settlement of this second (tokens in all four buckets)');
    clock.advance(30_000);
    await charge(store, 1, { usage: u(10, 0) });
    clock.advance(29_000);
    t.same(await store.keyStats('k1', 'x', 'x').then((r) => [r.rpm, r.tpm]), [2, 456], '59 s after the first');
    clock.advance(1_000);
    t.same(await store.keyStats('k1', 'x', 'x').then((r) => [r.rpm, r.tpm]), [1, 13], '60 s after the first: gone');
    clock.advance(30_000);
    t.same(await store.keyStats('k1', 'x', 'x').then((r) => [r.rpm, r.tpm]), [0, 0]);
    clock.advance(60_000 * 60);
    await charge(store, 1, { usage: u(1, 1) }); // lands in a reused ring slot
    t.same(await store.keyStats('k1', 'x', 'x').then((r) => [r.rpm, r.tpm]), [1, 5]);
    await store.close();
  });

  // ---- crash recovery --------------------------------------------------------------------------

  // Reported as todo, never as a pass, while a store has no way to simulate its death.
  const crashOpts = f.die ? {} : { todo: `the "simulate death" hook is not wired for the ${f.name} store yet` };
  tap.test(`${f.name}: crash: admissions of a dead process are resolved by their recovery settlement`, crashOpts, async (t) => {
    if (!f.die) return;
    const clock = new ManualClock(T0);
    const store = await f.open(clock);
    await charge(store, 1_000, { keyId: 'other' });
    const recovery = settlement({
      actual: 30,
      cost: 40,
      usage: { input: 300, output: 0, cacheRead: 0, cacheWrite: 0 },
      estimated: true,
      recovered: true,
      windows: ['5h'],
    });
    const slot = { scope: 'user:u1', limit: 1, queueSize: 0, maxWaitMs: 0, signal: new AbortController().signal };
    const recovering = await store.admit({
      requestId: 'crash-recover',
      reserve: 500,
      claims: [quota(10_000), win('5h', 10_000), balance(10_000), rpm(100)],
      recovery,
      slot,
    });
    t.ok(recovering.ok && (await recovering.slot)?.ok, 'admitted with the one concurrency slot');
    t.ok(
      (await store.admit({ requestId: 'crash-free', reserve: 700, claims: [quota(10_000), balance(10_000)] })).ok,
      'no recovery: released without a charge',
    );
    t.ok((await store.admit({ requestId: 'crash-settled', reserve: 500, claims: [quota(10_000), balance(10_000)], recovery })).ok);
    await store.settle('crash-settled', settlement({ actual: 200 }));
    t.same((await store.keyState('k1')).reserved, 1_200, 'two reservations in flight at the death');

    const after = await f.die(store, clock);
    const st = await after.keyState('k1');
    t.same([st.used, st.reserved], [230, 0], 'the recovery charge applied once, every reservation released');
    t.same(st.windows['5h'], { start: T0, used: 30, reserved: 0 }, 'the recovery counts in the key window it names');
    t.equal(await after.balanceSpent('u1'), 1_230, 'balance: the settled request, the recovered one, the other key');
    const stats = await after.keyStats('k1', '2026-01-01', '2026-01-31');
    t.same(
      [stats.total.requests, stats.total.input, stats.total.actual, stats.total.cost],
      [2, 310, 230, 140],
      'one usage record per resolved request, none for the released one',
    );
    t.equal(await freeSlots(after, 'user:u1', 1), 1, "the dead process's slot is free again");
    await after.settle('crash-recover', settlement({ actual: 999 }));
    t.equal((await after.keyState('k1')).used, 230, 'a late settlement of a recovered request changes nothing');
    await after.close();
  });

  // ---- accounts --------------------------------------------------------------------------------

  const audit = (action: string, target: string, over: Partial<AuditInput> = {}): AuditInput => ({
    actor: 'ops',
    ip: '127.0.0.1',
    method: 'POST',
    path: '/admin/x',
    action,
    target,
    before: null,
    after: null,
    ...over,
  });
  const userRec = (name: string, over: Partial<UserRecord> = {}): UserRecord => ({
    name,
    status: 'active',
    rpm: 0,
    concurrency: 0,
    queue: { size: 16, maxWaitMs: 30_000 },
    spendCaps: { weekly: 0, monthly: 0 },
    rates: {},
    subscriptions: [],
    createdAt: T0,
    updatedAt: T0,
    ...over,
  });
  const keyRec = (name: string, digest: string, over: Partial<KeyRecord> = {}): KeyRecord => ({
    name,
    digest,
    hint: 'sk-abc…wxyz',
    user: 'u1',
    group: 'g1',
    enabled: true,
    quota: 0,
    windows: { '5h': 0, '1d': 0, '7d': 0 },
    ipAllow: [],
    ipDeny: [],
    createdAt: T0,
    updatedAt: T0,
    ...over,
  });

  test('accounts: create once, compare-and-set by revision, delete; keys unique by digest', async (t) => {
    const { store } = await open();
    t.equal(await store.getAccount('user', 'alice'), undefined, 'nothing yet');
    const created = await store.writeAccount({
      kind: 'user',
      name: 'alice',
      value: userRec('alice'),
      expectRev: 0,
      audit: audit('user.create', 'user:alice'),
    });
    t.match(created, { ok: true, rev: 1, version: 1 });
    t.same(
      await store.writeAccount({
        kind: 'user',
        name: 'alice',
        value: userRec('alice'),
        expectRev: 0,
        audit: audit('user.create', 'user:alice'),
      }),
      {
        ok: false,
        reason: 'conflict',
      },
      'a second create of the same name is a conflict',
    );
    const got = await store.getAccount('user', 'alice');
    t.same(got, { rev: 1, value: userRec('alice') }, 'read back exactly, with its revision');
    t.match(
      await store.writeAccount({
        kind: 'user',
        name: 'alice',
        value: userRec('alice', { rpm: 5 }),
        expectRev: 1,
        audit: audit('user.update', 'user:alice'),
      }),
      {
        ok: true,
        rev: 2,
        version: 2,
      },
    );
    t.same(
      await store.writeAccount({
        kind: 'user',
        name: 'alice',
        value: userRec('alice', { rpm: 9 }),
        expectRev: 1,
        audit: audit('user.update', 'user:alice'),
      }),
      { ok: false, reason: 'conflict' },
      'a write from a stale revision changes nothing',
    );
    t.equal((await store.getAccount('user', 'alice'))?.value.rpm, 5);

    t.match(
      await store.writeAccount({
        kind: 'key',
        name: 'k-a',
        value: keyRec('k-a', 'd1'),
        expectRev: 0,
        audit: audit('key.create', 'key:k-a'),
      }),
      { ok: true },
    );
    t.same(
      await store.writeAccount({
        kind: 'key',
        name: 'k-b',
        value: keyRec('k-b', 'd1'),
        expectRev: 0,
        audit: audit('key.create', 'key:k-b'),
      }),
      { ok: false, reason: 'digest_taken' },
      'another key with the same digest is refused',
    );
    t.match(
      await store.writeAccount({
        kind: 'key',
        name: 'k-a',
        value: keyRec('k-a', 'd2'),
        expectRev: 1,
        audit: audit('key.rotate', 'key:k-a'),
      }),
      { ok: true, rev: 2 },
      'rotated',
    );
    t.match(
      await store.writeAccount({
        kind: 'key',
        name: 'k-b',
        value: keyRec('k-b', 'd1'),
        expectRev: 0,
        audit: audit('key.create', 'key:k-b'),
      }),
      { ok: true },
      'the old digest is free again',
    );
    t.match(await store.writeAccount({ kind: 'key', name: 'k-a', value: null, expectRev: 2, audit: audit('key.delete', 'key:k-a') }), {
      ok: true,
      rev: 0,
    });
    t.equal(await store.getAccount('key', 'k-a'), undefined, 'deleted');
    t.match(
      await store.writeAccount({
        kind: 'key',
        name: 'k-c',
        value: keyRec('k-c', 'd2'),
        expectRev: 0,
        audit: audit('key.create', 'key:k-c'),
      }),
      { ok: true },
      "a deleted key's digest is free",
    );
    await store.close();
  });

  test('accounts: load everything at a version, then follow the changes from it; listeners hear of writes', async (t) => {
    const { store } = await open();
    let heard = 0;
    const stop = store.onAccountsChanged(() => heard++);
    await store.writeAccount({ kind: 'user', name: 'u-a', value: userRec('u-a'), expectRev: 0, audit: audit('user.create', 'user:u-a') });
    await store.writeAccount({
      kind: 'key',
      name: 'k-a',
      value: keyRec('k-a', 'da', { user: 'u-a' }),
      expectRev: 0,
      audit: audit('key.create', 'key:k-a'),
    });
    const snap = await store.loadAccounts();
    t.equal(snap.version, 2);
    t.same(
      snap.users.map((u) => u.value.name),
      ['u-a'],
    );
    t.same(
      snap.keys.map((k) => [k.value.name, k.rev]),
      [['k-a', 1]],
    );
    t.same(await store.accountChanges(2), { version: 2, users: [], keys: [] }, 'nothing after the version loaded');
    await store.writeAccount({
      kind: 'key',
      name: 'k-a',
      value: keyRec('k-a', 'da', { user: 'u-a', enabled: false }),
      expectRev: 1,
      audit: audit('key.update', 'key:k-a'),
    });
    await store.writeAccount({ kind: 'user', name: 'u-b', value: userRec('u-b'), expectRev: 0, audit: audit('user.create', 'user:u-b') });
    await store.writeAccount({ kind: 'user', name: 'u-b', value: null, expectRev: 1, audit: audit('user.delete', 'user:u-b') });
    const ch = await store.accountChanges(2);
    t.equal(ch?.version, 5);
    t.same(
      ch?.keys,
      [{ name: 'k-a', record: { rev: 2, value: keyRec('k-a', 'da', { user: 'u-a', enabled: false }) } }],
      'the key as it is now',
    );
    t.same(ch?.users, [{ name: 'u-b', record: null }], 'a record written then deleted reads as deleted');
    await eventually(t, () => heard >= 5, 'a notice per write');
    stop();
    const before = heard;
    await store.writeAccount({ kind: 'user', name: 'u-c', value: userRec('u-c'), expectRev: 0, audit: audit('user.create', 'user:u-c') });
    await ticks(5);
    t.equal(heard, before, 'no notice once stopped');
    t.equal(await store.accountChanges(99), undefined, 'a version ahead of the store: load everything again');
    await store.close();
  });

  test('credit: top-ups add to the wallet the balance claim reads; a correction below zero is refused', async (t) => {
    const { store } = await open();
    t.same(await store.wallet('u1'), { credit: 0, spent: 0 }, 'a new wallet starts at zero');
    t.notOk((await admit(store, 100, balance(0))).ok, 'no credit anywhere: refused');
    const r = await store.credit({ user: 'u1', amount: 5_000, baseCredit: 0, reference: 'inv-1', audit: audit('topup', 'user:u1') });
    t.match(r, {
      ok: true,
      replayed: false,
      record: { user: 'u1', amount: 5_000, reference: 'inv-1', credit: 5_000, spent: 0, actor: 'ops' },
    });
    t.same(await store.wallet('u1'), { credit: 5_000, spent: 0 });
    const a = await admit(store, 3_000, balance(0));
    t.ok(a.ok, 'the stored credit counts for the balance claim');
    await store.settle(a.id, settlement({ actual: 4_000 }));
    t.same(await store.wallet('u1'), { credit: 5_000, spent: 4_000 });
    t.ok((await admit(store, 10, balance(0))).ok, '1,000 left');
    t.ok((await admit(store, 10, balance(500))).ok, "the config file's credit adds to it");
    t.same(
      await store.credit({ user: 'u1', amount: -1_001, baseCredit: 0, reference: 'fix', audit: audit('topup', 'user:u1') }),
      { ok: false, reason: 'below_zero' },
      'a correction that would leave the balance below zero',
    );
    t.match(
      await store.credit({ user: 'u1', amount: -1_001, baseCredit: 1, reference: 'fix', audit: audit('topup', 'user:u1') }),
      { ok: true, record: { credit: 3_999 } },
      'the base credit counts',
    );
    t.match(
      await store.credit({ user: 'u1', amount: -1_000, baseCredit: 0, reference: 'fix 2', audit: audit('topup', 'user:u1') }),
      { ok: false },
      'balance 0 - 1000',
    );
    const list = await store.credits('u1', { limit: 10 });
    t.same(
      list.map((c) => c.reference),
      ['fix', 'inv-1'],
      'newest first, refused ones not recorded',
    );
    t.same(
      (await store.credits('u1', { limit: 10, before: list[0].id })).map((c) => c.reference),
      ['inv-1'],
      'paged by id',
    );
    await store.close();
  });

  test('credit: an Idempotency-Key answers its first result; another body under it is refused; racing retries apply once', async (t) => {
    const { store } = await open();
    const req = (amount: number, fingerprint: string) => ({
      user: 'u1',
      amount,
      baseCredit: 0,
      reference: 'inv-9',
      idempotency: { key: 'idem-1', fingerprint },
      audit: audit('topup', 'user:u1'),
    });
    const results = await Promise.all(Array.from({ length: 20 }, () => store.credit(req(1_000, 'fp-a'))));
    t.equal(results.filter((r) => r.ok && !r.replayed).length, 1, 'one of twenty racing retries applied');
    t.ok(
      results.every((r) => r.ok),
      'every retry answered with the result',
    );
    const ids = new Set(results.map((r) => (r.ok ? r.record.id : '')));
    t.equal(ids.size, 1, 'the same record each time');
    t.same(await store.wallet('u1'), { credit: 1_000, spent: 0 }, 'credited once');
    t.same(await store.credit(req(2_000, 'fp-b')), { ok: false, reason: 'idempotency_conflict' });
    t.same(await store.wallet('u1'), { credit: 1_000, spent: 0 }, 'unchanged');
    t.match(await store.credit({ ...req(1_000, 'fp-a'), user: 'u2' }), { ok: true, replayed: false }, 'the key is scoped to the user');
    await store.close();
  });

  test('audit: every account write leaves an entry; entries read newest first, filtered and paged', async (t) => {
    const { store, clock } = await open();
    await store.writeAccount({
      kind: 'user',
      name: 'a',
      value: userRec('a'),
      expectRev: 0,
      audit: audit('user.create', 'user:a', { after: { name: 'a' } }),
    });
    clock.set(T0 + 1_000);
    await store.writeAccount({
      kind: 'user',
      name: 'b',
      value: userRec('b'),
      expectRev: 0,
      audit: audit('user.create', 'user:b', { actor: 'billing' }),
    });
    clock.set(T0 + 2_000);
    await store.credit({ user: 'a', amount: 1, baseCredit: 0, reference: 'r', audit: audit('topup', 'user:a', { actor: 'billing' }) });
    clock.set(T0 + 3_000);
    const appended = await store.appendAudit(audit('key.reset-quota', 'key:x'));
    t.match(appended, { actor: 'ops', action: 'key.reset-quota', at: T0 + 3_000 });
    const all = await store.readAudit({ limit: 10 });
    t.same(
      all.map((e) => e.action),
      ['key.reset-quota', 'topup', 'user.create', 'user.create'],
      'newest first',
    );
    t.same(all[3].after, { name: 'a' }, 'before and after kept');
    t.same(
      all.map((e) => e.at),
      [T0 + 3_000, T0 + 2_000, T0 + 1_000, T0],
      'store time',
    );
    t.same(
      (await store.readAudit({ limit: 10, actor: 'billing' })).map((e) => e.target),
      ['user:a', 'user:b'],
    );
    t.same(
      (await store.readAudit({ limit: 10, target: 'user:a' })).map((e) => e.action),
      ['topup', 'user.create'],
    );
    t.same(
      (await store.readAudit({ limit: 10, since: T0 + 1_000, until: T0 + 2_000 })).map((e) => e.at),
      [T0 + 2_000, T0 + 1_000],
    );
    const page1 = await store.readAudit({ limit: 2 });
    const page2 = await store.readAudit({ limit: 2, before: page1[1].id });
    t.same(
      [...page1, ...page2].map((e) => e.id),
      all.map((e) => e.id),
      'pages follow each other',
    );
    await store.close();
  });

  tap.test(`${f.name}: accounts, credits, Idempotency-Keys and the audit trail outlive the process`, crashOpts, async (t) => {
    const { store, clock } = await open();
    await store.writeAccount({ kind: 'user', name: 'dur', value: userRec('dur'), expectRev: 0, audit: audit('user.create', 'user:dur') });
    await store.writeAccount({
      kind: 'key',
      name: 'dur-k',
      value: keyRec('dur-k', 'dd', { user: 'dur' }),
      expectRev: 0,
      audit: audit('key.create', 'key:dur-k'),
    });
    const topup = await store.credit({
      user: 'dur',
      amount: 7_000,
      baseCredit: 0,
      reference: 'r1',
      idempotency: { key: 'idem-dur', fingerprint: 'fp' },
      audit: audit('topup', 'user:dur'),
    });
    const after = await f.die!(store, clock);
    t.same((await after.getAccount('key', 'dur-k'))?.value.user, 'dur', 'the key');
    t.equal((await after.loadAccounts()).version, 2, 'the version');
    t.same(await after.wallet('dur'), { credit: 7_000, spent: 0 }, 'the credit');
    const again = await after.credit({
      user: 'dur',
      amount: 7_000,
      baseCredit: 0,
      reference: 'r1',
      idempotency: { key: 'idem-dur', fingerprint: 'fp' },
      audit: audit('topup', 'user:dur'),
    });
    t.same(again, topup.ok ? { ...topup, replayed: true } : topup, 'a retry after the restart answers the first result');
    t.same(await after.wallet('dur'), { credit: 7_000, spent: 0 }, 'and credits nothing');
    t.same(
      (await after.readAudit({ limit: 10 })).map((e) => e.action),
      ['topup', 'key.create', 'user.create'],
      'the audit trail',
    );
    await after.close();
  });

  // ---- upstream accounts ------------------------------------------------------------------------

  test('account health: cooldowns only extend, failures count and reset, a disable stays until an enable, the last 8 TTFT samples, another fingerprint starts afresh', async (t) => {
    const { store } = await open();
    let heard = 0;
    const stop = store.onAccountHealthChanged(() => heard++);
    t.same((await store.accountHealth())?.accounts, {}, 'nothing known at first');
    const a = 'p/a';
    const fp = 'fp-a';
    const v1 = await store.reportAccountHealth([
      { account: a, fp, kind: 'failure', until: T0 + 30_000, reason: 'rate_limited' },
      { account: a, fp, kind: 'failure', until: T0 + 10_000, reason: 'server_error' },
      ...Array.from({ length: 10 }, (_, i) => ({ account: a, fp, kind: 'ttft' as const, at: T0 + i, ms: 100 + i })),
    ]);
    const s1 = await store.accountHealth();
    t.equal(s1?.version, v1, 'the version the report returned');
    t.same(
      s1?.accounts[a],
      {
        fp,
        coolingUntil: T0 + 30_000,
        coolReason: 'rate_limited',
        failures: 2,
        ttft: Array.from({ length: 8 }, (_, i) => [T0 + 2 + i, 102 + i]),
      },
      'the later, shorter cooldown did not shorten the first; two failures; the last 8 samples, oldest first',
    );
    t.equal(await store.accountHealth(v1), undefined, 'nothing new since that version');
    await eventually(t, () => heard > 0, 'a cooldown is announced');

    await store.reportAccountHealth([
      { account: a, fp, kind: 'success' },
      { account: 'p/b', fp: 'fp-b', kind: 'disable', at: T0, status: 401, message: 'invalid x-api-key' },
      { account: 'p/b', fp: 'fp-b', kind: 'disable', at: T0 + 5, status: 403, message: 'later' },
    ]);
    const s2 = (await store.accountHealth(v1))!;
    t.same([s2.accounts[a].failures, s2.accounts[a].coolingUntil], [0, T0 + 30_000], 'a success resets the failures, not the cooldown');
    t.same(
      s2.accounts['p/b'],
      { fp: 'fp-b', coolingUntil: 0, failures: 0, disabled: { at: T0, status: 401, message: 'invalid x-api-key' }, ttft: [] },
      'the first disable stays',
    );
    await store.reportAccountHealth([{ account: 'p/b', fp: 'fp-b', kind: 'enable' }]);
    t.same((await store.accountHealth())!.accounts['p/b'], { fp: 'fp-b', coolingUntil: 0, failures: 0, ttft: [] }, 'an enable clears it');
    await store.reportAccountHealth([{ account: a, fp: 'fp-a2', kind: 'ttft', at: T0, ms: 5 }]);
    t.same(
      (await store.accountHealth())!.accounts[a],
      { fp: 'fp-a2', coolingUntil: 0, failures: 0, ttft: [[T0, 5]] },
      'new credentials under the same name: a fresh record',
    );
    stop();
    await store.close();
  });

  test('limitsInUse: slots held per scope and requests counted this minute per RPM counter', async (t) => {
    const { store, clock } = await open();
    clock.set(T0 + 15_000);
    const slot = () =>
      store.acquireSlot({ scope: 'account:p/a', limit: 3, queueSize: 0, maxWaitMs: 0, signal: new AbortController().signal });
    const s1 = await slot();
    const s2 = await slot();
    t.ok(s1.ok && s2.ok);
    for (let i = 0; i < 2; i++) {
      const r = await admit(store, 0, rpm(10, 'p/a', 'account'));
      t.ok(r.ok);
      await store.cancel(r.id, { keepCounts: true });
    }
    const q = {
      slots: ['account:p/a', 'account:p/idle'],
      rpm: [
        { scope: 'account' as const, id: 'p/a' },
        { scope: 'user' as const, id: 'nobody' },
      ],
    };
    t.same(
      await store.limitsInUse(q),
      { slots: [2, 0], rpm: [2, 0], minuteLeftMs: 45_000 },
      'two held, two counted, 45 s left in the minute',
    );
    if (s1.ok) s1.release();
    await eventually(t, async () => (await store.limitsInUse(q)).slots[0] === 1, 'a release frees one');
    clock.set(T0 + 61_000);
    t.same((await store.limitsInUse(q)).rpm, [0, 0], 'a new minute counts from zero');
    if (s2.ok) s2.release();
    await store.close();
  });

  // ---- the ledger ------------------------------------------------------------------------------

  const ledgerOpts = f.ledger ? {} : { todo: `the ledger hook is not wired for the ${f.name} store yet` };
  const detail = {
    requestedModel: 'm0',
    provider: 'p1',
    account: 'p1/main',
    protocolIn: 'openai-chat',
    protocolOut: 'anthropic-messages',
    stream: true,
    status: 200,
    reasoning: 3,
    ratePpm: 800_000,
    ttftMs: 12,
    attempts: 2,
  } as const;

  tap.test(`${f.name}: ledger: one record per settlement that applies and per credit, each once`, ledgerOpts, async (t) => {
    if (!f.ledger) return;
    const { store, clock } = await open();
    t.ok((await store.admit({ requestId: 'led-1', reserve: 500, claims: [quota(10_000), balance(10_000)] })).ok);
    await store.settle('led-1', settlement({ actual: 80, cost: 100, detail }));
    await store.settle('led-1', settlement({ actual: 999, cost: 999, detail })); // repeated: changes nothing
    clock.advance(1_000);
    // Settled without an admission (Redis away at the admission), estimated: a record all the same.
    await store.settle('led-2', settlement({ actual: 7, estimated: true, detail: { ...detail, estimateReason: 'client_disconnect' } }));
    const credit = await store.credit({ user: 'u1', amount: 5_000, baseCredit: 0, reference: 'inv-9', audit: audit('topup', 'user:u1') });
    const fix = await store.credit({ user: 'u1', amount: -1_000, baseCredit: 0, reference: 'fix', audit: audit('topup', 'user:u1') });
    await store.credit({ user: 'u1', amount: -1_000_000, baseCredit: 0, reference: 'refused', audit: audit('topup', 'user:u1') });
    t.ok(credit.ok && fix.ok);
    const records = await f.ledger(store);
    t.same(
      records.map((r) => r.id).sort(),
      ['led-1', 'led-2', `credit:${credit.ok && credit.record.id}`, `credit:${fix.ok && fix.record.id}`].sort(),
      'one record each: none for the repeated settlement, nor for the refused correction',
    );
    const byId = new Map(records.map((r) => [r.id, r]));
    t.same(
      byId.get('led-1'),
      {
        id: 'led-1',
        type: 'request',
        ts: T0,
        user: 'u1',
        key: 'k1',
        group: 'g1',
        model_requested: 'm0',
        model: 'm1',
        provider: 'p1',
        account: 'p1/main',
        protocol_in: 'openai-chat',
        protocol_out: 'anthropic-messages',
        stream: true,
        status: 200,
        billing: 'balance',
        input_tokens: 10,
        output_tokens: 5,
        cache_read_tokens: 2,
        cache_write_tokens: 1,
        reasoning_tokens: 3,
        usage_source: 'reported',
        estimate_reason: null,
        list_micros: 100,
        rate_ppm: 800_000,
        charged_micros: 80,
        duration_ms: 50,
        ttft_ms: 12,
        attempts: 2,
        reference: null,
        actor: null,
      },
      'the settlement applied, with its details and the store time',
    );
    t.match(byId.get('led-2'), { ts: T0 + 1_000, usage_source: 'estimated', estimate_reason: 'client_disconnect', charged_micros: 7 });
    t.match(byId.get(`credit:${fix.ok && fix.record.id}`), {
      type: 'correction',
      user: 'u1',
      charged_micros: -1_000,
      reference: 'fix',
      actor: 'ops',
      ts: T0 + 1_000,
      key: null,
    });
    t.match(byId.get(`credit:${credit.ok && credit.record.id}`), { type: 'topup', charged_micros: 5_000, reference: 'inv-9' });
    await store.settle('led-1', settlement({ actual: 999, detail }));
    t.same((await f.ledger(store)).length, records.length, 'read again: the same records, none twice');
    await store.close();
  });

  tap.test(
    `${f.name}: ledger: a crash-recovery settlement has its record, marked crash_recovery`,
    f.die && f.ledger ? {} : { todo: `the death or ledger hook is not wired for the ${f.name} store yet` },
    async (t) => {
      if (!f.die || !f.ledger) return;
      const { store, clock } = await open();
      const recovery = settlement({ actual: 30, cost: 40, usage: { input: 300, output: 0, cacheRead: 0, cacheWrite: 0 }, estimated: true });
      t.ok((await store.admit({ requestId: 'led-crash', reserve: 500, claims: [quota(10_000)], recovery })).ok);
      t.ok((await store.admit({ requestId: 'led-done', reserve: 500, claims: [quota(10_000)], recovery })).ok);
      await store.settle('led-done', settlement({ actual: 60, detail }));
      t.same(
        (await f.ledger(store)).map((r) => r.id),
        ['led-done'],
        'before the death: the settled one',
      );
      const after = await f.die(store, clock);
      const records = await f.ledger(after);
      const crash = records.filter((r) => r.id === 'led-crash');
      t.equal(crash.length, 1, 'one record for the request in flight at the death');
      t.match(crash[0], {
        usage_source: 'estimated',
        estimate_reason: 'crash_recovery',
        charged_micros: 30,
        list_micros: 40,
        input_tokens: 300,
      });
      t.equal(records.filter((r) => r.id === 'led-done').length, 1, 'the settled one: its own record, once');
      await after.close();
    },
  );

  // ---- remembered items ------------------------------------------------------------------------

  test('remember / recall: by namespace, expiring, health', async (t) => {
    const { store } = await open();
    await store.remember(
      'key-a',
      [
        ['msg_1', '{"a":1}'],
        ['msg_2', '{"b":2}'],
      ],
      60_000,
    );
    t.same(await store.recall('key-a', ['msg_2', 'msg_1', 'msg_3']), ['{"b":2}', '{"a":1}', undefined]);
    t.same(await store.recall('key-b', ['msg_1']), [undefined], 'another namespace cannot read it');
    await store.remember('key-a', [['short', 'x']], 1);
    await new Promise((r) => setTimeout(r, 15));
    t.same(await store.recall('key-a', ['short']), [undefined], 'expired after its ttl');
    t.same(await store.health(), { ready: true });
    await store.close();
    t.same(await store.health(), { ready: false }, 'a closed store is not ready');
  });
}
