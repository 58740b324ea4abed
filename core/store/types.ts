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
import type { PlanLimits, ProtocolName, Window } from '../config/types.js';

/**
 * One limit a request must pass. Claims are checked in the order given; the first failure wins.
 * A frozen claim may be handed to many requests, and a store may keep what it derives from it (the
 * Redis store's admission text); one not frozen is read afresh on every admission.
 */
export type Claim =
  /**
   * Wallet: priced requests need `credit + stored credit - spent - reserved > 0`; free requests at
   * ≤ 0 fall under `freeRpm`. `credit` is what the config file declares for the user (0 for a user
   * of the admin API); the stored credit is what top-ups added (`Store.credit`).
   */
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
  /**
   * `slot`: the outcome of `AdmitRequest.slot` when one was asked for: the result itself when the
   * store decided it at once (the embedded store, unless the request queues), else a promise that
   * settles at once unless queued.
   */
  | { ok: true; slot?: SlotResult | Promise<SlotResult> }
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
  /**
   * A late settlement's correction (Redis, a fenced instance: core/store/redis/index.ts): what the
   * request's real usage has above the crash-recovery estimate already applied. Counts no request;
   * its ledger record is `<request id>:late` with usage_source `late`.
   */
  late?: boolean;
  /**
   * The request's details for its ledger record (core/ledger): stored with the settlement, never
   * read by the counters. Absent on settlements that predate the ledger.
   */
  detail?: SettlementDetail;
}

/** Why a request's usage is an estimate rather than what the upstream reported. */
export type EstimateReason =
  /** The client left before the upstream reported its usage: billed for what was generated. */
  | 'client_disconnect'
  /** The stream passed its reservation and was ended as a length stop. */
  | 'cut_at_reservation'
  /** The upstream stream broke off before its usage. */
  | 'upstream_cut'
  /** The upstream answered without usage. */
  | 'no_usage_reported'
  /** The process died with the request in flight; settled by the recovery rule at the next start. */
  | 'crash_recovery';

/** What a settlement carries for its ledger record beyond what the counters need. */
export interface SettlementDetail {
  /** The model the client asked for (gateway id), before any fallback. */
  requestedModel: string;
  provider: string;
  /** `<provider>/<account>` that answered. */
  account?: string;
  protocolIn: ProtocolName;
  protocolOut: ProtocolName;
  stream: boolean;
  /** HTTP status the client got (499: it left first). */
  status: number;
  /** Reasoning tokens within `output`, when the upstream reported them. */
  reasoning?: number;
  /** Set when `estimated`. */
  estimateReason?: EstimateReason;
  /** The rate applied to the list price, ppm (the group multiplier or the user's personal rate). */
  ratePpm: number;
  ttftMs?: number;
  /** Upstream attempts made (accounts and fallback models). */
  attempts: number;
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
 *
 * Fencing: an instance that could not renew a lease in time (paused, or cut off from the store, for
 * longer than the lease) may find its slot given to another request. It takes the lease back if
 * the scope still has room; otherwise it calls the listener given to `onLost` (at most once), and
 * the holder must end its request: going on would run more than the limit. A store whose leases
 * cannot be lost (memory) leaves `onLost` out.
 */
export type SlotResult =
  { ok: true; release: () => void; onLost?: (listener: () => void) => void } | { ok: false; reason: 'queue_full' | 'timeout' | 'aborted' };

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
  /**
   * `admit()` and `settle()` answered in the caller's turn, for a store that needs no I/O to answer
   * (the embedded store): the same contract, the result returned (an error thrown) instead of a
   * promise. A store that must wait for its answer (Redis) leaves them out. The request path uses
   * them when present, so a request through the embedded store waits for nothing but the client
   * and the upstream: no promise and no turn of the microtask queue per store call.
   */
  admitNow?(req: AdmitRequest): AdmitResult;
  settleNow?(requestId: string, s: Settlement): void;

  /** Balance spend of a user, micro-USD (the balance is the credit minus this). */
  balanceSpent(user: string): Promise<number>;
  /** A user's wallet: stored credit (top-ups and corrections) and balance spend, micro-USD. */
  wallet(user: string): Promise<Wallet>;
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

  // ---- accounts: the operator's data (docs/accounts.md) --------------------------------------

  /** One user or key record with its revision (1 on creation, +1 per write). */
  getAccount<K extends AccountKind>(kind: K, name: string): Promise<Stored<AccountRecord<K>> | undefined>;
  /**
   * Creates, replaces or deletes one record in one atomic step, compare-and-set on its revision,
   * and records the audit entry with it. Keys are unique by name and by digest. Every write raises
   * the accounts `version` by one and tells every instance sharing the store (onAccountsChanged).
   */
  writeAccount(w: AccountWrite): Promise<AccountWriteResult>;
  /** Every record, and the version they reflect (at start, and when changes cannot be followed). */
  loadAccounts(): Promise<AccountsSnapshot>;
  /**
   * The records written after `version` (a deleted one as `record: null`), and the version they
   * bring the caller to; undefined when the store can no longer tell (load everything instead).
   */
  accountChanges(version: number): Promise<AccountChanges | undefined>;
  /**
   * Calls `listener` (best effort, at most once per write, possibly for a write of this very
   * instance) when any instance changed a record: a hint to call `accountChanges` now. Returns
   * the function that stops the calls.
   */
  onAccountsChanged(listener: () => void): () => void;
  /**
   * Adds `amount` (micro-USD, negative for a correction) to a user's stored credit in one atomic
   * step with its record (and, with `idempotency`, the key's record: the same key and fingerprint
   * answer the first result again; another fingerprint is refused). A correction that would take
   * the balance (`baseCredit` + stored credit − spent) below zero is refused and changes nothing.
   */
  credit(req: CreditRequest): Promise<CreditResult>;
  /** A user's credit records, newest first, at most `limit`, older than the record id `before`. */
  credits(user: string, opts: { limit: number; before?: string }): Promise<CreditRecord[]>;
  /** Appends one audit entry (writeAccount records its own); entries older than the retention go. */
  appendAudit(entry: AuditInput): Promise<AuditEntry>;
  /** Audit entries, newest first, filtered, at most `limit`, older than the entry id `before`. */
  readAudit(q: AuditQuery): Promise<AuditEntry[]>;

  // ---- upstream accounts (core/pool): their health, and what their limits hold ------------------

  /**
   * Applies health events of upstream accounts, in order (the rules at AccountHealthEvent), and
   * returns the version the account health is at after them. Instances sharing the store see the
   * same health; a cooldown, disable or enable is also announced (onAccountHealthChanged).
   */
  reportAccountHealth(events: readonly AccountHealthEvent[]): Promise<number>;
  /**
   * Every account's health and the version it reflects; undefined when the version is still
   * `version` (nothing changed since the caller last read).
   */
  accountHealth(version?: number): Promise<AccountHealthSnapshot | undefined>;
  /**
   * Calls `listener` (best effort, possibly for an event of this very instance) when any instance
   * reported a cooldown, a disable or an enable: a hint to read `accountHealth` now. Returns the
   * function that stops the calls.
   */
  onAccountHealthChanged(listener: () => void): () => void;
  /**
   * What some shared limits hold right now, every instance's: the slots held in each scope, and the
   * requests counted this minute by each RPM claim's counter (admin views, not the request path).
   */
  limitsInUse(q: LimitsQuery): Promise<LimitsInUse>;

  /** Whether the store can serve now (cheap; called by /readyz). */
  health(): Promise<StoreHealth>;

  /**
   * Stores shared by several instances (Redis) keep each ledger record (core/ledger) until an
   * instance takes it into its day files: about `max` records at most (`more` when others wait)
   * that no instance has taken yet, and
   * records taken but never acknowledged by an instance that has since gone quiet for a lease
   * (`redelivered`: an instance may have written them already). Each record goes to one caller
   * until it is acknowledged (`ack`, once it is durable); a batch never acknowledged comes back.
   * Fails (Unavailable) while the store is away. Absent: the store writes its ledger itself
   * (memory: with its journal).
   */
  takeLedger?(max: number): Promise<LedgerBatch>;

  /** Write everything pending to disk (memory) / no-op (redis). */
  flush(): Promise<void>;
  close(): Promise<void>;
}

/** Ledger records taken from a store (Store.takeLedger). */
export interface LedgerBatch {
  records: TakenRecord[];
  /** More records wait: take again at once. */
  more?: boolean;
  /** The records are durable elsewhere: the store forgets them. */
  ack(): Promise<void>;
}

export interface TakenRecord {
  /** The record's id (core/ledger/record.ts `id`). */
  id: string;
  /** Its time, epoch ms. */
  ts: number;
  /** The record as JSON, fields in core/ledger/record.ts FIELDS order. */
  json: string;
  /** Taken before by an instance that never acknowledged it. */
  redelivered?: boolean;
}

export interface Wallet {
  /** Credit added through the store (top-ups, corrections); the config file's credit is not here. */
  credit: number;
  /** Balance spend. */
  spent: number;
}

// ---- accounts -------------------------------------------------------------------------------
//
// Users and keys created through the admin API live in the store, so that every instance sharing it
// serves the same ones; the config file may declare others (core/accounts merges the two). Records
// hold settings only: money is in the wallet counters (credit, spent) next to every other limit.

export interface SubscriptionRecord {
  group: string;
  /** Epoch ms. */
  expiresAt: number;
  status: 'active' | 'suspended';
}

/** A user's settings (config.md `users.<name>`, without `balance`: credit is the wallet's). */
export interface UserRecord {
  name: string;
  status: 'active' | 'inactive';
  /** Requests per minute across the user's keys; 0 = unlimited. */
  rpm: number;
  /** Concurrent requests; 0 = unlimited. */
  concurrency: number;
  queue: { size: number; maxWaitMs: number };
  /** micro-USD; 0 = none. */
  spendCaps: { weekly: number; monthly: number };
  /** Personal rate per group, ppm. */
  rates: Record<string, number>;
  subscriptions: SubscriptionRecord[];
  /** Free text for the operator (a customer id, an email). */
  note?: string;
  createdAt: number;
  updatedAt: number;
}

/** An API key's settings. The secret itself is never stored: its SHA-256 `digest` is. */
export interface KeyRecord {
  name: string;
  /** SHA-256 hex of the key; unique among keys. */
  digest: string;
  /** What may be shown of the key: its first 6 and last 4 characters. */
  hint: string;
  user: string;
  group?: string;
  enabled: boolean;
  /** micro-USD over the key's life; 0 = unlimited. */
  quota: number;
  /** micro-USD per window; 0 = unlimited. */
  windows: Record<Window, number>;
  /** Epoch ms. */
  expiresAt?: number;
  ipAllow: string[];
  ipDeny: string[];
  createdAt: number;
  updatedAt: number;
}

export type AccountKind = 'user' | 'key';
export type AccountRecord<K extends AccountKind = AccountKind> = K extends 'user' ? UserRecord : KeyRecord;

export interface Stored<T> {
  value: T;
  rev: number;
}

export interface AccountWrite {
  kind: AccountKind;
  name: string;
  /** The new record (its `name` must be `name`), or null to delete it. */
  value: UserRecord | KeyRecord | null;
  /** The revision the writer read: 0 when the record must not exist yet. */
  expectRev: number;
  /** Recorded with the write, in the same atomic step. */
  audit: AuditInput;
}

export type AccountWriteResult =
  | { ok: true; rev: number; version: number; audit: AuditEntry }
  /** `conflict`: the record's revision is not `expectRev` (it exists, or changed, or is gone). */
  | { ok: false; reason: 'conflict' | 'digest_taken' };

export interface AccountsSnapshot {
  version: number;
  users: Stored<UserRecord>[];
  keys: Stored<KeyRecord>[];
}

export interface AccountChanges {
  version: number;
  users: { name: string; record: Stored<UserRecord> | null }[];
  keys: { name: string; record: Stored<KeyRecord> | null }[];
}

/** Who changed what, as the admin API records it (never a secret: records show the key's hint). */
export interface AuditInput {
  /** The admin token's name. */
  actor: string;
  /** The client address of the admin call. */
  ip: string;
  method: string;
  path: string;
  /** e.g. `user.create`, `key.update`, `key.rotate`, `topup`. */
  action: string;
  /** e.g. `user:alice`, `key:ci-runner`. */
  target: string;
  before: unknown;
  after: unknown;
}

export interface AuditEntry extends AuditInput {
  /** Store-assigned, ordered by time: a cursor for `readAudit`. */
  id: string;
  /** Epoch ms (store time). */
  at: number;
}

export interface AuditQuery {
  limit: number;
  before?: string;
  actor?: string;
  target?: string;
  /** Epoch ms bounds. */
  since?: number;
  until?: number;
}

export interface CreditRequest {
  user: string;
  /** micro-USD, a safe integer; negative for a correction. */
  amount: number;
  /** The user's credit declared in the config file (0 for a user of the admin API). */
  baseCredit: number;
  reference: string;
  /** The Idempotency-Key and a fingerprint of what was asked (same key, other fingerprint: refused). */
  idempotency?: { key: string; fingerprint: string };
  audit: AuditInput;
}

export interface CreditRecord {
  /** Store-assigned, ordered by time. */
  id: string;
  user: string;
  amount: number;
  reference: string;
  /** Epoch ms (store time). */
  at: number;
  /** The wallet's stored credit and spend right after. */
  credit: number;
  spent: number;
  actor: string;
}

export type CreditResult =
  { ok: true; record: CreditRecord; replayed: boolean } | { ok: false; reason: 'idempotency_conflict' | 'below_zero' };

// ---- upstream account health ----------------------------------------------------------------
//
// core/pool decides what an attempt's outcome means for its account (core/pool/health.ts); the
// store keeps the result, so that every instance sharing it schedules by the same health: an
// account cooled down, disabled or demoted by one instance is by all.

/** Recent times to first token kept per account (core/pool/health.ts TTFT_SAMPLES). */
export const ACCOUNT_TTFT_SAMPLES = 8;

/** One upstream account's health (`<provider>/<account>`). */
export interface AccountHealth {
  /**
   * Which credentials it describes (core/pool's fingerprint of kind, URL and key): an event with
   * another fingerprint starts the record afresh, and a pool ignores a record of another one.
   */
  fp: string;
  /** Epoch ms until which it cools down (0: not cooling), and why. */
  coolingUntil: number;
  coolReason?: string;
  /** Consecutive failures (the backoff's exponent); a success resets them. */
  failures: number;
  /** The provider rejected its credentials: out of rotation until a reload enables it. */
  disabled?: { at: number; status?: number; message: string };
  /** Recent times to first token, oldest first: [epoch ms, ms], at most ACCOUNT_TTFT_SAMPLES. */
  ttft: Array<[number, number]>;
}

/**
 * What an instance learned about an account. Rules (each event atomic): `failure` adds one to
 * the consecutive failures and extends the cooldown to `until` (never shortens it: the reason is
 * the one that set the latest end); `success` resets the failures; `disable` sets `disabled` (the
 * first one stays); `enable` clears it (a reload); `ttft` adds a sample, keeping the latest
 * ACCOUNT_TTFT_SAMPLES. An event whose `fp` differs from the record's starts a fresh record.
 */
export type AccountHealthEvent = { account: string; fp: string } & (
  | { kind: 'failure'; until: number; reason: string }
  | { kind: 'success' }
  | { kind: 'disable'; at: number; status?: number; message: string }
  | { kind: 'enable' }
  | { kind: 'ttft'; at: number; ms: number }
);

export interface AccountHealthSnapshot {
  version: number;
  /** By account (`<provider>/<account>`). */
  accounts: Record<string, AccountHealth>;
}

export interface LimitsQuery {
  /** Slot scopes (SlotRequest.scope). */
  slots: readonly string[];
  /** RPM counters, as an `rpm` claim names them. */
  rpm: ReadonlyArray<{ scope: 'group' | 'user' | 'account'; id: string }>;
}

export interface LimitsInUse {
  /** Slots held now in each scope of the query, in its order. */
  slots: number[];
  /** Requests counted in the current minute by each RPM counter of the query, in its order. */
  rpm: number[];
  /** Milliseconds until the current minute ends (the store's clock). */
  minuteLeftMs: number;
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
