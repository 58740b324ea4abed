/**
 * Concurrency slots: `acquireSlot()`, and the slot an admission takes in its own script
 * (AdmitRequest.slot: index.ts admits, `granted`/`wait` here follow it up).
 *
 * Concurrency slots are leases renewed by the heartbeat (`renew`); the queue is global and FIFO
 * (slots.lua). A slot freed in Redis (released or expired) goes to the head of the queue at once,
 * and the grant is published on the wake channel: the waiter's instance hears it on its subscriber
 * connection (`onWake`). Each waiter also polls every WAITER_POLL_MS, for a grant whose message was
 * missed or a place in the queue that expired. A release is fire and forget: if Redis does not hear
 * it, the lease runs out.
 * While Redis is away (health.ts) slots come from the local store at the per-instance share; a
 * waiter whose Redis goes away waits there for the rest of its `maxWaitMs`.
 *
 * An admission's slot is freed by its settlement or cancel (its record names it): `unbind` only
 * stops renewing it and ends a wait for it. Which admission holds which slot is index.ts's table of
 * live admissions, read here through `live`.
 *
 * Fencing (SlotResult.onLost): a lease the heartbeat finds gone (this instance was paused or cut
 * off past the lease, and the slot was purged, or freed by crash recovery) is taken back when the
 * scope has room and nobody waits (slots.lua `reclaim`); otherwise its holder is told to end its
 * request, so the limit holds again as soon as this instance runs.
 */
import { LRUCache } from 'lru-cache';
import type { Logger } from '../../log.js';
import type { SlotRequest, SlotResult } from '../types.js';
import { Unavailable, type RedisClient, type Reply } from './client.js';
import type { Health } from './health.js';
import type { Keys } from './keys.js';
import { int } from './pack.js';

const WAITER_POLL_MS = 1_000;

/** The concurrency slot taken with an admission: its record frees it at settlement or cancel. */
export interface AdmissionSlot {
  scope: string;
  id: string;
  /** A slot of the local fallback, taken while Redis was away during the wait: freed here. */
  local?: () => void;
}

/** A lease held by this instance: its scope's limit (to take it back), and whom to tell if it is lost. */
interface Held {
  limit: number;
  lost?: () => void;
  /** Taken back after it was lost: no admission record frees it any more, its own release does. */
  reclaimed?: boolean;
}

/** An admission as this module sees it (index.ts's live admissions): the slot bound to it, if any. */
export interface SlotHolder {
  slot?: AdmissionSlot;
}

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

export class Slots {
  /** scope → lease id → lease, held by this instance */
  private readonly held = new Map<string, Map<string, Held>>();
  private readonly waiters = new Map<string, Waiter>();
  private slotSeq = 0;
  private readonly goneWaiters = new LRUCache<string, string>({ max: 10_000 });

  /** `live`: the admissions of this instance by request id (index.ts). */
  constructor(
    private readonly redis: RedisClient,
    private readonly health: Health,
    private readonly keys: Keys,
    private readonly instanceId: string,
    private readonly live: ReadonlyMap<string, SlotHolder>,
    private readonly log: Logger,
  ) {
    const wake = keys.wakeChannel();
    redis.sub.on('message', (ch: string, id: string) => {
      if (ch === wake) this.onWake(id);
    });
    redis.sub.subscribe(keys.wakeChannel()).catch(() => undefined);
  }

  /** A new lease id of this instance. */
  nextId(): string {
    return `${this.instanceId}/${++this.slotSeq}`;
  }

  async acquire(req: SlotRequest): Promise<SlotResult> {
    if (req.signal.aborted) return { ok: false, reason: 'aborted' };
    if (req.limit <= 0) return { ok: true, release: () => {} };
    if (this.health.state !== 'up') return this.health.acquireSlotLocally(req, req.maxWaitMs);
    const id = this.nextId();
    let r: number;
    try {
      r = (await this.slotOp(req.scope, 'acquire', id, int(req.limit), int(Math.max(0, req.queueSize)))) as number;
    } catch (e) {
      if (e instanceof Unavailable) return this.health.acquireSlotLocally(req, req.maxWaitMs);
      throw e;
    }
    if (r === 1) return this.granted(req.scope, id, req.limit);
    if (r === 2) return { ok: false, reason: 'queue_full' };
    return this.wait(req, id);
  }

  private slotOp(scope: string, op: string, ...args: string[]): Promise<Reply> {
    return this.redis.run('slots', this.keys.slots(scope), [op, ...args]);
  }

  /** A slot held from now on (renewed by the heartbeat); `requestId`: it belongs to that admission. */
  granted(scope: string, id: string, limit: number, requestId?: string): SlotResult {
    const h = this.hold(scope, id, limit);
    let released = false;
    return {
      ok: true,
      onLost: (listener) => {
        h.lost = listener;
      },
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

  /**
   * The settlement or cancel of an admission frees its slot in Redis (the record names it): here,
   * only stop renewing it, and end a wait for it.
   */
  unbind(adm: SlotHolder): void {
    const s = adm.slot;
    if (!s) return;
    adm.slot = undefined;
    if (this.held.get(s.scope)?.get(s.id)?.reclaimed) this.releaseRemote(s.scope, s.id);
    else this.forgetHeld(s.scope, s.id);
    const w = this.waiters.get(s.id);
    if (w) this.finish(w, { ok: false, reason: 'aborted' });
    s.local?.();
  }

  private hold(scope: string, id: string, limit: number): Held {
    let m = this.held.get(scope);
    if (!m) this.held.set(scope, (m = new Map()));
    const h: Held = { limit };
    m.set(id, h);
    return h;
  }

  private forgetHeld(scope: string, id: string): void {
    const m = this.held.get(scope);
    m?.delete(id);
    if (m?.size === 0) this.held.delete(scope);
  }

  /** A lease registered in Redis by someone else here (carry.ts): renewed and fenced as any other. */
  adopt(scope: string, id: string, limit: number, lost: () => void): void {
    this.hold(scope, id, limit).lost = lost;
  }

  /** Frees a lease in Redis, fire and forget: if Redis does not hear it, the lease runs out instead. */
  release(scope: string, id: string): void {
    this.releaseRemote(scope, id);
  }

  /** Fire and forget: if Redis does not hear it, the lease runs out instead. */
  private releaseRemote(scope: string, id: string): void {
    this.forgetHeld(scope, id);
    if (this.health.state !== 'up') return;
    this.slotOp(scope, 'release', id).catch(() => undefined);
  }

  /** Queued in Redis: waits for a grant (wake-up or poll) until `maxWaitMs`, an abort or a settlement. */
  wait(req: SlotRequest, id: string, requestId?: string): Promise<SlotResult> {
    return new Promise<SlotResult>((resolve) => {
      const w: Waiter = {
        id,
        scope: req.scope,
        req,
        requestId,
        resolve,
        done: false,
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
    if (w) return this.finish(w, this.granted(w.scope, w.id, w.req.limit, w.requestId));
    // A grant for a waiter of ours that is gone (timed out, aborted): give the slot back.
    if (id.startsWith(`${this.instanceId}/`) && !this.isHeld(id)) {
      const scope = this.scopeOfOrphan(id);
      if (scope) this.releaseRemote(scope, id);
    }
  }

  private scopeOfOrphan(id: string): string | undefined {
    return this.goneWaiters.get(id);
  }

  private isHeld(id: string): boolean {
    for (const m of this.held.values()) if (m.has(id)) return true;
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
      if (r === 1) this.finish(w, this.granted(w.scope, w.id, w.req.limit, w.requestId));
      else if (r === 3) {
        // Its place expired (this instance could not renew it): queue again.
        const again = (await this.slotOp(w.scope, 'acquire', w.id, int(w.req.limit), int(Math.max(0, w.req.queueSize)))) as number;
        if (again === 1) this.finish(w, this.granted(w.scope, w.id, w.req.limit, w.requestId));
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
      let r = await this.health.acquireSlotLocally(w.req, rest);
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
      if (!w.done) return this.finish(w, this.granted(w.scope, w.id, w.req.limit, w.requestId));
      if (!w.ok) this.releaseRemote(w.scope, w.id);
      return;
    }
    this.finish(w, { ok: false, reason });
  }

  /**
   * The heartbeat's part: renews the leases of the slots held and the places of the waiters, per
   * scope; a lease found gone is taken back or fenced (see the top).
   */
  renew(): Promise<unknown> {
    const scopes = new Set<string>([...this.held.keys(), ...[...this.waiters.values()].map((w) => w.scope)]);
    return Promise.all(
      [...scopes].map(async (scope) => {
        const held = [...(this.held.get(scope)?.keys() ?? [])];
        const waiting = [...this.waiters.values()].filter((w) => w.scope === scope && !w.done).map((w) => w.id);
        if (held.length === 0 && waiting.length === 0) return;
        const lost = (await this.redis.run('slots', this.keys.slots(scope), [
          'renew',
          String(held.length),
          ...held,
          ...waiting,
        ])) as string[];
        for (const id of lost) await this.lostLease(scope, id);
      }),
    );
  }

  /** A lease of ours that Redis no longer has: back if the scope has room, else its request is ended. */
  private async lostLease(scope: string, id: string): Promise<void> {
    const h = this.held.get(scope)?.get(id);
    if (!h) return; // a waiter's place (its poll queues it again), or released meanwhile
    const back = (await this.slotOp(scope, 'reclaim', id, int(h.limit))) as number;
    if (this.held.get(scope)?.get(id) !== h) {
      if (back === 1) this.releaseRemote(scope, id); // released while we asked
      return;
    }
    if (back === 1) {
      h.reclaimed = true;
      this.log.warn('store: a concurrency slot lease had expired; taken back (the scope had room)', { scope });
      return;
    }
    this.forgetHeld(scope, id);
    this.log.warn('store: a concurrency slot lease went to another request while this instance could not renew it: its request is ended', {
      scope,
    });
    h.lost?.();
  }

  /** close(): every waiter is answered `aborted`. */
  abortWaiters(): void {
    for (const w of [...this.waiters.values()]) this.finish(w, { ok: false, reason: 'aborted' });
  }

  /** close(): gives back every slot held (a release Redis does not hear runs out with its lease). */
  async releaseAll(): Promise<void> {
    for (const [scope, m] of this.held) for (const id of m.keys()) await this.slotOp(scope, 'release', id).catch(() => undefined);
    this.held.clear();
  }

  /** crash(): the waiters' timers stop, nothing is said to Redis. */
  stop(): void {
    for (const w of this.waiters.values()) {
      clearTimeout(w.timer);
      clearInterval(w.poll);
    }
  }
}
