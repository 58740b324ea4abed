/**
 * The Redis key layout. Every key carries a hash tag naming the one thing it belongs to, so a
 * script that touches one thing's counters stays in one hash slot (Redis Cluster):
 *
 *   {u:<user>}   wallet, spend caps, plan usage per group, user RPM, free calls at zero balance
 *   {k:<key>}    key quota and windows, usage totals, per-model day records, last-60-s ring
 *   {g:<group>}  group RPM (shared by every user of the group)
 *   {a:<provider>/<account>}  RPM of an upstream account (account pools)
 *   {s:<scope>}  concurrency slots of a scope (user:<name>, account:<provider>/<account>)
 *   {r:<ns>}     remember/recall entries of one namespace
 *   {q:<id>}     a request's admission record and done marker (single Redis)
 *   {i} / {i:<instance>}   the live-instance registry / one instance's admissions (for the reaper)
 *
 * Key counters sit under the key, not under its user, so they follow the key when the config
 * moves it to another user or group. On a cluster a request's admission and settlement therefore
 * touch up to three slots (key, user, group); see docs/operations.md ("Scale out").
 *
 * Durable (no TTL): wallet, caps, plan, key counters, totals, day records and their index.
 * Volatile (TTL set by the script that writes them): RPM and free-call minutes, the ring,
 * admission records, done markers, slot leases and queues, the registry, instance indexes,
 * remembered entries.
 */

/** Config names cannot hold braces; a store user might. Escaped so a name never ends a tag early. */
function tagSafe(s: string): string {
  return s.replace(/[%{}]/g, (c) => (c === '%' ? '%25' : c === '{' ? '%7B' : '%7D'));
}

export class Keys {
  constructor(readonly prefix: string) {
    if (/[{}]/.test(prefix)) throw new Error(`store prefix '${prefix}' must not contain { or }`);
  }

  /** `<prefix>{<tag>}:<suffix>` */
  key(tag: string, suffix: string): string {
    return `${this.prefix}{${tag}}:${suffix}`;
  }

  user(user: string): string {
    return `u:${tagSafe(user)}`;
  }
  apiKey(key: string): string {
    return `k:${tagSafe(key)}`;
  }
  group(group: string): string {
    return `g:${tagSafe(group)}`;
  }
  /** An upstream account of a pool: `<provider>/<account>`. */
  account(id: string): string {
    return `a:${tagSafe(id)}`;
  }
  request(id: string): string {
    return `q:${tagSafe(id)}`;
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
  done(tag: string, id: string): string {
    return this.key(tag, `done:${id}`);
  }

  registry(): string {
    return this.key('i', 'live');
  }
  index(instance: string): string {
    return this.key(`i:${tagSafe(instance)}`, 'admissions');
  }

  /** held, queue, waiters, arrival counter, limit */
  slots(scope: string): [string, string, string, string, string] {
    const tag = `s:${tagSafe(scope)}`;
    return [this.key(tag, 'held'), this.key(tag, 'queue'), this.key(tag, 'waiters'), this.key(tag, 'seq'), this.key(tag, 'limit')];
  }

  remembered(namespace: string, id: string): string {
    return this.key(`r:${tagSafe(namespace)}`, id);
  }

  wakeChannel(): string {
    return `${this.prefix}slot-wake`;
  }
}
