/**
 * The embedded store's state and its rules: every counter, the admission of a request against its
 * claims, settlement, cancel, concurrency slots and their FIFO queue, the reads, quota reset and
 * remembered items. Pure: no file I/O and no timers but the slot waits' own (`maxWaitMs`); every
 * method but `acquireSlot` completes synchronously. What must reach the disk is told to a
 * `Recorder` (persistence.ts) as it happens; what a snapshot holds is `snapshot()` / `restore()`,
 * and journal replay uses the `apply*` methods, which record nothing. index.ts wraps this in the
 * async `Store` interface.
 *
 * Decisions (the contract is in ../types.ts):
 * - Atomicity comes from the event loop: `admit()` evaluates every claim and then applies them
 *   without an `await` in between (it is synchronous), so no other request can interleave.
 *   Evaluation notes what each claim will do (`toHold` / `toCount` / `toStart`), and `admit`
 *   performs exactly what was checked; nothing changes unless all pass.
 * - Reservations are held on the counter objects themselves (`reserved` next to `used`), and an
 *   admission remembers those objects. Period rollovers (windows, plan days/weeks/months, cap
 *   weeks/months) reset `used` but keep `reserved`, so an in-flight request is still counted after
 *   a reset and its settlement lands in the period current at settle time. Counter objects are
 *   therefore mutated in place, never replaced.
 * - A limit of 0 (or less) on a key/plan/cap/rpm claim means "no limit" (plugins do not add such
 *   claims anyway); the balance claim has no such escape.
 * - Amounts must be non-negative safe integers (micro-USD); anything else throws, so a pricing
 *   bug surfaces instead of putting floats into the counters.
 * - An admission that is never settled nor cancelled keeps its reservation until the process
 *   ends: there is no expiry, since a long stream may legitimately hold one for a long time. The
 *   pipeline settles or cancels every admission.
 * - Admitting an id that is already admitted, or was already settled, throws (ids are minted by
 *   the gateway, unique per request: a repeat is a bug, never a free pass).
 * - Recorded (only when a `Recorder` is given, i.e. with a store folder): an admission that
 *   carries a `recovery` settlement (with it, so a crash cannot leave it uncharged), its cancel,
 *   every settlement, every window started by an admission, every quota reset. Each call is made
 *   after the change it records, within the same synchronous step; on every request it is one
 *   method call (the recorder builds the journal line, journal.ts `settlementLine`).
 * - Volatile by design (not in `snapshot()`): reservations, admission records, RPM and free-call
 *   counters, slots, and the last-60-s rpm/tpm ring. Settled request ids are restored only from
 *   the journal tail being replayed, not from the snapshot: a request cannot outlive the process
 *   that admitted it, so cross-restart idempotency is only needed for what the journal itself
 *   replays. Admissions in flight that carry a recovery settlement are in `snapshot().open`, so
 *   compaction never drops one; `restore()` leaves them to the caller (crash recovery settles
 *   them with `applySettlement`).
 */
import { LRUCache } from 'lru-cache';
import type { Clock } from '../../clock.js';
import { WINDOWS, WINDOW_MS, type Window } from '../../config/types.js';
import {
  dayKey,
  dayStart,
  weekStart,
  monthStart,
  nextMonthStart,
  minuteStart,
  type AdmitRequest,
  type AdmitResult,
  type Claim,
  type ClientSignal,
  type KeyState,
  type KeyStats,
  type PeriodUsage,
  type Settlement,
  type LimitsInUse,
  type LimitsQuery,
  type SlotRequest,
  type SlotResult,
  type UsageCounters,
  type WindowState,
} from '../types.js';
import { RecentIds } from '../recent.js';

const MINUTE = 60_000;
const DAY = 86_400_000;
const WEEK = 7 * DAY;
/**
 * Settled ids kept for idempotency: at least the last 50,000 (RecentIds keeps between half and all).
 * On this store a second settlement of a request can only come during that request's own handling
 * (nothing queues settlements, unlike the Redis store's outage queue, whose done markers last a
 * day), so more would only grow the heap every major collection marks (issue 29's soak: 400,000
 * ids were about 30 MiB of old generation).
 */
const SETTLED_MAX = 100_000;
const MAX_TIMER_MS = 2_147_483_647;
/** Bytes of `remember()` entries kept (ids and values, as UTF-16 length); the oldest go first. */
const REMEMBER_MAX_CHARS = 64 * 1024 * 1024;

/**
 * What must be made durable, told by the state as it happens (persistence.ts journals it). `t` is
 * the store clock's time of the change. Every call follows the change it records.
 */
export interface Recorder {
  /** An admission with its recovery settlement (already flagged `estimated` and `recovered`). */
  admitted(id: string, t: number, recovery: Settlement): void;
  settled(id: string, t: number, s: Settlement): void;
  /** The cancel of an admission that was recorded by `admitted`. */
  cancelled(id: string, t: number): void;
  /** A key window started (used set to 0) by an admission. */
  windowStarted(key: string, window: Window, t: number): void;
  /** A key's quota and windows reset (`resetKeyQuota`). */
  reset(key: string, t: number): void;
}

// ---- state shapes ------------------------------------------------------------------------------

/** Something an admission holds a reservation on. */
interface Held {
  reserved: number;
}

/** Usage within one calendar period (`start` = the period's first ms). */
interface Period extends Held {
  start: number;
  used: number;
}

interface WindowCounter extends Held {
  start?: number;
  used: number;
}

interface KeyCounters extends Held {
  used: number;
  windows: Record<Window, WindowCounter>;
}

interface Wallet extends Held {
  spent: number;
  /** Credit added through the store (top-ups, corrections); the claim brings the config file's. */
  credit: number;
}

interface PlanCounters {
  daily: Period;
  weekly: Period;
  monthly: Period;
}

interface CapCounters {
  weekly: Period;
  monthly: Period;
}

interface MinuteCounter {
  minute: number;
  count: number;
}

interface RingSlot {
  sec: number;
  requests: number;
  tokens: number;
}

interface KeyUsage {
  total: UsageCounters;
  /** day (YYYY-MM-DD) → model → counters */
  days: Map<string, Map<string, UsageCounters>>;
  /** Last 60 one-second buckets, indexed by sec % 60. */
  ring: RingSlot[];
}

interface Admission {
  reserve: number;
  /** Journaled with the admission: applied at the next start if the process dies first. */
  recovery?: Settlement;
  /** Admission time (journal and snapshot). */
  t: number;
  held: Held[];
  /** Minute counters incremented (RPM, free calls), with the minute they counted in. */
  counted: { counter: MinuteCounter; minute: number }[];
  /** The slot taken with the admission (AdmitRequest.slot): releases it, or leaves its queue. */
  slot?: () => void;
}

interface Waiter {
  resolve: (r: SlotResult) => void;
  timer: NodeJS.Timeout;
  signal: ClientSignal;
  onAbort: () => void;
}

interface SlotGroup {
  scope: string;
  active: number;
  limit: number;
  waiters: Set<Waiter>;
}

// ---- durable state (what a snapshot holds) -----------------------------------------------------

type PeriodJson = { start: number; used: number };

/** The durable state as JSON (the body of persistence.ts's snapshot). */
export interface DurableState {
  /** user → balance spend */
  wallets: Record<string, number>;
  /** user → stored credit (absent in snapshots written before top-ups existed) */
  credits?: Record<string, number>;
  caps: Record<string, { weekly: PeriodJson; monthly: PeriodJson }>;
  /** keyed by planKey(user, group) */
  plans: Record<string, { user: string; group: string; daily: PeriodJson; weekly: PeriodJson; monthly: PeriodJson }>;
  keys: Record<string, { used: number; windows: Partial<Record<Window, PeriodJson>> }>;
  stats: Record<string, { total: UsageCounters; days: Record<string, Record<string, UsageCounters>> }>;
  /** Admissions in flight when the snapshot was taken, with their recovery settlement. */
  open?: Record<string, { t: number; r: Settlement }>;
}

// ---- small helpers -----------------------------------------------------------------------------

const zeroCounters = (): UsageCounters => ({
  requests: 0,
  input: 0,
  output: 0,
  cacheRead: 0,
  cacheWrite: 0,
  cost: 0,
  actual: 0,
  durationMs: 0,
});

function addCounters(into: UsageCounters, c: UsageCounters): void {
  into.requests += c.requests;
  into.input += c.input;
  into.output += c.output;
  into.cacheRead += c.cacheRead;
  into.cacheWrite += c.cacheWrite;
  into.cost += c.cost;
  into.actual += c.actual;
  into.durationMs += c.durationMs;
}

function newPeriod(): Period {
  return { start: 0, used: 0, reserved: 0 };
}

/** Used within the period starting at `start` (0 if the counter belongs to another period). */
function periodUsed(p: Period, start: number): number {
  return p.start === start ? p.used : 0;
}

function rollPeriod(p: Period, start: number): void {
  if (p.start !== start) {
    p.start = start;
    p.used = 0;
  }
}

/** True when the window has not started or its duration has passed at `now`. */
function windowExpired(w: WindowCounter, win: Window, now: number): boolean {
  return w.start === undefined || now >= w.start + WINDOW_MS[win];
}

function planKey(user: string, group: string): string {
  return `${user}\u0000${group}`;
}

function rpmKey(scope: string, id: string): string {
  return `${scope}\u0000${id}`;
}

function assertMoney(name: string, v: number): void {
  if (!Number.isSafeInteger(v) || v < 0) throw new TypeError(`${name} must be a non-negative integer (micro-USD), got ${v}`);
}

function getOr<K, V>(m: Map<K, V>, k: K, make: () => V): V {
  let v = m.get(k);
  if (v === undefined) {
    v = make();
    m.set(k, v);
  }
  return v;
}

type Check = { ok: true } | { ok: false; retryAfterMs?: number; held?: true };
const OK: Check = { ok: true };
const FAIL: Check = { ok: false };
/** Refused only because of reservations in flight. */
const HELD: Check = { ok: false, held: true };

/** One period of a plan claim with a limit: OK, HELD (reservations fill it) or FAIL (used up). */
function planCheck(period: Period, start: number, limit: number): Check {
  const used = periodUsed(period, start);
  if (used >= limit) return FAIL;
  return used + period.reserved >= limit ? HELD : OK;
}

export class MemoryState {
  private readonly wallets = new Map<string, Wallet>();
  private readonly caps = new Map<string, CapCounters>();
  private readonly plans = new Map<string, PlanCounters & { user: string; group: string }>();
  private readonly keys = new Map<string, KeyCounters>();
  private readonly usage = new Map<string, KeyUsage>();
  private readonly rpm = new Map<string, MinuteCounter>();
  private readonly freeCalls = new Map<string, MinuteCounter>();
  private readonly admissions = new Map<string, Admission>();
  /** Request ids settled lately (../recent.ts): the last SETTLED_MAX / 2 at least. */
  private readonly settled = new RecentIds(SETTLED_MAX);
  /** What the claims of the admission being checked do once all pass (see check()). */
  private readonly toHold: Held[] = [];
  private readonly toCount: MinuteCounter[] = [];
  private readonly toStart: { w: WindowCounter; key: string; window: Window }[] = [];
  private readonly slots = new Map<string, SlotGroup>();
  private readonly remembered = new LRUCache<string, string>({
    maxSize: REMEMBER_MAX_CHARS,
    sizeCalculation: (v, k) => v.length + k.length || 1,
    ttlAutopurge: false,
  });

  constructor(
    private readonly clock: Clock,
    /** Undefined: nothing is recorded (no store folder). */
    private readonly recorder: Recorder | undefined,
  ) {}

  // ---- admission -------------------------------------------------------------------------------

  /** Checks every claim and, when all pass, applies them: one synchronous step (see the top). */
  admit(req: AdmitRequest): AdmitResult {
    assertMoney('reserve', req.reserve);
    // Ids are minted by the gateway, one admission each; a repeat is a bug, never a free pass.
    if (this.admissions.has(req.requestId) || this.settled.has(req.requestId))
      throw new Error(`request ${req.requestId} was already admitted`);
    const now = this.clock.now();
    // No await from here to the end: check and apply are one atomic step.
    this.toHold.length = 0;
    this.toCount.length = 0;
    this.toStart.length = 0;
    let heldAt = -1;
    for (let i = 0; i < req.claims.length; i++) {
      const c = this.check(req.claims[i], now);
      if (c.ok) continue;
      // A held claim is reported only if no later claim is refused outright: exhaustion wins.
      if (c.held) heldAt = heldAt < 0 ? i : heldAt;
      else return c.retryAfterMs === undefined ? { ok: false, index: i } : { ok: false, index: i, retryAfterMs: c.retryAfterMs };
    }
    if (heldAt >= 0) return { ok: false, index: heldAt, held: true };
    // Every claim passed: perform what they noted, exactly what was checked.
    const adm: Admission = { reserve: req.reserve, held: this.toHold.slice(), counted: [], t: now };
    for (const { w, key, window } of this.toStart) {
      w.start = now;
      w.used = 0;
      if (this.recorder !== undefined) this.recorder.windowStarted(key, window, now);
    }
    for (const h of adm.held) h.reserved += req.reserve;
    const minute = Math.floor(now / MINUTE);
    for (const counter of this.toCount) {
      if (counter.minute !== minute) {
        counter.minute = minute;
        counter.count = 0;
      }
      counter.count++;
      adm.counted.push({ counter, minute });
    }
    this.admissions.set(req.requestId, adm);
    if (req.recovery && this.recorder !== undefined) {
      assertMoney('recovery.actual', req.recovery.actual);
      adm.recovery = { ...req.recovery, estimated: true, recovered: true };
      this.recorder.admitted(req.requestId, now, adm.recovery);
    }
    if (req.slot) return { ok: true, slot: this.admissionSlot(req.requestId, adm, req.slot) };
    return { ok: true };
  }

  /** A slot that belongs to an admission: its settlement or cancel releases it (or leaves the queue). */
  private admissionSlot(requestId: string, adm: Admission, req: SlotRequest): SlotResult | Promise<SlotResult> {
    // Decided at once (the usual case): no queue to leave, so no AbortController and no listener.
    const now = this.slotNow(req);
    if (now) {
      if (now.ok) adm.slot = now.release;
      return now;
    }
    const leave = new AbortController();
    const forward = () => leave.abort();
    if (req.signal.aborted) leave.abort();
    else req.signal.addEventListener('abort', forward, { once: true });
    adm.slot = () => leave.abort();
    return this.acquireSlot({ ...req, signal: leave.signal }).then((r) => {
      req.signal.removeEventListener('abort', forward);
      if (!r.ok) return r;
      if (this.admissions.get(requestId) !== adm) {
        r.release(); // settled or cancelled while it waited
        return { ok: false, reason: 'aborted' };
      }
      adm.slot = r.release;
      return r;
    });
  }

  /**
   * Evaluates one claim without side effects on the limits; what passing it will do is noted in
   * `toHold` / `toCount` / `toStart` (cleared by each admit), which `admit` performs once every
   * claim has passed — no closure per claim, on the path of every request.
   */
  private check(c: Claim, now: number): Check {
    const minute = Math.floor(now / MINUTE);
    switch (c.kind) {
      case 'balance': {
        const w = this.walletOf(c.user);
        const credit = c.credit + w.credit;
        if (credit - w.spent - w.reserved > 0) {
          this.toHold.push(w);
          return OK;
        }
        if (!c.free) return credit - w.spent > 0 ? HELD : FAIL;
        let fc = this.freeCalls.get(c.user);
        if (fc === undefined) this.freeCalls.set(c.user, (fc = { minute, count: 0 }));
        const used = fc.minute === minute ? fc.count : 0;
        if (c.freeRpm > 0 && used >= c.freeRpm) return { ok: false, retryAfterMs: minuteStart(now) + MINUTE - now };
        this.toHold.push(w);
        this.toCount.push(fc);
        return OK;
      }
      case 'plan': {
        const p = this.plan(c.user, c.group);
        const l = c.limits;
        const d = l.daily > 0 ? planCheck(p.daily, dayStart(now), l.daily) : OK;
        if (d === FAIL) return FAIL;
        const w = l.weekly > 0 ? planCheck(p.weekly, weekStart(now), l.weekly) : OK;
        if (w === FAIL) return FAIL;
        const m = l.monthly > 0 ? planCheck(p.monthly, monthStart(now), l.monthly) : OK;
        if (m === FAIL) return FAIL;
        if (d === HELD || w === HELD || m === HELD) return HELD;
        this.toHold.push(p.daily, p.weekly, p.monthly);
        return OK;
      }
      case 'key-quota': {
        const k = this.keyCounters(c.key);
        if (c.limit > 0 && k.used >= c.limit) return FAIL;
        if (c.limit > 0 && k.used + k.reserved >= c.limit) return HELD;
        this.toHold.push(k);
        return OK;
      }
      case 'key-window': {
        const k = this.keyCounters(c.key);
        const w = k.windows[c.window];
        const restart = windowExpired(w, c.window, now);
        const used = restart ? 0 : w.used;
        if (c.limit > 0 && used >= c.limit) return FAIL;
        if (c.limit > 0 && used + w.reserved >= c.limit) return HELD;
        if (restart) this.toStart.push({ w, key: c.key, window: c.window });
        this.toHold.push(w);
        return OK;
      }
      case 'spend-cap': {
        const p = this.cap(c.user)[c.period];
        const start = c.period === 'weekly' ? weekStart(now) : monthStart(now);
        const used = periodUsed(p, start);
        if (c.limit > 0 && used < c.limit && used + p.reserved >= c.limit) return HELD;
        if (c.limit > 0 && used >= c.limit) {
          const end = c.period === 'weekly' ? start + WEEK : nextMonthStart(now);
          return { ok: false, retryAfterMs: end - now };
        }
        this.toHold.push(p);
        return OK;
      }
      case 'rpm': {
        const id = rpmKey(c.scope, c.id);
        let r = this.rpm.get(id);
        if (r === undefined) this.rpm.set(id, (r = { minute, count: 0 }));
        const used = r.minute === minute ? r.count : 0;
        if (c.limit > 0 && used >= c.limit) return { ok: false, retryAfterMs: minuteStart(now) + MINUTE - now };
        this.toCount.push(r);
        return OK;
      }
      default: {
        const never: never = c;
        throw new Error(`unknown claim kind ${(never as { kind: string }).kind}`);
      }
    }
  }

  /** Drops an admission's reservations; `undoCounts` also takes back its RPM / free-call counts. */
  private release(requestId: string, undoCounts: boolean): Admission | undefined {
    const adm = this.admissions.get(requestId);
    if (!adm) return undefined;
    this.admissions.delete(requestId);
    adm.slot?.();
    for (const h of adm.held) h.reserved -= adm.reserve;
    if (undoCounts) {
      for (const { counter, minute } of adm.counted) {
        if (counter.minute === minute && counter.count > 0) counter.count--;
      }
    }
    return adm;
  }

  cancel(requestId: string, opts: { keepCounts?: boolean } = {}): void {
    const adm = this.release(requestId, !opts.keepCounts);
    if (adm?.recovery && this.recorder !== undefined) this.recorder.cancelled(requestId, this.clock.now());
  }

  // ---- settlement ------------------------------------------------------------------------------

  settle(requestId: string, s: Settlement): void {
    assertMoney('actual', s.actual);
    assertMoney('cost', s.cost);
    // An id in flight was never settled (admit refuses settled ids, settling removes the
    // admission first): the recent ids, large sets cold in the cache, are read only for one not in flight.
    if (!this.admissions.has(requestId) && this.settled.has(requestId)) return;
    const now = this.clock.now();
    this.release(requestId, false);
    this.applySettlement(requestId, s, now);
    if (this.recorder !== undefined) this.recorder.settled(requestId, now, s);
  }

  /** The durable effects of a settlement (also used by journal replay, with the recorded time); records nothing. */
  applySettlement(requestId: string, s: Settlement, now: number): void {
    this.settled.add(requestId, now);
    const k = this.keyCounters(s.keyId);
    k.used += s.actual;
    for (const win of s.windows) {
      const w = k.windows[win];
      if (!w) continue;
      if (windowExpired(w, win, now)) {
        w.start = now;
        w.used = 0;
      }
      w.used += s.actual;
    }
    if (s.billing === 'balance') {
      this.walletOf(s.user).spent += s.actual;
      const cap = this.cap(s.user);
      rollPeriod(cap.weekly, weekStart(now));
      rollPeriod(cap.monthly, monthStart(now));
      cap.weekly.used += s.actual;
      cap.monthly.used += s.actual;
    } else {
      const p = this.plan(s.user, s.group);
      rollPeriod(p.daily, dayStart(now));
      rollPeriod(p.weekly, weekStart(now));
      rollPeriod(p.monthly, monthStart(now));
      p.daily.used += s.actual;
      p.weekly.used += s.actual;
      p.monthly.used += s.actual;
    }
    this.recordUsage(s, now);
  }

  private recordUsage(s: Settlement, now: number): void {
    const u = this.keyUsage(s.keyId);
    const c: UsageCounters = {
      requests: 1,
      input: s.usage.input,
      output: s.usage.output,
      cacheRead: s.usage.cacheRead,
      cacheWrite: s.usage.cacheWrite,
      cost: s.cost,
      actual: s.actual,
      durationMs: s.durationMs,
    };
    addCounters(u.total, c);
    const day = getOr(u.days, dayKey(now), () => new Map<string, UsageCounters>());
    addCounters(getOr(day, s.model, zeroCounters), c);
    const sec = Math.floor(now / 1000);
    const slot = u.ring[sec % 60];
    if (slot.sec !== sec) {
      slot.sec = sec;
      slot.requests = 0;
      slot.tokens = 0;
    }
    slot.requests++;
    slot.tokens += c.input + c.output + c.cacheRead + c.cacheWrite;
  }

  // ---- slots -----------------------------------------------------------------------------------

  /** The answer to a slot request when it needs no wait; undefined when it joins the queue. */
  private slotNow(req: SlotRequest): SlotResult | undefined {
    if (req.signal.aborted) return { ok: false, reason: 'aborted' };
    if (req.limit <= 0) return { ok: true, release: () => {} };
    let g = this.slots.get(req.scope);
    if (g === undefined) {
      g = { scope: req.scope, active: 0, limit: req.limit, waiters: new Set<Waiter>() };
      this.slots.set(req.scope, g);
    }
    g.limit = req.limit;
    if (g.waiters.size > 0) this.pumpSlots(g); // a raised limit first serves those already waiting
    if (g.active < g.limit) {
      g.active++;
      return { ok: true, release: this.slotRelease(g) };
    }
    if (g.waiters.size >= req.queueSize) return { ok: false, reason: 'queue_full' };
    return undefined;
  }

  async acquireSlot(req: SlotRequest): Promise<SlotResult> {
    const now = this.slotNow(req);
    if (now) return now;
    const g = this.slots.get(req.scope)!;
    return new Promise<SlotResult>((resolve) => {
      const waiter: Waiter = {
        resolve,
        signal: req.signal,
        onAbort: () => this.dropWaiter(g, waiter, 'aborted'),
        timer: setTimeout(() => this.dropWaiter(g, waiter, 'timeout'), Math.min(Math.max(0, req.maxWaitMs), MAX_TIMER_MS)),
      };
      req.signal.addEventListener('abort', waiter.onAbort, { once: true });
      g.waiters.add(waiter);
    });
  }

  private slotRelease(g: SlotGroup): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      g.active--;
      this.slotsChanged(g);
    };
  }

  /** Hands free slots to waiters in FIFO order. */
  private pumpSlots(g: SlotGroup): void {
    while (g.active < g.limit && g.waiters.size > 0) {
      const w = g.waiters.values().next().value as Waiter;
      this.unlinkWaiter(g, w);
      g.active++;
      w.resolve({ ok: true, release: this.slotRelease(g) });
    }
  }

  /** After a release or a dropped waiter: serve the queue, forget an idle user. */
  private slotsChanged(g: SlotGroup): void {
    this.pumpSlots(g);
    if (g.active === 0 && g.waiters.size === 0 && this.slots.get(g.scope) === g) this.slots.delete(g.scope);
  }

  private unlinkWaiter(g: SlotGroup, w: Waiter): void {
    g.waiters.delete(w);
    clearTimeout(w.timer);
    w.signal.removeEventListener('abort', w.onAbort);
  }

  private dropWaiter(g: SlotGroup, w: Waiter, reason: 'timeout' | 'aborted'): void {
    if (!g.waiters.has(w)) return;
    this.unlinkWaiter(g, w);
    w.resolve({ ok: false, reason });
    this.slotsChanged(g);
  }

  // ---- reads -----------------------------------------------------------------------------------

  /** Slots held in scopes, and requests counted this minute by RPM counters (Store.limitsInUse). */
  limitsInUse(q: LimitsQuery): LimitsInUse {
    const now = this.clock.now();
    const minute = Math.floor(now / MINUTE);
    return {
      slots: q.slots.map((scope) => this.slots.get(scope)?.active ?? 0),
      rpm: q.rpm.map((c) => {
        const r = this.rpm.get(rpmKey(c.scope, c.id));
        return r !== undefined && r.minute === minute ? r.count : 0;
      }),
      minuteLeftMs: minuteStart(now) + MINUTE - now,
    };
  }

  balanceSpent(user: string): number {
    return this.wallets.get(user)?.spent ?? 0;
  }

  wallet(user: string): { credit: number; spent: number } {
    const w = this.wallets.get(user);
    return { credit: w?.credit ?? 0, spent: w?.spent ?? 0 };
  }

  /**
   * Adds `amount` (micro-USD, signed) to a user's stored credit, unless it is a correction that
   * would take the balance (`baseCredit` + credit − spent) below zero: then nothing changes and
   * undefined is returned. The wallet after, otherwise.
   */
  /** A credit replayed from the journal (it was checked when it was made). */
  applyCredit(user: string, amount: number): void {
    this.walletOf(user).credit += amount;
  }

  addCredit(user: string, amount: number, baseCredit: number): { credit: number; spent: number } | undefined {
    if (!Number.isSafeInteger(amount)) throw new TypeError(`amount must be an integer (micro-USD), got ${amount}`);
    const w = this.walletOf(user);
    if (amount < 0 && baseCredit + w.credit + amount - w.spent < 0) return undefined;
    w.credit += amount;
    return { credit: w.credit, spent: w.spent };
  }

  keyState(keyId: string): KeyState {
    const now = this.clock.now();
    const k = this.keys.get(keyId);
    const windows = {} as Record<Window, WindowState>;
    for (const win of WINDOWS) {
      const w = k?.windows[win];
      if (!w) windows[win] = { used: 0, reserved: 0 };
      else if (windowExpired(w, win, now)) windows[win] = { used: 0, reserved: w.reserved };
      else windows[win] = { start: w.start, used: w.used, reserved: w.reserved };
    }
    return { used: k?.used ?? 0, reserved: k?.reserved ?? 0, windows };
  }

  planUsage(user: string, group: string): PeriodUsage {
    const p = this.plans.get(planKey(user, group));
    if (!p) return { daily: 0, weekly: 0, monthly: 0 };
    const now = this.clock.now();
    return {
      daily: periodUsed(p.daily, dayStart(now)),
      weekly: periodUsed(p.weekly, weekStart(now)),
      monthly: periodUsed(p.monthly, monthStart(now)),
    };
  }

  spendCapUsage(user: string): { weekly: number; monthly: number } {
    const c = this.caps.get(user);
    if (!c) return { weekly: 0, monthly: 0 };
    const now = this.clock.now();
    return { weekly: periodUsed(c.weekly, weekStart(now)), monthly: periodUsed(c.monthly, monthStart(now)) };
  }

  keyStats(keyId: string, fromDay: string, toDay: string): KeyStats {
    const now = this.clock.now();
    const u = this.usage.get(keyId);
    const today = zeroCounters();
    const total = zeroCounters();
    const byModel: Record<string, UsageCounters> = Object.create(null);
    const byDay: Record<string, UsageCounters> = {};
    let rpm = 0;
    let tpm = 0;
    if (u) {
      addCounters(total, u.total);
      for (const c of u.days.get(dayKey(now))?.values() ?? []) addCounters(today, c);
      for (const [day, models] of u.days) {
        if (day < fromDay || day > toDay) continue;
        for (const [model, c] of models) {
          byModel[model] ??= zeroCounters();
          addCounters(byModel[model], c);
          addCounters((byDay[day] ??= zeroCounters()), c);
        }
      }
      const nowSec = Math.floor(now / 1000);
      for (const slot of u.ring) {
        if (slot.sec > nowSec - 60 && slot.sec <= nowSec) {
          rpm += slot.requests;
          tpm += slot.tokens;
        }
      }
    }
    return { today, total, byModel: { ...byModel }, byDay, rpm, tpm };
  }

  resetKeyQuota(keyId: string): void {
    this.applyReset(keyId);
    if (this.recorder !== undefined) this.recorder.reset(keyId, this.clock.now());
  }

  /** A quota reset (also used by journal replay); records nothing. */
  applyReset(keyId: string): void {
    const k = this.keyCounters(keyId);
    k.used = 0;
    for (const win of WINDOWS) {
      k.windows[win].start = undefined;
      k.windows[win].used = 0;
    }
  }

  // ---- remembered items --------------------------------------------------------------------------

  remember(namespace: string, entries: ReadonlyArray<readonly [string, string]>, ttlMs: number): void {
    for (const [id, value] of entries) this.remembered.set(`${namespace}\u0000${id}`, value, { ttl: Math.max(1, ttlMs) });
  }

  recall(namespace: string, ids: readonly string[]): Array<string | undefined> {
    return ids.map((id) => this.remembered.get(`${namespace}\u0000${id}`));
  }

  // ---- counters (created on first touch; never replaced, since admissions hold references) -----

  private walletOf(user: string): Wallet {
    return getOr(this.wallets, user, () => ({ spent: 0, reserved: 0, credit: 0 }));
  }

  private cap(user: string): CapCounters {
    return getOr(this.caps, user, () => ({ weekly: newPeriod(), monthly: newPeriod() }));
  }

  private plan(user: string, group: string): PlanCounters {
    return getOr(this.plans, planKey(user, group), () => ({ user, group, daily: newPeriod(), weekly: newPeriod(), monthly: newPeriod() }));
  }

  private keyCounters(keyId: string): KeyCounters {
    return getOr(this.keys, keyId, () => ({
      used: 0,
      reserved: 0,
      windows: { '5h': { used: 0, reserved: 0 }, '1d': { used: 0, reserved: 0 }, '7d': { used: 0, reserved: 0 } },
    }));
  }

  private keyUsage(keyId: string): KeyUsage {
    return getOr(this.usage, keyId, () => ({
      total: zeroCounters(),
      days: new Map(),
      ring: Array.from({ length: 60 }, () => ({ sec: -1, requests: 0, tokens: 0 })),
    }));
  }

  // ---- snapshot and replay ---------------------------------------------------------------------

  /** Whether a settlement of this id was applied lately (replay skips a second one). */
  isSettled(requestId: string): boolean {
    return this.settled.has(requestId);
  }

  /** A key window started at `t` (journal replay); records nothing. */
  applyWindowStart(keyId: string, window: Window, t: number): void {
    const w = this.keyCounters(keyId).windows[window];
    if (w) {
      w.start = t;
      w.used = 0;
    }
  }

  /** The durable state, with the admissions in flight that carry a recovery settlement (`open`). */
  snapshot(): DurableState {
    const period = (p: Period): PeriodJson => ({ start: p.start, used: p.used });
    const days = (u: KeyUsage) => Object.fromEntries([...u.days].map(([day, models]) => [day, Object.fromEntries(models)]));
    return {
      wallets: Object.fromEntries([...this.wallets].map(([u, w]) => [u, w.spent])),
      credits: Object.fromEntries([...this.wallets].filter(([, w]) => w.credit !== 0).map(([u, w]) => [u, w.credit])),
      caps: Object.fromEntries([...this.caps].map(([u, c]) => [u, { weekly: period(c.weekly), monthly: period(c.monthly) }])),
      plans: Object.fromEntries(
        [...this.plans].map(([k, p]) => [
          k,
          {
            user: p.user,
            group: p.group,
            daily: period(p.daily),
            weekly: period(p.weekly),
            monthly: period(p.monthly),
          },
        ]),
      ),
      keys: Object.fromEntries(
        [...this.keys].map(([id, k]) => [
          id,
          {
            used: k.used,
            windows: Object.fromEntries(
              WINDOWS.filter((w) => k.windows[w].start !== undefined).map((w) => [
                w,
                { start: k.windows[w].start!, used: k.windows[w].used },
              ]),
            ),
          },
        ]),
      ),
      stats: Object.fromEntries([...this.usage].map(([id, u]) => [id, { total: u.total, days: days(u) }])),
      open: Object.fromEntries([...this.admissions].filter(([, a]) => a.recovery).map(([id, a]) => [id, { t: a.t, r: a.recovery! }])),
    };
  }

  /** Loads a snapshot's durable state into a fresh state; `s.open` is left to the caller (crash recovery). */
  restore(s: DurableState): void {
    for (const [user, spent] of Object.entries(s.wallets)) this.walletOf(user).spent = spent;
    for (const [user, credit] of Object.entries(s.credits ?? {})) this.walletOf(user).credit = credit;
    for (const [user, c] of Object.entries(s.caps)) {
      const cap = this.cap(user);
      Object.assign(cap.weekly, c.weekly);
      Object.assign(cap.monthly, c.monthly);
    }
    for (const p of Object.values(s.plans)) {
      const plan = this.plan(p.user, p.group);
      Object.assign(plan.daily, p.daily);
      Object.assign(plan.weekly, p.weekly);
      Object.assign(plan.monthly, p.monthly);
    }
    for (const [id, k] of Object.entries(s.keys)) {
      const kc = this.keyCounters(id);
      kc.used = k.used;
      for (const w of WINDOWS) {
        const saved = k.windows[w];
        if (saved) Object.assign(kc.windows[w], saved);
      }
    }
    for (const [id, st] of Object.entries(s.stats)) {
      const u = this.keyUsage(id);
      Object.assign(u.total, st.total);
      for (const [day, models] of Object.entries(st.days)) {
        u.days.set(day, new Map(Object.entries(models).map(([m, c]) => [m, { ...zeroCounters(), ...c }])));
      }
    }
  }
}
