/**
 * The drainer: moves the ledger records a shared store keeps (Store.takeLedger; Redis: streams
 * written by the very scripts that settle money, core/store/redis/ledger.ts) into this instance's
 * day files (files.ts, `seq: 0`), in rounds: take a batch, append it, fsync, acknowledge. Each
 * record is taken by one instance; with several, each instance's files hold the records it took,
 * and the whole ledger is their union — or PostgreSQL, which every instance feeds from its files.
 *
 * Delivery is at least once: a batch written but not acknowledged (the process died in between,
 * or the store went away) comes back, to this instance or another (the store's `redelivered`). So
 * that a record is in this instance's files once, a record is skipped when its id is among
 * - the ids this process wrote (the last RECENT_MAX),
 * - the ids at the end of the files when it started (TAIL_BYTES: what a killed predecessor wrote
 *   last, its unacknowledged batch among them),
 * - and, for a batch holding redelivered records, the ids at the end of the files now
 *   (CLAIM_TAIL_BYTES: what another process sharing the folder wrote, e.g. a sibling worker).
 * A redelivered record written longer ago than those windows could be written twice; it would
 * have been written by another instance (its own files) far more likely. Readers of the files
 * count what is there; PostgreSQL keeps one row per id in any case.
 *
 * Rounds run every `intervalMs`, at once while records wait; `catchUp` runs rounds until the
 * store has nothing left (the ledger's queries call it, so a single instance answers with every
 * settled request); `close` ends with one. While the store is away, rounds fail quietly (one line
 * logged per outage) and the records wait in the store.
 */
import type { Logger } from '../log.js';
import type { LedgerBatch } from '../store/types.js';
import { RecentIds } from '../store/recent.js';
import type { LedgerFiles } from './files.js';

/** Ids written by this process remembered (it takes no batch before the last is acknowledged). */
const RECENT_MAX = 20_000;
const TAIL_BYTES = 8 * 1024 * 1024;
const CLAIM_TAIL_BYTES = 32 * 1024 * 1024;

/** Where the records come from (the Redis store). */
export interface LedgerSource {
  takeLedger(max: number): Promise<LedgerBatch>;
}

export interface LedgerDrainerOptions {
  source: LedgerSource;
  files: LedgerFiles;
  log: Logger;
  /** Between rounds that left nothing waiting (default 500 ms). */
  intervalMs?: number;
  /** Records per round, about (default 1,000). */
  batch?: number;
}

export class LedgerDrainer {
  private readonly source: LedgerSource;
  private readonly files: LedgerFiles;
  private readonly log: Logger;
  private readonly intervalMs: number;
  private readonly batch: number;
  private readonly written = new RecentIds(RECENT_MAX);
  private tail = new Set<string>();
  /** Taken and not yet in the files (a write failed): written before anything else is taken. */
  private held: LedgerBatch | undefined;
  /** In the files, not yet acknowledged. */
  private unacked: LedgerBatch | undefined;
  private running: Promise<boolean> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private failing = false;
  /** Records written to the files, and skipped as already there (for logs and tests). */
  readonly counts = { written: 0, skipped: 0 };

  private constructor(opts: LedgerDrainerOptions) {
    this.source = opts.source;
    this.files = opts.files;
    this.log = opts.log;
    this.intervalMs = opts.intervalMs ?? 500;
    this.batch = opts.batch ?? 1_000;
  }

  /** Reads the end of the files (see the top), then drains in rounds until close(). */
  static async start(opts: LedgerDrainerOptions): Promise<LedgerDrainer> {
    const d = new LedgerDrainer(opts);
    d.tail = await opts.files.tailIds(TAIL_BYTES);
    d.schedule(0);
    return d;
  }

  private schedule(ms: number): void {
    if (this.closed) return;
    this.timer = setTimeout(() => void this.tick(), ms);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    let more = false;
    try {
      more = await this.round();
      if (this.failing) this.log.info('ledger: draining again');
      this.failing = false;
    } catch (e) {
      if (!this.failing) this.log.warn('ledger: records wait in the store (cannot drain them now)', { error: e as Error });
      this.failing = true;
    }
    this.schedule(more ? 0 : this.intervalMs);
  }

  /** One round (joined when one runs): whether more records wait. */
  private round(): Promise<boolean> {
    this.running ??= this.drainOnce().finally(() => (this.running = undefined));
    return this.running;
  }

  private async drainOnce(): Promise<boolean> {
    if (this.unacked) {
      await this.unacked.ack();
      this.unacked = undefined;
    }
    const batch = this.held ?? (await this.source.takeLedger(this.batch));
    this.held = batch;
    const records = batch.records;
    let again: Set<string> | undefined;
    if (records.some((r) => r.redelivered)) again = await this.files.tailIds(CLAIM_TAIL_BYTES);
    const lines: { ts: number; line: string }[] = [];
    const ids = new Set<string>();
    for (const r of records) {
      if (this.written.has(r.id) || this.tail.has(r.id) || again?.has(r.id) || ids.has(r.id)) {
        this.counts.skipped++;
        this.log.info('ledger: a record delivered again was already written; skipped', { id: r.id });
        continue;
      }
      ids.add(r.id);
      lines.push({ ts: r.ts, line: `{"seq":0,${r.json.slice(1)}\n` });
    }
    if (lines.length > 0) {
      // By time: a day file is switched to at most once per batch taken from several streams.
      lines.sort((a, b) => a.ts - b.ts);
      this.files.appendSync(lines);
      await this.files.sync();
    }
    for (const id of ids) this.written.add(id);
    this.counts.written += ids.size;
    this.held = undefined;
    this.unacked = batch;
    await batch.ack();
    this.unacked = undefined;
    return batch.more === true || records.length >= this.batch;
  }

  /**
   * Runs rounds until the store has nothing left to take (or `maxMs` passed): every record settled
   * before the call is then in the files — those taken by other instances excepted.
   */
  async catchUp(maxMs = 2_000): Promise<void> {
    const deadline = Date.now() + maxMs;
    do {
      if (!(await this.round())) return;
    } while (Date.now() < deadline);
  }

  /** Stops the rounds after a last catch-up (records left wait in the store for any instance). */
  async close(maxMs = 2_000): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    try {
      await this.catchUp(maxMs);
    } catch (e) {
      this.log.warn('ledger: records left in the store at close (another instance or the next start takes them)', { error: e as Error });
    }
  }
}
