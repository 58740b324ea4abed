/**
 * Who may call: the users and keys the gateway serves, merged from the two places they live.
 *
 * - **The config file** declares users and keys (`users:`, `keys:`), as it always did: a GitOps
 *   operator's. They change with the file (a reload) and the admin API refuses to edit them.
 * - **The store** holds those made through the admin API (records, core/store/types.ts), shared by
 *   every instance on the same store.
 *
 * A name belongs to one place: the admin API refuses to create a user or key whose name the file
 * declares, and if a file later declares a name the store has, the file's entry wins (and a warning
 * says which store record it hides). A key's secret belongs to one key: a stored key with the digest
 * of a file key is not served. Money is not here: every user's wallet is in the store, and a file
 * user's `balance` is a credit added to it.
 *
 * Lookups on the request path are synchronous, from memory: this holds a replica of the store's
 * records, loaded at start and kept up to date by following the store's change log — at once when
 * the store announces a write (Redis pub/sub; the memory store calls back in the same turn), and in
 * any case every `pollMs`, so a lost announcement costs at most one poll. While the replica cannot be
 * confirmed (the store unreachable for longer than `staleMs`), keys from the store are refused with
 * 503 billing_service_error rather than served from a replica that may have missed a revocation;
 * keys from the file are served as ever (docs/accounts.md, "How changes reach every instance").
 */
import type { Logger } from '../log.js';
import type { GatewayConfig, KeyConfig, UserConfig } from '../config/types.js';
import type { AccountChanges, KeyRecord, Store, Stored, UserRecord } from '../store/types.js';

export interface DirectoryOptions {
  /** How often the change log is read even without an announcement. */
  pollMs: number;
  /** How long the replica may go unconfirmed before stored keys are refused. */
  staleMs: number;
}

export const DEFAULT_DIRECTORY: DirectoryOptions = { pollMs: 500, staleMs: 2_000 };

/** Where an entry comes from. */
export type Source = 'file' | 'store';

/** A key as the request path sees it: the config shape, and where it lives. */
export interface DirectoryKey {
  key: KeyConfig;
  source: Source;
}

/** The request path's view of a stored user: its settings, no balance (the wallet is the store's). */
export function userConfigOf(r: UserRecord): UserConfig {
  return {
    name: r.name,
    status: r.status,
    balance: 0,
    rpm: r.rpm,
    concurrency: r.concurrency,
    queue: r.queue,
    spendCaps: r.spendCaps,
    rates: r.rates,
    subscriptions: r.subscriptions,
  };
}

export function keyConfigOf(r: KeyRecord): KeyConfig {
  return {
    id: r.name,
    name: r.name,
    digest: r.digest,
    user: r.user,
    group: r.group,
    enabled: r.enabled,
    quota: r.quota,
    windows: r.windows,
    expiresAt: r.expiresAt,
    ipAllow: r.ipAllow,
    ipDeny: r.ipDeny,
  };
}

/**
 * The replica of the store's users and keys, following the store's change log. One per gateway
 * process; `view(config)` joins it with one config load's file entries.
 */
export class AccountDirectory {
  private readonly users = new Map<string, { record: Stored<UserRecord>; config: UserConfig }>();
  private readonly keys = new Map<string, { record: Stored<KeyRecord>; config: KeyConfig }>();
  private readonly byDigest = new Map<string, KeyConfig>();
  private version = 0;
  /** When the replica was last confirmed current (epoch ms). */
  private confirmedAt = 0;
  private syncing: Promise<void> | undefined;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private stopListening: (() => void) | undefined;
  private closed = false;
  private failures = 0;

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    private readonly opts: DirectoryOptions = DEFAULT_DIRECTORY,
  ) {}

  /** Loads the store's records and starts following its changes. */
  async start(): Promise<void> {
    try {
      await this.loadAll();
    } catch (e) {
      // The store may be unreachable at start (Redis away): stored keys wait for the first sync.
      this.log.warn('accounts: could not load the stored users and keys yet; retrying', { error: e as Error });
    }
    this.stopListening = this.store.onAccountsChanged(() => void this.sync());
    this.timer = setInterval(() => void this.sync(), this.opts.pollMs);
    this.timer.unref();
  }

  close(): void {
    this.closed = true;
    clearInterval(this.timer);
    this.stopListening?.();
  }

  /** This replica joined with one config load's file entries (the file's win). */
  view(config: GatewayConfig): AccountView {
    const view = new AccountView(this, config);
    for (const name of this.users.keys()) {
      if (Object.prototype.hasOwnProperty.call(config.users, name)) {
        this.log.warn('accounts: the config file declares a user the store has; the file wins', { user: name });
      }
    }
    for (const name of this.keys.keys()) {
      if (view.fileKeyNames.has(name))
        this.log.warn('accounts: the config file declares a key name the store has; the file wins', { key: name });
    }
    return view;
  }

  /**
   * Whether the stored entries are known to be current (confirmed within `staleMs` of real time; the
   * injected clock is for money periods). The embedded store lives in this process: always current.
   */
  isFresh(): boolean {
    return this.store.kind === 'memory' || Date.now() - this.confirmedAt <= this.opts.staleMs;
  }

  storedKeyByDigest(digest: string): KeyConfig | undefined {
    return this.byDigest.get(digest);
  }

  storedUser(name: string): { record: Stored<UserRecord>; config: UserConfig } | undefined {
    return this.users.get(name);
  }

  storedKey(name: string): { record: Stored<KeyRecord>; config: KeyConfig } | undefined {
    return this.keys.get(name);
  }

  storedUserNames(): string[] {
    return [...this.users.keys()].sort();
  }

  storedKeyNames(): string[] {
    return [...this.keys.keys()].sort();
  }

  /** Every stored key's digest (failed-request records redact them). */
  digests(): Iterable<string> {
    return this.byDigest.keys();
  }

  /**
   * Brings the replica up to the store's current version (one at a time; a call during a sync runs
   * another right after it). Rejects when the store cannot answer.
   */
  sync(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.syncing) {
      this.again = true;
      return this.syncing;
    }
    const p = (async () => {
      try {
        do {
          this.again = false;
          await this.syncOnce();
        } while (this.again && !this.closed);
        if (this.failures > 0) this.log.info('accounts: following the store again', { version: this.version });
        this.failures = 0;
      } catch (e) {
        if (this.failures++ === 0) {
          this.log.warn('accounts: cannot follow the store; its keys are refused once the replica is stale', { error: e as Error });
        }
        throw e;
      } finally {
        this.syncing = undefined;
      }
    })();
    this.syncing = p;
    p.catch(() => undefined);
    return p;
  }

  private async syncOnce(): Promise<void> {
    const startedAt = Date.now();
    const changes = await this.store.accountChanges(this.version);
    if (changes === undefined) {
      this.log.warn('accounts: the store is behind what this instance saw (restarted empty?); loading every record again', {
        version: this.version,
      });
      await this.loadAll();
      return;
    }
    this.apply(changes);
    this.confirmedAt = startedAt;
  }

  private async loadAll(): Promise<void> {
    const startedAt = Date.now();
    const snap = await this.store.loadAccounts();
    this.users.clear();
    this.keys.clear();
    this.byDigest.clear();
    for (const u of snap.users) this.setUser(u.value.name, u);
    for (const k of snap.keys) this.setKey(k.value.name, k);
    this.version = snap.version;
    this.confirmedAt = startedAt;
  }

  private apply(ch: AccountChanges): void {
    for (const { name, record } of ch.users) this.setUser(name, record);
    for (const { name, record } of ch.keys) this.setKey(name, record);
    this.version = Math.max(this.version, ch.version);
  }

  private setUser(name: string, record: Stored<UserRecord> | null): void {
    if (record) this.users.set(name, { record, config: userConfigOf(record.value) });
    else this.users.delete(name);
  }

  private setKey(name: string, record: Stored<KeyRecord> | null): void {
    const old = this.keys.get(name);
    if (old) this.byDigest.delete(old.config.digest);
    if (record) {
      const config = keyConfigOf(record.value);
      this.keys.set(name, { record, config });
      this.byDigest.set(config.digest, config);
    } else this.keys.delete(name);
  }
}

/** The users and keys one config load serves: its file's, then the store's (the file's win). */
export class AccountView {
  /** File keys by id and name: a stored key of the same name is hidden. */
  readonly fileKeyNames: ReadonlySet<string>;

  constructor(
    readonly directory: AccountDirectory,
    readonly config: GatewayConfig,
  ) {
    const names = new Set<string>();
    for (const k of config.keys) {
      names.add(k.id);
      names.add(k.name);
    }
    this.fileKeyNames = names;
  }

  /** The key with this SHA-256 digest, from the file or the store; undefined when none. */
  keyByDigest(digest: string): DirectoryKey | undefined {
    const file = this.config.keysByDigest.get(digest);
    if (file) return { key: file, source: 'file' };
    const stored = this.directory.storedKeyByDigest(digest);
    if (stored && !this.fileKeyNames.has(stored.name)) return { key: stored, source: 'store' };
    return undefined;
  }

  user(name: string): UserConfig | undefined {
    if (Object.prototype.hasOwnProperty.call(this.config.users, name)) return this.config.users[name];
    return this.directory.storedUser(name)?.config;
  }

  userSource(name: string): Source | undefined {
    if (Object.prototype.hasOwnProperty.call(this.config.users, name)) return 'file';
    return this.directory.storedUser(name) ? 'store' : undefined;
  }

  /** A key by name: from the file (by name or id) or the store. */
  keyByName(name: string): { key: KeyConfig; source: Source; record?: Stored<KeyRecord> } | undefined {
    const file = this.config.keys.find((k) => k.name === name || k.id === name);
    if (file) return { key: file, source: 'file' };
    const s = this.directory.storedKey(name);
    return s ? { key: s.config, source: 'store', record: s.record } : undefined;
  }

  /** Every user, file first then store, each in name order. */
  allUsers(): { name: string; source: Source; config: UserConfig; record?: Stored<UserRecord> }[] {
    const out: { name: string; source: Source; config: UserConfig; record?: Stored<UserRecord> }[] = [];
    for (const name of Object.keys(this.config.users).sort()) out.push({ name, source: 'file', config: this.config.users[name] });
    for (const name of this.directory.storedUserNames()) {
      if (Object.prototype.hasOwnProperty.call(this.config.users, name)) continue;
      const u = this.directory.storedUser(name)!;
      out.push({ name, source: 'store', config: u.config, record: u.record });
    }
    return out;
  }

  /** Every key, file first then store, each in name order. */
  allKeys(): { key: KeyConfig; source: Source; record?: Stored<KeyRecord> }[] {
    const out: { key: KeyConfig; source: Source; record?: Stored<KeyRecord> }[] = this.config.keys.map((key) => ({ key, source: 'file' }));
    out.sort((a, b) => (a.key.name < b.key.name ? -1 : a.key.name > b.key.name ? 1 : 0));
    for (const name of this.directory.storedKeyNames()) {
      if (this.fileKeyNames.has(name)) continue;
      const k = this.directory.storedKey(name)!;
      out.push({ key: k.config, source: 'store', record: k.record });
    }
    return out;
  }
}
