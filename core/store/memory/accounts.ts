/**
 * The embedded store's accounts: the records of users and keys made through the admin API, their
 * versions, the audit trail, and the credit records and Idempotency-Keys of top-ups. Pure, like
 * state.ts: no I/O; what must reach the disk is told to the `AccountRecorder` within the same
 * synchronous step, and `snapshot()` / `restore()` / `apply*` serve persistence.ts.
 *
 * The wallet's credit itself is a counter of state.ts (the balance claim reads it next to the
 * spend); `credit()` here checks and records, and `MemoryState.addCredit` moves the money, both in
 * one synchronous step (index.ts).
 *
 * - One process holds the store, so a write is seen by every reader at once: `onAccountsChanged`
 *   listeners are called synchronously after it, and `accountChanges` is exact for any version
 *   (the last version of every record is kept, a deleted one as a tombstone).
 * - Ids of audit entries and credit records are `<ms>-<n>` as Redis streams write them: ordered
 *   by time, then by the order of writes within a millisecond (compareIds).
 * - Audit entries older than the retention are dropped as new ones come; Idempotency-Keys are
 *   kept for a day after their top-up (docs/accounts.md).
 */
import type {
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
  KeyRecord,
  Stored,
  UserRecord,
} from '../types.js';

/** How long a top-up's Idempotency-Key answers with its first result. */
export const IDEMPOTENCY_TTL_MS = 86_400_000;

/** What persistence.ts journals for the accounts (each call follows the change it records). */
export interface AccountRecorder {
  accountWritten(kind: AccountKind, name: string, record: Stored<UserRecord | KeyRecord> | null, version: number, audit: AuditEntry): void;
  credited(record: CreditRecord, idempotency: { key: string; fingerprint: string } | undefined, audit: AuditEntry): void;
  audited(entry: AuditEntry): void;
}

interface IdempotencyRecord {
  fingerprint: string;
  record: CreditRecord;
  expiresAt: number;
}

/** The accounts as JSON (in persistence.ts's snapshot). */
export interface DurableAccounts {
  version: number;
  users: Stored<UserRecord>[];
  keys: Stored<KeyRecord>[];
  /** Tombstones and last versions: `u:<name>` / `k:<name>` → version of its last write. */
  changed: Record<string, number>;
  audit: AuditEntry[];
  credits: CreditRecord[];
  idempotency: Record<string, IdempotencyRecord>;
  lastId: [number, number];
}

/** Orders `<ms>-<n>` ids. */
export function compareIds(a: string, b: string): number {
  const [am, an] = a.split('-').map(Number);
  const [bm, bn] = b.split('-').map(Number);
  return am !== bm ? am - bm : an - bn;
}

export class AccountBook {
  private readonly users = new Map<string, Stored<UserRecord>>();
  private readonly keys = new Map<string, Stored<KeyRecord>>();
  private readonly digests = new Map<string, string>();
  private readonly changed = new Map<string, number>();
  private version = 0;
  private audit: AuditEntry[] = [];
  /** user → credit records, oldest first. */
  private readonly credits = new Map<string, CreditRecord[]>();
  private readonly idempotency = new Map<string, IdempotencyRecord>();
  private readonly listeners = new Set<() => void>();
  private lastMs = 0;
  private lastN = 0;

  constructor(
    private readonly auditRetentionMs: number,
    private readonly recorder: AccountRecorder | undefined,
  ) {}

  /** A new id at `now`: `<ms>-<n>`, increasing even when the clock goes back. */
  private nextId(now: number): string {
    if (now > this.lastMs) {
      this.lastMs = now;
      this.lastN = 0;
    } else this.lastN++;
    return `${this.lastMs}-${this.lastN}`;
  }

  get<K extends AccountKind>(kind: K, name: string): Stored<AccountRecord<K>> | undefined {
    const m = (kind === 'user' ? this.users : this.keys) as Map<string, Stored<AccountRecord<K>>>;
    const r = m.get(name);
    return r && { value: structuredClone(r.value), rev: r.rev };
  }

  write(w: AccountWrite, now: number): AccountWriteResult {
    const map = (w.kind === 'user' ? this.users : this.keys) as Map<string, Stored<UserRecord | KeyRecord>>;
    const current = map.get(w.name);
    if ((current?.rev ?? 0) !== w.expectRev) return { ok: false, reason: 'conflict' };
    if (w.value !== null && w.value.name !== w.name) throw new TypeError(`record name '${w.value.name}' written as '${w.name}'`);
    if (w.kind === 'key' && w.value !== null) {
      const owner = this.digests.get((w.value as KeyRecord).digest);
      if (owner !== undefined && owner !== w.name) return { ok: false, reason: 'digest_taken' };
    }
    const stored = w.value === null ? null : { value: structuredClone(w.value), rev: (current?.rev ?? 0) + 1 };
    this.applyWrite(w.kind, w.name, stored, this.version + 1);
    const audit = this.addAudit(w.audit, now);
    this.recorder?.accountWritten(w.kind, w.name, stored, this.version, audit);
    this.notify();
    return { ok: true, rev: stored?.rev ?? 0, version: this.version, audit };
  }

  /** The write itself (also journal replay). */
  applyWrite(kind: AccountKind, name: string, stored: Stored<UserRecord | KeyRecord> | null, version: number): void {
    if (kind === 'user') {
      if (stored) this.users.set(name, stored as Stored<UserRecord>);
      else this.users.delete(name);
    } else {
      const old = this.keys.get(name);
      if (old) this.digests.delete(old.value.digest);
      if (stored) {
        this.keys.set(name, stored as Stored<KeyRecord>);
        this.digests.set((stored.value as KeyRecord).digest, name);
      } else this.keys.delete(name);
    }
    this.changed.set(`${kind === 'user' ? 'u' : 'k'}:${name}`, version);
    this.version = Math.max(this.version, version);
  }

  load(): AccountsSnapshot {
    return {
      version: this.version,
      users: [...this.users.values()].map((r) => structuredClone(r)),
      keys: [...this.keys.values()].map((r) => structuredClone(r)),
    };
  }

  /** Undefined when `since` is ahead of this store (the caller saw another store's state). */
  changes(since: number): AccountChanges | undefined {
    if (since > this.version) return undefined;
    const out: AccountChanges = { version: this.version, users: [], keys: [] };
    for (const [id, v] of this.changed) {
      if (v <= since) continue;
      const name = id.slice(2);
      if (id.startsWith('u:')) out.users.push({ name, record: this.get('user', name) ?? null });
      else out.keys.push({ name, record: this.get('key', name) ?? null });
    }
    return out;
  }

  onChanged(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private notify(): void {
    for (const l of this.listeners) {
      try {
        l();
      } catch {
        // a listener's failure is its own
      }
    }
  }

  // ---- credit ------------------------------------------------------------------------------------

  /** An earlier top-up's record under this Idempotency-Key, if it is still kept. */
  idempotent(user: string, key: string, now: number): IdempotencyRecord | undefined {
    const r = this.idempotency.get(`${user}\u0000${key}`);
    if (r && r.expiresAt <= now) {
      this.idempotency.delete(`${user}\u0000${key}`);
      return undefined;
    }
    return r;
  }

  /** Records a credit the wallet has just taken (state.ts moved the money). */
  credited(
    fields: Omit<CreditRecord, 'id' | 'at'>,
    idem: { key: string; fingerprint: string } | undefined,
    auditInput: AuditInput,
    now: number,
  ): CreditRecord {
    const record: CreditRecord = { id: this.nextId(now), at: now, ...fields };
    this.applyCredit(record, idem, now);
    const audit = this.addAudit(auditInput, now);
    this.recorder?.credited(record, idem, audit);
    return record;
  }

  applyCredit(record: CreditRecord, idem: { key: string; fingerprint: string } | undefined, now: number): void {
    let list = this.credits.get(record.user);
    if (!list) this.credits.set(record.user, (list = []));
    list.push(record);
    this.bump(record.at, record.id);
    if (idem)
      this.idempotency.set(`${record.user}\u0000${idem.key}`, {
        fingerprint: idem.fingerprint,
        record,
        expiresAt: now + IDEMPOTENCY_TTL_MS,
      });
  }

  creditsOf(user: string, limit: number, before?: string): CreditRecord[] {
    const list = this.credits.get(user) ?? [];
    const out: CreditRecord[] = [];
    for (let i = list.length - 1; i >= 0 && out.length < limit; i--) {
      if (before === undefined || compareIds(list[i].id, before) < 0) out.push({ ...list[i] });
    }
    return out;
  }

  // ---- audit -------------------------------------------------------------------------------------

  appendAudit(input: AuditInput, now: number): AuditEntry {
    const entry = this.addAudit(input, now);
    this.recorder?.audited(entry);
    return entry;
  }

  private addAudit(input: AuditInput, now: number): AuditEntry {
    const entry: AuditEntry = { id: this.nextId(now), at: now, ...structuredClone(input) };
    this.applyAudit(entry, now);
    return entry;
  }

  applyAudit(entry: AuditEntry, now: number): void {
    this.audit.push(entry);
    this.bump(entry.at, entry.id);
    const oldest = now - this.auditRetentionMs;
    if (this.audit.length > 0 && this.audit[0].at < oldest) this.audit = this.audit.filter((e) => e.at >= oldest);
  }

  readAudit(q: AuditQuery): AuditEntry[] {
    const out: AuditEntry[] = [];
    for (let i = this.audit.length - 1; i >= 0 && out.length < q.limit; i--) {
      const e = this.audit[i];
      if (q.before !== undefined && compareIds(e.id, q.before) >= 0) continue;
      if (q.until !== undefined && e.at > q.until) continue;
      if (q.since !== undefined && e.at < q.since) break;
      if (q.actor !== undefined && e.actor !== q.actor) continue;
      if (q.target !== undefined && e.target !== q.target) continue;
      out.push(structuredClone(e));
    }
    return out;
  }

  /** Keeps ids increasing past those replayed or restored. */
  private bump(at: number, id: string): void {
    const n = Number(id.split('-')[1]);
    if (at > this.lastMs || (at === this.lastMs && n > this.lastN)) {
      this.lastMs = at;
      this.lastN = n;
    }
  }

  // ---- snapshot ----------------------------------------------------------------------------------

  snapshot(now: number): DurableAccounts {
    const idempotency: Record<string, IdempotencyRecord> = {};
    for (const [k, r] of this.idempotency) if (r.expiresAt > now) idempotency[k] = r;
    return {
      version: this.version,
      users: [...this.users.values()],
      keys: [...this.keys.values()],
      changed: Object.fromEntries(this.changed),
      audit: this.audit,
      credits: [...this.credits.values()].flat(),
      idempotency,
      lastId: [this.lastMs, this.lastN],
    };
  }

  restore(s: DurableAccounts): void {
    for (const u of s.users) this.users.set(u.value.name, u);
    for (const k of s.keys) {
      this.keys.set(k.value.name, k);
      this.digests.set(k.value.digest, k.value.name);
    }
    for (const [id, v] of Object.entries(s.changed)) this.changed.set(id, v);
    this.version = s.version;
    this.audit = s.audit;
    for (const c of s.credits) {
      let list = this.credits.get(c.user);
      if (!list) this.credits.set(c.user, (list = []));
      list.push(c);
    }
    for (const [k, r] of Object.entries(s.idempotency)) this.idempotency.set(k, r);
    [this.lastMs, this.lastN] = s.lastId;
  }
}
