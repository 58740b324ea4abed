/**
 * The one error catalogue. Every error the gateway sends — its status, its code or type, its
 * message, whether clients should retry it and whether it carries `Retry-After` — comes from an
 * entry here. Code elsewhere throws `new GatewayError(id, …)`; nothing else builds error bodies.
 *
 * Body formats (spec §7.1):
 *  - `flat`      `{code, message}`                               key, account, balance, quota and plan problems
 *  - `messages`  `{type:"error", error:{type, message}}`          Messages endpoints, chat-only 404s, missing group
 *  - `chat`      `{error:{type, code, message, param}}`           Chat Completions, Responses on Responses-style groups
 *  - `responses-lite` `{error:{code, message}}`                    Responses on Messages-style groups
 * An entry with a fixed `format` always renders that way; the others follow the route's format
 * (decided by the client protocol and the key's group, see `ErrorFormat`). Flat bodies also carry
 * an `error: {type, code, message}` object with the same meaning, so OpenAI-shaped clients (which
 * read `error.message`) can show it; `code` and `message` stay at the top level as the contract says.
 *
 * Retry signal (wire-notes "Retry signals"): the official SDKs retry 408, 409, 429 and every 5xx
 * unless told `x-should-retry: false`. Whether an error is retryable is derived, never flagged
 * by hand: every 4xx but 408 and 429 is final by its status; a 429 or 5xx is final when its
 * `category` says so (a limit used up, a model not served). `x-should-retry: true` is never sent:
 * where a retry helps, the clients' own backoff is the right behaviour.
 */

export type ErrorFormat = 'flat' | 'messages' | 'chat' | 'responses-lite';

/**
 * What kind of failure an entry is; with the status it decides the retry signal (`isRetryable`).
 *  - `request`     the request itself is wrong (400, 404, 405, 409, 413)            final
 *  - `credential`  the key or account cannot be used (401)                          final
 *  - `denied`      not allowed: IP rule, expiry, group, balance, plan, policy (403)  final
 *  - `exhausted`   a limit used up until it resets or is raised (quota, windows, plan, spend cap)  final
 *  - `unserved`    the model is not served here, or cannot be priced (503 no accounts, no pricing)  final
 *  - `throttled`   too many requests right now (RPM, queue, a provider's 429)        retry
 *  - `transient`   a failure that may pass (upstream 5xx, overload, no channel now, billing service, internal)  retry
 */
export type ErrorCategory = 'request' | 'credential' | 'denied' | 'exhausted' | 'unserved' | 'throttled' | 'transient';

export interface CatalogueEntry {
  status: number;
  /** `error.type` in protocol formats; unused by flat entries. */
  type: string;
  /** `code` of flat bodies and `error.code` of the chat / responses-lite bodies. */
  code: string;
  /** Default message; a thrower may pass a more specific one. */
  message: string;
  /** A fixed body format, whatever the endpoint. */
  format?: ErrorFormat;
  /** Required: decides, with the status, whether clients are told not to retry (`isRetryable`). */
  category: ErrorCategory;
  /** The thrower must give `retryAfter` seconds; it is sent as `Retry-After` (+ `retry-after-ms`). */
  retryAfter?: boolean;
}

function entry(e: CatalogueEntry): CatalogueEntry {
  return Object.freeze(e);
}

export const CATALOGUE = Object.freeze({
  // ---- key check (flat, spec §7.3) -------------------------------------------------------
  API_KEY_IN_QUERY: entry({
    category: 'request',
    status: 400,
    type: 'invalid_request_error',
    code: 'api_key_in_query_deprecated',
    format: 'flat',
    message: 'API keys in the query string are not accepted; send the key in the Authorization, x-api-key or x-goog-api-key header',
  }),
  API_KEY_REQUIRED: entry({
    category: 'credential',
    status: 401,
    type: 'authentication_error',
    code: 'API_KEY_REQUIRED',
    format: 'flat',
    message: 'API key is required',
  }),
  INVALID_API_KEY: entry({
    category: 'credential',
    status: 401,
    type: 'authentication_error',
    code: 'INVALID_API_KEY',
    format: 'flat',
    message: 'Invalid API key',
  }),
  API_KEY_DISABLED: entry({
    category: 'credential',
    status: 401,
    type: 'authentication_error',
    code: 'API_KEY_DISABLED',
    format: 'flat',
    message: 'API key is disabled',
  }),
  USER_NOT_FOUND: entry({
    category: 'credential',
    status: 401,
    type: 'authentication_error',
    code: 'USER_NOT_FOUND',
    format: 'flat',
    message: 'User not found',
  }),
  USER_INACTIVE: entry({
    category: 'credential',
    status: 401,
    type: 'authentication_error',
    code: 'USER_INACTIVE',
    format: 'flat',
    message: 'User is not active',
  }),
  ACCESS_DENIED: entry({
    category: 'denied',
    status: 403,
    type: 'permission_error',
    code: 'ACCESS_DENIED',
    format: 'flat',
    message: 'Access denied',
  }),
  API_KEY_EXPIRED: entry({
    category: 'denied',
    status: 403,
    type: 'permission_error',
    code: 'API_KEY_EXPIRED',
    format: 'flat',
    message: 'API key has expired',
  }),
  INSUFFICIENT_BALANCE: entry({
    category: 'denied',
    status: 403,
    type: 'billing_error',
    code: 'INSUFFICIENT_BALANCE',
    format: 'flat',
    message: 'Insufficient balance',
  }),
  SUBSCRIPTION_NOT_FOUND: entry({
    category: 'denied',
    status: 403,
    type: 'permission_error',
    code: 'SUBSCRIPTION_NOT_FOUND',
    format: 'flat',
    message: 'No active subscription for this group',
  }),
  SUBSCRIPTION_INVALID: entry({
    category: 'denied',
    status: 403,
    type: 'permission_error',
    code: 'SUBSCRIPTION_INVALID',
    format: 'flat',
    message: 'Subscription is not valid for this request',
  }),
  API_KEY_QUOTA_EXHAUSTED: entry({
    category: 'exhausted',
    status: 429,
    type: 'rate_limit_error',
    code: 'API_KEY_QUOTA_EXHAUSTED',
    format: 'flat',
    message: 'API key quota exhausted',
  }),
  USAGE_LIMIT_EXCEEDED: entry({
    category: 'exhausted',
    status: 429,
    type: 'rate_limit_error',
    code: 'USAGE_LIMIT_EXCEEDED',
    format: 'flat',
    message: 'Plan usage limit exceeded',
  }),

  // ---- request and routing (protocol formats, spec §7.4) -----------------------------------
  INVALID_REQUEST: entry({
    category: 'request',
    status: 400,
    type: 'invalid_request_error',
    code: 'invalid_request_error',
    message: 'Invalid request',
  }),
  SPEND_CAP_REACHED: entry({
    category: 'exhausted',
    status: 402,
    type: 'spend_cap_reached',
    code: 'spend_cap_reached',
    retryAfter: true,
    message: 'Account spend cap reached',
  }),
  BILLING_ERROR: entry({
    category: 'denied',
    status: 403,
    type: 'billing_error',
    code: 'insufficient_balance',
    message: 'Insufficient balance for this model',
  }),
  NO_GROUP: entry({
    category: 'denied',
    status: 403,
    type: 'permission_error',
    code: 'permission_error',
    format: 'messages',
    message: 'API key is not assigned to any group',
  }),
  MESSAGES_NOT_ALLOWED: entry({
    category: 'denied',
    status: 403,
    type: 'permission_error',
    code: 'permission_error',
    message: 'This group does not allow /v1/messages dispatch',
  }),
  CONTENT_POLICY: entry({
    category: 'denied',
    status: 403,
    type: 'content_policy_violation',
    code: 'content_policy_violation',
    message: 'Request blocked by content policy',
  }),
  ENDPOINT_NOT_SERVED: entry({
    category: 'request',
    status: 404,
    type: 'not_found_error',
    code: 'not_found_error',
    format: 'messages',
    message: "This endpoint is not available for the API key's group",
  }),
  MALFORMED_SESSION: entry({
    category: 'request',
    status: 409,
    type: 'malformed_session_state',
    code: 'malformed_session_state',
    message: 'The conversation history is invalid',
  }),
  BODY_TOO_LARGE: entry({
    category: 'request',
    status: 413,
    type: 'request_too_large',
    code: 'request_too_large',
    message: 'Request body is too large',
  }),
  RPM_EXCEEDED: entry({
    category: 'throttled',
    status: 429,
    type: 'rate_limit_exceeded',
    code: 'rate_limit_exceeded',
    retryAfter: true,
    message: 'Rate limit exceeded: too many requests per minute',
  }),
  FREE_RPM_EXCEEDED: entry({
    category: 'throttled',
    status: 429,
    type: 'rate_limit_exceeded',
    code: 'rate_limit_exceeded',
    retryAfter: true,
    message: 'Rate limit exceeded for free models at zero balance',
  }),
  WINDOW_EXHAUSTED: entry({
    category: 'exhausted',
    status: 429,
    type: 'rate_limit_exceeded',
    code: 'rate_limit_exceeded',
    message: 'api key 限额已用完',
  }),
  QUEUE_FULL: entry({
    category: 'throttled',
    status: 429,
    type: 'rate_limit_error',
    code: 'rate_limit_error',
    message: 'Too many pending requests, please retry later',
  }),
  QUEUE_TIMEOUT: entry({
    category: 'throttled',
    status: 429,
    type: 'rate_limit_error',
    code: 'rate_limit_error',
    message: 'Concurrency limit exceeded for user, please retry later',
  }),
  LIMIT_HELD: entry({
    category: 'throttled',
    status: 429,
    type: 'rate_limit_error',
    code: 'rate_limit_error',
    retryAfter: true,
    message: 'The rest of this limit is held by requests in flight, please retry shortly',
  }),
  PROVIDER_RATE_LIMIT: entry({
    category: 'throttled',
    status: 429,
    type: 'rate_limit_error',
    code: 'rate_limit_error',
    message: 'The provider is rate limiting requests',
  }),
  UPSTREAM_ERROR: entry({
    category: 'transient',
    status: 502,
    type: 'upstream_error',
    code: 'upstream_error',
    message: 'Upstream request failed',
  }),
  NO_ACCOUNTS: entry({
    category: 'unserved',
    status: 503,
    type: 'api_error',
    code: 'model_not_available',
    message: 'No available accounts support the requested model',
  }),
  // Upstream account pools (core/pool): every account of the model is unusable right now.
  ACCOUNTS_COOLING: entry({
    category: 'throttled',
    status: 429,
    type: 'rate_limit_error',
    code: 'rate_limit_error',
    retryAfter: true,
    message: 'No available accounts right now: every account is cooling down, please retry later',
  }),
  ACCOUNTS_BUSY: entry({
    category: 'transient',
    status: 503,
    type: 'api_error',
    code: 'no_available_accounts',
    message: 'No available accounts right now: every account is at its concurrency limit, please retry shortly',
  }),
  ACCOUNTS_DISABLED: entry({
    category: 'unserved',
    status: 503,
    type: 'api_error',
    code: 'no_available_accounts',
    message: 'No available accounts: the provider rejected the credentials of every account',
  }),
  NO_CHANNELS: entry({
    category: 'transient',
    status: 503,
    type: 'api_error',
    code: 'no_available_channels',
    message: 'No available channels for this request',
  }),
  PRICING_UNAVAILABLE: entry({
    category: 'unserved',
    status: 503,
    type: 'api_error',
    code: 'pricing_not_available',
    message: 'Request pricing not available for this model',
  }),
  BILLING_SERVICE: entry({
    category: 'transient',
    status: 503,
    type: 'billing_service_error',
    code: 'billing_service_error',
    message: 'Billing check failed, please retry later',
  }),
  // Shutdown: requests still in flight when server.drain_timeout runs out are ended by the gateway
  // (a stream with its protocol's error event, anything not yet answered with this 503); a retry
  // reaches another instance.
  SHUTTING_DOWN: entry({
    category: 'transient',
    status: 503,
    type: 'api_error',
    code: 'server_shutting_down',
    message: 'The gateway is shutting down and ended this request (server.drain_timeout); retry it',
  }),
  // Fencing: this instance lost a concurrency slot's lease (it was paused, or cut off from the store,
  // for longer than store.lease) and another request has the slot now; going on would run more than
  // the limit, so the gateway ends the request (a stream with its protocol's error event). A retry
  // waits for a slot like any other request.
  SLOT_LOST: entry({
    category: 'transient',
    status: 503,
    type: 'api_error',
    code: 'concurrency_lease_lost',
    message:
      'The gateway ended this request: its instance could not renew its concurrency slot in time (paused or cut off from the store) and the slot went to another request; retry it',
  }),
  OVERLOADED: entry({
    category: 'transient',
    status: 503,
    type: 'overloaded_error',
    code: 'overloaded_error',
    message: 'The provider is overloaded',
  }),

  // ---- outside the model endpoints -----------------------------------------------------------
  ROUTE_NOT_FOUND: entry({
    category: 'request',
    status: 404,
    type: 'not_found_error',
    code: 'route_not_found',
    format: 'chat',
    message: 'No such route',
  }),
  METHOD_NOT_ALLOWED: entry({
    category: 'request',
    status: 405,
    type: 'invalid_request_error',
    code: 'method_not_allowed',
    format: 'chat',
    message: 'Method not allowed',
  }),
  // Malformed HTTP: rendered in the endpoint's format when the request line could be read, else
  // Chat-style. Oversized headers are a 400 (a malformed request, spec §7.2), not a 413: 413 is
  // the body's, and /v1/models and /v1/usage have no 413 in their status sets (spec §4).
  MALFORMED_HTTP: entry({
    category: 'request',
    status: 400,
    type: 'invalid_request_error',
    code: 'bad_request',
    message: 'Malformed HTTP request',
  }),
  HEADERS_TOO_LARGE: entry({
    category: 'request',
    status: 400,
    type: 'invalid_request_error',
    code: 'headers_too_large',
    message: 'Request headers are too large (at most 16 KiB)',
  }),
  REQUEST_TIMEOUT: entry({
    category: 'request',
    status: 400,
    type: 'invalid_request_error',
    code: 'request_timeout',
    message: 'The request did not arrive in time (server.headers_timeout / server.body_timeout)',
  }),
  BODY_MEMORY_FULL: entry({
    category: 'transient',
    status: 503,
    type: 'overloaded_error',
    code: 'body_memory_exhausted',
    retryAfter: true,
    message: 'The gateway is holding too many large request bodies (server.body_memory); retry shortly',
  }),
  UNAUTHORIZED_ADMIN: entry({
    category: 'credential',
    status: 401,
    type: 'authentication_error',
    code: 'unauthorized',
    format: 'chat',
    message: 'Admin token required',
  }),
  INTERNAL: entry({ category: 'transient', status: 500, type: 'api_error', code: 'internal_error', message: 'Internal gateway error' }),
});

export type ErrorId = keyof typeof CATALOGUE;

export interface GatewayErrorOptions {
  /** Replaces the catalogue message (e.g. the upstream's own 400 message, the window's name). */
  message?: string;
  /** Seconds for `Retry-After` (required by entries with `retryAfter`). */
  retryAfter?: number;
  /** Milliseconds, sent as `retry-after-ms` when the gateway knows better than whole seconds. */
  retryAfterMs?: number;
  /** Extra response headers (upstream `retry-after` / `x-ratelimit-*` passed through). */
  headers?: Record<string, string>;
  /** Overrides the status (e.g. an upstream 413 or 429 passed through as is). */
  status?: number;
  /** Overrides `error.type` (provider rate limits keep the provider's type). */
  type?: string;
  cause?: unknown;
}

/**
 * Marks gateway errors across copies of this package: a plugin installed with its own copy of
 * `llm-gateway` throws that copy's GatewayError, which `instanceof` against ours would miss.
 */
const BRAND = Symbol.for('llm-gateway.GatewayError');

/**
 * Thrown by plugins, handlers and the core to stop a request. Before commit the client gets the
 * rendered body; after commit (stream started) the client's protocol renders an in-stream error.
 * Recognised by a brand, not by class identity: `isGatewayError(e)` and `e instanceof GatewayError`
 * both hold for a GatewayError built by any copy of the package.
 */
export class GatewayError extends Error {
  static override [Symbol.hasInstance](v: unknown): boolean {
    return typeof v === 'object' && v !== null && (v as Record<symbol, unknown>)[BRAND] === true;
  }

  readonly id: ErrorId;
  readonly entry: CatalogueEntry;
  readonly status: number;
  readonly type: string;
  readonly retryAfter?: number;
  readonly retryAfterMs?: number;
  readonly headers?: Record<string, string>;
  /** The plugin instance whose hook threw the error this one stands for (INTERNAL), for the logs. */
  plugin?: string;

  constructor(id: ErrorId, opts: GatewayErrorOptions = {}) {
    const e = CATALOGUE[id];
    super(opts.message ?? e.message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'GatewayError';
    this.id = id;
    this.entry = e;
    this.status = opts.status ?? e.status;
    this.type = opts.type ?? e.type;
    this.retryAfter = opts.retryAfter;
    this.retryAfterMs = opts.retryAfterMs;
    this.headers = opts.headers;
    Object.defineProperty(this, BRAND, { value: true });
  }

  get code(): string {
    return this.entry.code;
  }
}

export function isGatewayError(e: unknown): e is GatewayError {
  return e instanceof GatewayError;
}

/**
 * Anything thrown that is not a GatewayError becomes INTERNAL (its message is not leaked; it is
 * kept as the cause, with `plugin` naming the instance that threw it, for the logs).
 */
export function toGatewayError(e: unknown, plugin?: string): GatewayError {
  if (isGatewayError(e)) return e;
  const err = new GatewayError('INTERNAL', { cause: e });
  if (plugin) err.plugin = plugin;
  return err;
}

export interface RenderedError {
  status: number;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}

/** The body, status and headers a client receives for `err` on a route whose format is `routeFormat`. */
export function renderError(err: GatewayError, routeFormat: ErrorFormat): RenderedError {
  const format = err.entry.format ?? routeFormat;
  const headers: Record<string, string> = { ...(err.headers ?? {}) };
  if (!isRetryable(err)) headers['x-should-retry'] = 'false';
  if (err.retryAfter !== undefined) {
    headers['retry-after'] = String(Math.max(0, Math.ceil(err.retryAfter)));
    if (err.retryAfterMs !== undefined) headers['retry-after-ms'] = String(Math.max(0, Math.ceil(err.retryAfterMs)));
  }
  return { status: err.status, headers, body: errorBody(err, format) };
}

/**
 * Whether a client may usefully retry `err` as sent (its final status): never for a 4xx other than
 * 408 and 429; for a 429 or 5xx unless its category is `exhausted` or `unserved`.
 */
export function isRetryable(err: Pick<GatewayError, 'status' | 'entry'>): boolean {
  const s = err.status;
  if (s >= 400 && s < 500 && s !== 408 && s !== 429) return false;
  return err.entry.category !== 'exhausted' && err.entry.category !== 'unserved';
}

export function errorBody(err: GatewayError, format: ErrorFormat): Record<string, unknown> {
  switch (format) {
    case 'flat':
      return { code: err.code, message: err.message, error: { type: err.type, code: err.code, message: err.message } };
    case 'messages':
      return { type: 'error', error: { type: err.type, message: err.message } };
    case 'responses-lite':
      return { error: { code: err.code, message: err.message } };
    case 'chat':
    default:
      return { error: { type: err.type, code: err.code, message: err.message, param: null } };
  }
}

/** Messages for the three key spend windows (wire-notes: clients match on these strings). */
export const WINDOW_MESSAGES: Readonly<Record<'5h' | '1d' | '7d', string>> = Object.freeze({
  '5h': 'api key 5小时限额已用完',
  '1d': 'api key 日限额已用完',
  '7d': 'api key 7天限额已用完',
});
