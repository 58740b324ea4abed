/**
 * The Redis store: several gateway instances (processes, machines) share limits and money through
 * one Redis (or Redis Cluster). Same behaviour as the memory store (the contract is in ../types.ts);
 * the decisions that differ:
 *
 * - Atomicity: admission and settlement are each one Lua script (EVALSHA) — on a single Redis one
 *   call for the whole request. On a cluster one call per hash slot the request touches (its key,
 *   its user, its group's RPM; see keys.ts), run in parallel: each limit is checked and reserved
 *   atomically in its own slot, so overspend stays bounded as on one node; a request refused in
 *   one slot has its other slots' reservations and counts taken back right after (compensation),
 *   so a concurrent request may meanwhile be refused by a reservation that is about to vanish.
 * - Time: the scripts read Redis TIME, so every instance agrees on periods. A test clock
 *   (`clock`) replaces it for the money periods only (pack.ts `now`).
 * - Crash recovery: reaper.ts.
 * - Concurrency slots are leases renewed by the heartbeat; the queue is global and FIFO (slots.lua).
 * - Faults: client.ts (every call bounded), health.ts (Redis away, the degraded mode), and here:
 *   while Redis is away, settlements and cancels wait in an in-memory queue sent in order once
 *   Redis is back (idempotent per request id, so nothing counts twice). An admission whose outcome
 *   is unknown (timed out) is cancelled once Redis answers; the cancel's marker refuses the
 *   admission if it arrives later still. The queue does not survive the process: an admission of a
 *   process that dies with its settlement queued is resolved by the reaper's rule.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { Clock } from '../../clock.js';
import { silentLogger, type Logger } from '../../log.js';
import { WINDOWS, WINDOW_MS, type Window } from '../../config/types.js';
import { MemoryStore } from '../memory.js';
import {
  type AdmitRequest, type AdmitResult, type Claim, type KeyState, type KeyStats, type PeriodUsage, type Settlement,
  type SlotRequest, type SlotResult, type Store, type StoreHealth, type UsageCounters, type WindowState,
} from '../types.js';
import { Keys } from './keys.js';
import { RecentIds } from '../recent.js';
import { loadScripts } from './scripts.js';
import { check, RedisClient, refuse, Unavailable, type Reply } from './client.js';
import { DONE_TTL_MS, int, LIST, now, packSettlement, PARTS, RECORD_TTL_MS, tagOf } from './pack.js';
import { Health, PROBE_MS } from './health.js';
import { Ops, type PartSlot } from './ops.js';
import { Reaper } from './reaper.js';

const RECENT_MAX = 100_000;
const WAITER_POLL_MS = 1_000;
const PENDING_MAX = 100_000;
const CLOSE_DRAIN_MS = 2_000;
const WINDOW_SPEC = WINDOWS.map((w) => `${w}:${WINDOW_MS[w]}`).join(',');

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
}

interface AdmissionSlot {
  scope: string;
  id: string;
  /** A slot of the local fallback, taken while Redis was away during the wait: freed here. */
  local?: () => void;
}

type PendingOp =
  | { op: 'settle'; id: string; s: Settlement; tags?: string[] }
  /** undo: 0 keep the counts, 1 take RPM counts back, 2 also unstart the windows it started (compensation). */
  | { op: 'cancel'; id: string; undo: 0 | 1 | 2; tags: string[] };

interface Waiter {
  id: string;
  scope: string;
  req: SlotRequest;
  /** The admission the slot belongs to (taken with it). */
  requestId?: string;
  deadline: number;
  done: boolean;
  /** It was answered with a slot. */
  ok?: boolean;
  resolve: (r: SlotResult) => void;
  timer: NodeJS.Timeout;
  poll: NodeJS.Timeout;
  onAbort: () => void;
}

const zeroCounters = (): UsageCounters => ({ requests: 0, input: 0, output: 0, cacheRead: 0, cacheWrite: 0, cost: 0, actual: 0, durationMs: 0 });
const COUNTER_NAMES = Object.keys(zeroCounters()) as (keyof UsageCounters)[];

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
  private readonly reaper: Reaper;
  private readonly log: Logger;
  private readonly leaseMs: number;
  private readonly clock?: Clock;
  private readonly cluster: boolean;

  private readonly live = new Map<string, LiveAdmission>();
  private readonly recent = new RecentIds(RECENT_MAX);
  private pending: PendingOp[] = [];
  private draining: Promise<void> | undefined;

  /** scope → lease ids held by this instance */
  private readonly held = new Map<string, Set<string>>();
  private readonly waiters = new Map<string, Waiter>();
  private slotSeq = 0;

  private readonly timers: NodeJS.Timeout[] = [];

  private constructor(opts: RedisStoreOptions, local: MemoryStore) {
    this.keys = new Keys(opts.prefix ?? 'gw:');
    this.log = opts.log ?? silentLogger;
    this.leaseMs = Math.min(opts.leaseMs ?? 15_000, 30_000);
    this.clock = opts.clock;
    this.cluster = opts.cluster ?? false;
    this.instanceId = `${hostname()}-${process.pid}-${randomBytes(4).toString('hex')}`;

    const scripts = loadScripts({
      prefix: this.keys.prefix, channel: this.keys.wakeChannel(), lease: this.leaseMs, recordTtl: RECORD_TTL_MS, doneTtl: DONE_TTL_MS, windows: WINDOW_MS,
    });
    this.redis = new RedisClient({ url: opts.url, cluster: this.cluster, timeoutMs: opts.timeoutMs ?? 500 }, scripts);
    this.status = new Health(this.redis, local, { divisor: Math.max(1, Math.floor(opts.instancesHint ?? 1)), log: this.log, onHealth: opts.onHealth }, {
      beat: () => this.reaper.beat(),
      pending: () => this.pending.length,
      drain: () => void this.drain(),
    });
    this.ops = new Ops(this.redis, this.keys, this.instanceId, opts.clock);
    this.reaper = new Reaper(this.redis, this.ops, this.status, this.keys, this.instanceId, this.leaseMs, this.log);
    this.redis.sub.on('message', (_ch: string, id: string) => this.onWake(id));
    this.redis.sub.subscribe(this.keys.wakeChannel()).catch(() => undefined);
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

  // ---- admission --------------------------------------------------------------------------

  /** Claims grouped by hash slot (cluster), or one part for everything (single Redis). */
  private partition(req: AdmitRequest, slot?: Part['slot']): Part[] {
    if (!this.cluster) return [{ tag: this.keys.request(req.requestId), claims: req.claims.map((claim, index) => ({ index, claim })), slot }];
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
    const slot = sr && !sr.signal.aborted && sr.limit > 0 ? { req: sr, id: `${this.instanceId}/${++this.slotSeq}` } : undefined;
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
      const unknown = tags.filter((_t, i) => results[i].status === 'rejected' && (results[i] as PromiseRejectedResult).reason instanceof Unavailable);
      const lostIndex = this.cluster && results[parts.length].status === 'rejected';
      const undo = [...admittedTags, ...unknown];
      if (undo.length > 0 || lostIndex) await this.runOrQueue({ op: 'cancel', id: req.requestId, undo: 2, tags: undo });
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
      await this.runOrQueue({ op: 'cancel', id: req.requestId, undo: 2, tags: [tag] });
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
    const live: LiveAdmission = { tags };
    this.live.set(req.requestId, live);
    if (!sr) return { ok: true };
    if (!slot) return { ok: true, slot: Promise.resolve(sr.signal.aborted ? { ok: false, reason: 'aborted' } : { ok: true, release: () => {} }) };
    if (state === 2) return { ok: true, slot: Promise.resolve({ ok: false, reason: 'queue_full' }) };
    live.slot = { scope: sr.scope, id: slot.id };
    if (state === 1) return { ok: true, slot: Promise.resolve(this.granted(sr.scope, slot.id, req.requestId)) };
    return { ok: true, slot: this.wait(sr, slot.id, req.requestId) };
  }

  /** Redis away: the degraded admission (health.ts), settled or cancelled on the local store too. */
  private async admitLocally(req: AdmitRequest): Promise<AdmitResult> {
    const r = await this.status.admitLocally(req);
    if (r.ok) this.live.set(req.requestId, { tags: [], local: true });
    return r;
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
    if (adm?.local) await this.status.local.cancel(requestId, { keepCounts: true });
    else if (adm) this.unbindSlot(adm);
    await this.runOrQueue({ op: 'settle', id: requestId, s, tags: adm && !adm.local ? adm.tags : undefined });
    this.recent.add(requestId);
  }

  async cancel(requestId: string, opts: { keepCounts?: boolean } = {}): Promise<void> {
    const adm = this.live.get(requestId);
    if (!adm) return;
    this.live.delete(requestId);
    if (adm.local) return this.status.local.cancel(requestId, opts);
    this.unbindSlot(adm);
    await this.runOrQueue({ op: 'cancel', id: requestId, undo: opts.keepCounts ? 0 : 1, tags: adm.tags });
  }

  /**
   * The settlement or cancel of an admission frees its slot in Redis (the record names it): here,
   * only stop renewing it, and end a wait for it.
   */
  private unbindSlot(adm: LiveAdmission): void {
    const s = adm.slot;
    if (!s) return;
    adm.slot = undefined;
    this.forgetHeld(s.scope, s.id);
    const w = this.waiters.get(s.id);
    if (w) this.finish(w, { ok: false, reason: 'aborted' });
    s.local?.();
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
      await null;
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
      if ((await this.ops.settlePart(op.id, this.keys.request(op.id), op.s, packed, 's', instance)) === 2) this.lateSettlement(op);
      return;
    }
    const codes = await Promise.all(this.ops.settleTags(op.id, op.s, op.tags).map((tag) => this.ops.settlePart(op.id, tag, op.s, packed, 's', instance)));
    if (this.cluster) await this.ops.indexDel(instance, op.id);
    if (codes.includes(2)) this.lateSettlement(op);
  }

  private lateSettlement(op: { id: string; s: Settlement }): void {
    this.log.warn('store: settlement arrived after crash recovery had resolved the request; the recovery stands', { requestId: op.id, actual: op.s.actual });
  }

  /** Renews this instance's lease and its slot leases and waiters. */
  private async heartbeat(): Promise<void> {
    if (this.status.state !== 'up' || this.status.closed) return;
    if (this.pending.length > 0) void this.drain();
    try {
      const known = await this.reaper.beat();
      if (!known) this.log.warn('this instance had been taken for dead; its admissions may have been resolved by crash recovery');
      const scopes = new Set<string>([...this.held.keys(), ...[...this.waiters.values()].map((w) => w.scope)]);
      await Promise.all([...scopes].map(async (scope) => {
        const held = [...(this.held.get(scope) ?? [])];
        const waiting = [...this.waiters.values()].filter((w) => w.scope === scope && !w.done).map((w) => w.id);
        if (held.length === 0 && waiting.length === 0) return;
        const lost = (await this.redis.run('slots', this.keys.slots(scope), ['renew', String(held.length), ...held, ...waiting])) as string[];
        for (const id of lost) {
          if (this.held.get(scope)?.delete(id)) this.log.warn('store: a concurrency slot lease had expired', { scope });
        }
      }));
    } catch (e) {
      if (!(e instanceof Unavailable)) throw e;
    }
  }

  // ---- concurrency slots ----------------------------------------------------------------------

  async acquireSlot(req: SlotRequest): Promise<SlotResult> {
    if (req.signal.aborted) return { ok: false, reason: 'aborted' };
    if (req.limit <= 0) return { ok: true, release: () => {} };
    if (this.status.state !== 'up') return this.status.acquireSlotLocally(req, req.maxWaitMs);
    const id = `${this.instanceId}/${++this.slotSeq}`;
    let r: number;
    try {
      r = (await this.slotOp(req.scope, 'acquire', id, int(req.limit), int(Math.max(0, req.queueSize)))) as number;
    } catch (e) {
      if (e instanceof Unavailable) return this.status.acquireSlotLocally(req, req.maxWaitMs);
      throw e;
    }
    if (r === 1) return this.granted(req.scope, id);
    if (r === 2) return { ok: false, reason: 'queue_full' };
    return this.wait(req, id);
  }

  private slotOp(scope: string, op: string, ...args: string[]): Promise<Reply> {
    return this.redis.run('slots', this.keys.slots(scope), [op, ...args]);
  }

  /** A slot held from now on (renewed by the heartbeat); `requestId`: it belongs to that admission. */
  private granted(scope: string, id: string, requestId?: string): SlotResult {
    let set = this.held.get(scope);
    if (!set) this.held.set(scope, (set = new Set()));
    set.add(id);
    let released = false;
    return {
      ok: true,
      release: () => {
        if (released) return;
        released = true;
        if (requestId !== undefined) {
          // Before its settlement: freed now, and unbound (the settlement's script finds it gone).
          const adm = this.live.get(requestId);
          if (adm?.slot?.id !== id) return; // the settlement or cancel freed it already
          adm.slot = undefined;
        }
        this.releaseRemote(scope, id);
      },
    };
  }

  private forgetHeld(scope: string, id: string): void {
    const set = this.held.get(scope);
    set?.delete(id);
    if (set?.size === 0) this.held.delete(scope);
  }

  /** Fire and forget: if Redis does not hear it, the lease runs out instead. */
  private releaseRemote(scope: string, id: string): void {
    this.forgetHeld(scope, id);
    if (this.status.state !== 'up') return;
    this.slotOp(scope, 'release', id).catch(() => undefined);
  }

  private wait(req: SlotRequest, id: string, requestId?: string): Promise<SlotResult> {
    return new Promise<SlotResult>((resolve) => {
      const w: Waiter = {
        id, scope: req.scope, req, requestId, resolve, done: false,
        deadline: Date.now() + Math.max(0, req.maxWaitMs),
        timer: setTimeout(() => void this.giveUp(w, 'timeout'), Math.min(Math.max(0, req.maxWaitMs), 2_147_483_647)),
        poll: setInterval(() => void this.pollWaiter(w), WAITER_POLL_MS),
        onAbort: () => void this.giveUp(w, 'aborted'),
      };
      req.signal.addEventListener('abort', w.onAbort, { once: true });
      this.waiters.set(id, w);
    });
  }

  private finish(w: Waiter, r: SlotResult): void {
    if (w.done) {
      if (r.ok) r.release();
      return;
    }
    w.done = true;
    w.ok = r.ok;
    clearTimeout(w.timer);
    clearInterval(w.poll);
    w.req.signal.removeEventListener('abort', w.onAbort);
    this.waiters.delete(w.id);
    w.resolve(r);
  }

  /** A grant published by the instance that freed the slot (or found by a poll). */
  private onWake(id: string): void {
    const w = this.waiters.get(id);
    if (w) return this.finish(w, this.granted(w.scope, w.id, w.requestId));
    // A grant for a waiter of ours that is gone (timed out, aborted): give the slot back.
    if (id.startsWith(`${this.instanceId}/`) && !this.isHeld(id)) {
      const scope = this.scopeOfOrphan(id);
      if (scope) this.releaseRemote(scope, id);
    }
  }

  private readonly goneWaiters = new LRUCache<string, string>({ max: 10_000 });

  private scopeOfOrphan(id: string): string | undefined {
    return this.goneWaiters.get(id);
  }

  private isHeld(id: string): boolean {
    for (const set of this.held.values()) if (set.has(id)) return true;
    return false;
  }

  private async pollWaiter(w: Waiter): Promise<void> {
    if (w.done) return;
    try {
      const r = (await this.slotOp(w.scope, 'poll', w.id)) as number;
      if (w.done) {
        if (r === 1 && !w.ok) this.releaseRemote(w.scope, w.id);
        return;
      }
      if (r === 1) this.finish(w, this.granted(w.scope, w.id, w.requestId));
      else if (r === 3) {
        // Its place expired (this instance could not renew it): queue again.
        const again = (await this.slotOp(w.scope, 'acquire', w.id, int(w.req.limit), int(Math.max(0, w.req.queueSize)))) as number;
        if (again === 1) this.finish(w, this.granted(w.scope, w.id, w.requestId));
        else if (again === 2) this.finish(w, { ok: false, reason: 'queue_full' });
      }
    } catch (e) {
      if (!(e instanceof Unavailable) || w.done) return;
      // Redis went away while waiting: wait for a local slot for the rest of max_wait.
      this.goneWaiters.set(w.id, w.scope);
      const rest = Math.max(0, w.deadline - Date.now());
      clearInterval(w.poll);
      clearTimeout(w.timer);
      w.req.signal.removeEventListener('abort', w.onAbort);
      this.waiters.delete(w.id);
      w.done = true;
      let r = await this.status.acquireSlotLocally(w.req, rest);
      if (r.ok && w.requestId !== undefined) {
        // Still the admission's slot: its settlement or cancel frees this local one.
        const s = this.live.get(w.requestId)?.slot;
        if (s?.id === w.id) s.local = r.release;
        else {
          r.release();
          r = { ok: false, reason: 'aborted' };
        }
      }
      w.ok = r.ok;
      w.resolve(r);
    }
  }

  private async giveUp(w: Waiter, reason: 'timeout' | 'aborted'): Promise<void> {
    if (w.done) return;
    this.goneWaiters.set(w.id, w.scope);
    if (reason === 'aborted') this.finish(w, { ok: false, reason });
    let r = 3;
    try {
      r = (await this.slotOp(w.scope, 'leave', w.id)) as number;
    } catch {
      // unreachable: the waiter expires with its lease
    }
    if (r === 1) {
      // Granted just before: a timed-out waiter takes it, an aborted one gives it back.
      if (!w.done) return this.finish(w, this.granted(w.scope, w.id, w.requestId));
      if (!w.ok) this.releaseRemote(w.scope, w.id);
      return;
    }
    this.finish(w, { ok: false, reason });
  }

  // ---- reads ----------------------------------------------------------------------------------

  private async read<T>(f: () => Promise<T>): Promise<T> {
    if (this.status.state !== 'up') throw refuse(new Unavailable('Redis unreachable'));
    try {
      return await f();
    } catch (e) {
      if (e instanceof Unavailable) throw refuse(e);
      throw e;
    }
  }

  async balanceSpent(user: string): Promise<number> {
    return this.read(async () => Number((await this.redis.cmd((c) => c.hget(this.keys.wallet(user), 'spent'))) ?? 0));
  }

  async keyState(keyId: string): Promise<KeyState> {
    return this.read(async () => {
      const r = (await this.redis.run('read', [this.keys.counters(keyId)], [now(this.clock), 'key', WINDOW_SPEC])) as number[];
      const windows = {} as Record<Window, WindowState>;
      WINDOWS.forEach((w, i) => {
        const [start, used, reserved] = r.slice(2 + 3 * i, 5 + 3 * i);
        windows[w] = start < 0 ? { used, reserved } : { start, used, reserved };
      });
      return { used: r[0], reserved: r[1], windows };
    });
  }

  async planUsage(user: string, group: string): Promise<PeriodUsage> {
    return this.read(async () => {
      const r = (await this.redis.run('read', [this.keys.plan(user, group)], [now(this.clock), 'plan'])) as number[];
      return { daily: r[0], weekly: r[1], monthly: r[2] };
    });
  }

  async spendCapUsage(user: string): Promise<{ weekly: number; monthly: number }> {
    return this.read(async () => {
      const r = (await this.redis.run('read', [this.keys.caps(user)], [now(this.clock), 'cap'])) as number[];
      return { weekly: r[0], monthly: r[1] };
    });
  }

  async keyStats(keyId: string, fromDay: string, toDay: string): Promise<KeyStats> {
    return this.read(async () => {
      const k = this.keys;
      const r = (await this.redis.run('read', [k.totals(keyId), k.days(keyId), k.ring(keyId)], [now(this.clock), 'stats', fromDay, toDay, k.dayPrefix(keyId)])) as Reply[];
      const total = zeroCounters();
      const flat = r[0] as string[];
      for (let i = 0; i < flat.length; i += 2) {
        const f = flat[i] as keyof UsageCounters;
        if (COUNTER_NAMES.includes(f)) total[f] = Number(flat[i + 1]);
      }
      const today = zeroCounters();
      for (const [, c] of Object.entries(byModel(r[1] as string[]))) addCounters(today, c);
      const models: Record<string, UsageCounters> = {};
      for (let i = 4; i < r.length; i += 2) {
        for (const [model, c] of Object.entries(byModel(r[i + 1] as string[]))) addCounters((models[model] ??= zeroCounters()), c);
      }
      return { today, total, byModel: models, rpm: r[2] as number, tpm: r[3] as number };
    });
  }

  async resetKeyQuota(keyId: string): Promise<void> {
    this.status.assertOpen();
    const kc = this.keys.counters(keyId);
    const fields: string[] = ['used', '0'];
    for (const w of WINDOWS) fields.push(`${w}:u`, '0');
    await this.read(() => this.redis.cmd((c) => c.multi().hset(kc, ...fields).hdel(kc, ...WINDOWS.map((w) => `${w}:s`)).exec().then(check)));
  }

  // ---- remembered items -------------------------------------------------------------------------

  async remember(namespace: string, entries: ReadonlyArray<readonly [string, string]>, ttlMs: number): Promise<void> {
    if (this.status.state !== 'up' || entries.length === 0) return;
    try {
      await this.redis.cmd((c) => {
        const m = c.multi();
        for (const [id, value] of entries) m.set(this.keys.remembered(namespace, id), value, 'PX', Math.max(1, Math.round(ttlMs)));
        return m.exec().then(check);
      });
    } catch (e) {
      // A cache: what cannot be kept now is simply not found later.
      if (!(e instanceof Unavailable)) this.log.warn('store: remember failed', { error: e as Error });
    }
  }

  async recall(namespace: string, ids: readonly string[]): Promise<Array<string | undefined>> {
    if (this.status.state !== 'up' || ids.length === 0) return ids.map(() => undefined);
    try {
      const values = await this.redis.cmd((c) => c.mget(...ids.map((id) => this.keys.remembered(namespace, id))));
      return values.map((v) => v ?? undefined);
    } catch {
      return ids.map(() => undefined);
    }
  }

  async health(): Promise<StoreHealth> {
    return this.status.report();
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
    for (const w of [...this.waiters.values()]) this.finish(w, { ok: false, reason: 'aborted' });
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
    for (const [scope, set] of this.held) for (const id of set) await this.slotOp(scope, 'release', id).catch(() => undefined);
    this.held.clear();
    await this.reaper.leave();
    await this.status.local.close();
    this.redis.disconnect();
  }

  /** Tests: dies like a killed process — no goodbye, no pending sent, leases left to expire. */
  crash(): void {
    this.status.closed = true;
    for (const t of this.timers) clearInterval(t);
    for (const w of this.waiters.values()) {
      clearTimeout(w.timer);
      clearInterval(w.poll);
    }
    this.redis.disconnect();
  }
}

function addCounters(into: UsageCounters, c: UsageCounters): void {
  for (const n of COUNTER_NAMES) into[n] += c[n];
}

/** `<model>|<counter>` fields of a day record → counters per model. */
function byModel(flat: string[]): Record<string, UsageCounters> {
  const out: Record<string, UsageCounters> = {};
  for (let i = 0; i < flat.length; i += 2) {
    const sep = flat[i].lastIndexOf('|');
    const model = flat[i].slice(0, sep);
    const f = flat[i].slice(sep + 1) as keyof UsageCounters;
    if (!COUNTER_NAMES.includes(f)) continue;
    (out[model] ??= zeroCounters())[f] = Number(flat[i + 1]);
  }
  return out;
}
