/**
 * The upstream's HTTP, both ways, with no state of its own:
 * - out: where a request goes (`accountBaseUrl` + `upstreamPath`) and with which headers
 *   (`upstreamHeaders`: the account's credential, never the client's);
 * - back: what the client sees for an upstream failure (`mapUpstreamStatus` for a status ≥ 400,
 *   `errorFromEvent` for an error event inside a stream), the rate-limit headers passed through
 *   from the provider, and `readAll`, which reads a (bounded) upstream body.
 *
 * Used by the attempt (core/upstream/attempt.ts), both deliveries and the count_tokens handler.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { GatewayError, type ErrorId } from '../errors.js';
import type { AccountConfig, ProtocolName, ProviderConfig } from '../config/types.js';
import type { RequestContext } from '../context.js';
import type { ErrorInfo } from '../protocols/types.js';
import type { UpstreamDeps } from './types.js';
import type { UpstreamBody } from './h1.js';

/** Where an account's requests go: its own base URL (a relay), else the provider's. */
export function accountBaseUrl(deps: UpstreamDeps, provider: ProviderConfig, account: AccountConfig | undefined): string {
  return account?.baseUrl ?? deps.baseUrl(provider);
}

export function upstreamPath(provider: ProviderConfig, protocol: ProtocolName, op: 'generate' | 'count' = 'generate'): string {
  if (protocol === 'anthropic-messages') return op === 'count' ? '/v1/messages/count_tokens' : '/v1/messages';
  const prefix = provider.kind === 'openai' ? '' : '/v1';
  return prefix + (protocol === 'openai-responses' ? '/responses' : '/chat/completions');
}

/** Headers sent upstream: the account's credential in its protocol's style, never the client's. */
export function upstreamHeaders(
  ctx: RequestContext,
  provider: ProviderConfig,
  protocol: ProtocolName,
  stream: boolean,
  account: AccountConfig = provider.accounts[0],
): Record<string, string> {
  const apiKey = account?.apiKey ?? provider.apiKey;
  const h: Record<string, string> = {
    'content-type': 'application/json',
    accept: stream ? 'text/event-stream' : 'application/json',
    'user-agent': 'llm-gateway/0.1',
    'x-request-id': ctx.id,
  };
  if (protocol === 'anthropic-messages') {
    if (apiKey) h['x-api-key'] = apiKey;
    const version = ctx.headerValues('anthropic-version')[0];
    h['anthropic-version'] = version && /^[\w.-]{1,64}$/.test(version) ? version : '2023-06-01';
    const beta = ctx.headerValues('anthropic-beta');
    if (beta.length > 0) h['anthropic-beta'] = beta.join(',');
  } else if (apiKey) {
    h.authorization = `Bearer ${apiKey}`;
  }
  const extra = account?.headers ?? provider.headers;
  for (const k in extra) h[k.toLowerCase()] = extra[k];
  return h;
}

/** What the client sees for an upstream failure (wire-notes "Upstream failures"). */
export function mapUpstreamStatus(status: number, headers: IncomingHttpHeaders, bodyText: string): GatewayError {
  const info = readUpstreamError(bodyText);
  const pass = passHeaders(headers, true);
  if (status === 400 || status === 422)
    return new GatewayError('INVALID_REQUEST', { message: info?.message ?? `Upstream rejected the request (${status})` });
  if (status === 401 || status === 403)
    return new GatewayError('UPSTREAM_ERROR', { message: "The provider rejected the gateway's credentials" });
  if (status === 413) return new GatewayError('BODY_TOO_LARGE', { message: info?.message ?? 'Request too large for the provider' });
  if (status === 429)
    return new GatewayError('PROVIDER_RATE_LIMIT', { message: info?.message ?? 'The provider is rate limiting requests', headers: pass });
  if (status === 529 || (status === 503 && /overload/i.test(`${info?.type ?? ''} ${info?.message ?? ''}`))) {
    return new GatewayError('OVERLOADED', { message: info?.message ?? 'The provider is overloaded', headers: pass });
  }
  return new GatewayError('UPSTREAM_ERROR', { message: `Upstream request failed with status ${status}` });
}

/** Retry-After and x-ratelimit-* are passed through from the provider (spec §8.6). */
function passHeaders(headers: IncomingHttpHeaders, withRetry: boolean): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined) continue;
    if (k.startsWith('x-ratelimit-') || (withRetry && (k === 'retry-after' || k === 'retry-after-ms'))) {
      out[k] = Array.isArray(v) ? v.join(', ') : v;
    }
  }
  return out;
}

/**
 * `passHeaders(headers, false)` read from the raw header list: the same names and values (Node
 * joins a repeated `x-ratelimit-*` with ", "), without building the response's header map;
 * added to `out`.
 */
export function rateLimitHeaders(res: { readonly rawHeaders: string[] }, out: Record<string, string> = {}): Record<string, string> {
  const raw = res.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    if (name.length < 12 || !/^x-ratelimit-/i.test(name)) continue;
    const k = name.toLowerCase();
    const v = raw[i + 1];
    const had = out[k];
    out[k] = had === undefined ? v : `${had}, ${v}`;
  }
  return out;
}

export function readUpstreamError(text: string): ErrorInfo | undefined {
  try {
    const j = JSON.parse(text);
    const e = j?.error;
    if (e && typeof e === 'object') {
      return { type: String(e.type ?? e.code ?? 'api_error'), message: String(e.message ?? ''), code: e.code ? String(e.code) : undefined };
    }
    if (typeof e === 'string') return { type: 'api_error', message: e };
    if (typeof j?.message === 'string') return { type: 'api_error', message: j.message };
  } catch {
    /* not JSON */
  }
  return undefined;
}

/** An in-stream error event from the upstream, as the client-facing GatewayError. */
export function errorFromEvent(info: ErrorInfo): GatewayError {
  const t = `${info.type} ${info.code ?? ''}`;
  let id: ErrorId = 'UPSTREAM_ERROR';
  if (/overload/i.test(t)) id = 'OVERLOADED';
  else if (/rate_limit|insufficient_quota/i.test(t)) id = 'PROVIDER_RATE_LIMIT';
  else if (/invalid_request/i.test(t)) id = 'INVALID_REQUEST';
  return new GatewayError(id, { message: info.message || undefined });
}

/** The body as text (UTF-8), read whole: rejects past `limit` bytes, or when it failed or was cut short. */
export async function readAll(body: UpstreamBody, limit: number): Promise<string> {
  return (await body.readAll(limit)).toString('utf8');
}
