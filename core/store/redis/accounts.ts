/**
 * The accounts on Redis: the records of users and keys, their version and change log, the audit
 * stream, and wallet credits with their Idempotency-Keys (accounts.lua holds every step that must
 * be atomic). Shared by every instance on the Redis: a write is published on the accounts channel,
 * and each instance's directory (core/accounts) follows the change log from its last version.
 *
 * Keys (keys.ts): `{acct}:users`, `{acct}:keys` (name → `<rev>\n<json>`), `{acct}:digests`
 * (digest → key name), `{acct}:ver`, `{acct}:log` (a sorted set: `u:<name>` / `k:<name>` scored by
 * the version of its last write), `{acct}:audit` (a stream trimmed to the retention); under the
 * user's tag, `credits` (a stream of credit records) and `idem:<Idempotency-Key>` (a day).
 *
 * - Every account key shares the `{acct}` tag, so on a cluster a write, with its audit entry, is
 *   still one script in one slot. A credit runs in the user's slot (where the wallet is); its audit
 *   entry is appended right after, in the accounts' slot: if that second call fails the credit
 *   stands (its record is in the credits stream) and the failure is logged with the entry.
 * - While Redis is away (health.ts) every call here fails closed: 503 billing_service_error, and
 *   nothing changes. A write carries a deadline in Redis time, just before its caller's timeout
 *   (the offset between this process's clock and Redis TIME is measured with a TIME call, again
 *   every minute): a write Redis runs only after it (Redis was frozen while the call waited, and the
 *   caller has answered 503) changes nothing. So a write answered 503 never applies later.
 * - Redis time (or the test clock) stamps records, audit entries and credit records. Audit and
 *   credit ids are the stream ids (`<ms>-<n>`, Redis time).
 * - A credit's ledger record (`credit:<id>`) goes to the user's ledger stream in the credit's own
 *   script (ledger.ts).
 */
import type { Clock } from '../../clock.js';
import type { Logger } from '../../log.js';
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
  CreditRequest,
  CreditResult,
  KeyRecord,
  Stored,
  UserRecord,
} from '../types.js';
import { Notices, refuse, Unavailable, whileUp, type RedisClient, type Reply } from './client.js';
import type { Health } from './health.js';
import type { Keys } from './keys.js';
import type { LedgerStreams } from './ledger.js';
import { creditLedgerText, now } from './pack.js';

/** How long a top-up's Idempotency-Key answers with its first result. */
const IDEMPOTENCY_TTL_MS = 86_400_000;
/** Stream entries read per round while filtering the audit trail. */
const AUDIT_PAGE = 200;

function parseStored<T>(text: string): Stored<T> {
  const nl = text.indexOf('\n');
  return { rev: Number(text.slice(0, nl)), value: JSON.parse(text.slice(nl + 1)) as T };
}

/** The audit fields as the script stores them, `at` and `id` added there. */
function auditFields(a: AuditInput): string {
  return JSON.stringify({
    actor: a.actor,
    ip: a.ip,
    method: a.method,
    path: a.path,
    action: a.action,
    target: a.target,
    before: a.before ?? null,
    after: a.after ?? null,
  });
}

/** A stream entry [id, [field, value]] → its JSON value with the id. */
function entryOf<T>(e: Reply): T & { id: string } {
  const [id, fields] = e as [string, string[]];
  return { id, ...(JSON.parse(fields[1]) as T) };
}

/** How long a measured offset to Redis TIME is trusted. */
const OFFSET_TTL_MS = 60_000;
/** Kept between a write's deadline in Redis and its caller's timeout. */
const DEADLINE_MARGIN_MS = 25;

export class Accounts {
  private readonly notices: Notices;
  /** Redis TIME minus this process's clock (ms), its uncertainty, and when it was measured. */
  private offset: { ms: number; error: number; at: number } | undefined;

  constructor(
    private readonly redis: RedisClient,
    private readonly health: Health,
    private readonly keys: Keys,
    private readonly clock: Clock | undefined,
    private readonly auditRetentionMs: number,
    private readonly log: Logger,
    private readonly ledger: LedgerStreams,
  ) {
    this.notices = new Notices(redis, keys.accountsChannel());
  }

  private call<T>(f: () => Promise<T>): Promise<T> {
    return whileUp(this.health, f);
  }

  /** The deadline of a write sent now, in Redis time (see the top). */
  private async deadline(): Promise<string> {
    const now = Date.now();
    if (!this.offset || now - this.offset.at > OFFSET_TTL_MS) {
      const t0 = Date.now();
      const [s, us] = await this.call(() => this.redis.cmd((c) => c.time()));
      const t1 = Date.now();
      this.offset = { ms: Number(s) * 1000 + Math.floor(Number(us) / 1000) - (t0 + t1) / 2, error: (t1 - t0) / 2 + 1, at: t1 };
    }
    const o = this.offset;
    return String(Math.floor(Date.now() + o.ms + this.redis.timeoutMs - o.error - DEADLINE_MARGIN_MS));
  }

  private hashOf(kind: AccountKind): string {
    return this.keys.accounts(kind === 'user' ? 'users' : 'keys');
  }

  async get<K extends AccountKind>(kind: K, name: string): Promise<Stored<AccountRecord<K>> | undefined> {
    const text = await this.call(() => this.redis.cmd((c) => c.hget(this.hashOf(kind), name)));
    return text === null ? undefined : parseStored<AccountRecord<K>>(text);
  }

  async write(w: AccountWrite): Promise<AccountWriteResult> {
    if (w.value !== null && w.value.name !== w.name) throw new TypeError(`record name '${w.value.name}' written as '${w.name}'`);
    const k = this.keys;
    const digest = w.kind === 'key' && w.value !== null ? (w.value as KeyRecord).digest : '';
    const deadline = await this.deadline();
    // A deleted key's digest leaves the index: the script reads it from the stored record.
    const r = (await this.call(() =>
      this.redis.run(
        'accounts',
        [this.hashOf(w.kind), k.accounts('digests'), k.accounts('ver'), k.accounts('log'), k.accounts('audit')],
        [
          'write',
          now(this.clock),
          w.kind === 'user' ? 'u' : 'k',
          w.name,
          String(w.expectRev),
          w.value === null ? '' : JSON.stringify(w.value),
          digest,
          auditFields(w.audit),
          String(this.auditRetentionMs),
          k.accountsChannel(),
          deadline,
        ],
      ),
    )) as Reply[];
    if (r[0] === -2) throw refuse(new Unavailable('Redis ran the write after its deadline'));
    if (r[0] === 0) return { ok: false, reason: r[1] as 'conflict' | 'digest_taken' };
    const audit: AuditEntry = { id: r[3] as string, at: r[4] as number, ...structuredClone(w.audit) };
    return { ok: true, rev: r[1] as number, version: r[2] as number, audit };
  }

  async load(): Promise<AccountsSnapshot> {
    const k = this.keys;
    const r = (await this.call(() =>
      this.redis.run('accounts', [k.accounts('users'), k.accounts('keys'), k.accounts('ver')], ['load', now(this.clock)]),
    )) as [number, string[], string[]];
    const users: Stored<UserRecord>[] = [];
    const keys: Stored<KeyRecord>[] = [];
    for (let i = 0; i < r[1].length; i += 2) users.push(parseStored<UserRecord>(r[1][i + 1]));
    for (let i = 0; i < r[2].length; i += 2) keys.push(parseStored<KeyRecord>(r[2][i + 1]));
    return { version: r[0], users, keys };
  }

  async changes(version: number): Promise<AccountChanges | undefined> {
    const k = this.keys;
    const r = (await this.call(() =>
      this.redis.run(
        'accounts',
        [k.accounts('users'), k.accounts('keys'), k.accounts('ver'), k.accounts('log')],
        ['changes', now(this.clock), String(version)],
      ),
    )) as Reply[];
    if (r[0] === -1) return undefined; // the store is behind what the caller saw: it lost data
    const out: AccountChanges = { version: r[0] as number, users: [], keys: [] };
    for (let i = 1; i < r.length; i += 2) {
      const id = r[i] as string;
      const text = r[i + 1] as string | null;
      const name = id.slice(2);
      if (id.startsWith('u:')) out.users.push({ name, record: text ? parseStored<UserRecord>(text) : null });
      else out.keys.push({ name, record: text ? parseStored<KeyRecord>(text) : null });
    }
    return out;
  }

  onChanged(listener: () => void): () => void {
    return this.notices.on(listener);
  }

  async credit(req: CreditRequest): Promise<CreditResult> {
    if (!Number.isSafeInteger(req.amount)) throw new TypeError(`amount must be an integer (micro-USD), got ${req.amount}`);
    const k = this.keys;
    // The record's own fields, as a JSON fragment the script completes (`{"at":…,"credit":…,"spent":…` + this + `}`).
    const fields = JSON.stringify({ user: req.user, amount: req.amount, reference: req.reference, actor: req.audit.actor }).slice(1, -1);
    const idem = req.idempotency;
    // Its ledger record goes to the user's stream, in the same script (ledger.ts).
    const stream = this.ledger.streamOf(k.user(req.user));
    await this.call(() => this.ledger.ensure(stream));
    const deadline = await this.deadline();
    const r = (await this.call(() =>
      this.redis.run(
        'accounts',
        [k.wallet(req.user), idem ? k.idempotency(req.user, idem.key) : k.wallet(req.user), k.credits(req.user), stream],
        [
          'credit',
          now(this.clock),
          String(req.amount),
          String(req.baseCredit),
          `,${fields}`,
          idem?.fingerprint ?? '',
          String(IDEMPOTENCY_TTL_MS),
          deadline,
          creditLedgerText({ user: req.user, amount: req.amount, reference: req.reference, actor: req.audit.actor }),
        ],
      ),
    )) as Reply[];
    if (r[0] === -2) throw refuse(new Unavailable('Redis ran the credit after its deadline'));
    if (r[0] === 2) {
      const text = r[1] as string;
      const nl = text.indexOf('\n');
      return {
        ok: true,
        replayed: true,
        record: { id: text.slice(0, nl), ...(JSON.parse(text.slice(nl + 1)) as Omit<CreditRecord, 'id'>) },
      };
    }
    if (r[0] === 3) return { ok: false, reason: 'idempotency_conflict' };
    if (r[0] === 4) return { ok: false, reason: 'below_zero' };
    this.ledger.wrote(stream);
    const record: CreditRecord = {
      id: r[1] as string,
      at: r[2] as number,
      credit: r[3] as number,
      spent: r[4] as number,
      user: req.user,
      amount: req.amount,
      reference: req.reference,
      actor: req.audit.actor,
    };
    try {
      await this.appendAudit(req.audit);
    } catch (e) {
      this.log.error('admin audit: the entry of a credit that was applied could not be stored', { audit: req.audit, error: e as Error });
    }
    return { ok: true, record, replayed: false };
  }

  async credits(user: string, opts: { limit: number; before?: string }): Promise<CreditRecord[]> {
    const end = opts.before === undefined ? '+' : `(${opts.before}`;
    const r = await this.call(() => this.redis.cmd((c) => c.xrevrange(this.keys.credits(user), end, '-', 'COUNT', opts.limit)));
    return (r as Reply[]).map((e) => entryOf<Omit<CreditRecord, 'id'>>(e));
  }

  async appendAudit(entry: AuditInput): Promise<AuditEntry> {
    const r = (await this.call(() =>
      this.redis.run(
        'accounts',
        [this.keys.accounts('audit')],
        ['audit', now(this.clock), auditFields(entry), String(this.auditRetentionMs)],
      ),
    )) as [string, number];
    return { id: r[0], at: r[1], ...structuredClone(entry) };
  }

  async readAudit(q: AuditQuery): Promise<AuditEntry[]> {
    const out: AuditEntry[] = [];
    let end = q.before === undefined ? '+' : `(${q.before}`;
    for (;;) {
      const page = (await this.call(() =>
        this.redis.cmd((c) => c.xrevrange(this.keys.accounts('audit'), end, '-', 'COUNT', AUDIT_PAGE)),
      )) as Reply[];
      for (const e of page) {
        const a = entryOf<Omit<AuditEntry, 'id'>>(e);
        if (q.since !== undefined && a.at < q.since) return out;
        if (q.until !== undefined && a.at > q.until) continue;
        if (q.actor !== undefined && a.actor !== q.actor) continue;
        if (q.target !== undefined && a.target !== q.target) continue;
        out.push(a);
        if (out.length >= q.limit) return out;
      }
      if (page.length < AUDIT_PAGE) return out;
      end = `(${(page[page.length - 1] as [string])[0]}`;
    }
  }
}
