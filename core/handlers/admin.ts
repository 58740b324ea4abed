/**
 * The operator API under /admin/, on only when `server.admin_token` is set, and then only with
 * `Authorization: Bearer <admin_token>`. It carries what the config file cannot: resetting a key's
 * used quota (raising the quota in gateway.yaml needs no command), and a reload on demand.
 *
 *   POST /admin/keys/<key name>/reset-quota   → 200 {"ok":true,"key":…}
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
  if (req.method !== 'POST') return fail(res, new GatewayError('METHOD_NOT_ALLOWED'));

  const reset = /^\/admin\/keys\/([^/]+)\/reset-quota$/.exec(pathname);
  if (reset) {
    const name = decodeURIComponent(reset[1]);
    const key = deps.config.keys.find((k) => k.name === name || k.id === name);
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
