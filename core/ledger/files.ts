/**
 * The embedded ledger: append-only JSON Lines files on disk, one per UTC day
 * (`<dir>/YYYY-MM-DD.jsonl`), each line a record (record.ts) with the store's `seq` in front.
 *
 * - Written by the store's persistence in the same event-loop turn as its journal, after the journal
 *   (one synchronous write per turn). The journal is the write-ahead log: it is fsynced every
 *   second, the day files only before the journal is cut (compaction), at a day's end and at close.
 *   A process killed loses nothing the OS was handed; after a power loss or a crash between the two
 *   writes the journal holds what the files lack, and at the next start the store writes every
 *   settlement and credit of its journal whose `seq` the files miss (`seqsAfter`), so nothing is
 *   missing and nothing is written twice. (One fsync per second instead of two: the file sink's
 *   cost in the bench fell from 1.10x to about 1.0x the CPU per request; the kernel still writes
 *   the bytes, in its own time.)
 * - `seq` orders the records of one store folder; a store with no journal of its own (Redis) writes
 *   `seq: 0` and relies on the record ids instead (drain.ts).
 * - A torn line never swallows the next record: in a file found ending mid-line (a process killed
 *   in a write) the next write begins with a newline, so the torn line stays one unreadable line
 *   (skipped). A short write (a full disk) is continued where it stopped.
 * - Files older than the retention are deleted (checked at start and hourly).
 * - Reading streams line by line (readline): a month of records is never held in memory.
 */
import {
  closeSync,
  fstatSync,
  fsync,
  fsyncSync,
  mkdirSync,
  openSync,
  readSync,
  readdirSync,
  unlinkSync,
  writeSync,
  createReadStream,
  statSync,
} from 'node:fs';
import { open } from 'node:fs/promises';
import path from 'node:path';
import readline from 'node:readline';
import type { Logger } from '../log.js';
import { dayKey } from '../store/types.js';
import type { LedgerRecord } from './record.js';

const FILE = /^(\d{4}-\d{2}-\d{2})\.jsonl$/;
/** A record line's start: its seq, and its id as a JSON string. */
const SEQ_ID = /^\{"seq":(\d+),"id":("(?:[^"\\]|\\.)*")/;
const HOUR = 3_600_000;
const DAY = 86_400_000;

/**
 * A complete record line's `seq` and id, read from its start without parsing the rest (undefined
 * for a torn or foreign line). The store, the Redis drainer and the PostgreSQL shipper use it to
 * tell which records a file holds.
 */
export function lineSeqId(line: string): { seq: number; id: string } | undefined {
  const m = SEQ_ID.exec(line);
  if (!m || !line.endsWith('}')) return undefined;
  try {
    return { seq: Number(m[1]), id: JSON.parse(m[2]) as string };
  } catch {
    return undefined;
  }
}

/**
 * A record's file line: `seq` first, then the record's fields in `FIELDS` order (record.ts builds
 * its objects in that order, so no replacer is needed).
 */
export function fileLine(seq: number, r: LedgerRecord): string {
  return `{"seq":${seq},${JSON.stringify(r).slice(1)}\n`;
}

export interface LedgerFilesOptions {
  dir: string;
  /** Day files older than this are deleted. */
  retentionMs: number;
  log: Logger;
  now?: () => number;
}

export class LedgerFiles {
  readonly dir: string;
  private fd: number | undefined;
  private fdDay = '';
  private unsynced = false;
  /** The open file may end mid-line (a write failed, or a process was killed in one). */
  private torn = false;
  private readonly retentionMs: number;
  private readonly log: Logger;
  private readonly now: () => number;
  private timer: NodeJS.Timeout | undefined;
  /** Lines added and not written, one string per run of one UTC day (`add`). */
  private pending: { day: string; text: string; rest?: Buffer }[] = [];
  /** The start (epoch ms) of the last pending run's day. */
  private pendingDay = 0;
  private pendingLines = 0;

  constructor(opts: LedgerFilesOptions) {
    this.dir = opts.dir;
    this.retentionMs = opts.retentionMs;
    this.log = opts.log;
    this.now = opts.now ?? Date.now;
    mkdirSync(this.dir, { recursive: true });
    this.prune();
    this.timer = setInterval(() => this.prune(), HOUR);
    this.timer.unref();
  }

  /** Appends lines (each ending in a newline) of the records at `ts` (epoch ms), in one synchronous write per day file. */
  appendSync(lines: { ts: number; line: string }[]): void {
    for (const { ts, line } of lines) this.add(ts, line);
    try {
      this.writePending();
    } catch (e) {
      // The caller keeps the lines and calls again: nothing stays buffered here, and a line cut by
      // a short write is ended by the next write (so it stays one unreadable line).
      if (this.pending[0]?.rest) this.torn = true;
      this.pending = [];
      this.pendingLines = 0;
      throw e;
    }
  }

  /**
   * Buffers a record's line (ending in a newline) for `writePending`. Consecutive lines of one UTC
   * day are joined into one string as they come (no object per line: the memory store adds one
   * per billed request).
   */
  add(ts: number, line: string): void {
    const last = this.pending.length - 1;
    if (last >= 0 && ts >= this.pendingDay && ts < this.pendingDay + DAY && !this.pending[last].rest) this.pending[last].text += line;
    else {
      this.pendingDay = ts - (ts % DAY);
      this.pending.push({ day: dayKey(ts), text: line });
    }
    this.pendingLines++;
  }

  /** Lines added and not written yet. */
  get waiting(): number {
    return this.pendingLines;
  }

  /**
   * Writes what `add` buffered, one synchronous write per day file. On failure what was not
   * written stays buffered for the next call, and the error is thrown.
   */
  writePending(): void {
    while (this.pending.length > 0) {
      const run = this.pending[0];
      const fd = this.fileFor(run.day);
      if (this.torn) {
        // The file ends mid-line (found so at open): end that line first, so it stays one unreadable line.
        writeSync(fd, '\n');
        this.torn = false;
      }
      // A string write: no Buffer per call. One call: an error means it wrote nothing.
      const wrote = run.rest ? writeSync(fd, run.rest) : writeSync(fd, run.text);
      this.unsynced = true;
      const bytes = run.rest ? run.rest.length : Buffer.byteLength(run.text);
      if (wrote < bytes) {
        // A short write (a full disk): the rest continues the same line at the next call.
        run.rest = (run.rest ?? Buffer.from(run.text)).subarray(wrote);
        throw new Error(`ledger: short write to ${run.day}.jsonl (${wrote} of ${bytes} bytes)`);
      }
      this.pending.shift();
    }
    this.pendingLines = 0;
  }

  private fileFor(day: string): number {
    if (this.fd !== undefined && this.fdDay === day) return this.fd;
    if (this.fd !== undefined) {
      // Yesterday's file is done: make it durable before moving on.
      try {
        fsyncSync(this.fd);
      } catch {
        /* the next sync reports it */
      }
      closeSync(this.fd);
    }
    const fd = openSync(path.join(this.dir, `${day}.jsonl`), 'a+');
    const size = fstatSync(fd).size;
    const last = Buffer.alloc(1);
    if (size > 0) readSync(fd, last, 0, 1, size - 1);
    this.torn = size > 0 && last[0] !== 0x0a;
    this.fd = fd;
    this.fdDay = day;
    return this.fd;
  }

  /** fsyncs what was written (the store calls it before cutting its journal). */
  sync(): Promise<void> {
    const fd = this.fd;
    if (fd === undefined || !this.unsynced) return Promise.resolve();
    this.unsynced = false;
    return new Promise((resolve, reject) => fsync(fd, (e) => (e ? reject(e) : resolve())));
  }

  close(): void {
    clearInterval(this.timer);
    if (this.fd !== undefined) {
      try {
        fsyncSync(this.fd);
      } finally {
        closeSync(this.fd);
        this.fd = undefined;
      }
    }
  }

  /** The day files present, oldest first. */
  days(): string[] {
    return readdirSync(this.dir)
      .map((f) => FILE.exec(f)?.[1])
      .filter((d): d is string => d !== undefined)
      .sort();
  }

  /**
   * The records above `after` that the day files hold, `seq` → id, read backwards from the newest
   * file until a line at or below `after` (the store's snapshot: everything up to it was fsynced
   * before the journal was cut), or after `maxBytes`. A map rather than the last `seq`: after a
   * power loss the files may have lost any of what the kernel had not written yet, not only their
   * tail. With the ids: a store folder started afresh beside an older ledger folder numbers its
   * records from 1 again, and an old record with the same `seq` is not one of its own.
   */
  async seqsAfter(after: number, maxBytes = 256 * 1024 * 1024): Promise<Map<number, string>> {
    const seqs = new Map<number, string>();
    const days = this.days();
    let budget = maxBytes;
    for (let i = days.length - 1; i >= 0 && budget > 0; i--) {
      const file = path.join(this.dir, `${days[i]}.jsonl`);
      const fh = await open(file, 'r');
      try {
        let end = (await fh.stat()).size;
        let head = ''; // the start of the line the previous chunk began inside
        while (end > 0 && budget > 0) {
          const len = Math.min(end, 1 << 20);
          budget -= len;
          const buf = Buffer.alloc(len);
          await fh.read(buf, 0, len, end - len);
          end -= len;
          const lines = (buf.toString('utf8') + head).split('\n');
          head = end > 0 ? (lines.shift() ?? '') : '';
          for (let j = lines.length - 1; j >= 0; j--) {
            const r = lineSeqId(lines[j]);
            if (!r) continue;
            if (r.seq <= after) return seqs;
            seqs.set(r.seq, r.id);
          }
        }
      } finally {
        await fh.close();
      }
    }
    return seqs;
  }

  /**
   * The ids of the records in the last `maxBytes` of the newest day files (at most the two newest):
   * what a process wrote last (drain.ts checks records that may have been written already).
   */
  async tailIds(maxBytes: number): Promise<Set<string>> {
    const ids = new Set<string>();
    let budget = maxBytes;
    for (const day of this.days().slice(-2).reverse()) {
      if (budget <= 0) break;
      const file = path.join(this.dir, `${day}.jsonl`);
      const size = statSync(file).size;
      const len = Math.min(size, budget);
      budget -= len;
      const fh = await open(file, 'r');
      try {
        const buf = Buffer.alloc(len);
        await fh.read(buf, 0, len, size - len);
        const lines = buf.toString('utf8').split('\n');
        if (len < size) lines.shift(); // began mid-line
        for (const line of lines) {
          const r = lineSeqId(line);
          if (r) ids.add(r.id);
        }
      } finally {
        await fh.close();
      }
    }
    return ids;
  }

  /**
   * The records of the days from `fromDay` to `toDay` (YYYY-MM-DD, inclusive), in file order, one
   * at a time. A torn last line (a crash mid-write) is skipped.
   */
  async *read(fromDay: string, toDay: string): AsyncGenerator<LedgerRecord & { seq: number }> {
    for (const day of this.days()) {
      if (day < fromDay || day > toDay) continue;
      const rl = readline.createInterface({ input: createReadStream(path.join(this.dir, `${day}.jsonl`)), crlfDelay: Infinity });
      for await (const line of rl) {
        if (line === '') continue;
        let r: LedgerRecord & { seq: number };
        try {
          r = JSON.parse(line) as LedgerRecord & { seq: number };
        } catch {
          continue;
        }
        yield r;
      }
    }
  }

  private prune(): void {
    const oldest = dayKey(this.now() - this.retentionMs);
    for (const day of this.days()) {
      if (day >= oldest) break;
      try {
        unlinkSync(path.join(this.dir, `${day}.jsonl`));
        this.log.info('ledger: day file past the retention deleted', { day });
      } catch (e) {
        this.log.warn('ledger: could not delete a day file past the retention', { day, error: e as Error });
      }
    }
  }
}
