/**
 * The Redis store: several gateway instances (processes, machines) share limits and money through
 * one Redis (or Redis Cluster). Same behaviour as the memory store (the contract is in ../types.ts);
 * the decisions that differ (made in this module unless another is named):
 *
 * - Atomicity: admission and settlement are each one Lua script (EVALSHA) — on a single Redis one
 *   call for the whole request. On a cluster one call per hash slot the request touches (its key,
 *   its user, its group's RPM; see keys.ts), run in parallel: each limit is checked and reserved
 *   atomically in its own slot, so overspend stays bounded as on one node; a request refused in
 *   one slot has its other slots' reservations and counts taken back right after (compensation),
 *   so a concurrent request may meanwhile be refused by a reservation that is about to vanish.
 * - Time: the scripts read Redis TIME, so every instance agrees on periods. A test clock
 *   (`clock`) replaces it for the money periods only (pack.ts `now`).
 * - Crash recovery: reaper.ts. Concurrency slots: slots.ts.
 * - The ledger: every settlement that applies (the reaper's too) and every credit adds its record
 *   to a stream in its own script; instances take them into their day files (ledger.ts,
 *   `takeLedger`; core/ledger/drain.ts). A settlement queued while Redis is away carries its
 *   record with it.
 * - Faults: client.ts (every call bounded), health.ts (Redis away, the degraded mode), and here:
 *   while Redis is away, settlements and cancels wait in an in-memory queue sent in order once
 *   Redis is back (idempotent per request id, so nothing counts twice). An admission whose outcome
 *   is unknown (timed out) is cancelled once Redis answers; the cancel's marker refuses the
 *   admission if it arrives later still. The queue does not survive the process: an admission of a
 *   process that dies with its settlement queued is resolved by the reaper's rule.
 *
 * The modules, each importing only modules listed below it:
 *   index.ts    RedisStore: open, admit / settle / cancel, the queue, the timers, close, crash
 *   read.ts     the read side (usage, admin views, remembered items)
 *   upstreams.ts upstream accounts: their shared health, what their limits hold
 *   slots.ts    concurrency slots: leases, the global queue, waiters, wake-ups
 *   accounts.ts users, keys, the audit trail, credits
 *   reaper.ts   the registry of live instances and crash recovery
 *   ops.ts      an admission's script calls, per part (admit, settle, cancel, index entries)
 *   ledger.ts   the ledger's streams: where records go, and taking them out
 *   health.ts   Redis up or away, probing, the degraded mode, /readyz
 *   carry.ts    what the degraded mode counted and held, carried back to Redis once it returns
 *   client.ts   the connections, bounded calls, errors, batching
 *   scripts.ts  the .lua scripts, loaded
 *   pack.ts     the packed arguments of the scripts
 *   keys.ts     the key layout
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Clock } from '../../clock.js';
import { silentLogger, type Logger } from '../../log.js';
import { WINDOW_MS } from '../../config/types.js';
import { MemoryStore } from '../memory/index.js';
import {
  type AccountHealthEvent,
  type AccountHealthSnapshot,
  type LimitsInUse,
  type LimitsQuery,
  type AccountChanges,
  type AccountKind,
  type AccountRecord,
  type AccountsSnapshot,
  type AccountWrite,
  type AccountWriteResult,
  type AuditEntry,
  type AuditInput,
  type AuditQuery,
  type CreditRecord,
  type CreditRequest,
  type CreditResult,
  type Stored,
  type Wallet,
  type AdmitRequest,
  type AdmitResult,
  type Claim,
  type KeyState,
  type KeyStats,
  type PeriodUsage,
  type Settlement,
  type SlotRequest,
  type SlotResult,
  type Store,
  type StoreHealth,
  type LedgerBatch,
} from '../types.js';
import { DONE_BUCKET, Keys } from './keys.js';
import { RecentIds } from '../recent.js';
import { loadScripts } from './scripts.js';
import { RedisClient, refuse, Unavailable } from './client.js';
import { DONE_TTL_MS, LEDGER_FIELD, LIST, packSettlement, PARTS, RECORD_TTL_MS, tagOf } from './pack.js';
import { Health, PROBE_MS } from './health.js';
import { Ops, type PartSlot } from './ops.js';
import { Reaper } from './reaper.js';
import { Slots, type AdmissionSlot } from './slots.js';
import { Reads } from './read.js';
import { Accounts } from './accounts.js';
import { Carry } from './carry.js';
import { Upstreams } from './upstreams.js';
import { LedgerStreams } from './ledger.js';

const RECENT_MAX = 100_000;
/** How long audit entries are kept unless the options say otherwise. */
const AUDIT_RETENTION_MS = 90 * 86_400_000;
const PENDING_MAX = 100_000;
const CLOSE_DRAIN_MS = 2_000;

export interface RedisStoreOptions {
  /** `redis://[user:pass@]host:port[/db]`; for a cluster, seed nodes separated by commas. */
  url: string;
  cluster?: boolean;
  /** Prefix of every key (default `gw:`); several gateways can share one Redis with different ones. */
  prefix?: string;
  /** Divides RPM and concurrency limits while Redis is away (instances × workers). Default 1. */
  instancesHint?: number;
  /** Longest wait for any Redis call (default 500 ms). */
  timeoutMs?: number;
  /** Instance and slot lease (default 15 s, at most 30 s). */
  leaseMs?: number;
  /** How long open() waits for a first connection before serving degraded (default 2 s). */
  connectWaitMs?: number;
  /** Tests: fixed time for periods, windows and minutes instead of Redis TIME. */
  clock?: Clock;
  log?: Logger;
  /** Called when Redis goes away or comes back. */
  onHealth?: (h: StoreHealth) => void;
  /** How long audit entries are kept (default 90 days). */
  auditRetentionMs?: number;
}

interface Part {
  tag: string;
  claims: { index: number; claim: Claim }[];
  /** This part's script also takes the admission's concurrency slot (AdmitRequest.slot). */
  slot?: PartSlot;
}

interface LiveAdmission {
  /** Slot tags holding this admission's records (one on a single Redis). */
  tags: string[];
  /** Admitted by the local fallback while Redis was away. */
  local?: boolean;
  /** The concurrency slot taken with the admission: its record frees it at settlement or cancel. */
  slot?: AdmissionSlot;
  /** What crash recovery applies if this instance is taken for dead (a late settlement corrects it). */
  recovery?: Settlement;
  /** Local admissions: the claims and minute counted (carry.ts), and the slot's release (it is carried too). */
  fallback?: { claims: readonly Claim[]; minute: number; release?: () => void };
}

type PendingOp =
  | { op: 'settle'; id: string; s: Settlement; tags?: string[]; recovery?: Settlement }
  /** undo: 0 keep the counts, 1 take RPM counts back, 2 also unstart the windows it started (compensation). */
  | { op: 'cancel'; id: string; undo: 0 | 1 | 2; tags: string[] };

/**
 * What settlement `s` has above the recovered estimate `r`, counter by counter (0 where it has
 * less), as a settlement that counts no request; undefined when it has nothing more.
 */
function correction(r: Settlement, s: Settlement): Settlement | undefined {
  const more = (a: number, b: number) => Math.max(0, a - b);
  const usage = {
    input: more(s.usage.input, r.usage.input),
    output: more(s.usage.output, r.usage.output),
    cacheRead: more(s.usage.cacheRead, r.usage.cacheRead),
    cacheWrite: more(s.usage.cacheWrite, r.usage.cacheWrite),
  };
  const actual = more(s.actual, r.actual);
  const cost = more(s.cost, r.cost);
  if (actual === 0 && cost === 0 && usage.input + usage.output + usage.cacheRead + usage.cacheWrite === 0) return undefined;
  return { ...s, usage, actual, cost, durationMs: more(s.durationMs, r.durationMs), estimated: false, recovered: false, late: true };
}

function assertMoney(name: string, v: number): void {
  if (!Number.isSafeInteger(v) || v < 0) throw new TypeError(`${name} must be a non-negative integer (micro-USD), got ${v}`);
}

export class RedisStore implements Store {
  readonly kind = 'redis' as const;
  readonly instanceId: string;

  private readonly keys: Keys;
  private readonly redis: RedisClient;
  /** Redis up or away, and the degraded mode (named so: `health()` is the Store's). */
  private readonly status: Health;
  private readonly ops: Ops;
  private readonly slots: Slots;
  private readonly reaper: Reaper;
  private readonly reads: Reads;
  private readonly accounts: Accounts;
  private readonly upstreams: Upstreams;
  private readonly ledger: LedgerStreams;
  private readonly log: Logger;
  private readonly leaseMs: number;
  private readonly cluster: boolean;

  private readonly live = new Map<string, LiveAdmission>();
  private readonly recent = new RecentIds(RECENT_MAX);
  private pending: PendingOp[] = [];
  private draining: Promise<void> | undefined;

  private readonly timers: NodeJS.Timeout[] = [];

  private constructor(opts: RedisStoreOptions, local: MemoryStore) {
    this.keys = new Keys(opts.prefix ?? 'gw:');
    this.log = opts.log ?? silentLogger;
    this.leaseMs = Math.min(opts.leaseMs ?? 15_000, 30_000);
    this.cluster = opts.cluster ?? false;
    this.instanceId = `${hostname()}-${process.pid}-${randomBytes(4).toString('hex')}`;

    const scripts = loadScripts({
      prefix: this.keys.prefix,
      channel: this.keys.wakeChannel(),
      lease: this.leaseMs,
      recordTtl: RECORD_TTL_MS,
      doneTtl: DONE_TTL_MS,
      doneBucket: DONE_BUCKET,
      windows: WINDOW_MS,
      ledgerField: LEDGER_FIELD,
    });
    this.redis = new RedisClient({ url: opts.url, cluster: this.cluster, timeoutMs: opts.timeoutMs ?? 500 }, scripts);
    const carry = new Carry(this.redis, this.keys, opts.clock, () => this.status.state === 'up', this.log);
    // Health's hooks call parts made below: they run on connection events and failed calls, never during construction.
    this.status = new Health(
      this.redis,
      local,
      carry,
      { divisor: Math.max(1, Math.floor(opts.instancesHint ?? 1)), log: this.log, onHealth: opts.onHealth },
      {
        beat: () => this.reaper.beat(),
        pending: () => this.pending.length,
        drain: () => void this.drain(),
      },
    );
    this.ledger = new LedgerStreams(this.redis, this.status, this.keys, {
      consumer: this.instanceId,
      // Past two leases its reader is taken for gone (its instance would have been reaped).
      claimIdleMs: 2 * this.leaseMs,
      sweepMs: this.leaseMs,
      log: this.log,
    });
    this.ops = new Ops(this.redis, this.keys, this.instanceId, opts.clock, this.ledger);
    this.slots = new Slots(this.redis, this.status, this.keys, this.instanceId, this.live, this.log);
    carry.slotsModule = this.slots;
    this.reaper = new Reaper(this.redis, this.ops, this.status, this.keys, this.instanceId, this.leaseMs, this.log);
    this.reads = new Reads(this.redis, this.status, this.keys, opts.clock, this.log);
    this.accounts = new Accounts(
      this.redis,
      this.status,
      this.keys,
      opts.clock,
      opts.auditRetentionMs ?? AUDIT_RETENTION_MS,
      this.log,
      this.ledger,
    );
    this.upstreams = new Upstreams(this.redis, this.status, this.keys, opts.clock);
  }

  static async open(opts: RedisStoreOptions): Promise<RedisStore> {
    const store = new RedisStore(opts, await MemoryStore.open({ clock: opts.clock }));
    store.startTimers();
    const deadline = Date.now() + (opts.connectWaitMs ?? 2_000);
    while (!store.isUp() && Date.now() < deadline) {
      await store.status.probe();
      if (!store.isUp()) await new Promise((r) => setTimeout(r, 50));
    }
    store.status.starting = false;
    if (!store.isUp()) store.status.logDown(new Unavailable('no connection to Redis at start'));
    return store;
  }

  isUp(): boolean {
    return this.status.isUp();
  }

  private startTimers(): void {
    const every = (ms: number, fn: () => Promise<void> | void) => {
      const t = setInterval(() => {
        Promise.resolve(fn()).catch((e) => this.log.error('store timer failed', { error: e as Error }));
      }, ms);
      t.unref();
      this.timers.push(t);
    };
    every(Math.max(50, Math.floor(this.leaseMs / 3)), () => this.heartbeat());
    every(Math.max(100, Math.floor(this.leaseMs / 2)), () => this.reaper.reap());
    every(PROBE_MS, () => (this.status.state === 'down' ? this.status.probe() : undefined));
  }

  /** Renews this instance's lease and its slot leases and waiters. */
  private async heartbeat(): Promise<void> {
    if (this.status.state !== 'up' || this.status.closed) return;
    if (this.pending.length > 0) void this.drain();
    try {
      await this.reaper.beat();
      await this.slots.renew();
    } catch (e) {
      if (!(e instanceof Unavailable)) throw e;
    }
  }

  // ---- admission --------------------------------------------------------------------------

  /** Claims grouped by hash slot (cluster), or one part for everything (single Redis). */
  private partition(req: AdmitRequest, slot?: Part['slot']): Part[] {
    if (!this.cluster)
      return [{ tag: this.keys.request(req.requestId), claims: req.claims.map((claim, index) => ({ index, claim })), slot }];
    const parts = new Map<string, Part>();
    const partFor = (tag: string) => {
      let p = parts.get(tag);
      if (!p) parts.set(tag, (p = { tag, claims: [] }));
      return p;
    };
    req.claims.forEach((claim, index) => partFor(tagOf(this.keys, claim)).claims.push({ index, claim }));
    // Recovery settles the key's and the user's counters: both need a record to act on.
    if (req.recovery) {
      partFor(this.keys.apiKey(req.recovery.keyId));
      partFor(this.keys.user(req.recovery.user));
    }
    // The slot sits with its scope's counters (keys.ts): a user's slot with the user's claims.
    if (slot) partFor(this.keys.slotTag(slot.req.scope)).slot = slot;
    return [...parts.values()];
  }

  /** Runs one part's admission; the index entry goes with it on a single Redis. */
  private async admitPart(req: AdmitRequest, part: Part, indexEntry: string): Promise<number[]> {
    return this.ops.admit(req, part.tag, part.claims, part.slot, indexEntry);
  }

  async admit(req: AdmitRequest): Promise<AdmitResult> {
    this.status.assertOpen();
    assertMoney('reserve', req.reserve);
    if (this.live.has(req.requestId) || this.recent.has(req.requestId)) throw new Error(`request ${req.requestId} was already admitted`);
    if (req.recovery) {
      assertMoney('recovery.actual', req.recovery.actual);
      assertMoney('recovery.cost', req.recovery.cost);
    }
    if (this.status.state !== 'up') return this.admitLocally(req);

    // A slot asked for with the admission goes into the same script, unless there is nothing to take.
    const sr = req.slot;
    const slot = sr && !sr.signal.aborted && sr.limit > 0 ? { req: sr, id: this.slots.nextId() } : undefined;
    if (!this.cluster) return this.admitSingle(req, slot);
    const parts = this.partition(req, slot);
    const tags = parts.map((p) => p.tag);
    // For the reaper: the parts, and the settlement to apply if this process dies (PARTS-separated).
    const entry = `${tags.join(LIST)}${PARTS}${req.recovery ? packSettlement(req.recovery) : ''}`;
    const calls: Promise<unknown>[] = parts.map((p) => this.admitPart(req, p, entry));
    if (this.cluster) calls.push(this.ops.indexAdd(req.requestId, entry));
    const results = await Promise.allSettled(calls);
    const reply = (i: number) => (results[i].status === 'fulfilled' ? (results[i] as PromiseFulfilledResult<number[]>).value : undefined);
    const admittedTags = tags.filter((_t, i) => reply(i)?.[0] === 1);

    const failures = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => r.reason as unknown);
    if (failures.length > 0) {
      // Take back what got applied — and, where the answer was lost, what may have been (its
      // cancel marker also refuses an admission that reaches Redis later). Now, or once Redis answers.
      const unknown = tags.filter((_t, i) => results[i].status === 'rejected' && results[i].reason instanceof Unavailable);
      const lostIndex = this.cluster && results[parts.length].status === 'rejected';
      const undo = [...admittedTags, ...unknown];
      if (undo.length > 0 || lostIndex) this.cancelLater({ op: 'cancel', id: req.requestId, undo: 2, tags: undo });
      const e = failures.find((f) => f instanceof Unavailable) ?? failures[0];
      throw e instanceof Unavailable ? refuse(e) : e;
    }

    // The parts combine as one check in claim order: the first claim refused outright wins, else the first held.
    let failIndex = -1;
    let retry = -1;
    let heldIndex = -1;
    for (let i = 0; i < parts.length; i++) {
      const r = reply(i)!;
      if (r[0] === 1) continue;
      if (r[1] >= 0 && (failIndex < 0 || r[1] < failIndex)) {
        failIndex = r[1];
        retry = r[2];
      }
      if (r[3] >= 0 && (heldIndex < 0 || r[3] < heldIndex)) heldIndex = r[3];
    }
    if (failIndex < 0 && heldIndex < 0) return this.admitted(req, tags, slot, slot ? reply(parts.findIndex((p) => p.slot))![1] : -1);
    if (this.cluster) await this.runOrQueue({ op: 'cancel', id: req.requestId, undo: 2, tags: admittedTags });
    if (failIndex >= 0) return retry >= 0 ? { ok: false, index: failIndex, retryAfterMs: retry } : { ok: false, index: failIndex };
    return { ok: false, index: heldIndex, held: true };
  }

  /**
   * admit() on a single Redis: what the general path does for one part (one script), without
   * building parts and combining settled promises — it runs on every request.
   */
  private async admitSingle(req: AdmitRequest, slot: Part['slot']): Promise<AdmitResult> {
    const tag = this.keys.request(req.requestId);
    const entry = tag + PARTS + (req.recovery ? packSettlement(req.recovery) : '');
    let r: number[];
    try {
      r = await this.ops.admit(req, tag, req.claims, slot, entry);
    } catch (e) {
      if (!(e instanceof Unavailable)) throw e;
      // The answer was lost: take back what may have been applied (its cancel marker also
      // refuses the admission should it reach Redis later), now or once Redis answers.
      this.cancelLater({ op: 'cancel', id: req.requestId, undo: 2, tags: [tag] });
      throw refuse(e);
    }
    if (r[0] === 1) return this.admitted(req, [tag], slot, r[1]);
    const failIndex = r[1] >= 0 ? r[1] : -1;
    const heldIndex = r[3] >= 0 ? r[3] : -1;
    if (failIndex >= 0) return r[2] >= 0 ? { ok: false, index: failIndex, retryAfterMs: r[2] } : { ok: false, index: failIndex };
    if (heldIndex >= 0) return { ok: false, index: heldIndex, held: true };
    return this.admitted(req, [tag], slot, -1);
  }

  /** An admission every part admitted; `state`: the slot's (0 queued, 1 granted, 2 queue full). */
  private admitted(req: AdmitRequest, tags: string[], slot: Part['slot'], state: number): AdmitResult {
    const sr = req.slot;
    const live: LiveAdmission = { tags, recovery: req.recovery };
    this.live.set(req.requestId, live);
    if (!sr) return { ok: true };
    if (!slot)
      return { ok: true, slot: Promise.resolve(sr.signal.aborted ? { ok: false, reason: 'aborted' } : { ok: true, release: () => {} }) };
    if (state === 2) return { ok: true, slot: Promise.resolve({ ok: false, reason: 'queue_full' }) };
    live.slot = { scope: sr.scope, id: slot.id };
    if (state === 1) return { ok: true, slot: Promise.resolve(this.slots.granted(sr.scope, slot.id, sr.limit, req.requestId)) };
    return { ok: true, slot: this.slots.wait(sr, slot.id, req.requestId) };
  }

  /**
   * Redis away: the degraded admission (health.ts), settled or cancelled on the local store too;
   * what it counts and the slot it holds are carried to Redis once it is back (carry.ts).
   */
  private async admitLocally(req: AdmitRequest): Promise<AdmitResult> {
    const minute = this.status.carry.minute();
    const r = await this.status.admitLocally(req);
    if (!r.ok) return r;
    const local: NonNullable<LiveAdmission['fallback']> = { claims: req.claims, minute };
    this.live.set(req.requestId, { tags: [], local: true, fallback: local });
    if (!r.slot) return r;
    return {
      ok: true,
      slot: Promise.resolve(r.slot).then((s) => {
        if (s.ok) local.release = s.release;
        return s;
      }),
    };
  }

  // ---- settlement and cancel ----------------------------------------------------------------

  async settle(requestId: string, s: Settlement): Promise<void> {
    this.status.assertOpen();
    assertMoney('actual', s.actual);
    assertMoney('cost', s.cost);
    assertMoney('usage tokens', s.usage.input);
    assertMoney('usage tokens', s.usage.output);
    assertMoney('usage tokens', s.usage.cacheRead);
    assertMoney('usage tokens', s.usage.cacheWrite);
    if (this.recent.has(requestId)) return;
    const adm = this.live.get(requestId);
    this.live.delete(requestId);
    if (adm?.local) {
      adm.fallback?.release?.();
      await this.status.local.cancel(requestId, { keepCounts: true });
    } else if (adm) this.slots.unbind(adm);
    await this.runOrQueue({ op: 'settle', id: requestId, s, tags: adm && !adm.local ? adm.tags : undefined, recovery: adm?.recovery });
    this.recent.add(requestId);
  }

  async cancel(requestId: string, opts: { keepCounts?: boolean } = {}): Promise<void> {
    const adm = this.live.get(requestId);
    if (!adm) return;
    this.live.delete(requestId);
    if (adm.local) {
      const l = adm.fallback;
      l?.release?.();
      if (l && !opts.keepCounts) this.status.carry.uncounted(l.claims, l.minute);
      return this.status.local.cancel(requestId, opts);
    }
    this.slots.unbind(adm);
    await this.runOrQueue({ op: 'cancel', id: requestId, undo: opts.keepCounts ? 0 : 1, tags: adm.tags });
  }

  /**
   * The cancel of an admission whose answer was lost: queued, not awaited. Redis has just failed to
   * answer within the timeout; the client's 503 does not wait for a second one.
   */
  private cancelLater(op: PendingOp): void {
    this.enqueue(op);
  }

  /** Sends now when Redis is up and nothing waits before it; queues otherwise (order kept). */
  private async runOrQueue(op: PendingOp): Promise<void> {
    if (this.status.state === 'up' && this.pending.length === 0) {
      try {
        await this.apply(op, this.instanceId);
        return;
      } catch (e) {
        if (!(e instanceof Unavailable)) throw e;
      }
    }
    this.enqueue(op);
  }

  private enqueue(op: PendingOp): void {
    if (this.pending.length >= PENDING_MAX) {
      const dropped = this.pending.shift()!;
      this.log.error('store: pending queue full; dropping the oldest operation', { operation: dropped });
    }
    this.pending.push(op);
    if (this.status.state === 'up') void this.drain();
  }

  /** Sends queued settlements and cancels in order while Redis answers. */
  private drain(): Promise<void> {
    this.draining ??= (async () => {
      // Yield first, so that the finally below never runs before this promise is stored.
      await Promise.resolve();
      try {
        while (this.pending.length > 0 && this.status.state === 'up') {
          const op = this.pending[0];
          try {
            await this.apply(op, this.instanceId);
          } catch (e) {
            if (e instanceof Unavailable) {
              this.log.debug('store: queued operations wait for Redis', { pending: this.pending.length, error: e.message });
              return;
            }
            this.log.error('store: a queued operation failed and is dropped', { operation: op, error: e as Error });
          }
          this.pending.shift();
        }
      } finally {
        this.draining = undefined;
      }
    })();
    return this.draining;
  }

  /** Applies a settlement or cancel of an admission listed under `instance`. */
  private async apply(op: PendingOp, instance: string): Promise<void> {
    if (op.op === 'cancel') {
      await Promise.all(this.ops.cancelTags(op.id, op.tags).map((tag) => this.ops.cancelPart(op.id, tag, op.undo, instance)));
      if (this.cluster) await this.ops.indexDel(instance, op.id);
      return;
    }
    const packed = packSettlement(op.s);
    if (!this.cluster) {
      // One part: no fan-out (every request settles here).
      const tag = this.keys.request(op.id);
      if ((await this.ops.settlePart(op.id, tag, op.s, packed, 's', instance)) === 2) await this.lateSettlement(op, [tag], instance);
      return;
    }
    const tags = this.ops.settleTags(op.id, op.s, op.tags);
    const codes = await Promise.all(tags.map((tag) => this.ops.settlePart(op.id, tag, op.s, packed, 's', instance)));
    if (this.cluster) await this.ops.indexDel(instance, op.id);
    const late = tags.filter((_t, i) => codes[i] === 2);
    if (late.length > 0) await this.lateSettlement(op, late, instance);
  }

  /**
   * A settlement whose admission crash recovery resolved already (this instance was taken for
   * dead, and was not): what the real usage has above the recovered estimate is added as a
   * correction, counter by counter, once (settle.lua mode `x`), so the request ends charged the
   * larger of the two — never less than the upstream reported, never the estimate twice.
   */
  private async lateSettlement(op: { id: string; s: Settlement; recovery?: Settlement }, tags: string[], instance: string): Promise<void> {
    const r = op.recovery;
    const extra = r ? correction(r, op.s) : undefined;
    const fields = { requestId: op.id, recovered: r?.actual ?? null, actual: op.s.actual, charged: Math.max(r?.actual ?? 0, op.s.actual) };
    if (!extra) {
      this.log.warn(
        'store: settlement arrived after crash recovery had resolved the request; the estimate was not below it and stands',
        fields,
      );
      return;
    }
    const packed = packSettlement(extra);
    await Promise.all(tags.map((tag) => this.ops.settlePart(op.id, tag, extra, packed, 'x', instance)));
    this.log.warn('store: settlement arrived after crash recovery had resolved the request; what it used above the estimate was added', {
      ...fields,
      added: extra.actual,
    });
  }

  // ---- the rest of the Store interface ----------------------------------------------------------

  acquireSlot(req: SlotRequest): Promise<SlotResult> {
    return this.slots.acquire(req);
  }

  balanceSpent(user: string): Promise<number> {
    return this.reads.balanceSpent(user);
  }

  wallet(user: string): Promise<Wallet> {
    return this.reads.wallet(user);
  }

  keyState(keyId: string): Promise<KeyState> {
    return this.reads.keyState(keyId);
  }

  planUsage(user: string, group: string): Promise<PeriodUsage> {
    return this.reads.planUsage(user, group);
  }

  spendCapUsage(user: string): Promise<{ weekly: number; monthly: number }> {
    return this.reads.spendCapUsage(user);
  }

  keyStats(keyId: string, fromDay: string, toDay: string): Promise<KeyStats> {
    return this.reads.keyStats(keyId, fromDay, toDay);
  }

  resetKeyQuota(keyId: string): Promise<void> {
    return this.reads.resetKeyQuota(keyId);
  }

  remember(namespace: string, entries: ReadonlyArray<readonly [string, string]>, ttlMs: number): Promise<void> {
    return this.reads.remember(namespace, entries, ttlMs);
  }

  recall(namespace: string, ids: readonly string[]): Promise<Array<string | undefined>> {
    return this.reads.recall(namespace, ids);
  }

  // ---- accounts (accounts.ts) ---------------------------------------------------------------------

  getAccount<K extends AccountKind>(kind: K, name: string): Promise<Stored<AccountRecord<K>> | undefined> {
    return this.accounts.get(kind, name);
  }

  writeAccount(w: AccountWrite): Promise<AccountWriteResult> {
    return this.accounts.write(w);
  }

  loadAccounts(): Promise<AccountsSnapshot> {
    return this.accounts.load();
  }

  accountChanges(version: number): Promise<AccountChanges | undefined> {
    return this.accounts.changes(version);
  }

  onAccountsChanged(listener: () => void): () => void {
    return this.accounts.onChanged(listener);
  }

  credit(req: CreditRequest): Promise<CreditResult> {
    return this.accounts.credit(req);
  }

  credits(user: string, opts: { limit: number; before?: string }): Promise<CreditRecord[]> {
    return this.accounts.credits(user, opts);
  }

  appendAudit(entry: AuditInput): Promise<AuditEntry> {
    return this.accounts.appendAudit(entry);
  }

  readAudit(q: AuditQuery): Promise<AuditEntry[]> {
    return this.accounts.readAudit(q);
  }

  // ---- upstream accounts (upstreams.ts) ------------------------------------------------------------

  reportAccountHealth(events: readonly AccountHealthEvent[]): Promise<number> {
    return this.upstreams.report(events);
  }

  accountHealth(version?: number): Promise<AccountHealthSnapshot | undefined> {
    return this.upstreams.read(version);
  }

  onAccountHealthChanged(listener: () => void): () => void {
    return this.upstreams.onChanged(listener);
  }

  limitsInUse(q: LimitsQuery): Promise<LimitsInUse> {
    return this.upstreams.limitsInUse(q);
  }

  async health(): Promise<StoreHealth> {
    return this.status.report();
  }

  takeLedger(max: number): Promise<LedgerBatch> {
    return this.ledger.take(max);
  }

  /** Queued settlements not yet in Redis. */
  get pendingCount(): number {
    return this.pending.length;
  }

  /** Tries once to send what is queued. */
  async flush(): Promise<void> {
    if (this.status.state === 'up') await this.drain();
  }

  async close(): Promise<void> {
    if (this.status.closed) return;
    this.status.closed = true;
    for (const t of this.timers) clearInterval(t);
    this.slots.abortWaiters();
    const deadline = Date.now() + CLOSE_DRAIN_MS;
    while (this.pending.length > 0 && Date.now() < deadline) {
      if (this.status.state === 'up') await this.drain();
      if (this.pending.length > 0) {
        await new Promise((r) => setTimeout(r, PROBE_MS));
        await this.status.probe().catch(() => undefined);
      }
    }
    await this.redis.batchesDone();
    for (const op of this.pending) this.log.error('store: closing with an operation Redis never received', { operation: op });
    await this.slots.releaseAll();
    await this.reaper.leave();
    await this.status.local.close();
    this.redis.disconnect();
  }

  /** Tests: dies like a killed process — no goodbye, no pending sent, leases left to expire. */
  crash(): void {
    this.status.closed = true;
    for (const t of this.timers) clearInterval(t);
    this.slots.stop();
    this.redis.disconnect();
  }
}
