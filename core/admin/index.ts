/**
 * The admin API under /admin/ (docs/accounts.md, the contract in openapi.ts): users, keys,
 * top-ups, plans and the audit trail as data in the store, and operations on the running gateway
 * (reload, upstream accounts, a key's usage, a quota reset).
 *
 * - Off unless a token is configured (`server.admin_token`, named `admin`, and `admin.tokens`):
 *   then every path here is 404. `GET /admin/openapi.json` needs no token.
 * - Authentication: `Authorization: Bearer <token>`, compared by SHA-256 in constant time against
 *   every token's digest; a failure is logged without the token, and an address with more than
 *   `admin.auth_failures_per_minute` failures in the clock minute gets 429 until it ends, whatever
 *   it presents.
 * - Entries the config file declares are read-only here (409 managed_by_config): the file is their
 *   source of truth. Money is the exception: a top-up credits any user's wallet, which lives in the
 *   store for every user.
 * - Every write goes through the store in one atomic step with its audit entry (who: the token's
 *   name; what; before and after, never a secret; when; from where), is logged as one JSON line,
 *   and is made durable before the answer (the memory store fsyncs its journal). This instance then
 *   follows the store's change log at once, so the next request here sees the change; other
 *   instances within the bound of docs/accounts.md.
 * - A record changed by someone else between read and write is re-read and the change applied again
 *   (compare-and-set on its revision), a few times; two creations of one name: one wins, the other
 *   gets 409 conflict.
 * - The store unreachable: 503 store_unavailable, and nothing changed. A top-up that timed out is
 *   safe to retry with the same Idempotency-Key.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import { WINDOWS, WINDOW_MS, type GatewayConfig, type UserConfig, type Window } from '../config/types.js';
import { formatIssue, type ConfigError } from '../config/load.js';
import type { AccountPools } from '../pool/index.js';
import type { AuditInput, KeyRecord, Store, Stored, UserRecord } from '../store/types.js';
import { dayKey } from '../store/types.js';
import { keyConfigOf, type AccountDirectory, type AccountView } from '../accounts/directory.js';
import { KEY_FORMAT, keyHint, newKey, sha256Hex } from '../accounts/secret.js';
import { compileList } from '../client-ip.js';
import { isGatewayError } from '../errors.js';
import { counters } from '../handlers/usage.js';
import {
  OPENAPI,
  CreateKey,
  CreateTopup,
  CreateUser,
  GrantSubscription,
  RotateKey,
  UpdateKey,
  UpdateSubscription,
  UpdateUser,
} from './openapi.js';
import { AdminError, iso, invalid, pageLimit, readJson, sendError, sendJson, time, toUsd, usd, validator } from './http.js';
import { auditRecord, auditView, keyView, topupView, userView } from './views.js';
import * as ledger from './ledger.js';
import type { LedgerReader } from '../ledger/index.js';

const DAY = 86_400_000;
/** Compare-and-set attempts of one write before it answers 409 conflict. */
const CAS_TRIES = 5;
const DEFAULT_QUEUE = { size: 16, maxWaitMs: 30_000 };

export interface AdminDeps {
  /** The config load serving now, and its view of the users and keys. */
  current(): { config: GatewayConfig; accounts: AccountView };
  directory: AccountDirectory;
  store: Store;
  pools?: AccountPools;
  clock: Clock;
  log: Logger;
  reload(): Promise<ConfigError | undefined>;
  /** The ledger's reader, when the gateway keeps a ledger (core/ledger). */
  ledger(): LedgerReader | undefined;
}

interface Call {
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  params: Record<string, string>;
  actor: string;
  ip: string;
  config: GatewayConfig;
  accounts: AccountView;
}

type Handler = (c: Call) => Promise<void>;

interface Route {
  method: string;
  pattern: RegExp;
  handler: Handler;
}

// ---- request bodies -------------------------------------------------------------------------------

type Usd = number | string;
interface UserSettingsIn {
  status?: 'active' | 'inactive';
  note?: string;
  rpm?: number;
  concurrency?: number;
  queue?: { size?: number; max_wait_ms?: number };
  spend_caps?: { weekly_usd?: Usd; monthly_usd?: Usd };
  rates?: Record<string, number>;
}
interface KeySettingsIn {
  group?: string;
  enabled?: boolean;
  quota_usd?: Usd;
  windows_usd?: Partial<Record<Window, Usd>>;
  expires_at?: string | null;
  ip_allow?: string[];
  ip_deny?: string[];
}

const createUser = validator<UserSettingsIn & { name: string }>(CreateUser);
const updateUser = validator<UserSettingsIn>(UpdateUser);
const createTopup = validator<{ amount_usd: Usd; reference: string }>(CreateTopup);
const grantSubscription = validator<{ group: string; expires_at?: string; days?: number }>(GrantSubscription);
const updateSubscription = validator<{ status?: 'active' | 'suspended'; expires_at?: string; extend_days?: number }>(UpdateSubscription);
const createKey = validator<KeySettingsIn & { user: string; group: string; name?: string; key?: string; expires_in_days?: number }>(
  CreateKey,
);
const updateKey = validator<KeySettingsIn>(UpdateKey);
const rotateKey = validator<{ key?: string }>(RotateKey);

const digestOf = (s: string) => createHash('sha256').update(s).digest();

export class AdminApi {
  private readonly routes: Route[] = [];
  /** Failed authentications per client address in the current clock minute. */
  private readonly failures = new Map<string, { minute: number; count: number }>();

  constructor(private readonly deps: AdminDeps) {
    const r = (method: string, path: string, handler: Handler) => {
      const pattern = new RegExp(`^${path.replace(/\{(\w+)\}/g, '(?<$1>[^/]+)')}$`);
      this.routes.push({ method, pattern, handler });
    };
    r('GET', '/admin/users', (c) => this.listUsers(c));
    r('POST', '/admin/users', (c) => this.createUser(c));
    r('GET', '/admin/users/{name}', (c) => this.getUser(c));
    r('PATCH', '/admin/users/{name}', (c) => this.updateUser(c));
    r('GET', '/admin/users/{name}/topups', (c) => this.listTopups(c));
    r('POST', '/admin/users/{name}/topups', (c) => this.topup(c));
    r('POST', '/admin/users/{name}/subscriptions', (c) => this.grant(c));
    r('PATCH', '/admin/users/{name}/subscriptions/{group}', (c) => this.updateSubscription(c));
    r('DELETE', '/admin/users/{name}/subscriptions/{group}', (c) => this.removeSubscription(c));
    r('GET', '/admin/keys', (c) => this.listKeys(c));
    r('POST', '/admin/keys', (c) => this.createKey(c));
    r('GET', '/admin/keys/{name}', (c) => this.getKey(c));
    r('PATCH', '/admin/keys/{name}', (c) => this.updateKey(c));
    r('DELETE', '/admin/keys/{name}', (c) => this.deleteKey(c));
    r('POST', '/admin/keys/{name}/rotate', (c) => this.rotateKey(c));
    r('GET', '/admin/keys/{name}/usage', (c) => this.keyUsage(c));
    r('POST', '/admin/keys/{name}/reset-quota', (c) => this.resetQuota(c));
    r('GET', '/admin/audit', (c) => this.listAudit(c));
    r('GET', '/admin/ledger/summary', (c) => ledger.summary(c.res, c.url, ledger.need(this.deps.ledger()), this.deps.clock.now()));
    r('GET', '/admin/ledger/records', (c) => ledger.records(c.res, c.url, ledger.need(this.deps.ledger()), this.deps.clock.now()));
    r('GET', '/admin/ledger/export', (c) =>
      ledger.exportRecords(c.req, c.res, c.url, ledger.need(this.deps.ledger()), this.deps.clock.now()),
    );
    r('GET', '/admin/ledger/reconcile', (c) =>
      ledger.reconcileRange(
        c.res,
        c.url,
        ledger.need(this.deps.ledger()),
        this.deps.store,
        c.accounts.allKeys().map((k) => k.key.id),
        this.deps.clock.now(),
      ),
    );
    r('POST', '/admin/reload', (c) => this.reload(c));
    r('GET', '/admin/accounts', async (c) =>
      sendJson(c.res, 200, (await this.deps.pools?.view()) ?? { counts: 'this_instance', providers: [] }),
    );
  }

  /** Answers one request under /admin/ (`ip`: the client's address). Throws nothing. */
  async handle(req: IncomingMessage, res: ServerResponse, ip: string): Promise<void> {
    try {
      await this.serve(req, res, ip);
    } catch (e) {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (e instanceof AdminError) return sendError(res, e);
      if (isGatewayError(e) && e.status === 503) {
        return sendError(res, new AdminError('store_unavailable', 'The store is unreachable: nothing was changed; retry later'));
      }
      this.deps.log.error('admin request failed', { error: e as Error, path: req.url });
      sendError(res, new AdminError('internal', 'Internal error'));
    }
  }

  private async serve(req: IncomingMessage, res: ServerResponse, ip: string): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://gateway');
    const { config, accounts } = this.deps.current();
    const tokens = config.admin.tokens;
    if (tokens.length === 0) throw new AdminError('not_found', `No route for ${req.method} ${url.pathname} (the admin API is off)`);
    if (url.pathname === '/admin/openapi.json' && (req.method === 'GET' || req.method === 'HEAD')) {
      req.resume();
      return sendJson(res, 200, OPENAPI);
    }
    const actor = this.authenticate(req, ip, tokens, config.admin.authFailuresPerMinute, url.pathname);
    const matches = this.routes.filter((r) => r.pattern.test(url.pathname));
    if (matches.length === 0) throw new AdminError('not_found', `No route for ${req.method} ${url.pathname}`);
    const route = matches.find((r) => r.method === req.method);
    if (!route) {
      const allow = [...new Set(matches.map((r) => r.method))].join(', ');
      throw new AdminError('method_not_allowed', `Method ${req.method} is not allowed on ${url.pathname} (allowed: ${allow})`, undefined, {
        allow,
      });
    }
    const m = route.pattern.exec(url.pathname)!;
    const params: Record<string, string> = {};
    for (const [k, v] of Object.entries(m.groups ?? {})) {
      try {
        params[k] = decodeURIComponent(v);
      } catch {
        throw invalid(k, 'is not a valid URL component');
      }
    }
    await route.handler({ req, res, url, params, actor, ip, config, accounts });
  }

  /** The token's name, or throws 401 / 429 (see the top). */
  private authenticate(
    req: IncomingMessage,
    ip: string,
    tokens: GatewayConfig['admin']['tokens'],
    perMinute: number,
    path: string,
  ): string {
    const minute = Math.floor(this.deps.clock.now() / 60_000);
    const f = this.failures.get(ip);
    if (f && f.minute === minute && f.count >= perMinute) {
      req.resume();
      const retry = String(Math.max(1, Math.ceil(((minute + 1) * 60_000 - this.deps.clock.now()) / 1000)));
      throw new AdminError('rate_limited', 'Too many failed admin authentications from this address; retry later', undefined, {
        'retry-after': retry,
      });
    }
    const m = /^bearer\s+(.+)$/i.exec(req.headers.authorization ?? '');
    if (m) {
      const presented = digestOf(m[1].trim());
      let found: string | undefined;
      // Every token is compared, so the time taken does not tell which one came close.
      for (const t of tokens) if (timingSafeEqual(presented, Buffer.from(t.digest, 'hex')) && found === undefined) found = t.name;
      if (found !== undefined) return found;
    }
    req.resume();
    if (this.failures.size > 10_000) for (const [k, v] of this.failures) if (v.minute !== minute) this.failures.delete(k);
    if (f && f.minute === minute) f.count++;
    else this.failures.set(ip, { minute, count: 1 });
    this.deps.log.warn('admin authentication failed', { ip, path, method: req.method, presented: m ? 'a wrong token' : 'no token' });
    throw new AdminError('unauthorized', 'Admin token required', undefined, { 'www-authenticate': 'Bearer' });
  }

  // ---- shared steps -----------------------------------------------------------------------------

  private auditInput(c: Call, action: string, target: string, before: unknown, after: unknown): AuditInput {
    return { actor: c.actor, ip: c.ip, method: c.req.method ?? '', path: c.url.pathname, action, target, before, after };
  }

  /** After a write: durable, logged, and seen by this instance's directory at once. */
  private async written(entry: AuditInput & { id?: string; at?: number }): Promise<void> {
    await this.deps.store.flush();
    this.deps.log.info('admin audit', { audit: entry });
    await this.deps.directory.sync().catch(() => undefined);
  }

  private storeUserOrThrow(c: Call, name: string, verb: string): void {
    const source = c.accounts.userSource(name);
    if (source === undefined) throw new AdminError('not_found', `No user named '${name}'`);
    if (source === 'file') {
      throw new AdminError('managed_by_config', `User '${name}' is declared in the config file: ${verb} it there (and reload)`);
    }
  }

  /** Reads a stored record, changes it, writes it back if nobody wrote meanwhile (retries); the written record. */
  private async change<K extends 'user' | 'key'>(
    c: Call,
    kind: K,
    name: string,
    action: string,
    edit: (current: K extends 'user' ? UserRecord : KeyRecord) => (K extends 'user' ? UserRecord : KeyRecord) | null,
  ): Promise<Stored<K extends 'user' ? UserRecord : KeyRecord> | null> {
    type R = K extends 'user' ? UserRecord : KeyRecord;
    for (let i = 0; i < CAS_TRIES; i++) {
      const cur: Stored<R> | undefined = await this.deps.store.getAccount<K>(kind, name);
      if (!cur) throw new AdminError('not_found', `No ${kind} named '${name}'`);
      const next = edit(structuredClone(cur.value));
      if (next !== null) next.updatedAt = this.deps.clock.now();
      const audit = this.auditInput(c, action, `${kind}:${name}`, auditRecord(cur.value), auditRecord(next));
      const w = await this.deps.store.writeAccount({ kind, name, value: next, expectRev: cur.rev, audit });
      if (w.ok) {
        await this.written(w.audit);
        return next === null ? null : { value: next, rev: w.rev };
      }
      if (w.reason === 'digest_taken') throw new AdminError('conflict', 'That key is already in use');
    }
    throw new AdminError('conflict', `The ${kind} '${name}' kept changing meanwhile; read it again and retry`);
  }

  private async sendUser(c: Call, name: string, status = 200): Promise<void> {
    const u = c.accounts.user(name);
    if (!u) throw new AdminError('not_found', `No user named '${name}'`);
    const wallet = await this.deps.store.wallet(name);
    const keys = c.accounts
      .allKeys()
      .filter((k) => k.key.user === name)
      .map((k) => k.key.name);
    const record = c.accounts.userSource(name) === 'store' ? c.accounts.directory.storedUser(name)?.record : undefined;
    sendJson(c.res, status, userView(u, c.accounts.userSource(name)!, record, wallet, keys, this.deps.clock.now()));
  }

  // ---- users ------------------------------------------------------------------------------------

  private async listUsers(c: Call): Promise<void> {
    await this.deps.directory.sync().catch(() => undefined);
    const q = c.url.searchParams;
    const limit = pageLimit(q.get('limit'));
    const status = q.get('status');
    const source = q.get('source');
    const text = q.get('q')?.toLowerCase();
    const cursor = q.get('cursor');
    if (status !== null && status !== 'active' && status !== 'inactive') throw invalid('status', 'must be active or inactive');
    if (source !== null && source !== 'file' && source !== 'store') throw invalid('source', 'must be file or store');
    const all = c.accounts
      .allUsers()
      .filter((u) => (status === null || u.config.status === status) && (source === null || u.source === source))
      .filter((u) => !text || u.name.toLowerCase().includes(text) || (u.record?.value.note ?? '').toLowerCase().includes(text))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .filter((u) => cursor === null || u.name > cursor);
    const page = all.slice(0, limit);
    const keysOf = new Map<string, string[]>();
    for (const k of c.accounts.allKeys()) keysOf.set(k.key.user, [...(keysOf.get(k.key.user) ?? []), k.key.name]);
    const wallets = await Promise.all(page.map((u) => this.deps.store.wallet(u.name)));
    const now = this.deps.clock.now();
    sendJson(c.res, 200, {
      data: page.map((u, i) => userView(u.config, u.source, u.record, wallets[i], keysOf.get(u.name) ?? [], now)),
      next_cursor: all.length > limit ? page[page.length - 1].name : null,
    });
  }

  private async getUser(c: Call): Promise<void> {
    await this.deps.directory.sync().catch(() => undefined);
    await this.sendUser(c, c.params.name);
  }

  private userSettings(c: Call, b: UserSettingsIn, into: UserRecord): UserRecord {
    if (b.status !== undefined) into.status = b.status;
    if (b.note !== undefined) into.note = b.note;
    if (b.rpm !== undefined) into.rpm = b.rpm;
    if (b.concurrency !== undefined) into.concurrency = b.concurrency;
    if (b.queue?.size !== undefined) into.queue.size = b.queue.size;
    if (b.queue?.max_wait_ms !== undefined) into.queue.maxWaitMs = b.queue.max_wait_ms;
    if (b.spend_caps?.weekly_usd !== undefined) into.spendCaps.weekly = usd(b.spend_caps.weekly_usd, '/spend_caps/weekly_usd', { min: 0 });
    if (b.spend_caps?.monthly_usd !== undefined)
      into.spendCaps.monthly = usd(b.spend_caps.monthly_usd, '/spend_caps/monthly_usd', { min: 0 });
    if (b.rates !== undefined) {
      const rates: Record<string, number> = {};
      for (const [g, m] of Object.entries(b.rates)) {
        if (!Object.prototype.hasOwnProperty.call(c.config.groups, g)) throw invalid(`/rates/${g}`, `group '${g}' is not defined`);
        rates[g] = usd(m, `/rates/${g}`, { min: 0 }); // a multiplier with 6 places is ppm, as USD is micro-USD
      }
      into.rates = rates;
    }
    return into;
  }

  private async createUser(c: Call): Promise<void> {
    const b = createUser(await readJson(c.req));
    if (c.accounts.userSource(b.name) === 'file') {
      throw new AdminError('managed_by_config', `User '${b.name}' is declared in the config file; choose another name`);
    }
    const now = this.deps.clock.now();
    const record = this.userSettings(c, b, {
      name: b.name,
      status: 'active',
      rpm: 0,
      concurrency: 0,
      queue: { ...DEFAULT_QUEUE },
      spendCaps: { weekly: 0, monthly: 0 },
      rates: {},
      subscriptions: [],
      createdAt: now,
      updatedAt: now,
    });
    const w = await this.deps.store.writeAccount({
      kind: 'user',
      name: b.name,
      value: record,
      expectRev: 0,
      audit: this.auditInput(c, 'user.create', `user:${b.name}`, null, record),
    });
    if (!w.ok) throw new AdminError('conflict', `A user named '${b.name}' exists`);
    await this.written(w.audit);
    await this.sendUser(c, b.name, 201);
  }

  private async updateUser(c: Call): Promise<void> {
    const name = c.params.name;
    const b = updateUser(await readJson(c.req));
    this.storeUserOrThrow(c, name, 'change');
    await this.change(c, 'user', name, 'user.update', (u) => this.userSettings(c, b, u));
    await this.sendUser(c, name);
  }

  // ---- top-ups ------------------------------------------------------------------------------------

  private async topup(c: Call): Promise<void> {
    const name = c.params.name;
    const header = c.req.headers['idempotency-key'];
    const key = Array.isArray(header) ? header[0] : header;
    if (key === undefined) {
      c.req.resume();
      throw new AdminError(
        'idempotency_key_required',
        'Send an Idempotency-Key header (1 to 200 characters, e.g. the payment id), so that a retry never credits twice',
      );
    }
    if (key.length < 1 || key.length > 200 || key.trim() !== key) {
      c.req.resume();
      throw invalid('Idempotency-Key', 'must be 1 to 200 characters with no surrounding spaces');
    }
    const b = createTopup(await readJson(c.req));
    const amount = usd(b.amount_usd, '/amount_usd');
    if (amount === 0) throw invalid('/amount_usd', 'must not be 0');
    const user = c.accounts.user(name);
    if (!user) throw new AdminError('not_found', `No user named '${name}'`);
    const fingerprint = createHash('sha256')
      .update(JSON.stringify([name, amount, b.reference]))
      .digest('hex');
    const r = await this.deps.store.credit({
      user: name,
      amount,
      baseCredit: user.balance,
      reference: b.reference,
      idempotency: { key, fingerprint },
      audit: this.auditInput(c, amount > 0 ? 'topup' : 'topup.correction', `user:${name}`, null, {
        amount_usd: toUsd(amount),
        reference: b.reference,
        idempotency_key: key,
      }),
    });
    if (!r.ok) {
      if (r.reason === 'idempotency_conflict') {
        throw new AdminError(
          'idempotency_conflict',
          'This Idempotency-Key was used for another top-up (another user, amount or reference)',
        );
      }
      throw new AdminError('below_zero', `A correction of ${toUsd(-amount)} USD would leave the balance below zero`);
    }
    if (!r.replayed) {
      await this.deps.store.flush();
      this.deps.log.info('admin audit', {
        audit: this.auditInput(c, 'topup', `user:${name}`, null, { amount_usd: toUsd(amount), reference: b.reference, id: r.record.id }),
      });
    }
    sendJson(c.res, 201, topupView(r.record, user.balance), r.replayed ? { 'idempotent-replayed': 'true' } : {});
  }

  private async listTopups(c: Call): Promise<void> {
    const name = c.params.name;
    const user = c.accounts.user(name);
    if (!user) throw new AdminError('not_found', `No user named '${name}'`);
    const limit = pageLimit(c.url.searchParams.get('limit'));
    const cursor = c.url.searchParams.get('cursor') ?? undefined;
    if (cursor !== undefined && !/^\d+-\d+$/.test(cursor)) throw invalid('cursor', 'is not a cursor this API gave');
    const list = await this.deps.store.credits(name, { limit: limit + 1, before: cursor });
    const page = list.slice(0, limit);
    sendJson(c.res, 200, {
      data: page.map((r) => topupView(r, user.balance)),
      next_cursor: list.length > limit ? page[page.length - 1].id : null,
    });
  }

  // ---- subscriptions ------------------------------------------------------------------------------

  private planGroup(c: Call, group: string, path: string): void {
    const g = c.config.groups[group];
    if (!g) throw invalid(path, `group '${group}' is not defined`);
    if (g.billing !== 'plan') throw invalid(path, `group '${group}' is not a plan group (billing: plan)`);
  }

  private async grant(c: Call): Promise<void> {
    const name = c.params.name;
    const b = grantSubscription(await readJson(c.req));
    this.planGroup(c, b.group, '/group');
    if (b.expires_at !== undefined && b.days !== undefined) throw invalid('/days', 'give expires_at or days, not both');
    const now = this.deps.clock.now();
    const expiresAt = b.expires_at !== undefined ? time(b.expires_at, '/expires_at') : now + (b.days ?? 30) * DAY;
    this.storeUserOrThrow(c, name, 'change its plans');
    await this.change(c, 'user', name, 'subscription.grant', (u) => {
      u.subscriptions = [...u.subscriptions.filter((s) => s.group !== b.group), { group: b.group, expiresAt, status: 'active' }];
      return u;
    });
    await this.sendUser(c, name, 201);
  }

  private async updateSubscription(c: Call): Promise<void> {
    const { name, group } = c.params;
    const b = updateSubscription(await readJson(c.req));
    if (b.expires_at !== undefined && b.extend_days !== undefined)
      throw invalid('/extend_days', 'give expires_at or extend_days, not both');
    const expiresAt = b.expires_at !== undefined ? time(b.expires_at, '/expires_at') : undefined;
    this.storeUserOrThrow(c, name, 'change its plans');
    const now = this.deps.clock.now();
    await this.change(c, 'user', name, b.status === 'suspended' ? 'subscription.suspend' : 'subscription.update', (u) => {
      const s = u.subscriptions.find((x) => x.group === group);
      if (!s) throw new AdminError('not_found', `User '${name}' has no subscription to '${group}'`);
      if (b.status !== undefined) s.status = b.status;
      if (expiresAt !== undefined) s.expiresAt = expiresAt;
      if (b.extend_days !== undefined) s.expiresAt = Math.max(now, s.expiresAt) + b.extend_days * DAY;
      return u;
    });
    await this.sendUser(c, name);
  }

  private async removeSubscription(c: Call): Promise<void> {
    const { name, group } = c.params;
    c.req.resume();
    this.storeUserOrThrow(c, name, 'change its plans');
    await this.change(c, 'user', name, 'subscription.remove', (u) => {
      if (!u.subscriptions.some((s) => s.group === group))
        throw new AdminError('not_found', `User '${name}' has no subscription to '${group}'`);
      u.subscriptions = u.subscriptions.filter((s) => s.group !== group);
      return u;
    });
    await this.sendUser(c, name);
  }

  // ---- keys ---------------------------------------------------------------------------------------

  private findKey(c: Call, name: string) {
    const k = c.accounts.keyByName(name);
    if (!k) throw new AdminError('not_found', `No key named '${name}'`);
    return k;
  }

  private storeKeyOrThrow(c: Call, name: string, verb: string): void {
    const k = this.findKey(c, name);
    if (k.source === 'file')
      throw new AdminError('managed_by_config', `Key '${name}' is declared in the config file: ${verb} it there (and reload)`);
  }

  private keySettings(c: Call, b: KeySettingsIn, into: KeyRecord): KeyRecord {
    if (b.group !== undefined) {
      if (!Object.prototype.hasOwnProperty.call(c.config.groups, b.group)) throw invalid('/group', `group '${b.group}' is not defined`);
      into.group = b.group;
    }
    if (b.enabled !== undefined) into.enabled = b.enabled;
    if (b.quota_usd !== undefined) into.quota = usd(b.quota_usd, '/quota_usd', { min: 0 });
    for (const w of WINDOWS) {
      const v = b.windows_usd?.[w];
      if (v !== undefined) into.windows[w] = usd(v, `/windows_usd/${w}`, { min: 0 });
    }
    if (b.expires_at !== undefined) {
      if (b.expires_at === null) delete into.expiresAt;
      else into.expiresAt = time(b.expires_at, '/expires_at');
    }
    for (const [field, list] of [
      ['ip_allow', b.ip_allow],
      ['ip_deny', b.ip_deny],
    ] as const) {
      if (list === undefined) continue;
      try {
        compileList(list, field);
      } catch (e) {
        throw invalid(`/${field}`, (e as Error).message.replace(`${field}: `, ''));
      }
      if (field === 'ip_allow') into.ipAllow = list.map((s) => s.trim());
      else into.ipDeny = list.map((s) => s.trim());
    }
    return into;
  }

  /** A new secret (or the given one), checked against every key the gateway serves. */
  private secret(c: Call, given: string | undefined): { key: string; digest: string } {
    const key = given ?? newKey();
    if (!KEY_FORMAT.test(key) || key.length > 256) {
      throw invalid('/key', 'must be sk- and 64 hex, or 16 to 256 letters, digits, _ and -');
    }
    const digest = sha256Hex(key);
    if (c.accounts.keyByDigest(digest)) throw new AdminError('conflict', 'That key is already in use');
    return { key, digest };
  }

  private async listKeys(c: Call): Promise<void> {
    await this.deps.directory.sync().catch(() => undefined);
    const q = c.url.searchParams;
    const limit = pageLimit(q.get('limit'));
    const [user, group, enabled, source, cursor] = ['user', 'group', 'enabled', 'source', 'cursor'].map((n) => q.get(n));
    if (enabled !== null && enabled !== 'true' && enabled !== 'false') throw invalid('enabled', 'must be true or false');
    if (source !== null && source !== 'file' && source !== 'store') throw invalid('source', 'must be file or store');
    const all = c.accounts
      .allKeys()
      .filter(
        (k) =>
          (user === null || k.key.user === user) &&
          (group === null || k.key.group === group) &&
          (enabled === null || String(k.key.enabled) === enabled) &&
          (source === null || k.source === source),
      )
      .sort((a, b) => (a.key.name < b.key.name ? -1 : a.key.name > b.key.name ? 1 : 0))
      .filter((k) => cursor === null || k.key.name > cursor);
    const page = all.slice(0, limit);
    sendJson(c.res, 200, {
      data: page.map((k) => keyView(k.key, k.source, k.record)),
      next_cursor: all.length > limit ? page[page.length - 1].key.name : null,
    });
  }

  private async getKey(c: Call): Promise<void> {
    await this.deps.directory.sync().catch(() => undefined);
    const k = this.findKey(c, c.params.name);
    sendJson(c.res, 200, keyView(k.key, k.source, k.record));
  }

  private async createKey(c: Call): Promise<void> {
    const b = createKey(await readJson(c.req));
    if (!c.accounts.user(b.user)) throw invalid('/user', `no user named '${b.user}'`);
    const { key, digest } = this.secret(c, b.key);
    const name = b.name ?? `key-${digest.slice(0, 12)}`;
    if (c.accounts.fileKeyNames.has(name))
      throw new AdminError('managed_by_config', `Key '${name}' is declared in the config file; choose another name`);
    const now = this.deps.clock.now();
    const record = this.keySettings(c, b, {
      name,
      digest,
      hint: keyHint(key),
      user: b.user,
      enabled: true,
      quota: 0,
      windows: { '5h': 0, '1d': 0, '7d': 0 },
      ipAllow: [],
      ipDeny: [],
      createdAt: now,
      updatedAt: now,
    });
    if (b.expires_in_days !== undefined) {
      if (b.expires_at !== undefined) throw invalid('/expires_in_days', 'give expires_at or expires_in_days, not both');
      record.expiresAt = now + b.expires_in_days * DAY;
    }
    const w = await this.deps.store.writeAccount({
      kind: 'key',
      name,
      value: record,
      expectRev: 0,
      audit: this.auditInput(c, 'key.create', `key:${name}`, null, auditRecord(record)),
    });
    if (!w.ok)
      throw new AdminError('conflict', w.reason === 'digest_taken' ? 'That key is already in use' : `A key named '${name}' exists`);
    await this.written(w.audit);
    sendJson(c.res, 201, { ...keyView(keyConfigOf(record), 'store', { value: record, rev: w.rev }), key });
  }

  private async updateKey(c: Call): Promise<void> {
    const name = c.params.name;
    const b = updateKey(await readJson(c.req));
    this.storeKeyOrThrow(c, name, 'change');
    const written = await this.change(c, 'key', name, b.enabled === false ? 'key.disable' : 'key.update', (k) => this.keySettings(c, b, k));
    sendJson(c.res, 200, keyView(keyConfigOf(written!.value), 'store', written!));
  }

  private async rotateKey(c: Call): Promise<void> {
    const name = c.params.name;
    const body = await readJson(c.req);
    const b = body === undefined ? {} : rotateKey(body);
    this.storeKeyOrThrow(c, name, 'rotate');
    const { key, digest } = this.secret(c, b.key);
    const written = await this.change(c, 'key', name, 'key.rotate', (k) => ({ ...k, digest, hint: keyHint(key) }));
    sendJson(c.res, 200, { ...keyView(keyConfigOf(written!.value), 'store', written!), key });
  }

  private async deleteKey(c: Call): Promise<void> {
    const name = c.params.name;
    c.req.resume();
    this.storeKeyOrThrow(c, name, 'remove');
    await this.change(c, 'key', name, 'key.delete', () => null);
    c.res.writeHead(204, { 'cache-control': 'no-store' });
    c.res.end();
  }

  private async resetQuota(c: Call): Promise<void> {
    c.req.resume();
    const k = this.findKey(c, c.params.name);
    await this.deps.store.resetKeyQuota(k.key.id);
    const entry = await this.deps.store.appendAudit(this.auditInput(c, 'key.reset-quota', `key:${k.key.name}`, null, null));
    await this.written(entry);
    sendJson(c.res, 200, { ok: true, key: k.key.id });
  }

  /** What an operator asks about a key: its limits and what is used of them, the wallet or plan, usage. */
  private async keyUsage(c: Call): Promise<void> {
    c.req.resume();
    const { key } = this.findKey(c, c.params.name);
    const { store, clock } = this.deps;
    const now = clock.now();
    const [state, stats] = await Promise.all([store.keyState(key.id), store.keyStats(key.id, dayKey(now - 30 * DAY), dayKey(now))]);
    const group = key.group ? c.config.groups[key.group] : undefined;
    const user: UserConfig | undefined = c.accounts.user(key.user);
    let wallet: Record<string, unknown> | undefined;
    let plan: Record<string, unknown> | undefined;
    if (group?.billing === 'plan') {
      const p = await store.planUsage(key.user, group.name);
      plan = {
        group: group.name,
        daily: { limit: toUsd(group.plan.daily), used: toUsd(p.daily) },
        weekly: { limit: toUsd(group.plan.weekly), used: toUsd(p.weekly) },
        monthly: { limit: toUsd(group.plan.monthly), used: toUsd(p.monthly) },
      };
    } else {
      const w = await store.wallet(key.user);
      const credit = (user?.balance ?? 0) + w.credit;
      wallet = { credit: toUsd(credit), spent: toUsd(w.spent), remaining: toUsd(credit - w.spent) };
    }
    sendJson(c.res, 200, {
      key: key.id,
      user: key.user,
      group: key.group ?? null,
      enabled: key.enabled,
      expires_at: iso(key.expiresAt),
      quota: { limit: toUsd(key.quota), used: toUsd(state.used), reserved: toUsd(state.reserved) },
      windows: Object.fromEntries(
        WINDOWS.filter((w) => key.windows[w] > 0).map((w) => {
          const ws = state.windows[w];
          return [
            w,
            {
              limit: toUsd(key.windows[w]),
              used: toUsd(ws.used),
              reset_at: ws.start !== undefined ? new Date(ws.start + WINDOW_MS[w]).toISOString() : null,
            },
          ];
        }),
      ),
      ...(wallet ? { balance: wallet } : {}),
      ...(plan ? { plan } : {}),
      usage: { today: counters(stats.today), total: counters(stats.total), rpm: stats.rpm, tpm: stats.tpm },
      model_stats: Object.entries(stats.byModel)
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([model, s]) => ({ model, ...counters(s) })),
    });
  }

  // ---- audit and operations -----------------------------------------------------------------------

  private async listAudit(c: Call): Promise<void> {
    const q = c.url.searchParams;
    const limit = pageLimit(q.get('limit'));
    const cursor = q.get('cursor') ?? undefined;
    if (cursor !== undefined && !/^\d+-\d+$/.test(cursor)) throw invalid('cursor', 'is not a cursor this API gave');
    const since = q.get('since');
    const until = q.get('until');
    const entries = await this.deps.store.readAudit({
      limit: limit + 1,
      before: cursor,
      actor: q.get('actor') ?? undefined,
      target: q.get('target') ?? undefined,
      since: since === null ? undefined : time(since, 'since'),
      until: until === null ? undefined : time(until, 'until'),
    });
    const page = entries.slice(0, limit);
    sendJson(c.res, 200, { data: page.map(auditView), next_cursor: entries.length > limit ? page[page.length - 1].id : null });
  }

  private async reload(c: Call): Promise<void> {
    c.req.resume();
    const err = await this.deps.reload();
    const entry = await this.deps.store
      .appendAudit(this.auditInput(c, err ? 'config.reload.rejected' : 'config.reload', 'config', null, null))
      .catch(() => undefined);
    if (entry) this.deps.log.info('admin audit', { audit: entry });
    if (err) return sendJson(c.res, 400, { ok: false, errors: err.issues.map((i) => formatIssue(err.file, i)) });
    sendJson(c.res, 200, { ok: true });
  }
}
