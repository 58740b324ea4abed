/**
 * Crash recovery: the registry of live instances and the reaper.
 *
 * Each admission is listed under its instance (an index in Redis) with its `recovery` settlement.
 * Instances renew a lease in a registry (heartbeat every lease/3); the reaper of any live instance
 * resolves the admissions of an instance whose lease expired: the `recovery` settlement (settle
 * semantics, once, `recovered`), or a release without charge when there is none. It waits one
 * lease after its own (re)connection before judging others, so an outage of Redis itself kills
 * nobody. A live instance cut off from Redis (or paused) for longer than the lease is taken for dead:
 * its late settlements find the request resolved and add, as a correction, what the real usage has
 * above the recovered estimate (index.ts); its lost slots are fenced (slots.ts).
 *
 * `beat` is the heartbeat's registry part (index.ts runs the heartbeat; health.ts probes with it),
 * `reap` the reaper (run every lease/2 by index.ts), `leave` the registry exit at close.
 */
import { randomBytes } from 'node:crypto';
import { Cluster } from 'ioredis';
import type { Logger } from '../../log.js';
import type { Settlement } from '../types.js';
import { Unavailable, type RedisClient } from './client.js';
import type { Health } from './health.js';
import type { Keys } from './keys.js';
import type { Ops } from './ops.js';
import { int, LIST, PARTS, RECORD_TTL_MS, unpackSettlement } from './pack.js';

/** What a heartbeat found: first contact, registered already, taken for dead, or Redis lost its data. */
export type Beat = 'new' | 'known' | 'reaped' | 'lost';

export class Reaper {
  private readonly cluster: boolean;
  /** The epoch of Redis's data seen last (live.lua): another one means Redis lost its data. */
  private epoch: string | undefined;

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

  /**
   * Renews this instance's lease in the registry, and says (in the log, once) when it finds this
   * instance taken for dead, or Redis without the data it had.
   */
  async beat(): Promise<Beat> {
    const client = this.redis.client;
    // Not before the client is ready: a cluster client without its slot table sends commands to
    // random nodes and follows the redirections, out of order.
    if (client.status !== 'ready') throw new Unavailable(`Redis connection ${client.status}`);
    const work = (async () => {
      // A cluster client connects to each node on first use, and retries that first command on a
      // random node (out of order): connect them all before serving.
      if (client instanceof Cluster) await Promise.all(client.nodes('master').map((n) => n.ping()));
      return this.redis.run(
        'live',
        [this.keys.registry(), this.keys.epoch()],
        ['beat', this.instanceId, int(this.leaseMs), int(RECORD_TTL_MS), randomBytes(8).toString('hex')],
      );
    })();
    // Bounded whatever a client queue does: a probe that never ends would stop every later one.
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Unavailable('heartbeat timed out')), this.redis.timeoutMs + 200);
    });
    let reply: [number, string];
    try {
      reply = (await Promise.race([work, limit])) as [number, string];
    } finally {
      clearTimeout(timer);
      work.catch(() => undefined);
    }
    const [registered, epoch] = reply;
    const known = this.epoch;
    this.epoch = epoch;
    const beat: Beat = known === undefined ? 'new' : epoch !== known ? 'lost' : registered === 1 ? 'known' : 'reaped';
    if (beat === 'lost') {
      this.log.error(
        'Redis lost its data (restarted empty, flushed, or failed over to a replica without it): the balances, usage and limits it held are gone unless restored; this instance registered again',
      );
    } else if (beat === 'reaped') {
      this.log.warn(
        'this instance had been taken for dead (no heartbeat reached Redis within store.lease: paused, or cut off from Redis): crash recovery resolved its admissions, whose settlements now add what they used above the estimate; its requests whose concurrency slots went to others are ended',
      );
    }
    return beat;
  }

  /** Resolves the admissions of instances whose lease expired (see the header). */
  async reap(): Promise<void> {
    if (this.health.state !== 'up' || this.health.closed || Date.now() - this.health.upSince < this.leaseMs) return;
    let dead: string[];
    try {
      dead = ((await this.redis.run('live', [this.keys.registry()], ['dead', '', '0', '0', ''])) as string[]).filter(
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
      await this.redis.run('live', [this.keys.registry()], ['forget', instance, '0', '0', '']);
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
