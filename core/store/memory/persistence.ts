/**
 * The embedded store's durability: a store folder holding a snapshot plus an append-only journal.
 * It owns the store's files and its flush timer, and no rule of the state: it restores the state at
 * load (snapshot, then journal replay, then crash recovery), journals what the state tells it as
 * the `Recorder`, and writes snapshots of it. Used only when the store has a `path`.
 *
 * - Files: `snapshot.json` (whole durable state + the journal sequence number it includes;
 *   written to a temp file, fsynced, renamed, directory fsynced), `journal.jsonl` (one JSON
 *   value per line: admissions with their recovery settlement, settlements, cancellations,
 *   window starts, quota resets, each with an increasing `seq`; the line format is journal.ts)
 *   and `gateway.lock` (the PID of the one process using the folder; lock.ts).
 * - The `Recorder` calls arrive from state.ts inside `admit()` / `settle()`: each one only builds
 *   its line and appends it to `pending`, with no I/O and no `await`, so an admission stays one
 *   synchronous step.
 * - Journal appends are written to the OS once per event-loop turn (one synchronous write of
 *   everything appended during the turn), so a process kill loses nothing that was settled before
 *   the turn ended; the file is fsynced every `flushIntervalMs`, so a power loss or kernel crash
 *   loses at most that interval. A torn last line is skipped on load.
 * - The ledger's day files (core/ledger/files.ts) are written right after the journal in the same
 *   turn but fsynced only before a compaction cuts the journal: until then the journal is their
 *   write-ahead log, and load() writes again whatever of it they lack.
 * - Crash recovery (the one rule for every store, docs/limits.md): an admission that carries a
 *   `recovery` settlement is journaled; its settle or cancel resolves it. At the next start, every
 *   admission left unresolved (the process died with the request in flight) is settled with its
 *   `recovery` (flagged `recovered` and `estimated`, logged one line each). Open admissions are
 *   kept in the snapshot too, so compaction never drops one.
 * - Replay skips entries whose `seq` the snapshot already contains, so a crash between writing a
 *   snapshot and truncating the journal does not count anything twice (nor does a journal chunk
 *   rewritten after a failed write).
 * - Compaction (new snapshot, journal truncated) runs when the journal passes `compactBytes`
 *   (4 MB), after loading a non-empty journal (which also drops a torn tail before new appends),
 *   and on close().
 * - Disk operations that wait (fsync, snapshot writes) run one at a time (`serial`). Once close()
 *   has begun, a cancel is no longer journaled.
 */
import { mkdir, open, readFile, rename, type FileHandle } from 'node:fs/promises';
import { closeSync, fsync, ftruncateSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { Clock } from '../../clock.js';
import type { Logger } from '../../log.js';
import type { Window } from '../../config/types.js';
import type { AccountKind, AuditEntry, CreditRecord, KeyRecord, Settlement, Stored, UserRecord } from '../types.js';
import type { DurableState, MemoryState, Recorder } from './state.js';
import type { AccountBook, AccountRecorder, DurableAccounts } from './accounts.js';
import { ADMIT, SETTLE, entryLine, fromLine, settlementLine, type JournalEntry, type KeyedEntry } from './journal.js';
import { releaseLock, takeLock } from './lock.js';
import type { LedgerFiles } from '../../ledger/files.js';
import { fileLine } from '../../ledger/files.js';
import { creditRecord, requestFileLine } from '../../ledger/record.js';

/** Journal size that triggers compaction, unless the store options say otherwise. */
export const COMPACT_BYTES = 4 * 1024 * 1024;
const SNAPSHOT = 'snapshot.json';
const JOURNAL = 'journal.jsonl';

interface SnapshotJson extends DurableState {
  v: 1;
  seq: number;
  savedAt: number;
  /** Absent in snapshots written before accounts were data. */
  accounts?: DurableAccounts;
}

export interface PersistenceOptions {
  /** The store folder. */
  dir: string;
  /** How often buffered journal writes are written and fsynced. */
  flushIntervalMs: number;
  /** Journal size that triggers compaction. */
  compactBytes: number;
  clock: Clock;
  log: Logger;
  /** The ledger's day files (core/ledger): a record per settlement and credit, written with the journal. */
  ledger?: LedgerFiles;
}

export class Persistence implements Recorder, AccountRecorder {
  private readonly dir: string;
  private readonly flushIntervalMs: number;
  private readonly compactBytes: number;
  private readonly clock: Clock;
  private readonly log: Logger;
  /** The state this folder holds (given to load()). */
  private state!: MemoryState;
  private book!: AccountBook;
  private seq = 0;
  private pending: string[] = [];
  /** The journal's file descriptor (appends are synchronous writes, once per event-loop turn). */
  private journal: number | undefined;
  private journalBytes = 0;
  /** Bytes written since the last fsync. */
  private unsynced = false;
  private writeScheduled = false;
  /** While a snapshot is being written, appends wait in `pending` (the journal is truncated after). */
  private compacting = false;
  /** Admissions found unresolved while loading (id → recovery), settled once loading ends. */
  private readonly unresolved = new Map<string, { t: number; r: Settlement }>();
  private locked = false;
  private chain: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly ledger: LedgerFiles | undefined;
  /** The records past the snapshot the ledger held when the folder was loaded, `seq` → id. */
  private ledgerHas = new Map<number, string>();

  constructor(opts: PersistenceOptions) {
    this.ledger = opts.ledger;
    this.dir = opts.dir;
    this.flushIntervalMs = opts.flushIntervalMs;
    this.compactBytes = opts.compactBytes;
    this.clock = opts.clock;
    this.log = opts.log;
  }

  // ---- what the state records (Recorder) -------------------------------------------------------

  admitted(id: string, t: number, recovery: Settlement): void {
    this.appendLine(settlementLine(ADMIT, ++this.seq, t, id, recovery));
  }

  settled(id: string, t: number, s: Settlement): void {
    this.appendLine(settlementLine(SETTLE, ++this.seq, t, id, s));
    if (this.ledger) this.ledger.add(t, requestFileLine(this.seq, id, t, s));
  }

  cancelled(id: string, t: number): void {
    if (!this.closed) this.append({ op: 'cancel', t, id });
  }

  windowStarted(key: string, window: Window, t: number): void {
    this.append({ op: 'wstart', t, key, w: window });
  }

  reset(key: string, t: number): void {
    this.append({ op: 'reset', t, key });
  }

  // ---- what the accounts record (AccountRecorder) ----------------------------------------------

  accountWritten(kind: AccountKind, name: string, rec: Stored<UserRecord | KeyRecord> | null, ver: number, audit: AuditEntry): void {
    this.append({ op: 'acct', t: audit.at, kind, name, rec, ver, audit });
  }

  credited(rec: CreditRecord, idem: { key: string; fingerprint: string } | undefined, audit: AuditEntry): void {
    this.append(idem ? { op: 'credit', t: rec.at, rec, idem, audit } : { op: 'credit', t: rec.at, rec, audit });
    if (this.ledger) this.ledger.add(rec.at, fileLine(this.seq, creditRecord(rec)));
  }

  audited(entry: AuditEntry): void {
    this.append({ op: 'audit', t: entry.at, entry });
  }

  // ---- journal ---------------------------------------------------------------------------------

  private append(entry: KeyedEntry): void {
    this.appendLine(entryLine(++this.seq, entry));
  }

  /** `line` must carry the next `seq` (`++this.seq`). */
  private appendLine(line: string): void {
    this.pending.push(line);
    if (!this.writeScheduled && this.journal !== undefined) {
      this.writeScheduled = true;
      setImmediate(() => {
        this.writeScheduled = false;
        this.writeNow();
      });
    }
  }

  /**
   * Hands everything appended so far to the OS in one synchronous write (no fsync): after it, a
   * process kill loses none of it. Skipped while a snapshot is written (the journal is truncated
   * when it is durable; `compact` writes what waited).
   */
  private writeNow(): void {
    const fd = this.journal;
    if (fd === undefined || this.compacting || this.pending.length === 0) return;
    // Written as a string: Node encodes it into memory it frees at once, where a Buffer made here
    // would be garbage for the collector. A regular file takes all of it unless the disk is full or
    // a signal interrupts; the rest then goes as bytes.
    const text = this.pending.join('');
    const size = Buffer.byteLength(text, 'utf8');
    this.pending = [];
    try {
      let off = writeSync(fd, text);
      if (off < size) {
        const rest = Buffer.from(text, 'utf8');
        while (off < size) off += writeSync(fd, rest, off, size - off);
      }
    } catch (e) {
      // Put it back for the next attempt; cut off a partial write so lines stay whole.
      this.pending.unshift(text);
      try {
        ftruncateSync(fd, this.journalBytes);
      } catch {
        /* next write retries */
      }
      this.log.error('store journal write failed', { error: e as Error });
      return;
    }
    this.journalBytes += size;
    this.unsynced = true;
    this.writeLedger();
    if (this.journalBytes >= this.compactBytes && !this.ledger?.waiting)
      void this.serial(() => this.compact()).catch((e) => this.log.error('store compaction failed', { error: e as Error }));
  }

  /**
   * The ledger's lines of what the journal now holds, in one write. Should it fail they wait for
   * the next turn (and compaction waits for them: the journal must keep what the ledger lacks).
   */
  private writeLedger(): void {
    if (!this.ledger?.waiting) return;
    try {
      this.ledger.writePending();
    } catch (e) {
      this.log.error('ledger write failed; retried with the next write', { error: e as Error, waiting: this.ledger.waiting });
    }
  }

  /** Runs `fn` after every earlier disk operation (one writer at a time). */
  private serial(fn: () => Promise<void>): Promise<void> {
    const p = this.chain.then(fn);
    this.chain = p.catch(() => undefined);
    return p;
  }

  async flush(): Promise<void> {
    if (this.journal === undefined) return;
    return this.serial(() => this.writePending());
  }

  /**
   * Writes what is pending and fsyncs the journal (power-loss durability). Not the ledger's day
   * files: the journal holds every record they may lack until compaction, which fsyncs them first.
   */
  private async writePending(): Promise<void> {
    const fd = this.journal;
    if (fd === undefined) return;
    this.writeNow();
    this.writeLedger();
    if (this.pending.length > 0 && !this.compacting) throw new Error('store journal write failed');
    if (this.ledger?.waiting) throw new Error('ledger write failed');
    if (this.unsynced) {
      this.unsynced = false;
      await new Promise<void>((resolve, reject) => fsync(fd, (e) => (e ? reject(e) : resolve())));
    }
  }

  // ---- snapshot --------------------------------------------------------------------------------

  /** Writes a snapshot of the whole state and empties the journal. Run through serial(). */
  private async compact(): Promise<void> {
    const dir = this.dir;
    // The journal is the ledger's only other copy of what the ledger has not written yet.
    this.writeLedger();
    if (this.ledger?.waiting) throw new Error('ledger lines are waiting to be written: compaction postponed');
    const snap = JSON.stringify(this.snapshot());
    // Everything buffered so far is in the snapshot; keep it until the snapshot is durable.
    // Appends made while it is written wait in `pending` (written after the truncation below).
    const included = this.pending;
    this.pending = [];
    this.compacting = true;
    try {
      // The ledger's records up to the snapshot must be on disk before the journal holding them is cut.
      await this.ledger?.sync();
      const tmp = join(dir, SNAPSHOT + '.tmp');
      const fh = await open(tmp, 'w');
      try {
        await fh.writeFile(snap, 'utf8');
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, join(dir, SNAPSHOT));
      await syncDir(dir);
    } catch (e) {
      this.pending = included.concat(this.pending);
      this.compacting = false;
      throw e;
    }
    try {
      if (this.journal !== undefined) {
        ftruncateSync(this.journal, 0);
        this.journalBytes = 0;
      }
    } finally {
      this.compacting = false;
    }
    this.writeNow();
  }

  private snapshot(): SnapshotJson {
    const now = this.clock.now();
    return { v: 1, seq: this.seq, savedAt: now, ...this.state.snapshot(), accounts: this.book.snapshot(now) };
  }

  private restore(s: SnapshotJson): void {
    if (s.v !== 1) throw new Error(`store snapshot: unsupported version ${String(s.v)}`);
    this.seq = s.seq;
    for (const [id, o] of Object.entries(s.open ?? {})) this.unresolved.set(id, o);
    this.state.restore(s);
    if (s.accounts) this.book.restore(s.accounts);
  }

  // ---- open and close --------------------------------------------------------------------------

  /** Takes the folder's lock and loads it into `state` (fresh); then journals what it records. */
  async load(state: MemoryState, book: AccountBook): Promise<void> {
    this.state = state;
    this.book = book;
    const dir = this.dir;
    await mkdir(dir, { recursive: true });
    takeLock(dir, this.log);
    this.locked = true;
    try {
      const snapText = await readIfExists(join(dir, SNAPSHOT));
      if (snapText !== undefined) this.restore(JSON.parse(snapText) as SnapshotJson);
      const journalText = (await readIfExists(join(dir, JOURNAL))) ?? '';
      // What the ledger has of the journal: the settlements and credits it lacks are written again.
      this.ledgerHas = this.ledger ? await this.ledger.seqsAfter(this.seq) : new Map();
      const replayed = this.replay(journalText);
      this.ledgerHas = new Map();
      const recovered = this.recoverUnresolved();
      if (this.ledger?.waiting) {
        this.log.info('ledger: writing the records the journal holds and the ledger lacks', { records: this.ledger.waiting });
        this.ledger.writePending();
        await this.ledger.sync();
      }
      this.journal = openSync(join(dir, JOURNAL), 'a');
      this.journalBytes = Buffer.byteLength(journalText);
      await syncDir(dir); // the journal's directory entry, if it was just created
      // Fold the journal into a fresh snapshot: also drops a torn tail before anything is appended.
      if (journalText.length > 0 || recovered > 0) await this.serial(() => this.compact());
      this.log.info('store loaded', { path: dir, seq: this.seq, replayed, recovered });
    } catch (e) {
      if (this.journal !== undefined) closeSync(this.journal);
      this.journal = undefined;
      this.unlock();
      throw e;
    }
    this.timer = setInterval(() => {
      this.flush().catch((e) => this.log.error('store journal flush failed', { error: e as Error }));
    }, this.flushIntervalMs);
    this.timer.unref();
  }

  private replay(text: string): number {
    const state = this.state;
    const lines = text.split('\n');
    let replayed = 0;
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      if (line.trim() === '') continue;
      let e: JournalEntry;
      try {
        const v = JSON.parse(line) as JournalEntry | unknown[];
        if (Array.isArray(v)) {
          const d = fromLine(v);
          if (!d) {
            this.log.warn('store journal: unknown entry', { line: i + 1 });
            continue;
          }
          e = d;
        } else e = v;
      } catch {
        const last = lines.slice(i + 1).every((l) => l.trim() === '');
        if (last) this.log.warn('store journal: ignoring torn last line', { line: i + 1 });
        else this.log.error('store journal: skipping unreadable line', { line: i + 1 });
        continue;
      }
      if (typeof e.seq !== 'number' || e.seq <= this.seq) continue;
      this.seq = e.seq;
      replayed++;
      switch (e.op) {
        case 'settle':
          this.unresolved.delete(e.id);
          if (!state.isSettled(e.id)) {
            state.applySettlement(e.id, e.s, e.t);
            if (this.ledger && this.ledgerHas.get(e.seq) !== e.id) this.ledger.add(e.t, requestFileLine(e.seq, e.id, e.t, e.s));
          }
          break;
        case 'admit':
          if (!state.isSettled(e.id)) this.unresolved.set(e.id, { t: e.t, r: e.r });
          break;
        case 'cancel':
          this.unresolved.delete(e.id);
          break;
        case 'wstart':
          state.applyWindowStart(e.key, e.w, e.t);
          break;
        case 'reset':
          state.applyReset(e.key);
          break;
        case 'acct':
          this.book.applyWrite(e.kind, e.name, e.rec, e.ver);
          this.book.applyAudit(e.audit, e.t);
          break;
        case 'credit':
          state.applyCredit(e.rec.user, e.rec.amount);
          this.book.applyCredit(e.rec, e.idem, e.t);
          this.book.applyAudit(e.audit, e.t);
          if (this.ledger) {
            const r = creditRecord(e.rec);
            if (this.ledgerHas.get(e.seq) !== r.id) this.ledger.add(e.t, fileLine(e.seq, r));
          }
          break;
        case 'audit':
          this.book.applyAudit(e.entry, e.t);
          break;
        default:
          this.log.warn('store journal: unknown entry', { line: i + 1 });
      }
    }
    return replayed;
  }

  /**
   * Settles every admission the previous process left unresolved with its recovery settlement
   * (docs/limits.md "Crash recovery"). Runs at load, before the journal is opened: the settlements
   * get journal sequence numbers and land in the snapshot written right after.
   */
  private recoverUnresolved(): number {
    let n = 0;
    for (const [id, { t, r }] of this.unresolved) {
      const s: Settlement = { ...r, estimated: true, recovered: true };
      this.state.applySettlement(id, s, t);
      this.seq++;
      if (this.ledger) this.ledger.add(t, requestFileLine(this.seq, id, t, s));
      n++;
      this.log.warn('store: request in flight at a crash settled by the recovery rule', {
        requestId: id,
        key: s.keyId,
        user: s.user,
        model: s.model,
        actual: s.actual,
        usage: s.usage,
        recovered: true,
      });
    }
    this.unresolved.clear();
    return n;
  }

  /** Writes everything and a last snapshot, closes the journal and gives up the lock. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (this.journal === undefined) return;
    try {
      await this.serial(() => this.writePending());
      await this.serial(() => this.compact());
      await this.serial(() => this.writePending());
    } finally {
      const fd = this.journal;
      this.journal = undefined;
      closeSync(fd);
      this.unlock();
    }
  }

  private unlock(): void {
    if (!this.locked) return;
    this.locked = false;
    releaseLock(this.dir);
  }
}

async function readIfExists(file: string): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException | null)?.code === 'ENOENT') return undefined;
    throw e;
  }
}

/** Makes a rename durable; not every platform can open a directory for fsync. */
async function syncDir(dir: string): Promise<void> {
  let fh: FileHandle | undefined;
  try {
    fh = await open(dir, 'r');
    await fh.sync();
  } catch {
    // best effort
  } finally {
    await fh?.close().catch(() => undefined);
  }
}
