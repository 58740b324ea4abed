/**
 * auth: who is calling, and may they use this endpoint.
 *
 * onRequest (identification, headers only), in the spec's check order:
 *   key in the query string → 400 api_key_in_query_deprecated (on every endpoint; never logged)
 *   no credential header → 401 API_KEY_REQUIRED; malformed → 401 INVALID_API_KEY
 *   unknown key → 401 INVALID_API_KEY; duplicate credential headers → 401 INVALID_API_KEY
 *   disabled → 401 API_KEY_DISABLED; no such user → 401 USER_NOT_FOUND; inactive → 401 USER_INACTIVE
 * onAccess (after ip-filter has screened the address):
 *   expired → 403 API_KEY_EXPIRED (not on /v1/usage, which expired keys may read)
 *   no group → 403 permission_error; endpoint not served by the group → 404 / 403 (spec §4 matrix)
 *
 * Credentials: `Authorization: Bearer` (scheme case-insensitive), then `x-api-key`, then
 * `x-goog-api-key` (the neutral `x-alt-api-key` too). A key is looked up by its SHA-256 digest,
 * never compared as a plain string, among the config file's keys and the store's (made through the
 * admin API; `deps.accounts`, synchronous). A stored key is refused with a retryable 503
 * billing_service_error while this instance cannot confirm its copy of the store's keys is current
 * (the store unreachable beyond the bound of docs/accounts.md): a key revoked meanwhile must not be
 * served.
 */
import { definePlugin } from '../../core/plugin.js';
import { GatewayError } from '../../core/errors.js';
import type { RequestContext } from '../../core/context.js';
import { endpointAccess } from '../../core/routing.js';
import { KEY_FORMAT, sha256Hex } from '../../core/accounts/secret.js';
import { authSchema, type AuthOptions } from './schema.js';

const BEARER = /^bearer\s+(.*)$/i;
const ALT_HEADERS = ['x-goog-api-key', 'x-alt-api-key'] as const;

interface Presented {
  values: string[];
}

/** The credential by precedence: the first header present wins; all its values are kept. */
function presented(ctx: RequestContext): Presented | undefined {
  const auth = ctx.headerValues('authorization');
  // The usual case, one `Bearer <key>` header, without the regular expressions below (what they
  // would make of it: the text after "Bearer", trimmed).
  if (auth.length === 1 && auth[0].startsWith('Bearer ')) {
    const v = auth[0].slice(7).trim();
    if (v !== '') return { values: [v] };
  }
  // An empty Authorization (or a bare "Bearer") carries no key: it counts as absent, so a key in
  // x-api-key behind it is still found, and with none anywhere the answer is API_KEY_REQUIRED.
  if (auth.length > 0 && !auth.every((v) => /^(bearer)?$/i.test(v.trim()))) {
    // "Bearer" with nothing after it is a missing key; another scheme is an invalid one.
    const values = auth.map((v) => (/^bearer$/i.test(v.trim()) ? '' : (BEARER.exec(v.trim())?.[1]?.trim() ?? '\u0000')));
    return { values };
  }
  for (const name of ['x-api-key', ...ALT_HEADERS]) {
    const v = ctx.headerValues(name);
    if (v.length > 0) return { values: v.map((x) => x.trim()) };
  }
  return undefined;
}

/** Every comma-separated part of the values, trimmed. */
function splitValues(values: string[]): string[] {
  const out: string[] = [];
  for (const v of values) for (const x of v.split(',')) out.push(x.trim());
  return out;
}

/** A `key` or `api_key` query parameter (a URL is parsed only when there is a query string). */
function keyInQuery(target: string): boolean {
  if (!target.includes('?')) return false;
  const url = new URL(target, 'http://gateway');
  return url.searchParams.has('key') || url.searchParams.has('api_key');
}

export default definePlugin<AuthOptions>({
  name: 'auth',
  description: 'API key authentication and the group endpoint matrix',
  schema: authSchema,
  create(_options, { config, accounts }) {
    return {
      onRequest(ctx) {
        if (keyInQuery(ctx.req.url ?? '/')) throw new GatewayError('API_KEY_IN_QUERY');

        const cred = presented(ctx);
        if (!cred || cred.values.every((v) => v === '')) throw new GatewayError('API_KEY_REQUIRED');
        // Node joins a repeated x-api-key into "a, b": split it back so it counts as a duplicate.
        // (`flatMap` was a third of this hook's time in the gateway's profile: one value without a
        // comma, the usual case, is taken as it is.)
        const values = cred.values.length === 1 && !cred.values[0].includes(',') ? cred.values : splitValues(cred.values);
        const first = values[0];
        if (!KEY_FORMAT.test(first)) throw new GatewayError('INVALID_API_KEY');
        const digest = sha256Hex(first);
        const found = accounts.keyByDigest(digest);
        if (!found) throw new GatewayError('INVALID_API_KEY');
        if (values.length > 1) throw new GatewayError('INVALID_API_KEY', { message: 'More than one API key was sent' });
        if (found.source === 'store' && !accounts.directory.isFresh()) {
          throw new GatewayError('BILLING_SERVICE', { message: 'The key cannot be checked right now, please retry later' });
        }
        const key = found.key;
        if (!key.enabled) throw new GatewayError('API_KEY_DISABLED');
        const user = accounts.user(key.user);
        if (!user) throw new GatewayError('USER_NOT_FOUND');
        if (user.status !== 'active') throw new GatewayError('USER_INACTIVE');
        ctx.key = key;
        ctx.user = user;
      },

      onAccess(ctx) {
        const key = ctx.key!;
        if (key.expiresAt !== undefined && key.expiresAt <= ctx.clock.now() && ctx.route.handler !== 'usage') {
          throw new GatewayError('API_KEY_EXPIRED');
        }
        if (!key.group) throw new GatewayError('NO_GROUP');
        const group = config.groups[key.group];
        // A stored key's group may have left the config since the key was made: as good as none.
        if (!group) throw new GatewayError('NO_GROUP');
        ctx.group = group;
        const access = endpointAccess(group, ctx.route.protocol, ctx.route.handler);
        if (access === 'not_found') throw new GatewayError('ENDPOINT_NOT_SERVED');
        if (access === 'forbidden') throw new GatewayError('MESSAGES_NOT_ALLOWED');
      },
    };
  },
});
