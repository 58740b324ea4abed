/**
 * The Redis key layout. Every key carries a hash tag naming the one thing it belongs to, so a
 * script that touches one thing's counters stays in one hash slot (Redis Cluster):
 *
 *   {u:<user>}   wallet, spend caps, plan usage per group, user RPM, free calls at zero balance,
 *                the user's concurrency slots (scope user:<name>)
 *   {k:<key>}    key quota and windows, usage totals, per-model day records, last-60-s ring
 *   {g:<group>}  group RPM (shared by every user of the group)
 *   {a:<provider>/<account>}  RPM and concurrency slots of an upstream account (account pools)
 *   {s:<scope>}  concurrency slots of any other scope
 *   {r:<ns>}     remember/recall entries of one namespace
 *   {q}          admission records and done-marker hashes (single Redis; on a cluster they sit in the
 *                hash slot of each part of the request: {k:<key>}, {u:<user>}, {g:<group>})
 *   {i} / {i:<instance>}   the live-instance registry and the data's epoch / one instance's admissions (for the reaper)
 *   {acct}       the accounts: user and key records, digest index, version, change log, audit
 *                (accounts.ts); a user's credit records and top-up Idempotency-Keys are under {u:<user>}
 *   {up}         the health of upstream accounts (cooldowns, disables, times to first token: upstreams.ts)
 *   ledger       the ledger's records until an instance drains them (ledger.ts): one stream on a
 *                single Redis, {q}:ledger; on a cluster one per hash tag that writes records,
 *                {k:<key>}:ledger (settlements) and {u:<user>}:ledger (credits), listed in
 *                {ledger}:streams
 *
 * Key counters sit under the key, not under its user, so they follow the key when the config
 * moves it to another user or group. On a cluster a request's admission and settlement therefore
 * touch up to three slots (key, user, group); see docs/operations.md ("Scale out").
 *
 * Durable (no TTL): wallet, caps, plan, key counters, totals, day records and their index, the
 * ledger streams and their list.
 * Volatile (TTL set by the script that writes them): RPM and free-call minutes, the ring,
 * admission records, done markers, slot leases and queues, the registry, instance indexes,
 * remembered entries, the upstream accounts' health.
 */

/**
 * Config names cannot hold braces; a store user might. Escaped so a name never ends a tag early
 * (nor holds a separator of the packed script arguments, 0x1c-0x1f).
 */
function tagSafe(s: string): string {
  return /[%{}\x1c-\x1f]/.test(s)
    ? s.replace(/[%{}\x1c-\x1f]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`)
    : s;
}

/** Leading characters of a request id that name its done markers' hash (ops.lua `done_field` takes the rest). */
export const DONE_BUCKET = 27;

/** Tags of names seen (users, keys, groups, accounts: bounded by the config), built once each. */
const TAG_CACHE_MAX = 10_000;

export class Keys {
  private readonly tags = new Map<string, string>();

  constructor(readonly prefix: string) {
    // Braces would change a key's hash slot; control characters separate the scripts' packed values.
    if (/[{}\x00-\x1f]/.test(prefix))
      throw new Error(`store prefix ${JSON.stringify(prefix)} must not contain { or } or control characters`);
  }

  private tag(kind: string, name: string): string {
    const id = kind + name;
    let t = this.tags.get(id);
    if (t === undefined) {
      if (this.tags.size >= TAG_CACHE_MAX) this.tags.clear();
      t = kind + tagSafe(name);
      this.tags.set(id, t);
    }
    return t;
  }

  /** `<prefix>{<tag>}:<suffix>` */
  key(tag: string, suffix: string): string {
    return `${this.prefix}{${tag}}:${suffix}`;
  }

  user(user: string): string {
    return this.tag('u:', user);
  }
  apiKey(key: string): string {
    return this.tag('k:', key);
  }
  group(group: string): string {
    return this.tag('g:', group);
  }
  /** An upstream account of a pool: `<provider>/<account>`. */
  account(id: string): string {
    return this.tag('a:', id);
  }
  /** The tag of admission records on a single Redis (any tag would do there). */
  request(_id: string): string {
    return 'q';
  }

  wallet(user: string): string {
    return this.key(this.user(user), 'wallet');
  }
  free(user: string): string {
    return this.key(this.user(user), 'free');
  }
  caps(user: string): string {
    return this.key(this.user(user), 'caps');
  }
  plan(user: string, group: string): string {
    return this.key(this.user(user), `plan:${group}`);
  }
  rpm(scope: 'user' | 'group' | 'account', id: string): string {
    return this.key(scope === 'user' ? this.user(id) : scope === 'group' ? this.group(id) : this.account(id), 'rpm');
  }

  counters(key: string): string {
    return this.key(this.apiKey(key), 'counters');
  }
  totals(key: string): string {
    return this.key(this.apiKey(key), 'totals');
  }
  days(key: string): string {
    return this.key(this.apiKey(key), 'days');
  }
  /** + YYYY-MM-DD: one hash per day, fields `<model>|<counter>`. */
  dayPrefix(key: string): string {
    return this.key(this.apiKey(key), 'day:');
  }
  ring(key: string): string {
    return this.key(this.apiKey(key), 'ring');
  }

  record(tag: string, id: string): string {
    return this.key(tag, `adm:${id}`);
  }
  /**
   * The hash that holds a request's done marker: one hash per DONE_BUCKET leading characters of
   * the request id, the marker a field named by the rest (ops.lua `done_field`). A gateway id is
   * `req_`, a per-process random part and a counter, 12 hex digits each (server.ts), so one hash
   * holds the markers of 16 consecutive requests of one process (and their account-pool
   * attempts), in Redis's compact encoding: about 15 bytes a marker against 161 for a key of its
   * own with its TTL. Hashes of 256 would take 8, but finding a field in that encoding is a scan:
   * +40k instructions of Redis per request (bench/micro/redis-instructions.mjs), against +1k for
   * 16. An id of another shape degrades to a hash a marker (no worse than a key each), never to
   * one hash that keeps growing.
   */
  done(tag: string, id: string): string {
    return this.key(tag, `done:${id.slice(0, DONE_BUCKET)}`);
  }

  registry(): string {
    return this.key('i', 'live');
  }
  /** Names the data of this Redis (live.lua): a new one means Redis lost what it held. */
  epoch(): string {
    return this.key('i', 'epoch');
  }
  index(instance: string): string {
    return this.key(`i:${tagSafe(instance)}`, 'admissions');
  }

  /**
   * The hash tag of a slot scope: a user's slots sit with the user's counters, an account's with its
   * RPM, so an admission takes its slot in the same script (same hash slot) as those claims.
   */
  slotTag(scope: string): string {
    if (scope.startsWith('user:')) return this.user(scope.slice(5));
    if (scope.startsWith('account:')) return this.account(scope.slice(8));
    return this.tag('s:', scope);
  }

  /** The common beginning of a scope's slot keys (lib.lua appends held, queue, waiters, seq, limit). */
  slotBase(scope: string): string {
    return this.key(this.slotTag(scope), 'slot:');
  }

  /** held, queue, waiters, arrival counter, limit */
  slots(scope: string): [string, string, string, string, string] {
    const base = this.slotBase(scope);
    return [`${base}held`, `${base}queue`, `${base}waiters`, `${base}seq`, `${base}limit`];
  }

  remembered(namespace: string, id: string): string {
    return this.key(`r:${tagSafe(namespace)}`, id);
  }

  wakeChannel(): string {
    return `${this.prefix}slot-wake`;
  }

  /** The health of upstream accounts, shared by the pools of every instance (upstreams.ts). */
  upstreamHealth(): string {
    return this.key('up', 'health');
  }

  /** Where cooldowns, disables and enables of upstream accounts are announced (upstreams.ts). */
  upstreamsChannel(): string {
    return `${this.prefix}upstreams`;
  }

  /** Where account writes are announced (accounts.ts). */
  accountsChannel(): string {
    return `${this.prefix}accounts`;
  }

  /** The accounts' keys, all in one hash slot: users, keys, digests, ver, log, audit. */
  accounts(suffix: 'users' | 'keys' | 'digests' | 'ver' | 'log' | 'audit'): string {
    return this.key('acct', suffix);
  }

  /** A user's credit records (a stream). */
  credits(user: string): string {
    return this.key(this.user(user), 'credits');
  }

  /** The ledger stream of records written in `tag`'s hash slot (a cluster's; a single Redis has one, tag `q`). */
  ledger(tag: string): string {
    return this.key(tag, 'ledger');
  }

  /** A cluster's list of its ledger streams (a set), for the drainers. */
  ledgerStreams(): string {
    return this.key('ledger', 'streams');
  }

  /** A top-up's Idempotency-Key, scoped to the user it tops up. */
  idempotency(user: string, key: string): string {
    return this.key(this.user(user), `idem:${key}`);
  }
}
