/**
 * Whether Redis serves, as this instance sees it, and the degraded mode while it does not.
 *
 * - A timeout or lost connection marks Redis away until a probe succeeds (client.ts reports the
 *   failed calls here: a lost connection at once, a timed-out call once a heartbeat fails too; a
 *   busy reply fails its call only). A probe is one heartbeat (the registry's beat, reaper.ts), run
 *   on each (re)connection and, by index.ts, every PROBE_MS while Redis is away.
 * - While away: admissions with a money claim fail closed (503 billing_service_error); RPM-only
 *   admissions and slots run on a local memory store at each limit's per-instance share
 *   (limit / `instancesHint`, rounded up); reads fail closed (read.ts); settlements and cancels wait
 *   in a queue (index.ts), sent once Redis is back.
 * - Back: what the fallback counted (RPM) and still holds (slots) is carried to Redis (carry.ts)
 *   before the store serves from Redis again, so the shared limits count the outage too.
 * - `onHealth` is told when Redis goes away or comes back; `report()` is what `/readyz` shows.
 * - `closed`: the store was closed (or crashed): faults are no longer noted, nothing probes.
 */
import type { Redis } from 'ioredis';
import type { Logger } from '../../log.js';
import type { AdmitRequest, AdmitResult, Claim, SlotRequest, SlotResult, Store, StoreHealth } from '../types.js';
import { isUnavailable, refuse, Unavailable, type Faults, type RedisClient } from './client.js';
import type { Carry } from './carry.js';

export const PROBE_MS = 250;
const MONEY_CLAIMS = new Set<Claim['kind']>(['balance', 'plan', 'key-quota', 'key-window', 'spend-cap']);

/** What a probe needs of the rest of the store (index.ts wires it). */
export interface HealthHooks {
  /** One registry heartbeat (reaper.ts, which logs what it finds). */
  beat(): Promise<unknown>;
  /** How many settlements and cancels wait in the queue. */
  pending(): number;
  /** Sends them: Redis is back. */
  drain(): void;
}

export interface HealthOptions {
  /** Divides RPM and concurrency limits while Redis is away (instances × workers). */
  divisor: number;
  log: Logger;
  /** Called when Redis goes away or comes back. */
  onHealth?: (h: StoreHealth) => void;
}

export class Health implements Faults {
  /** Written here only; read by every part before it calls Redis. */
  state: 'down' | 'up' = 'down';
  upSince = 0;
  /** While open() waits for the first connection, failures are expected and not logged. */
  starting = true;
  closed = false;
  /** Set once "degraded" has been logged for the current outage. */
  private downLogged = false;
  private probing: Promise<void> | undefined;
  private checkedMode = false;
  private confirming = false;
  private readonly divisor: number;
  private readonly log: Logger;
  private readonly onHealth?: (h: StoreHealth) => void;

  /** `local`: the store that serves while Redis is away (a memory store); `carry`: what it did, for Redis. */
  constructor(
    private readonly redis: RedisClient,
    readonly local: Store,
    readonly carry: Carry,
    opts: HealthOptions,
    private readonly hooks: HealthHooks,
  ) {
    this.divisor = opts.divisor;
    this.log = opts.log;
    this.onHealth = opts.onHealth;
    redis.faults = this;
    redis.client.on('close', () => this.fault(new Unavailable('connection to Redis closed')));
    redis.client.on('ready', () => void this.probe());
  }

  isUp(): boolean {
    return this.state === 'up';
  }

  assertOpen(): void {
    if (this.closed) throw new Error('store is closed');
  }

  /** Records a failed call: Redis is away until a probe succeeds. */
  fault(e: unknown): void {
    if (this.closed) return;
    if (this.state === 'up') {
      this.state = 'down';
      this.logDown(e);
    }
  }

  logDown(e: unknown): void {
    if (this.downLogged || this.starting || this.closed) return;
    this.downLogged = true;
    this.log.warn('store degraded: Redis unreachable; money paths refused (503), RPM and concurrency per instance', {
      error: (e as Error)?.message,
      share: `1/${this.divisor}`,
    });
    this.onHealth?.({ ready: false, degraded: this.degradedText() });
  }

  private degradedText(): string {
    return `redis unreachable: money paths refused, RPM and concurrency at 1/${this.divisor} of each limit per instance`;
  }

  /** What `/readyz` reports. */
  report(): StoreHealth {
    if (this.closed) return { ready: false };
    return this.state === 'up' ? { ready: true } : { ready: false, degraded: this.degradedText() };
  }

  /** One heartbeat; success brings the store back up and sends what waited. */
  probe(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.probing ??= (async () => {
      await Promise.resolve(); // yield first, so that the finally below never runs before this promise is stored
      try {
        await this.hooks.beat();
        if (this.state === 'down') {
          await this.carryBack();
          this.state = 'up';
          this.upSince = Date.now();
          const hadLogged = this.downLogged;
          this.downLogged = false;
          if (hadLogged) this.log.info('store recovered: Redis reachable again', { pending: this.hooks.pending() });
          this.onHealth?.({ ready: true });
          if (!this.redis.cluster && !this.checkedMode) void this.checkMode();
          this.hooks.drain();
        }
      } catch (e) {
        if (!isUnavailable(e)) this.log.error('store probe failed', { error: e as Error });
        if (this.state === 'down') this.logDown(e);
      } finally {
        this.probing = undefined;
      }
    })();
    return this.probing;
  }

  /**
   * Before serving from Redis again: what the fallback counted and holds, into Redis (carry.ts),
   * until a pass finds nothing new — its last pass awaits nothing, so no local admission slips in
   * between it and the switch. Throws Unavailable when Redis does not take it (still away).
   */
  private async carryBack(): Promise<void> {
    try {
      for (let pass = 0; pass < 5 && (await this.carry.send()); pass++);
    } catch (e) {
      if (e instanceof Unavailable) throw e;
      this.log.error('store: carrying back what this instance counted while Redis was away failed', { error: e as Error });
    }
  }

  /** A Redis Cluster node addressed as a single server fails every multi-key script: say why. */
  private async checkMode(): Promise<void> {
    this.checkedMode = true;
    try {
      const info = await this.redis.cmd((c) => (c as Redis).info('cluster'));
      if (/cluster_enabled:1/.test(info)) this.log.error('store: this Redis is a cluster node; set store.cluster: true');
    } catch {
      this.checkedMode = false;
    }
  }

  /** A call timed out: Redis is marked away if a heartbeat fails too. */
  confirmDown(e: unknown): void {
    if (this.confirming || this.state !== 'up') return;
    this.confirming = true;
    this.hooks
      .beat()
      .then(
        () => undefined,
        () => this.fault(e),
      )
      .finally(() => (this.confirming = false));
  }

  // ---- degraded mode ----------------------------------------------------------------------------

  private share(limit: number): number {
    return limit > 0 ? Math.max(1, Math.ceil(limit / this.divisor)) : limit;
  }

  /**
   * Redis away: RPM-only admissions run locally at the per-instance share; money fails closed
   * (throws the 503 at once, before any promise).
   */
  admitLocally(req: AdmitRequest): Promise<AdmitResult> {
    if (req.claims.some((c) => MONEY_CLAIMS.has(c.kind))) throw refuse(new Unavailable('Redis unreachable'));
    const claims = req.claims.map((c) => (c.kind === 'rpm' ? { ...c, limit: this.share(c.limit) } : c));
    const sr = req.slot;
    const slot = sr && { ...sr, limit: this.share(sr.limit), queueSize: this.share(sr.queueSize) };
    return this.local.admit({ requestId: req.requestId, reserve: 0, claims, slot }).then((r) => {
      if (!r.ok) return r;
      this.carry.counted(req.claims);
      return r.slot && sr ? { ok: true, slot: Promise.resolve(r.slot).then((s) => this.carried(s, sr.scope, sr.limit)) } : r;
    });
  }

  /** Redis away: a slot of the local store at the per-instance share, waiting at most `maxWaitMs`. */
  acquireSlotLocally(req: SlotRequest, maxWaitMs: number): Promise<SlotResult> {
    return this.local
      .acquireSlot({ ...req, limit: this.share(req.limit), queueSize: this.share(req.queueSize), maxWaitMs })
      .then((s) => this.carried(s, req.scope, req.limit));
  }

  /** A local slot, registered for the carry-back: its release frees its lease in Redis too, once it has one. */
  private carried(s: SlotResult, scope: string, limit: number): SlotResult {
    if (!s.ok || limit <= 0) return s;
    const h = this.carry.slot(scope, limit);
    return {
      ok: true,
      release: () => {
        s.release();
        this.carry.release(h);
      },
      onLost: (listener) => {
        h.lost = listener;
      },
    };
  }
}
