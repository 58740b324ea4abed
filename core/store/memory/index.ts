/**
 * The embedded store: all state in process memory, persisted to a directory as a snapshot plus an
 * append-only journal. The default for one gateway instance.
 *
 * This file is the `Store` (the contract is in ../types.ts) and nothing else: it composes
 * - state.ts: the counters and their rules (admission, settlement, cancel, slots, reads), pure
 *   and synchronous;
 * - accounts.ts: the records of users and keys, the audit trail, credit records (pure too);
 * - upstreams.ts: the health of upstream accounts (in memory only);
 * - persistence.ts: the store folder (snapshot, journal, compaction, lock, crash recovery), only
 *   with `path`; it is the state's `Recorder` and the accounts' `AccountRecorder`.
 * Each method hands the call to the state in the same turn: no `await` is added before or inside
 * an admission, so its check-and-apply stays one atomic step.
 *
 * - Mutations after close() throw: a settlement that cannot be made durable is reported, not lost
 *   silently. (A cancel is accepted, and journaled only until close() begins.)
 */
import { systemClock, type Clock } from '../../clock.js';
import { silentLogger, type Logger } from '../../log.js';
import type {
  AccountHealthEvent,
  AccountHealthSnapshot,
  LimitsInUse,
  LimitsQuery,
  AccountChanges,
  AccountKind,
  AccountRecord,
  AccountsSnapshot,
  AccountWrite,
  AccountWriteResult,
  AuditEntry,
  AuditInput,
  AuditQuery,
  CreditRecord,
  CreditRequest,
  CreditResult,
  Stored,
  Wallet,
  AdmitRequest,
  AdmitResult,
  KeyState,
  KeyStats,
  PeriodUsage,
  Settlement,
  SlotRequest,
  SlotResult,
  Store,
  StoreHealth,
} from '../types.js';
import { MemoryState } from './state.js';
import { AccountBook } from './accounts.js';
import { UpstreamHealth } from './upstreams.js';
import { LedgerFiles } from '../../ledger/files.js';
import { COMPACT_BYTES, Persistence } from './persistence.js';

export interface MemoryStoreOptions {
  /** Directory for the snapshot and journal; undefined = nothing on disk. */
  path?: string;
  /** How often buffered journal writes are written and fsynced (default 1000). */
  flushIntervalMs?: number;
  clock?: Clock;
  log?: Logger;
  /** Journal size that triggers compaction (default 4 MB). */
  compactBytes?: number;
  /** How long audit entries are kept (default 90 days). */
  auditRetentionMs?: number;
  /**
   * The ledger's day files (core/ledger/files.ts), written with the journal: a record per
   * settlement and credit. Only with `path` (without a journal there is nothing to be exact with).
   */
  ledger?: { dir: string; retentionMs: number };
}

/** How long audit entries are kept unless the options say otherwise. */
export const AUDIT_RETENTION_MS = 90 * 86_400_000;

export class MemoryStore implements Store {
  readonly kind = 'memory' as const;

  private closed = false;
  private closing: Promise<void> | undefined;
  private readonly upstreams = new UpstreamHealth();

  private constructor(
    private readonly state: MemoryState,
    private readonly book: AccountBook,
    private readonly clock: Clock,
    /** Undefined without `path`: nothing on disk. */
    private readonly disk: Persistence | undefined,
    /** Written by `disk`; closed after it. */
    private readonly ledgerFiles?: LedgerFiles,
  ) {}

  static async open(opts: MemoryStoreOptions = {}): Promise<MemoryStore> {
    const clock = opts.clock ?? systemClock;
    const log = opts.log ?? silentLogger;
    const ledger =
      opts.path !== undefined && opts.ledger
        ? new LedgerFiles({ dir: opts.ledger.dir, retentionMs: opts.ledger.retentionMs, log })
        : undefined;
    const disk =
      opts.path === undefined
        ? undefined
        : new Persistence({
            dir: opts.path,
            flushIntervalMs: opts.flushIntervalMs ?? 1000,
            compactBytes: opts.compactBytes ?? COMPACT_BYTES,
            clock,
            log,
            ledger,
          });
    const state = new MemoryState(clock, disk);
    const book = new AccountBook(opts.auditRetentionMs ?? AUDIT_RETENTION_MS, disk);
    try {
      if (disk !== undefined) await disk.load(state, book);
    } catch (e) {
      ledger?.close();
      throw e;
    }
    return new MemoryStore(state, book, clock, disk, ledger);
  }

  /** The promise forms of admit and settle are the synchronous ones (`Store.admitNow`), answered as promises. */
  async admit(req: AdmitRequest): Promise<AdmitResult> {
    return this.admitNow(req);
  }

  admitNow(req: AdmitRequest): AdmitResult {
    this.assertOpen();
    return this.state.admit(req);
  }

  async cancel(requestId: string, opts?: { keepCounts?: boolean }): Promise<void> {
    this.state.cancel(requestId, opts);
  }

  async settle(requestId: string, s: Settlement): Promise<void> {
    this.settleNow(requestId, s);
  }

  settleNow(requestId: string, s: Settlement): void {
    this.assertOpen();
    this.state.settle(requestId, s);
  }

  acquireSlot(req: SlotRequest): Promise<SlotResult> {
    return this.state.acquireSlot(req);
  }

  async balanceSpent(user: string): Promise<number> {
    return this.state.balanceSpent(user);
  }

  async wallet(user: string): Promise<Wallet> {
    return this.state.wallet(user);
  }

  async keyState(keyId: string): Promise<KeyState> {
    return this.state.keyState(keyId);
  }

  async planUsage(user: string, group: string): Promise<PeriodUsage> {
    return this.state.planUsage(user, group);
  }

  async spendCapUsage(user: string): Promise<{ weekly: number; monthly: number }> {
    return this.state.spendCapUsage(user);
  }

  async keyStats(keyId: string, fromDay: string, toDay: string): Promise<KeyStats> {
    return this.state.keyStats(keyId, fromDay, toDay);
  }

  async resetKeyQuota(keyId: string): Promise<void> {
    this.assertOpen();
    this.state.resetKeyQuota(keyId);
  }

  async remember(namespace: string, entries: ReadonlyArray<readonly [string, string]>, ttlMs: number): Promise<void> {
    this.state.remember(namespace, entries, ttlMs);
  }

  async recall(namespace: string, ids: readonly string[]): Promise<Array<string | undefined>> {
    return this.state.recall(namespace, ids);
  }

  // ---- accounts ------------------------------------------------------------------------------------

  async getAccount<K extends AccountKind>(kind: K, name: string): Promise<Stored<AccountRecord<K>> | undefined> {
    return this.book.get(kind, name);
  }

  async writeAccount(w: AccountWrite): Promise<AccountWriteResult> {
    this.assertOpen();
    return this.book.write(w, this.clock.now());
  }

  async loadAccounts(): Promise<AccountsSnapshot> {
    return this.book.load();
  }

  async accountChanges(version: number): Promise<AccountChanges | undefined> {
    return this.book.changes(version);
  }

  onAccountsChanged(listener: () => void): () => void {
    return this.book.onChanged(listener);
  }

  async credit(req: CreditRequest): Promise<CreditResult> {
    this.assertOpen();
    const now = this.clock.now();
    // One synchronous step: the Idempotency-Key, the check, the money and its record.
    if (req.idempotency) {
      const earlier = this.book.idempotent(req.user, req.idempotency.key, now);
      if (earlier) {
        return earlier.fingerprint === req.idempotency.fingerprint
          ? { ok: true, record: { ...earlier.record }, replayed: true }
          : { ok: false, reason: 'idempotency_conflict' };
      }
    }
    const after = this.state.addCredit(req.user, req.amount, req.baseCredit);
    if (!after) return { ok: false, reason: 'below_zero' };
    const record = this.book.credited(
      { user: req.user, amount: req.amount, reference: req.reference, credit: after.credit, spent: after.spent, actor: req.audit.actor },
      req.idempotency,
      req.audit,
      now,
    );
    return { ok: true, record, replayed: false };
  }

  async credits(user: string, opts: { limit: number; before?: string }): Promise<CreditRecord[]> {
    return this.book.creditsOf(user, opts.limit, opts.before);
  }

  async appendAudit(entry: AuditInput): Promise<AuditEntry> {
    this.assertOpen();
    return this.book.appendAudit(entry, this.clock.now());
  }

  async readAudit(q: AuditQuery): Promise<AuditEntry[]> {
    return this.book.readAudit(q);
  }

  // ---- upstream accounts (upstreams.ts) ------------------------------------------------------------

  async reportAccountHealth(events: readonly AccountHealthEvent[]): Promise<number> {
    return this.upstreams.report(events);
  }

  async accountHealth(version?: number): Promise<AccountHealthSnapshot | undefined> {
    return this.upstreams.snapshot(version);
  }

  onAccountHealthChanged(listener: () => void): () => void {
    return this.upstreams.onChanged(listener);
  }

  async limitsInUse(q: LimitsQuery): Promise<LimitsInUse> {
    return this.state.limitsInUse(q);
  }

  async health(): Promise<StoreHealth> {
    return { ready: !this.closed };
  }

  /** Writes the journal's pending lines and fsyncs it (also done every `flushIntervalMs`). */
  flush(): Promise<void> {
    return this.disk !== undefined ? this.disk.flush() : Promise.resolve();
  }

  async close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    this.closed = true;
    try {
      if (this.disk !== undefined) await this.disk.close();
    } finally {
      this.ledgerFiles?.close();
    }
  }

  /** The ledger's day files this store writes (undefined without a store folder or a ledger). */
  get ledger(): LedgerFiles | undefined {
    return this.ledgerFiles;
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('store is closed');
  }
}
