/**
 * The operator API under /admin/, on only when `server.admin_token` is set, and then only with
 * `Authorization: Bearer <admin_token>`. It carries what the config file cannot: resetting a key's
 * used quota (raising the quota in gateway.yaml needs no command), and a reload on demand.
 *
 *   POST /admin/keys/<key name>/reset-quota   → 200 {"ok":true,"key":…}
 *   GET  /admin/keys/<key name>/usage         → 200 the key's spend, limits, wallet or plan, and usage
 *   POST /admin/reload                        → 200 {"ok":true} | 400 {"ok":false,"errors":[…]}
 *   GET  /admin/accounts                      → 200 {"providers":[{name, accounts:[…]}]}: each upstream
 *        account as this instance sees it (state, cooling until, disabled, in flight, recent TTFT);
 *        never its key. Fields: AccountView in core/pool/index.ts, docs/operations.md.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { timingSafeEqual, createHash } from 'node:crypto';
import { GatewayError, renderError } from '../errors.js';
import type { GatewayConfig } from '../config/types.js';
import type { Store } from '../store/types.js';
import { formatIssue, type ConfigError } from '../config/load.js';
import type { AccountPools } from '../pool/index.js';
import { WINDOWS, WINDOW_MS, type KeyConfig } from '../config/types.js';
import { dayKey } from '../store/types.js';
import { microsToUsd } from '../units.js';
import { counters } from './usage.js';

export interface AdminDeps {
  config: GatewayConfig;
  store: Store;
  pools?: AccountPools;
  reload(): Promise<ConfigError | undefined>;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function fail(res: ServerResponse, err: GatewayError): void {
  const r = renderError(err, 'chat');
  res.writeHead(r.status, { 'content-type': 'application/json', ...r.headers });
  res.end(JSON.stringify(r.body));
}

const digest = (s: string) => createHash('sha256').update(s).digest();

export async function adminHandler(req: IncomingMessage, res: ServerResponse, deps: AdminDeps): Promise<void> {
  req.resume();
  const pathname = new URL(req.url ?? '/', 'http://gateway').pathname;
  const token = deps.config.server.adminToken;
  if (!token) return fail(res, new GatewayError('ROUTE_NOT_FOUND', { message: `No route for ${req.method} ${pathname}` }));
  const auth = req.headers.authorization ?? '';
  const m = /^bearer\s+(.+)$/i.exec(auth);
  if (!m || !timingSafeEqual(digest(m[1].trim()), digest(token))) return fail(res, new GatewayError('UNAUTHORIZED_ADMIN'));
  if (pathname === '/admin/accounts') {
    if (req.method !== 'GET') return fail(res, new GatewayError('METHOD_NOT_ALLOWED'));
    return send(res, 200, deps.pools?.view() ?? { providers: [] });
  }
  const findKey = (name: string) => deps.config.keys.find((k) => k.name === name || k.id === name);
  const usage = /^\/admin\/keys\/([^/]+)\/usage$/.exec(pathname);
  if (usage) {
    if (req.method !== 'GET') return fail(res, new GatewayError('METHOD_NOT_ALLOWED'));
    const name = decodeURIComponent(usage[1]);
    const key = findKey(name);
    if (!key) return fail(res, new GatewayError('ROUTE_NOT_FOUND', { message: `No key named '${name}'` }));
    return send(res, 200, await keyUsage(deps, key));
  }
  if (req.method !== 'POST') return fail(res, new GatewayError('METHOD_NOT_ALLOWED'));

  const reset = /^\/admin\/keys\/([^/]+)\/reset-quota$/.exec(pathname);
  if (reset) {
    const name = decodeURIComponent(reset[1]);
    const key = findKey(name);
    if (!key) return fail(res, new GatewayError('ROUTE_NOT_FOUND', { message: `No key named '${name}'` }));
    await deps.store.resetKeyQuota(key.id);
    return send(res, 200, { ok: true, key: key.id });
  }
  if (pathname === '/admin/reload') {
    const err = await deps.reload();
    if (err) return send(res, 400, { ok: false, errors: err.issues.map((i) => formatIssue(err.file, i)) });
    return send(res, 200, { ok: true });
  }
  return fail(res, new GatewayError('ROUTE_NOT_FOUND', { message: `No route for ${req.method} ${pathname}` }));
}

/** What an operator asks about a key: its limits and what is used of them, the wallet or plan, usage. */
async function keyUsage(deps: AdminDeps, key: KeyConfig): Promise<Record<string, unknown>> {
  const { store, config } = deps;
  const now = Date.now();
  const [state, stats] = await Promise.all([store.keyState(key.id), store.keyStats(key.id, dayKey(now - 30 * 86_400_000), dayKey(now))]);
  const group = key.group ? config.groups[key.group] : undefined;
  const user = config.users[key.user];
  let wallet: Record<string, unknown> | undefined;
  let plan: Record<string, unknown> | undefined;
  if (group?.billing === 'plan') {
    const p = await store.planUsage(key.user, group.name);
    plan = {
      group: group.name,
      daily: { limit: microsToUsd(group.plan.daily), used: microsToUsd(p.daily) },
      weekly: { limit: microsToUsd(group.plan.weekly), used: microsToUsd(p.weekly) },
      monthly: { limit: microsToUsd(group.plan.monthly), used: microsToUsd(p.monthly) },
    };
  } else {
    const spent = await store.balanceSpent(key.user);
    wallet = { credit: microsToUsd(user?.balance ?? 0), spent: microsToUsd(spent), remaining: microsToUsd((user?.balance ?? 0) - spent) };
  }
  return {
    key: key.id,
    user: key.user,
    group: key.group ?? null,
    enabled: key.enabled,
    expires_at: key.expiresAt !== undefined ? new Date(key.expiresAt).toISOString() : null,
    quota: { limit: microsToUsd(key.quota), used: microsToUsd(state.used), reserved: microsToUsd(state.reserved) },
    windows: Object.fromEntries(
      WINDOWS.filter((w) => key.windows[w] > 0).map((w) => {
        const ws = state.windows[w];
        return [
          w,
          {
            limit: microsToUsd(key.windows[w]),
            used: microsToUsd(ws.used),
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
      .map(([model, c]) => ({ model, ...counters(c) })),
  };
}
