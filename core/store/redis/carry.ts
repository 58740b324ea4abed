/**
 * The carry-back: what the local fallback (health.ts) counted and held while Redis was away is
 * added to the shared limits once Redis is back, so an outage never resets them.
 *
 * - RPM: each admission the fallback passes is counted here per minute counter (its Redis key), and
 *   `send` adds the counts of the current minute to Redis's minute counters (carry.lua), once each.
 *   Counts of a minute that is over are dropped: they limit nothing any more.
 * - Concurrency: each slot the fallback grants is registered here; `send` makes the ones still held
 *   leases in Redis (the heartbeat renews them, their release frees them there too), so requests
 *   admitted through Redis afterwards see them. A slot granted locally while Redis is up (a local
 *   waiter served after the return) is sent at once.
 *
 * health.ts calls `send` when Redis answers again, before the store serves from it, until nothing
 * is left to send. Each instance carries its own counts: the minute ends with every instance's.
 */
import type { Clock } from '../../clock.js';
import type { Logger } from '../../log.js';
import type { Claim } from '../types.js';
import type { RedisClient } from './client.js';
import type { Keys } from './keys.js';
import { int, now, tagOf } from './pack.js';

const MINUTE = 60_000;

/** A minute counter the fallback counted in. */
interface Count {
  key: string;
  /** The hash slot it lives in (cluster: one script per slot). */
  tag: string;
  minute: number;
  count: number;
  /** How many of `count` Redis has. */
  sent: number;
}

/** A slot the fallback granted. */
export interface LocalSlot {
  readonly scope: string;
  readonly limit: number;
  /** Its lease id once registered in Redis (Slots.nextId). */
  readonly id: string;
  state: 'local' | 'sending' | 'remote' | 'released';
  /** Told if its lease in Redis is lost later (SlotResult.onLost). */
  lost?: () => void;
}

/** What carrying back needs of the slots module (slots.ts), passed in (no import of it here). */
export interface CarrySlots {
  /** A new lease id of this instance. */
  nextId(): string;
  /** A lease registered in Redis: renewed by the heartbeat from now on (`lost`: see SlotResult.onLost). */
  adopt(scope: string, id: string, limit: number, lost: () => void): void;
  /** Frees a lease in Redis (fire and forget). */
  release(scope: string, id: string): void;
}

export class Carry {
  private readonly counts = new Map<string, Count>();
  private readonly slots = new Set<LocalSlot>();
  private sending: Promise<boolean> | undefined;
  /** Set by index.ts once the slots module exists (it is made after health.ts, which holds this). */
  slotsModule!: CarrySlots;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly clock: Clock | undefined,
    private readonly isUp: () => boolean,
    private readonly log: Logger,
  ) {}

  private localNow(): number {
    return this.clock ? this.clock.now() : Date.now();
  }

  /** An admission the fallback passed: its RPM claims count in the current minute. */
  counted(claims: readonly Claim[]): void {
    const minute = Math.floor(this.localNow() / MINUTE);
    for (const c of claims) {
      if (c.kind !== 'rpm') continue;
      const key = this.keys.rpm(c.scope, c.id);
      let e = this.counts.get(key);
      if (!e || e.minute !== minute) this.counts.set(key, (e = { key, tag: tagOf(this.keys, c), minute, count: 0, sent: 0 }));
      e.count++;
    }
  }

  /** An admission of the fallback cancelled with its counts (it never reached the upstream). */
  uncounted(claims: readonly Claim[], minute: number): void {
    for (const c of claims) {
      if (c.kind !== 'rpm') continue;
      const e = this.counts.get(this.keys.rpm(c.scope, c.id));
      if (e && e.minute === minute && e.count > e.sent) e.count--;
    }
  }

  /** The minute a local admission counts in (for `uncounted`). */
  minute(): number {
    return Math.floor(this.localNow() / MINUTE);
  }

  /** A slot the fallback granted: carried to Redis (at once when Redis is up). */
  slot(scope: string, limit: number): LocalSlot {
    const s: LocalSlot = { scope, limit, id: this.slotsModule.nextId(), state: 'local' };
    this.slots.add(s);
    if (this.isUp())
      void this.send().catch((e) => this.log.debug('store: a local slot waits to be carried to Redis', { error: e as Error }));
    return s;
  }

  /** The local slot's request is over: its lease in Redis too, if it has one. */
  release(s: LocalSlot): void {
    const was = s.state;
    s.state = 'released';
    this.slots.delete(s);
    if (was === 'remote') this.slotsModule.release(s.scope, s.id);
    // 'sending': freed by send() once Redis has it.
  }

  /** Whether anything waits to be carried. */
  get empty(): boolean {
    if (this.slots.size > 0) for (const s of this.slots) if (s.state === 'local') return false;
    const minute = this.minute();
    for (const e of this.counts.values()) if (e.minute === minute && e.count > e.sent) return false;
    return true;
  }

  /**
   * Sends what was counted and held locally and not carried yet; true when it sent something.
   * Rejects with Unavailable when Redis does not take it (nothing is marked sent then).
   */
  send(): Promise<boolean> {
    if (this.sending) return this.sending.then(() => this.send());
    const p = this.sendOnce().finally(() => {
      if (this.sending === p) this.sending = undefined;
    });
    this.sending = p;
    return p;
  }

  private async sendOnce(): Promise<boolean> {
    const minute = this.minute();
    for (const [k, e] of this.counts) if (e.minute !== minute) this.counts.delete(k);
    const counts = [...this.counts.values()].filter((e) => e.count > e.sent).map((e) => ({ e, n: e.count - e.sent }));
    const slots = [...this.slots].filter((s) => s.state === 'local');
    if (counts.length === 0 && slots.length === 0) return false;
    for (const s of slots) s.state = 'sending';
    // One script per hash slot on a cluster; one for everything on a single Redis.
    const groups = new Map<string, { counts: typeof counts; slots: LocalSlot[] }>();
    const group = (tag: string) => {
      const g0 = this.redis.cluster ? tag : '';
      let g = groups.get(g0);
      if (!g) groups.set(g0, (g = { counts: [], slots: [] }));
      return g;
    };
    for (const c of counts) group(c.e.tag).counts.push(c);
    for (const s of slots) group(this.keys.slotTag(s.scope)).slots.push(s);
    const results = await Promise.allSettled(
      [...groups.values()].map(async (g) => {
        const keys = [...g.counts.map((c) => c.e.key), ...g.slots.map((s) => this.keys.slots(s.scope)[0])];
        const args = [
          now(this.clock),
          int(g.counts.length),
          ...g.counts.flatMap((c) => [int(c.e.minute), int(c.n)]),
          ...g.slots.map((s) => s.id),
        ];
        await this.redis.run('carry', keys, args);
        for (const c of g.counts) c.e.sent += c.n;
        for (const s of g.slots) {
          if (s.state === 'released') this.slotsModule.release(s.scope, s.id);
          else {
            s.state = 'remote';
            this.slotsModule.adopt(s.scope, s.id, s.limit, () => s.lost?.());
          }
        }
        return g;
      }),
    );
    for (const s of slots) if (s.state === 'sending') s.state = 'local';
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason instanceof Error ? failed.reason : new Error(String(failed.reason));
    const sentCounts = counts.reduce((n, c) => n + c.n, 0);
    this.log.info('store: what this instance counted while Redis was away is carried back to Redis', {
      rpmCounts: sentCounts,
      slots: slots.length,
    });
    return true;
  }
}
