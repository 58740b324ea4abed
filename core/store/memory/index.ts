/**
 * The embedded store: all state in process memory, persisted to a directory as a snapshot plus an
 * append-only journal. The default for one gateway instance.
 *
 * Decisions (the contract is in ../types.ts):
 * - Atomicity comes from the event loop: `admit()` evaluates every claim and then applies them
 *   without an `await` in between, so no other request can interleave. Evaluation builds one
 *   closure per claim that applies exactly what was checked; nothing changes unless all pass.
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
 * - Admitting an id that is already admitted is a no-op returning ok (a retried call); admitting
 *   an id that was already settled throws (ids are unique per request).
 * - Mutations after close() throw: a settlement that cannot be made durable is reported, not lost
 *   silently.
 *
 * Durability (only with `path`):
 * - Files: `snapshot.json` (whole durable state + the journal sequence number it includes;
 *   written to a temp file, fsynced, renamed, directory fsynced), `journal.jsonl` (one JSON
 *   value per line: admissions with their recovery settlement, settlements, cancellations,
 *   window starts, quota resets, each with an increasing `seq`) and `gateway.lock` (the PID of
 *   the one process using the folder). Settlements and admissions, two lines per request, are
 *   positional arrays built by hand (`settlementLine`: about a third of the cost of
 *   `JSON.stringify` of the keyed object); the rarer entries are keyed objects, and so is every
 *   line of journals written before (read as ever: an upgrade replays an old journal).
 * - Journal appends are written to the OS once per event-loop turn (one synchronous write of
 *   everything appended during the turn), so a process kill loses nothing that was settled before
 *   the turn ended; the file is fsynced every `flushIntervalMs`, so a power loss or kernel crash
 *   loses at most that interval. A torn last line is skipped on load.
 * - Crash recovery (the one rule for every store, docs/limits.md): an admission that carries a
 *   `recovery` settlement is journaled; its settle or cancel resolves it. At the next start, every
 *   admission left unresolved (the process died with the request in flight) is settled with its
 *   `recovery` (flagged `recovered` and `estimated`, logged one line each). Open admissions are
 *   kept in the snapshot too, so compaction never drops one.
 * - One process per folder: `gateway.lock` is created exclusively and names the holder's PID; a
 *   second open fails with the folder and the PID, unless that PID no longer runs (stale lock of a
 *   killed process), in which case the lock is taken over.
 * - Replay skips entries whose `seq` the snapshot already contains, so a crash between writing a
 *   snapshot and truncating the journal does not count anything twice (nor does a journal chunk
 *   rewritten after a failed write).
 * - Compaction (new snapshot, journal truncated) runs when the journal passes `compactBytes`
 *   (4 MB), after loading a non-empty journal (which also drops a torn tail before new appends),
 *   and on close().
 * - Volatile by design: reservations, admission records, RPM and free-call counters, slots, and
 *   the last-60-s rpm/tpm ring. Settled request ids are restored only from the journal tail being
 *   replayed, not from the snapshot: a request cannot outlive the process that admitted it, so
 *   cross-restart idempotency is only needed for what the journal itself replays.
 */
import { mkdir, open, readFile, rename, type FileHandle } from 'node:fs/promises';
import { closeSync, fsync, ftruncateSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { LRUCache } from 'lru-cache';
import { join } from 'node:path';
import { systemClock, type Clock } from '../../clock.js';
import { silentLogger, type Logger } from '../../log.js';
import { WINDOWS, WINDOW_MS, type Window } from '../../config/types.js';
import {
  dayKey, dayStart, weekStart, monthStart, nextMonthStart, minuteStart,
  type AdmitRequest, type AdmitResult, type Claim, type ClientSignal, type KeyState, type KeyStats, type PeriodUsage,
  type Settlement, type SlotRequest, type SlotResult, type Store, type StoreHealth, type UsageCounters, type WindowState,
} from '../types.js';
import { RecentIds } from '../recent.js';

const MINUTE = 60_000;
const DAY = 86_400_000;
const WEEK = 7 * DAY;
const SETTLED_TTL_MS = DAY;
/** Settled ids kept for idempotency: at least the last 200,000 (RecentIds keeps between half and all). */
const SETTLED_MAX = 400_000;
const COMPACT_BYTES = 4 * 1024 * 1024;
const MAX_TIMER_MS = 2_147_483_647;
/** Bytes of `remember()` entries kept (ids and values, as UTF-16 length); the oldest go first. */
const REMEMBER_MAX_CHARS = 64 * 1024 * 1024;
const SNAPSHOT = 'snapshot.json';
const JOURNAL = 'journal.jsonl';
const LOCK = 'gateway.lock';
/** Folders locked by this process (a lock naming our own PID but not listed here is stale). */
const lockedHere = new Set<string>();

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

// ---- persisted shapes --------------------------------------------------------------------------

type PeriodJson = { start: number; used: number };

interface SnapshotJson {
  v: 1;
  seq: number;
  savedAt: number;
  wallets: Record<string, number>;
  caps: Record<string, { weekly: PeriodJson; monthly: PeriodJson }>;
  /** keyed by planKey(user, group) */
  plans: Record<string, { user: string; group: string; daily: PeriodJson; weekly: PeriodJson; monthly: PeriodJson }>;
  keys: Record<string, { used: number; windows: Partial<Record<Window, PeriodJson>> }>;
  stats: Record<string, { total: UsageCounters; days: Record<string, Record<string, UsageCounters>> }>;
  /** Admissions in flight when the snapshot was taken, with their recovery settlement. */
  open?: Record<string, { t: number; r: Settlement }>;
}

type JournalEntry =
  | { seq: number; op: 'settle'; t: number; id: string; s: Settlement }
  | { seq: number; op: 'admit'; t: number; id: string; r: Settlement }
  | { seq: number; op: 'cancel'; t: number; id: string }
  | { seq: number; op: 'wstart'; t: number; key: string; w: Window }
  | { seq: number; op: 'reset'; t: number; key: string };

type DistributiveOmit<T, K extends keyof T> = T extends unknown ? Omit<T, K> : never;

/**
 * The positional journal line of a settlement (`SETTLE`) or of an admission with its recovery
 * settlement (`ADMIT`):
 *   [op, seq, t, id, keyId, user, group, model, billing, input, output, cacheRead, cacheWrite,
 *    cost, actual, durationMs, windows (comma-separated), flags (1 estimated, 2 recovered)]
 * Older journals hold the same entries as keyed objects (`JournalEntry`); both are read.
 */
const SETTLE = 1;
const ADMIT = 2;
const LINE_FIELDS = 18;

/** JSON texts of the strings that repeat on every line (key, user, group, model and window names). */
const quoted = new Map<string, string>();
function q(v: string): string {
  if (typeof v !== 'string') return JSON.stringify(v ?? null); // what JSON.stringify of the object wrote
  let j = quoted.get(v);
  if (j === undefined) {
    if (quoted.size >= 4096) quoted.clear();
    j = JSON.stringify(v);
    quoted.set(v, j);
  }
  return j;
}

/** A number as JSON writes it (NaN, infinities and a missing value as null): the line always parses. */
function n(v: number): string | number {
  return typeof v === 'number' && Number.isFinite(v) ? v : 'null';
}

function settlementLine(op: number, seq: number, t: number, id: string, s: Settlement): string {
  const u = s.usage;
  return '[' + op + ',' + seq + ',' + n(t) + ',' + JSON.stringify(id) + ',' + q(s.keyId) + ',' + q(s.user) + ',' + q(s.group) + ',' +
    q(s.model) + ',' + q(s.billing) + ',' + n(u.input) + ',' + n(u.output) + ',' + n(u.cacheRead) + ',' + n(u.cacheWrite) + ',' +
    n(s.cost) + ',' + n(s.actual) + ',' + n(s.durationMs) + ',' + q(s.windows.join(',')) + ',' + ((s.estimated ? 1 : 0) | (s.recovered ? 2 : 0)) + ']\n';
}

/** A positional line back to its entry; undefined when it is not one this version writes. */
function fromLine(a: unknown[]): JournalEntry | undefined {
  if (a.length < LINE_FIELDS || (a[0] !== SETTLE && a[0] !== ADMIT)) return undefined;
  const flags = a[17] as number;
  const s: Settlement = {
    keyId: a[4] as string, user: a[5] as string, group: a[6] as string, model: a[7] as string, billing: a[8] as Settlement['billing'],
    usage: { input: a[9] as number, output: a[10] as number, cacheRead: a[11] as number, cacheWrite: a[12] as number },
    cost: a[13] as number, actual: a[14] as number, durationMs: a[15] as number,
    windows: a[16] === '' ? [] : (a[16] as string).split(',') as Window[],
  };
  if (flags & 1) s.estimated = true;
  if (flags & 2) s.recovered = true;
  const [, seq, t, id] = a as [number, number, number, string];
  return a[0] === SETTLE ? { seq, op: 'settle', t, id, s } : { seq, op: 'admit', t, id, r: s };
}

// ---- small helpers -----------------------------------------------------------------------------

const zeroCounters = (): UsageCounters => ({ requests: 0, input: 0, output: 0, cacheRead: 0, cacheWrite: 0, cost: 0, actual: 0, durationMs: 0 });

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

function errCode(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException | null)?.code;
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

export interface MemoryStoreOptions {
  /** Directory for the snapshot and journal; undefined = nothing on disk. */
  path?: string;
  /** How often buffered journal writes are written and fsynced (default 1000). */
  flushIntervalMs?: number;
  clock?: Clock;
  log?: Logger;
  /** Journal size that triggers compaction (default 4 MB). */
  compactBytes?: number;
}

export class MemoryStore implements Store {
  readonly kind = 'memory' as const;

  private readonly wallets = new Map<string, Wallet>();
  private readonly caps = new Map<string, CapCounters>();
  private readonly plans = new Map<string, PlanCounters & { user: string; group: string }>();
  private readonly keys = new Map<string, KeyCounters>();
  private readonly usage = new Map<string, KeyUsage>();
  private readonly rpm = new Map<string, MinuteCounter>();
  private readonly freeCalls = new Map<string, MinuteCounter>();
  private readonly admissions = new Map<string, Admission>();
  /** Request ids settled lately (../recent.ts): the last SETTLED_MAX / 2 at least, each for a day at least. */
  private readonly settled = new RecentIds(SETTLED_MAX, SETTLED_TTL_MS);
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

  // persistence
  private seq = 0;
  private pending: string[] = [];
  /** The journal's file descriptor (appends are synchronous writes, once per event-loop turn). */
  private journal: number | undefined;
  private journalBytes = 0;
  /** Bytes written since the last fsync. */
  private unsynced = false;
  private writeScheduled = false;
  /** While a snapshot is being written, appends wait in `pending` (the journal is truncated after). */
  private compacting = false;
  /** Admissions found unresolved while loading (id → recovery), settled once loading ends. */
  private readonly unresolved = new Map<string, { t: number; r: Settlement }>();
  private locked = false;
  private chain: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;

  private constructor(
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly dir: string | undefined,
    private readonly flushIntervalMs: number,
    private readonly compactBytes: number,
  ) {}

  static async open(opts: MemoryStoreOptions = {}): Promise<MemoryStore> {
    const store = new MemoryStore(
      opts.clock ?? systemClock,
      opts.log ?? silentLogger,
      opts.path,
      opts.flushIntervalMs ?? 1000,
      opts.compactBytes ?? COMPACT_BYTES,
    );
    if (store.dir !== undefined) await store.load();
    return store;
  }

  // ---- admission -------------------------------------------------------------------------------

  async admit(req: AdmitRequest): Promise<AdmitResult> {
    this.assertOpen();
    assertMoney('reserve', req.reserve);
    // Ids are minted by the gateway, one admission each; a repeat is a bug, never a free pass.
    if (this.admissions.has(req.requestId) || this.settled.has(req.requestId)) throw new Error(`request ${req.requestId} was already admitted`);
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
      this.append({ op: 'wstart', t: now, key, w: window });
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
    if (req.recovery && this.dir !== undefined) {
      assertMoney('recovery.actual', req.recovery.actual);
      adm.recovery = { ...req.recovery, estimated: true, recovered: true };
      this.appendLine(settlementLine(ADMIT, ++this.seq, now, req.requestId, adm.recovery));
    }
    if (req.slot) return { ok: true, slot: this.admissionSlot(req.requestId, adm, req.slot) };
    return { ok: true };
  }

  /** A slot that belongs to an admission: its settlement or cancel releases it (or leaves the queue). */
  private admissionSlot(requestId: string, adm: Admission, req: SlotRequest): Promise<SlotResult> {
    // Decided at once (the usual case): no queue to leave, so no AbortController and no listener.
    const now = this.slotNow(req);
    if (now) {
      if (now.ok) adm.slot = now.release;
      return Promise.resolve(now);
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
        const w = this.wallet(c.user);
        if (c.credit - w.spent - w.reserved > 0) {
          this.toHold.push(w);
          return OK;
        }
        if (!c.free) return c.credit - w.spent > 0 ? HELD : FAIL;
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

  async cancel(requestId: string, opts: { keepCounts?: boolean } = {}): Promise<void> {
    const adm = this.release(requestId, !opts.keepCounts);
    if (adm?.recovery && !this.closed) this.append({ op: 'cancel', t: this.clock.now(), id: requestId });
  }

  // ---- settlement ------------------------------------------------------------------------------

  async settle(requestId: string, s: Settlement): Promise<void> {
    this.assertOpen();
    assertMoney('actual', s.actual);
    assertMoney('cost', s.cost);
    if (this.settled.has(requestId)) return;
    const now = this.clock.now();
    this.release(requestId, false);
    this.applySettlement(requestId, s, now);
    if (this.dir !== undefined) this.appendLine(settlementLine(SETTLE, ++this.seq, now, requestId, s));
  }

  /** The durable effects of a settlement (also used by journal replay, with the recorded time). */
  private applySettlement(requestId: string, s: Settlement, now: number): void {
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
      this.wallet(s.user).spent += s.actual;
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

  async balanceSpent(user: string): Promise<number> {
    return this.wallets.get(user)?.spent ?? 0;
  }

  async keyState(keyId: string): Promise<KeyState> {
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

  async planUsage(user: string, group: string): Promise<PeriodUsage> {
    const p = this.plans.get(planKey(user, group));
    if (!p) return { daily: 0, weekly: 0, monthly: 0 };
    const now = this.clock.now();
    return {
      daily: periodUsed(p.daily, dayStart(now)),
      weekly: periodUsed(p.weekly, weekStart(now)),
      monthly: periodUsed(p.monthly, monthStart(now)),
    };
  }

  async spendCapUsage(user: string): Promise<{ weekly: number; monthly: number }> {
    const c = this.caps.get(user);
    if (!c) return { weekly: 0, monthly: 0 };
    const now = this.clock.now();
    return { weekly: periodUsed(c.weekly, weekStart(now)), monthly: periodUsed(c.monthly, monthStart(now)) };
  }

  async keyStats(keyId: string, fromDay: string, toDay: string): Promise<KeyStats> {
    const now = this.clock.now();
    const u = this.usage.get(keyId);
    const today = zeroCounters();
    const total = zeroCounters();
    const byModel: Record<string, UsageCounters> = Object.create(null);
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
    return { today, total, byModel: { ...byModel }, rpm, tpm };
  }

  async resetKeyQuota(keyId: string): Promise<void> {
    this.assertOpen();
    this.applyReset(keyId);
    this.append({ op: 'reset', t: this.clock.now(), key: keyId });
  }

  private applyReset(keyId: string): void {
    const k = this.keyCounters(keyId);
    k.used = 0;
    for (const win of WINDOWS) {
      k.windows[win].start = undefined;
      k.windows[win].used = 0;
    }
  }

  // ---- remembered items --------------------------------------------------------------------------

  async remember(namespace: string, entries: ReadonlyArray<readonly [string, string]>, ttlMs: number): Promise<void> {
    for (const [id, value] of entries) this.remembered.set(`${namespace}\u0000${id}`, value, { ttl: Math.max(1, ttlMs) });
  }

  async recall(namespace: string, ids: readonly string[]): Promise<Array<string | undefined>> {
    return ids.map((id) => this.remembered.get(`${namespace}\u0000${id}`));
  }

  async health(): Promise<StoreHealth> {
    return { ready: !this.closed };
  }

  // ---- counters (created on first touch; never replaced, since admissions hold references) -----

  private wallet(user: string): Wallet {
    return getOr(this.wallets, user, () => ({ spent: 0, reserved: 0 }));
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

  // ---- persistence -----------------------------------------------------------------------------

  private assertOpen(): void {
    if (this.closed) throw new Error('store is closed');
  }

  private append(entry: DistributiveOmit<JournalEntry, 'seq'>): void {
    if (this.dir === undefined) return;
    this.appendLine(JSON.stringify({ seq: ++this.seq, ...entry }) + '\n');
  }

  /** `line` must carry the next `seq` (`++this.seq`). */
  private appendLine(line: string): void {
    if (this.dir === undefined) return;
    this.pending.push(line);
    if (!this.writeScheduled && this.journal !== undefined) {
      this.writeScheduled = true;
      setImmediate(() => {
        this.writeScheduled = false;
        this.writeNow();
      });
    }
  }

  /**
   * Hands everything appended so far to the OS in one synchronous write (no fsync): after it, a
   * process kill loses none of it. Skipped while a snapshot is written (the journal is truncated
   * when it is durable; `compact` writes what waited).
   */
  private writeNow(): void {
    const fd = this.journal;
    if (fd === undefined || this.compacting || this.pending.length === 0) return;
    const chunk = Buffer.from(this.pending.join(''), 'utf8');
    this.pending = [];
    try {
      let off = 0;
      while (off < chunk.length) off += writeSync(fd, chunk, off, chunk.length - off);
    } catch (e) {
      // Put it back for the next attempt; cut off a partial write so lines stay whole.
      this.pending.unshift(chunk.toString('utf8'));
      try { ftruncateSync(fd, this.journalBytes); } catch { /* next write retries */ }
      this.log.error('store journal write failed', { error: e as Error });
      return;
    }
    this.journalBytes += chunk.length;
    this.unsynced = true;
    if (this.journalBytes >= this.compactBytes) void this.serial(() => this.compact()).catch((e) => this.log.error('store compaction failed', { error: e as Error }));
  }

  /** Runs `fn` after every earlier disk operation (one writer at a time). */
  private serial(fn: () => Promise<void>): Promise<void> {
    const p = this.chain.then(fn);
    this.chain = p.catch(() => undefined);
    return p;
  }

  async flush(): Promise<void> {
    if (this.dir === undefined || this.journal === undefined) return;
    return this.serial(() => this.writePending());
  }

  /** Writes what is pending and fsyncs the journal (power-loss durability). */
  private async writePending(): Promise<void> {
    const fd = this.journal;
    if (fd === undefined) return;
    this.writeNow();
    if (this.pending.length > 0 && !this.compacting) throw new Error('store journal write failed');
    if (!this.unsynced) return;
    this.unsynced = false;
    await new Promise<void>((resolve, reject) => fsync(fd, (e) => (e ? reject(e) : resolve())));
  }

  /** Writes a snapshot of the whole state and empties the journal. Run through serial(). */
  private async compact(): Promise<void> {
    const dir = this.dir!;
    const snap = JSON.stringify(this.snapshot());
    // Everything buffered so far is in the snapshot; keep it until the snapshot is durable.
    // Appends made while it is written wait in `pending` (written after the truncation below).
    const included = this.pending;
    this.pending = [];
    this.compacting = true;
    try {
      const tmp = join(dir, SNAPSHOT + '.tmp');
      const fh = await open(tmp, 'w');
      try {
        await fh.writeFile(snap, 'utf8');
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, join(dir, SNAPSHOT));
      await syncDir(dir);
    } catch (e) {
      this.pending = included.concat(this.pending);
      this.compacting = false;
      throw e;
    }
    try {
      if (this.journal !== undefined) {
        ftruncateSync(this.journal, 0);
        this.journalBytes = 0;
      }
    } finally {
      this.compacting = false;
    }
    this.writeNow();
  }

  async close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (this.dir === undefined || this.journal === undefined) return;
    try {
      await this.serial(() => this.writePending());
      await this.serial(() => this.compact());
      await this.serial(() => this.writePending());
    } finally {
      const fd = this.journal;
      this.journal = undefined;
      closeSync(fd);
      this.unlock();
    }
  }

  /** Takes `gateway.lock` (one process per folder); throws naming the holder when it runs. */
  private lock(): void {
    const dir = this.dir!;
    const file = join(dir, LOCK);
    for (let i = 0; i < 2; i++) {
      try {
        const fd = openSync(file, 'wx');
        writeSync(fd, `${process.pid}\n`);
        closeSync(fd);
        this.locked = true;
        lockedHere.add(dir);
        return;
      } catch (e) {
        if (errCode(e) !== 'EEXIST') throw e;
      }
      let pid = NaN;
      try { pid = Number.parseInt(readFileSync(file, 'utf8'), 10); } catch { /* removed meanwhile, or unreadable */ }
      const held = pid === process.pid ? lockedHere.has(dir) : Number.isInteger(pid) && pid > 0 && processRuns(pid);
      if (held) {
        throw new Error(`store folder ${dir} is in use by another gateway process (PID ${pid}, ${file}); ` +
          'stop that process or give this gateway another store.path');
      }
      if (i === 0) {
        this.log.warn('store: taking over a stale lock', { path: file, pid: Number.isNaN(pid) ? undefined : pid });
        try { unlinkSync(file); } catch { /* another process took it over first; the retry says so */ }
      }
    }
    throw new Error(`store folder ${dir} is being taken over by another gateway process (${file})`);
  }

  private unlock(): void {
    if (!this.locked) return;
    this.locked = false;
    lockedHere.delete(this.dir!);
    try { unlinkSync(join(this.dir!, LOCK)); } catch { /* already gone */ }
  }

  private async load(): Promise<void> {
    const dir = this.dir!;
    await mkdir(dir, { recursive: true });
    this.lock();
    try {
      const snapText = await readIfExists(join(dir, SNAPSHOT));
      if (snapText !== undefined) this.restore(JSON.parse(snapText) as SnapshotJson);
      const journalText = (await readIfExists(join(dir, JOURNAL))) ?? '';
      const replayed = this.replay(journalText);
      const recovered = this.recoverUnresolved();
      this.journal = openSync(join(dir, JOURNAL), 'a');
      this.journalBytes = Buffer.byteLength(journalText);
      await syncDir(dir); // the journal's directory entry, if it was just created
      // Fold the journal into a fresh snapshot: also drops a torn tail before anything is appended.
      if (journalText.length > 0 || recovered > 0) await this.serial(() => this.compact());
      this.log.info('store loaded', { path: dir, seq: this.seq, replayed, recovered });
    } catch (e) {
      if (this.journal !== undefined) closeSync(this.journal);
      this.journal = undefined;
      this.unlock();
      throw e;
    }
    this.timer = setInterval(() => {
      this.flush().catch((e) => this.log.error('store journal flush failed', { error: e as Error }));
    }, this.flushIntervalMs);
    this.timer.unref();
  }

  private replay(text: string): number {
    const lines = text.split('\n');
    let replayed = 0;
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      if (line.trim() === '') continue;
      let e: JournalEntry;
      try {
        const v = JSON.parse(line) as JournalEntry | unknown[];
        if (Array.isArray(v)) {
          const d = fromLine(v);
          if (!d) {
            this.log.warn('store journal: unknown entry', { line: i + 1 });
            continue;
          }
          e = d;
        } else e = v;
      } catch {
        const last = lines.slice(i + 1).every((l) => l.trim() === '');
        if (last) this.log.warn('store journal: ignoring torn last line', { line: i + 1 });
        else this.log.error('store journal: skipping unreadable line', { line: i + 1 });
        continue;
      }
      if (typeof e.seq !== 'number' || e.seq <= this.seq) continue;
      this.seq = e.seq;
      replayed++;
      switch (e.op) {
        case 'settle':
          this.unresolved.delete(e.id);
          if (!this.settled.has(e.id)) this.applySettlement(e.id, e.s, e.t);
          break;
        case 'admit':
          if (!this.settled.has(e.id)) this.unresolved.set(e.id, { t: e.t, r: e.r });
          break;
        case 'cancel':
          this.unresolved.delete(e.id);
          break;
        case 'wstart': {
          const w = this.keyCounters(e.key).windows[e.w];
          if (w) {
            w.start = e.t;
            w.used = 0;
          }
          break;
        }
        case 'reset':
          this.applyReset(e.key);
          break;
        default:
          this.log.warn('store journal: unknown entry', { line: i + 1 });
      }
    }
    return replayed;
  }

  /**
   * Settles every admission the previous process left unresolved with its recovery settlement
   * (docs/limits.md "Crash recovery"). Runs at load, before the journal is opened: the settlements
   * get journal sequence numbers and land in the snapshot written right after.
   */
  private recoverUnresolved(): number {
    let n = 0;
    for (const [id, { t, r }] of this.unresolved) {
      const s: Settlement = { ...r, estimated: true, recovered: true };
      this.applySettlement(id, s, t);
      this.seq++;
      n++;
      this.log.warn('store: request in flight at a crash settled by the recovery rule', {
        requestId: id, key: s.keyId, user: s.user, model: s.model, actual: s.actual, usage: s.usage, recovered: true,
      });
    }
    this.unresolved.clear();
    return n;
  }

  private snapshot(): SnapshotJson {
    const period = (p: Period): PeriodJson => ({ start: p.start, used: p.used });
    const days = (u: KeyUsage) =>
      Object.fromEntries([...u.days].map(([day, models]) => [day, Object.fromEntries(models)]));
    return {
      v: 1,
      seq: this.seq,
      savedAt: this.clock.now(),
      wallets: Object.fromEntries([...this.wallets].map(([u, w]) => [u, w.spent])),
      caps: Object.fromEntries([...this.caps].map(([u, c]) => [u, { weekly: period(c.weekly), monthly: period(c.monthly) }])),
      plans: Object.fromEntries([...this.plans].map(([k, p]) => [k, {
        user: p.user, group: p.group, daily: period(p.daily), weekly: period(p.weekly), monthly: period(p.monthly),
      }])),
      keys: Object.fromEntries([...this.keys].map(([id, k]) => [id, {
        used: k.used,
        windows: Object.fromEntries(WINDOWS.filter((w) => k.windows[w].start !== undefined)
          .map((w) => [w, { start: k.windows[w].start!, used: k.windows[w].used }])),
      }])),
      stats: Object.fromEntries([...this.usage].map(([id, u]) => [id, { total: u.total, days: days(u) }])),
      open: Object.fromEntries([...this.admissions].filter(([, a]) => a.recovery).map(([id, a]) => [id, { t: a.t, r: a.recovery! }])),
    };
  }

  private restore(s: SnapshotJson): void {
    if (s.v !== 1) throw new Error(`store snapshot: unsupported version ${String(s.v)}`);
    this.seq = s.seq;
    for (const [id, o] of Object.entries(s.open ?? {})) this.unresolved.set(id, o);
    for (const [user, spent] of Object.entries(s.wallets)) this.wallet(user).spent = spent;
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

async function readIfExists(file: string): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch (e) {
    if (errCode(e) === 'ENOENT') return undefined;
    throw e;
  }
}

/** Makes a rename durable; not every platform can open a directory for fsync. */
async function syncDir(dir: string): Promise<void> {
  let fh: FileHandle | undefined;
  try {
    fh = await open(dir, 'r');
    await fh.sync();
  } catch {
    // best effort
  } finally {
    await fh?.close().catch(() => undefined);
  }
}

/** Whether a process with this PID exists (EPERM: it does, under another user). */
function processRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return errCode(e) === 'EPERM';
  }
}
