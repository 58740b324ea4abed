/**
 * The one store interface. All shared state — money, spend windows, plan usage, RPM counters,
 * concurrency slots, usage statistics — lives behind it. Two implementations: `memory/`
 * (embedded, persisted to disk; the default) and Redis (several instances; one Lua script per
 * admission and per settlement). Plugins never see which one runs.
 *
 * Money never races: `admit()` checks every claim and reserves the request's worst-case charge in
 * ONE atomic step; `settle()` later replaces the reservation with the actual charge (idempotent per
 * request id). A claim passes while `used + reserved < limit`, so N racing requests can overspend
 * a limit by at most one request's overrun (its actual charge above its reservation), never by N.
 *
 * All amounts are integer micro-USD. Periods are computed from the store's clock (memory: the
 * injected Clock; Redis: the server's TIME), so every instance agrees on when a window resets.
 */
import type { Usage } from '../money.js';
import type { PlanLimits, Window } from '../config/types.js';

/** One limit a request must pass. Claims are checked in the order given; the first failure wins. */
export type Claim =
  /** Wallet: priced requests need `credit - spent - reserved > 0`; free requests at ≤ 0 fall under `freeRpm`. */
  | { kind: 'balance'; user: string; credit: number; free: boolean; freeRpm: number }
  /** Plan allowances of a subscription (calendar day / ISO week / month, UTC); 0 = no limit. */
  | { kind: 'plan'; user: string; group: string; limits: PlanLimits }
  /** Key quota over the key's life. */
  | { kind: 'key-quota'; key: string; limit: number }
  /** Fixed key window: starts at first use, resets once its duration has passed. */
  | { kind: 'key-window'; key: string; window: Window; limit: number }
  /** Account spend cap on balance spend: week from Monday 00:00 UTC, month from the 1st. */
  | { kind: 'spend-cap'; user: string; period: 'weekly' | 'monthly'; limit: number }
  /** Requests per clock minute (`account`: upstream requests to `<provider>/<account>`). */
  | { kind: 'rpm'; scope: 'group' | 'user' | 'account'; id: string; limit: number };

export interface AdmitRequest {
  requestId: string;
  /** Worst-case charge (micro-USD) held against every money claim until settlement. */
  reserve: number;
  claims: readonly Claim[];
  /**
   * The settlement applied if this admission is never settled nor cancelled because the process
   * that admitted it died (memory: found unresolved in the journal at the next start; Redis: its
   * lease expired and a reaper on a live instance resolved it). The documented rule: the input
   * the upstream would have processed, estimated from the request body, at the requested model's
   * price, recorded with `estimated` and `recovered` set — never silently free, never the worst
   * case. Absent: the admission is released without a charge (nothing billable was admitted).
   */
  recovery?: Settlement;
  /**
   * A concurrency slot to take with the admission: checked last, only once every claim has passed
   * (an admission refused by a claim takes no slot and joins no queue). Behaves as `acquireSlot()`
   * called right after an admission that passed — same scopes, queue and `maxWaitMs` — except that
   * the slot belongs to the admission: `settle()` or `cancel()` of this request releases it (or
   * takes the request out of the queue), so the slot costs no store call of its own (Redis: one
   * script at admission, one at settlement). Its `release()` still frees it at once when called
   * first, and is a no-op after the settlement. A slot that is not granted (queue full, timed out,
   * aborted) leaves the admission admitted: the caller settles or cancels it as usual.
   */
  slot?: SlotRequest;
}

export type AdmitResult =
  /** `slot`: the outcome of `AdmitRequest.slot` when one was asked for; settles at once unless queued. */
  | { ok: true; slot?: Promise<SlotResult> }
  /**
   * `index` of the first failing claim; `retryAfterMs` for time-based limits (RPM, caps). `held`:
   * the limit itself is not reached — only the reservations of requests in flight fill it, so the
   * refusal is transient (it clears as they settle) and must not read as exhaustion.
   */
  | { ok: false; index: number; retryAfterMs?: number; held?: true };

/** What a finished request cost, and where it counts. */
export interface Settlement {
  keyId: string;
  user: string;
  group: string;
  /** The model that answered (gateway id). */
  model: string;
  billing: 'balance' | 'plan';
  usage: Usage;
  /** List price, micro-USD. */
  cost: number;
  /** Charged, micro-USD. */
  actual: number;
  durationMs: number;
  /** Windows configured on the key (those with a limit), which start at first use. */
  windows: readonly Window[];
  /** Usage came from an estimate (client went away before the upstream reported it). */
  estimated?: boolean;
  /** Applied by crash recovery (the admission's `recovery`), not by the request itself. */
  recovered?: boolean;
}

export interface SlotRequest {
  /**
   * What the slots count: `user:<name>` (the concurrency plugin), `account:<provider>/<account>`
   * (upstream account pools). Slots of different scopes never interact.
   */
  scope: string;
  limit: number;
  queueSize: number;
  maxWaitMs: number;
  /** Aborting it (client gone) removes the waiter from the queue at once. */
  signal: ClientSignal;
}

/**
 * What a store may use of a request's signal. An AbortSignal is one; the gateway passes its
 * request's `clientGone`, which costs far less to create on Node 20 than an AbortSignal.
 */
export interface ClientSignal {
  readonly aborted: boolean;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/**
 * A granted slot is held until `release()` (idempotent). A store shared by several instances holds
 * it as a lease it renews while the holder lives, so the slots of a dead instance come back.
 */
export type SlotResult = { ok: true; release: () => void } | { ok: false; reason: 'queue_full' | 'timeout' | 'aborted' };

/** What `/readyz` reports about the store. */
export interface StoreHealth {
  /** The store answers; money paths can be served. */
  ready: boolean;
  /** Serving with reduced guarantees (e.g. Redis away: per-instance RPM and concurrency). */
  degraded?: string;
}

export interface UsageCounters {
  requests: number;
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  /** micro-USD at list price */
  cost: number;
  /** micro-USD charged */
  actual: number;
  durationMs: number;
}

export interface KeyStats {
  today: UsageCounters;
  total: UsageCounters;
  /** Per model over the requested day range. */
  byModel: Record<string, UsageCounters>;
  /** Per UTC day (`YYYY-MM-DD`) of the requested range that has usage. */
  byDay: Record<string, UsageCounters>;
  /** Requests and tokens in the last 60 s. */
  rpm: number;
  tpm: number;
}

export interface WindowState {
  /** Epoch ms; undefined when the window has not been used since its last reset. */
  start?: number;
  used: number;
  reserved: number;
}

export interface KeyState {
  used: number;
  reserved: number;
  windows: Record<Window, WindowState>;
}

export interface PeriodUsage {
  daily: number;
  weekly: number;
  monthly: number;
}

export interface Store {
  readonly kind: 'memory' | 'redis';
  /** One call per requestId: admitting an id that is live or already settled throws. */
  admit(req: AdmitRequest): Promise<AdmitResult>;
  /** Idempotent per requestId; releases the reservation made by admit (if any). */
  settle(requestId: string, s: Settlement): Promise<void>;
  /**
   * Drops a reservation without charging. The request's RPM counts are taken back too — unless
   * `keepCounts`: a request that reached the upstream (and failed) still counts as a request.
   */
  cancel(requestId: string, opts?: { keepCounts?: boolean }): Promise<void>;
  acquireSlot(req: SlotRequest): Promise<SlotResult>;

  /** Balance spend of a user, micro-USD (the balance is the configured credit minus this). */
  balanceSpent(user: string): Promise<number>;
  keyState(keyId: string): Promise<KeyState>;
  planUsage(user: string, group: string): Promise<PeriodUsage>;
  spendCapUsage(user: string): Promise<{ weekly: number; monthly: number }>;
  /** Usage stats for a key; `fromDay`/`toDay` are `YYYY-MM-DD` (UTC) bounds of byModel and byDay. */
  keyStats(keyId: string, fromDay: string, toDay: string): Promise<KeyStats>;

  /** Operator command: forget a key's used quota (and its windows). */
  resetKeyQuota(keyId: string): Promise<void>;

  /**
   * A short-lived, bounded cache of small JSON texts by id within a namespace (the converter keeps
   * the items of converted Responses here so later turns can refer to them by id). Entries expire
   * after `ttlMs` and may be evicted earlier under memory pressure; `recall` answers `undefined`
   * for what it does not hold. Namespaces isolate callers (e.g. one per API key).
   */
  remember(namespace: string, entries: ReadonlyArray<readonly [id: string, value: string]>, ttlMs: number): Promise<void>;
  recall(namespace: string, ids: readonly string[]): Promise<Array<string | undefined>>;

  /** Whether the store can serve now (cheap; called by /readyz). */
  health(): Promise<StoreHealth>;

  /** Write everything pending to disk (memory) / no-op (redis). */
  flush(): Promise<void>;
  close(): Promise<void>;
}

// ---- calendar helpers shared by both stores (UTC) ------------------------------------------
//
// Every admission and settlement asks for the day, week and month of "now" (≈ 7 µs a request when
// computed through Date each time). They change only at a day boundary, so the answers for the
// last UTC day asked about are kept and recomputed when `t` falls on another day (later or
// earlier: an injected test clock may go back). Pure functions of `t` all the same.

const DAY_MS = 86_400_000;
let cachedDay = NaN;
let cachedKey = '';
let cachedWeek = 0;
let cachedMonth = 0;
let cachedNextMonth = 0;

function calendar(t: number): void {
  const day = Math.floor(t / DAY_MS);
  if (day === cachedDay) return;
  const start = day * DAY_MS;
  const d = new Date(start);
  const key = d.toISOString().slice(0, 10); // throws on an invalid time, as before: nothing is cached
  cachedWeek = start - ((d.getUTCDay() + 6) % 7) * DAY_MS; // Monday = 0
  cachedMonth = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  cachedNextMonth = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  cachedKey = key;
  cachedDay = day;
}

/** The UTC day containing t, as YYYY-MM-DD. */
export function dayKey(t: number): string {
  calendar(t);
  return cachedKey;
}

/** Start of the UTC day containing t. */
export function dayStart(t: number): number {
  return Math.floor(t / DAY_MS) * DAY_MS;
}

/** Start of the ISO week (Monday 00:00 UTC) containing t. */
export function weekStart(t: number): number {
  calendar(t);
  return cachedWeek;
}

/** Start of the calendar month (UTC) containing t. */
export function monthStart(t: number): number {
  calendar(t);
  return cachedMonth;
}

export function nextMonthStart(t: number): number {
  calendar(t);
  return cachedNextMonth;
}

export function minuteStart(t: number): number {
  return Math.floor(t / 60_000) * 60_000;
}
