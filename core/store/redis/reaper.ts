/**
 * Crash recovery: the registry of live instances and the reaper.
 *
 * Each admission is listed under its instance (an index in Redis) with its `recovery` settlement.
 * Instances renew a lease in a registry (heartbeat every lease/3); the reaper of any live instance
 * resolves the admissions of an instance whose lease expired: the `recovery` settlement (settle
 * semantics, once, `recovered`), or a release without charge when there is none. It waits one
 * lease after its own (re)connection before judging others, so an outage of Redis itself kills
 * nobody. A live instance cut off from Redis for longer than the lease is taken for dead: its late
 * settlements find the request resolved and are dropped (logged); the recovered charge stands.
 *
 * `beat` is the heartbeat's registry part (index.ts runs the heartbeat; health.ts probes with it),
 * `reap` the reaper (run every lease/2 by index.ts), `leave` the registry exit at close.
 */
import { Cluster } from 'ioredis';
import type { Logger } from '../../log.js';
import type { Settlement } from '../types.js';
import { Unavailable, type RedisClient } from './client.js';
import type { Health } from './health.js';
import type { Keys } from './keys.js';
import type { Ops } from './ops.js';
import { int, LIST, PARTS, RECORD_TTL_MS, unpackSettlement } from './pack.js';

export class Reaper {
  private readonly cluster: boolean;

  constructor(
    private readonly redis: RedisClient,
    private readonly ops: Ops,
    private readonly health: Health,
    private readonly keys: Keys,
    private readonly instanceId: string,
    private readonly leaseMs: number,
    private readonly log: Logger,
  ) {
    this.cluster = redis.cluster;
  }

  /** Renews this instance's lease in the registry: true when it was registered already (not reaped). */
  async beat(): Promise<boolean> {
    const client = this.redis.client;
    // Not before the client is ready: a cluster client without its slot table sends commands to
    // random nodes and follows the redirections, out of order.
    if (client.status !== 'ready') throw new Unavailable(`Redis connection ${client.status}`);
    const work = (async () => {
      // A cluster client connects to each node on first use, and retries that first command on a
      // random node (out of order): connect them all before serving.
      if (client instanceof Cluster) await Promise.all(client.nodes('master').map((n) => n.ping()));
      return this.redis.run('live', [this.keys.registry()], ['beat', this.instanceId, int(this.leaseMs), int(RECORD_TTL_MS)]);
    })();
    // Bounded whatever a client queue does: a probe that never ends would stop every later one.
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Unavailable('heartbeat timed out')), this.redis.timeoutMs + 200);
    });
    try {
      return (await Promise.race([work, limit])) === 1;
    } finally {
      clearTimeout(timer);
      work.catch(() => undefined);
    }
  }

  /** Resolves the admissions of instances whose lease expired (see the header). */
  async reap(): Promise<void> {
    if (this.health.state !== 'up' || this.health.closed || Date.now() - this.health.upSince < this.leaseMs) return;
    let dead: string[];
    try {
      dead = ((await this.redis.run('live', [this.keys.registry()], ['dead', '', '0', '0'])) as string[]).filter(
        (i) => i !== this.instanceId,
      );
    } catch (e) {
      if (e instanceof Unavailable) return;
      throw e;
    }
    for (const instance of dead) {
      try {
        await this.reapInstance(instance);
      } catch (e) {
        if (e instanceof Unavailable) return;
        this.log.error('store: crash recovery failed', { instance, error: e as Error });
      }
    }
  }

  private async reapInstance(instance: string): Promise<void> {
    const index = this.keys.index(instance);
    const entries = await this.redis.cmd((c) => c.hgetall(index));
    for (const [id, text] of Object.entries(entries)) {
      let entry: { p: string[]; r: Settlement | null; packed: string };
      try {
        const [tags, packed] = text.split(PARTS);
        if (packed === undefined) throw new Error('not an index entry');
        entry = { p: tags.split(LIST), r: packed ? unpackSettlement(packed) : null, packed };
      } catch {
        this.log.error('store: unreadable admission entry dropped', { instance, requestId: id });
        await this.ops.indexDel(instance, id);
        continue;
      }
      if (this.cluster && (await this.isAlive(instance))) return;
      if (entry.r) {
        const s: Settlement = { ...entry.r, recovered: true, estimated: true };
        const tags = this.cluster ? this.ops.settleTags(id, s, entry.p) : [this.keys.request(id)];
        const codes = await Promise.all(tags.map((tag) => this.ops.settlePart(id, tag, s, entry.packed, 'r', instance)));
        if (codes.includes(4)) return; // it renewed its lease: alive after all
        if (codes.includes(1))
          this.log.warn('store: recovered an admission of a dead instance', { instance, requestId: id, actual: s.actual, model: s.model });
      } else {
        await Promise.all(this.ops.cancelTags(id, entry.p).map((tag) => this.ops.cancelPart(id, tag, 0, instance)));
      }
      if (this.cluster) await this.ops.indexDel(instance, id);
    }
    if ((await this.redis.cmd((c) => c.hlen(index))) === 0) {
      await this.redis.run('live', [this.keys.registry()], ['forget', instance, '0', '0']);
    }
  }

  private async isAlive(instance: string): Promise<boolean> {
    const [score, time] = await Promise.all([
      this.redis.cmd((c) => c.zscore(this.keys.registry(), instance)),
      this.redis.cmd((c) => c.time()),
    ]);
    const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
    return score !== null && Number(score) > now;
  }

  /** close(): leaves the registry, only with nothing left for a reaper to resolve. */
  async leave(): Promise<void> {
    if (this.health.state !== 'up') return;
    try {
      if ((await this.redis.cmd((c) => c.hlen(this.keys.index(this.instanceId)))) === 0) {
        await this.redis.cmd((c) => c.zrem(this.keys.registry(), this.instanceId));
      }
    } catch {
      // the lease runs out by itself
    }
  }
}
