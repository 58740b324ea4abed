/**
 * The ledger on Redis (core/ledger): each settlement that applies and each credit adds its record
 * to a stream in the same script as the counters it moves (ops.lua settle_op, accounts.lua
 * credit), so a record exists exactly when the money moved — the reaper's crash-recovery
 * settlements included — and once (a repeated settlement ends at its done marker, before it).
 * Instances take the records out into their own day files: core/ledger/drain.ts runs that loop,
 * `take` is the store's part.
 *
 * - Entries: the records of one script call (a batch's settlements on a single Redis) are one
 *   stream entry, fields `t` (their time) and `r` (the packed records, one per line; pack.ts): one
 *   XADD per call, and one read, acknowledgement and deletion per entry, whatever the number of
 *   records. An entry this version cannot read is left pending (logged), for an instance that can.
 * - Streams: a single Redis has one (`{q}:ledger`), read every round. On a cluster a script runs
 *   in one hash slot, so every slot that writes records has its own stream: a settlement's record
 *   goes to its key's (`{k:<key>}:ledger`: the key's part always runs), a credit's to its user's
 *   (`{u:<user>}:ledger`). A stream is added to the list `{ledger}:streams` before its first record
 *   (`ensure`, once per process), so every stream that holds records is listed. An instance reads
 *   the streams it wrote to since its last round (`wrote`), and every `sweepMs` every listed
 *   stream (records of instances that died before taking them).
 * - One consumer group (`drain`) per stream, each instance a consumer (its instance id): a record
 *   is read by one instance. Acknowledged records are deleted (XACK and XDEL in one MULTI): a
 *   stream holds only what waits. A record read and never acknowledged (its instance died between
 *   reading and acknowledging, or cannot reach Redis) is claimed by a sweep once it has been idle
 *   `claimIdleMs` (XAUTOCLAIM), marked `redelivered`. Consumers with nothing pending that have been
 *   idle for a day are removed.
 * - On the request path only `streamOf`, `ensure` and `wrote` run: lookups (and on a cluster one
 *   SADD per stream and process).
 */
import type { Logger } from '../../log.js';
import type { LedgerBatch, TakenRecord } from '../types.js';
import { check, Unavailable, type RedisClient, type Reply } from './client.js';
import type { Health } from './health.js';
import type { Keys } from './keys.js';
import { LEDGER_FIELD, ledgerJson } from './pack.js';

/** The consumer group of every ledger stream. */
export const LEDGER_GROUP = 'drain';
/**
 * Stream entries read per command (each up to a batch's records, 32): replies stay small — ioredis
 * spends far more per record on a reply of megabytes (measured: about 8 µs of the gateway's CPU per
 * record drained in reads of 16 entries, 19 µs in reads of 64, 21 µs of 256).
 */
const ENTRIES = 16;
/** Streams read at once in a sweep (a cluster's: one command each). */
const SWEEP_PARALLEL = 32;
const CONSUMERS_EVERY_MS = 3_600_000;
const CONSUMER_IDLE_MS = 86_400_000;
/** Streams listed as registered before the list is forgotten (it only saves SADDs). */
const REGISTERED_MAX = 100_000;

export interface LedgerStreamsOptions {
  /** This instance's consumer name. */
  consumer: string;
  /** A record read but unacknowledged this long is claimed by another reader. */
  claimIdleMs: number;
  /** How often every stream is read and claimed from. */
  sweepMs: number;
  log: Logger;
}

type Entry = [string, string[] | null];

export class LedgerStreams {
  private readonly cluster: boolean;
  /** A single Redis's one stream. */
  private readonly single: string;
  private readonly registered = new Set<string>();
  /** Cluster: streams written (by this process) or left with more to read since the last round. */
  private dirty = new Set<string>();
  private nextSweep = 0;
  private nextConsumers = 0;
  /** Entries found unreadable (logged once each). */
  private readonly unreadable = new Set<string>();

  constructor(
    private readonly redis: RedisClient,
    private readonly health: Health,
    private readonly keys: Keys,
    private readonly opts: LedgerStreamsOptions,
  ) {
    this.cluster = redis.cluster;
    this.single = keys.ledger('q');
  }

  /** The stream a settlement or credit in `tag`'s hash slot writes its record to. */
  streamOf(tag: string): string {
    return this.cluster ? this.keys.ledger(tag) : this.single;
  }

  /** Cluster: lists `stream` before its first record is written (once per process). */
  async ensure(stream: string): Promise<void> {
    if (!this.cluster || this.registered.has(stream)) return;
    await this.redis.cmd((c) => c.sadd(this.keys.ledgerStreams(), stream));
    if (this.registered.size >= REGISTERED_MAX) this.registered.clear();
    this.registered.add(stream);
  }

  /** A record was written to `stream` (read it in the next round). */
  wrote(stream: string): void {
    if (this.cluster) this.dirty.add(stream);
  }

  /** Store.takeLedger: records of up to ENTRIES entries per stream, until about `max` (see the header). */
  async take(max: number): Promise<LedgerBatch> {
    if (this.health.state !== 'up' || this.health.closed) throw new Unavailable('Redis is away');
    const now = Date.now();
    const sweep = now >= this.nextSweep;
    let streams: string[];
    if (!this.cluster) streams = [this.single];
    else {
      const listed = sweep ? await this.redis.cmd((c) => c.smembers(this.keys.ledgerStreams())) : [];
      streams = [...new Set([...this.dirty, ...listed])];
      this.dirty = new Set();
    }
    try {
      return await this.takeFrom(streams, sweep, now, max);
    } catch (e) {
      for (const s of streams) this.wrote(s); // read them again next round
      throw e;
    }
  }

  private async takeFrom(streams: string[], sweep: boolean, now: number, max: number): Promise<LedgerBatch> {
    const records: TakenRecord[] = [];
    const taken = new Map<string, string[]>();
    const note = (stream: string, entries: Entry[], redelivered: boolean) => {
      let ids = taken.get(stream);
      if (!ids) taken.set(stream, (ids = []));
      for (const [id, fields] of entries) {
        // An entry this version cannot read stays in Redis, pending, for one that can.
        if (!fields || this.records(stream, id, fields, redelivered, records)) ids.push(id);
      }
    };
    let more = false;
    let i = 0;
    for (; i < streams.length && records.length < max; i += SWEEP_PARALLEL) {
      await Promise.all(
        streams.slice(i, i + SWEEP_PARALLEL).map(async (stream) => {
          if (sweep) {
            const [claimed, deleted] = await this.claim(stream);
            note(stream, claimed, true);
            note(stream, deleted, true); // read once, gone since: acknowledged now
            if (claimed.length + deleted.length >= ENTRIES) more = true;
          }
          const fresh = await this.read(stream);
          note(stream, fresh, false);
          if (fresh.length >= ENTRIES) {
            this.wrote(stream);
            more = true;
          }
        }),
      );
    }
    // Streams not reached this time: the next round, at once.
    for (; i < streams.length; i++) this.wrote(streams[i]);
    if (i < streams.length) more = true;
    if (sweep) {
      this.nextSweep = now + this.opts.sweepMs;
      if (now >= this.nextConsumers) {
        this.nextConsumers = now + CONSUMERS_EVERY_MS;
        await Promise.all(streams.map((s) => this.removeIdleConsumers(s))).catch((e: unknown) =>
          this.opts.log.warn('ledger: idle consumers not removed', { error: e as Error }),
        );
      }
    }
    return { records, more, ack: () => this.ack(taken) };
  }

  /**
   * A stream entry's records (the settlements of one script call: one per line) into `out`; false,
   * and nothing added, when any of them cannot be read (a format of another version: pack.ts).
   */
  private records(stream: string, id: string, fields: string[], redelivered: boolean, out: TakenRecord[]): boolean {
    let t: string | undefined;
    let r: string | undefined;
    for (let i = 0; i + 1 < fields.length; i += 2) {
      if (fields[i] === 't') t = fields[i + 1];
      else if (fields[i] === LEDGER_FIELD) r = fields[i + 1];
    }
    const got: TakenRecord[] = [];
    let ok = r !== undefined && t !== undefined;
    for (let from = 0; ok;) {
      const to = r!.indexOf('\n', from);
      const rec = ledgerJson(t!, r!.slice(from, to < 0 ? r!.length : to));
      if (!rec) ok = false;
      else got.push(redelivered ? { ...rec, redelivered } : rec);
      if (to < 0) break;
      from = to + 1;
    }
    if (!ok) {
      if (!this.unreadable.has(id)) {
        if (this.unreadable.size >= 10_000) this.unreadable.clear();
        this.unreadable.add(id);
        this.opts.log.error('ledger: a stream entry this version cannot read is left in Redis', { stream, entry: id, fields });
      }
      return false;
    }
    for (const rec of got) out.push(rec);
    return true;
  }

  private async read(stream: string): Promise<Entry[]> {
    const args = ['GROUP', LEDGER_GROUP, this.opts.consumer, 'COUNT', String(ENTRIES), 'STREAMS', stream, '>'];
    let r: Reply;
    try {
      r = (await this.redis.cmd((c) => c.call('XREADGROUP', ...args))) as Reply;
    } catch (e) {
      if (!isNoGroup(e)) throw e;
      await this.createGroup(stream);
      r = (await this.redis.cmd((c) => c.call('XREADGROUP', ...args))) as Reply;
    }
    if (!Array.isArray(r) || r.length === 0) return [];
    // [[stream, entries]]; ioredis gives [stream, entries] when it speaks RESP3 to the server.
    const one = (typeof r[0] === 'string' ? r : r[0]) as [string, Entry[] | null];
    return one[1] ?? [];
  }

  /** Entries idle past claimIdleMs, taken over; and ids pending whose entries are gone. */
  private async claim(stream: string): Promise<[Entry[], Entry[]]> {
    let r: Reply[];
    try {
      r = (await this.redis.cmd((c) =>
        c.call('XAUTOCLAIM', stream, LEDGER_GROUP, this.opts.consumer, String(this.opts.claimIdleMs), '0-0', 'COUNT', String(ENTRIES)),
      )) as Reply[];
    } catch (e) {
      if (!isNoGroup(e)) throw e;
      await this.createGroup(stream);
      return [[], []];
    }
    const entries = (r[1] ?? []) as Entry[];
    // Redis 6.2 lists an entry deleted meanwhile with null fields; 7 lists its id apart.
    const deleted = ((r[2] ?? []) as string[]).map((id): Entry => [id, null]);
    return [entries.filter((e) => e[1] !== null), [...entries.filter((e) => e[1] === null), ...deleted]];
  }

  private async createGroup(stream: string): Promise<void> {
    try {
      await this.redis.cmd((c) => c.call('XGROUP', 'CREATE', stream, LEDGER_GROUP, '0', 'MKSTREAM'));
    } catch (e) {
      if (!/^BUSYGROUP/.test((e as Error).message)) throw e;
    }
  }

  private async ack(taken: Map<string, string[]>): Promise<void> {
    await Promise.all(
      [...taken]
        .filter(([, ids]) => ids.length > 0)
        .map(([stream, ids]) =>
          this.redis.cmd((c) =>
            c
              .multi()
              .xack(stream, LEDGER_GROUP, ...ids)
              .xdel(stream, ...ids)
              .exec()
              .then(check),
          ),
        ),
    );
  }

  private async removeIdleConsumers(stream: string): Promise<void> {
    let info: Reply[];
    try {
      info = (await this.redis.cmd((c) => c.call('XINFO', 'CONSUMERS', stream, LEDGER_GROUP))) as Reply[];
    } catch (e) {
      if (isNoGroup(e)) return;
      throw e;
    }
    for (const c of info as Reply[][]) {
      const f = new Map<string, Reply>();
      for (let i = 0; i + 1 < c.length; i += 2) f.set(String(c[i]), c[i + 1]);
      const name = String(f.get('name'));
      if (name !== this.opts.consumer && f.get('pending') === 0 && Number(f.get('idle')) > CONSUMER_IDLE_MS) {
        await this.redis.cmd((cl) => cl.call('XGROUP', 'DELCONSUMER', stream, LEDGER_GROUP, name));
      }
    }
  }
}

function isNoGroup(e: unknown): boolean {
  return /^NOGROUP/.test((e as Error)?.message ?? '');
}
