/**
 * The upstream attempt loop: one attempt per model (the requested one, then the fallback list),
 * each through the provider transport; the first success is delivered to the client.
 *
 * Commit — the moment the status line is written — happens only when the answering attempt has
 * produced its first client bytes (for streams: the first translated event). Until then a failed
 * attempt can still fall back to the next model; after it, a failure becomes the client protocol's
 * in-stream error event, never a silent close.
 *
 * `onResponse` hooks run once an attempt's outcome is known: an error (status ≥ 400, connection
 * failure, timeout, a stream that died before its first event) or a success whose first bytes are
 * ready. A hook sets `attempt.retry = true` to move on to the next model.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Attempt, RequestContext, ResolvedModel } from './context.js';
import { GatewayError, toGatewayError, type ErrorId } from './errors.js';
import type { AccountConfig, ProtocolName, ProviderConfig } from './config/types.js';
import type { AccountPools } from './pool/index.js';
import type { PluginInstance } from './plugin.js';
import { KEEPALIVE, SseParser, type SseBytesBlock } from './sse.js';
import { passthrough } from './protocols/passthrough.js';
import type { Conversion, ErrorInfo, ResponseTranslator } from './protocols/types.js';
import { resolveModel, upstreamProtocol } from './routing.js';
import { Transport, TransportError, type UpstreamResponse } from './upstream/transport.js';
import { estimateTokens } from './protocols/usage.js';
import { isFree, type Usage } from './money.js';
import { chargeRate, choices } from './billing.js';
import { OutputCap } from './stream-cut.js';
import { LARGE_BODY, yieldTurn } from './body.js';
import { largeWork } from './json/share.js';
import { type OutgoingBody } from './json/text.js';

/** The largest non-stream upstream body the gateway buffers. */
const MAX_JSON_BODY = 64 * 1024 * 1024;
/** Upstream error bodies are read for their message, up to this much. */
const MAX_ERROR_BODY = 256 * 1024;


export interface UpstreamDeps {
  transport: Transport;
  /** Base URL of a provider (mock providers get theirs when their server starts). */
  baseUrl(provider: ProviderConfig): string;
  /** The providers' account pools (core/pool). */
  pools: AccountPools;
}

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
  ctx: RequestContext, provider: ProviderConfig, protocol: ProtocolName, stream: boolean, account: AccountConfig = provider.accounts[0],
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
export function mapUpstreamStatus(status: number, headers: IncomingMessage['headers'], bodyText: string): GatewayError {
  const info = readUpstreamError(bodyText);
  const pass = passHeaders(headers, true);
  if (status === 400 || status === 422) return new GatewayError('INVALID_REQUEST', { message: info?.message ?? `Upstream rejected the request (${status})` });
  if (status === 401 || status === 403) return new GatewayError('UPSTREAM_ERROR', { message: 'The provider rejected the gateway\'s credentials' });
  if (status === 413) return new GatewayError('BODY_TOO_LARGE', { message: info?.message ?? 'Request too large for the provider' });
  if (status === 429) return new GatewayError('PROVIDER_RATE_LIMIT', { message: info?.message ?? 'The provider is rate limiting requests', headers: pass });
  if (status === 529 || (status === 503 && /overload/i.test(`${info?.type ?? ''} ${info?.message ?? ''}`))) {
    return new GatewayError('OVERLOADED', { message: info?.message ?? 'The provider is overloaded', headers: pass });
  }
  return new GatewayError('UPSTREAM_ERROR', { message: `Upstream request failed with status ${status}` });
}

/** Retry-After and x-ratelimit-* are passed through from the provider (spec §8.6). */
function passHeaders(headers: IncomingMessage['headers'], withRetry: boolean): Record<string, string> {
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
function rateLimitHeaders(res: IncomingMessage, out: Record<string, string> = {}): Record<string, string> {
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
  } catch { /* not JSON */ }
  return undefined;
}

/** An in-stream error event from the upstream, as the client-facing GatewayError. */
function errorFromEvent(info: ErrorInfo): GatewayError {
  const t = `${info.type} ${info.code ?? ''}`;
  let id: ErrorId = 'UPSTREAM_ERROR';
  if (/overload/i.test(t)) id = 'OVERLOADED';
  else if (/rate_limit|insufficient_quota/i.test(t)) id = 'PROVIDER_RATE_LIMIT';
  else if (/invalid_request/i.test(t)) id = 'INVALID_REQUEST';
  return new GatewayError(id, { message: info.message || undefined });
}

export function readAll(stream: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    stream.on('data', (c: Buffer) => {
      size += c.length;
      if (size > limit) {
        stream.destroy();
        reject(new Error('upstream body too large'));
        return;
      }
      chunks.push(c);
    });
    stream.on('end', () => resolve((chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size)).toString('utf8')));
    stream.on('error', reject);
    stream.on('aborted', () => reject(new Error('upstream aborted')));
    stream.on('close', () => {
      if (!stream.complete) reject(new Error('upstream closed before the body was complete'));
    });
  });
}

export interface ChainHooks {
  onAttempt: PluginInstance[];
  /** Reverse chain order. */
  onResponse: PluginInstance[];
  /** Reverse chain order. */
  onEvent: PluginInstance[];
  /** The instance name of a plugin in the chain (for logs). */
  nameOf?(p: PluginInstance): string | undefined;
}

/**
 * Runs the attempts of a model call and delivers the answer. Each model (the requested one, then
 * the fallback list) is tried on up to `scheduling.max_attempts` of its provider's accounts: a
 * failure that is the account's (429, 5xx, 401/403, timeouts, connection errors) moves to another
 * account transparently before the next model is considered.
 */
export async function runModelCall(ctx: RequestContext, hooks: ChainHooks, deps: UpstreamDeps): Promise<void> {
  // Read and resolved by the chain already on a metered route: no await (a microtask turn) then.
  const body = ctx.parsed ?? await ctx.body();
  const primary = ctx.requested ?? await ctx.model();
  const candidates: ResolvedModel[] = [primary];
  for (const name of ctx.fallback.models) {
    const r = resolveModel(ctx.config, ctx.group, name);
    if (r && !candidates.some((c) => c.model.id === r.model.id)) candidates.push(r);
    else if (!r) ctx.log.debug('fallback model not served, skipped', { model: name });
  }
  const max = Math.max(1, Math.min(ctx.fallback.maxAttempts, candidates.length));
  let lastError: GatewayError | undefined;
  /** Why a model had no account at all (reported when no attempt failed for a better reason). */
  let noAccount: GatewayError | undefined;
  for (let i = 0; i < max; i++) {
    if (ctx.clientGone.aborted) throw new GatewayError('UPSTREAM_ERROR', { message: 'client went away', status: 499 });
    const cand = candidates[i];
    const pool = deps.pools.of(cand.provider);
    const choose = pool.chooser(ctx, cand.model);
    let attempt: Attempt | undefined;
    for (;;) {
      const pick = await choose();
      if (!pick.ok) {
        if (pick.error?.status === 499) throw pick.error;
        if (!attempt) noAccount = pick.error;
        break;
      }
      if (attempt) {
        ctx.metrics?.accountFailovers.inc({ provider: cand.provider.name });
        ctx.log.info('upstream account failed, trying another account', {
          model: cand.model.id, account: attempt.account?.id, status: attempt.status, error: attempt.error?.message,
        });
      }
      const state: AttemptState = {
        index: ctx.attempts.length,
        model: cand.model,
        provider: cand.provider,
        account: pick.lease.account,
        upstreamProtocol: upstreamProtocol(ctx.protocol!, ctx.group, cand.provider.protocols),
        headers: {},
        retry: false,
        request: { text: body.text, json: body.json, large: body.large },
        [ANSWER]: undefined,
        [HEADERS]: undefined,
        get responseHeaders() {
          return this[HEADERS] ?? this[ANSWER]?.headers;
        },
        set responseHeaders(v) {
          this[HEADERS] = v;
        },
      };
      attempt = state;
      ctx.attempts.push(attempt);
      /** The attempt, once it went upstream and came back (a hook or converter that threw leaves it unset). */
      let outcome: Attempt | undefined;
      let ok = false;
      let failover = false;
      try {
        for (const p of hooks.onAttempt) {
          const r = hook(hooks, p, 'onAttempt', ctx, attempt);
          if (r) await r;
        }
        if (!attempt.conversion) {
          if (attempt.upstreamProtocol !== ctx.protocol) {
            throw new GatewayError('NO_CHANNELS', { message: `No available channels: model '${cand.model.id}' needs protocol conversion and no converter is configured on this route` });
          }
          attempt.conversion = passthroughOf(attempt.upstreamProtocol);
        }
        ok = await tryAttempt(ctx, attempt, body.stream, hooks, deps);
        outcome = attempt;
      } finally {
        // No outcome (the request was refused before or while it was sent): the account's slot is
        // released and nothing is held against it.
        failover = pick.lease.done(outcome, ctx)?.failover ?? false;
      }
      if (ok) return;
      lastError = attempt.error;
      if (ctx.committed || ctx.clientGone.aborted || !failover) break;
    }
    if (!attempt) continue; // no account for this model: the next one in the list, if any
    if (!attempt.retry || ctx.committed) break;
    ctx.log.info('upstream attempt failed, falling back', { model: cand.model.id, status: attempt.status, error: attempt.error?.message });
  }
  throw lastError ?? noAccount ?? new GatewayError('UPSTREAM_ERROR');
}

const ANSWER = Symbol('answer');
const HEADERS = Symbol('headers');
/**
 * An attempt as the core makes it: its `responseHeaders` are the upstream's (Node parses them
 * only when read, and most requests never read them) until a plugin sets its own.
 */
interface AttemptState extends Attempt {
  [ANSWER]: UpstreamResponse | undefined;
  [HEADERS]: Attempt['responseHeaders'];
}

/** A passthrough conversion holds no per-request state (its stream translators do): one per protocol. */
const passthroughs = new Map<ProtocolName, Conversion>();
function passthroughOf(protocol: ProtocolName): Conversion {
  let c = passthroughs.get(protocol);
  if (!c) passthroughs.set(protocol, (c = passthrough(protocol)));
  return c;
}

/** The onResponse hooks; undefined when none returned a promise (nothing to wait for). */
function runOnResponse(ctx: RequestContext, attempt: Attempt, hooks: ChainHooks): Promise<void> | undefined {
  const list = hooks.onResponse;
  for (let i = 0; i < list.length; i++) {
    const r = hook(hooks, list[i], 'onResponse', ctx, attempt);
    if (r) return finishOnResponse(ctx, attempt, hooks, i, r);
  }
  return undefined;
}

async function finishOnResponse(ctx: RequestContext, attempt: Attempt, hooks: ChainHooks, i: number, pending: Promise<void>): Promise<void> {
  await pending;
  const list = hooks.onResponse;
  for (i++; i < list.length; i++) {
    const r = hook(hooks, list[i], 'onResponse', ctx, attempt);
    if (r) await r;
  }
}

/**
 * Runs a hook; an exception that is not a GatewayError becomes INTERNAL naming the plugin. A hook
 * that returns no promise is not awaited (`undefined`: nothing to wait for, no microtask turn).
 */
function hook(hooks: ChainHooks, p: PluginInstance, name: 'onAttempt' | 'onResponse', ctx: RequestContext, attempt: Attempt): Promise<void> | undefined {
  let r: unknown;
  try {
    r = p[name]!(ctx, attempt);
  } catch (e) {
    throw toGatewayError(e, hooks.nameOf?.(p));
  }
  if (!r) return undefined;
  return Promise.resolve(r).then(() => undefined, (e) => { throw toGatewayError(e, hooks.nameOf?.(p)); });
}

/** One attempt. True when it answered the client (successfully or with a committed stream). */
async function tryAttempt(
  ctx: RequestContext, attempt: Attempt, stream: boolean, hooks: ChainHooks, deps: UpstreamDeps,
): Promise<boolean> {
  const { provider } = attempt;
  const conversion = attempt.conversion!;
  const large = ctx.requestChars > LARGE_BODY;
  if (large) await yieldTurn();
  // Built in a frame of its own: this one stays suspended for a stream's whole life, and nothing
  // of the request may stay in it.
  let requestBody: string | OutgoingBody | Promise<OutgoingBody> = encodeRequest(ctx, attempt, conversion, stream);
  if (requestBody instanceof Promise) requestBody = await requestBody;
  if (large) {
    await yieldTurn();
    if (ctx.clientGone.aborted) throw new GatewayError('UPSTREAM_ERROR', { message: 'client went away', status: 499 });
  }
  const url = accountBaseUrl(deps, provider, attempt.account) + upstreamPath(provider, attempt.upstreamProtocol);
  // The plugins' headers over ours, as a spread would put them, without copying ours.
  const headers = upstreamHeaders(ctx, provider, attempt.upstreamProtocol, stream, attempt.account);
  for (const k in attempt.headers) headers[k] = attempt.headers[k];
  const totalMs = provider.timeoutMs ?? ctx.config.server.upstreamTimeoutMs;
  const idleMs = provider.idleTimeoutMs ?? ctx.config.server.upstreamIdleTimeoutMs;
  const started = Date.now();
  // One timer for the attempt (the whole-attempt deadline and the idle timeout): the transport's.
  const call = deps.transport.send({ provider, account: attempt.account?.name, url, headers, body: requestBody, timeoutMs: totalMs, idleTimeoutMs: idleMs });
  requestBody = ''; // the transport holds the one encoded copy until it is sent; not this frame for a stream's life
  const gone = ctx.clientGone;
  gone.addEventListener('abort', call.abort);
  let up: UpstreamResponse;
  try {
    up = await call.response;
  } catch (e) {
    call.done();
    gone.removeEventListener('abort', call.abort);
    const te = e as TransportError;
    const timeout = call.timedOut() || te.kind === 'timeout';
    // The client left after the upstream took the request: it processed the input, so that is billed.
    if (gone.aborted && call.sent()) billInput(ctx, attempt);
    attempt.error = gone.aborted
      ? new GatewayError('UPSTREAM_ERROR', { message: 'client went away', status: 499 })
      : new GatewayError('UPSTREAM_ERROR', { message: timeout ? 'Upstream request timed out' : 'Could not reach the upstream provider' });
    attempt.failure = timeout ? 'timeout' : 'connect';
    ctx.metrics?.upstreamAttempts.inc({ provider: provider.name, model: attempt.model.id, outcome: timeout ? 'timeout' : 'connect_error' });
    const r = runOnResponse(ctx, attempt, hooks);
    if (r) await r;
    return false;
  }
  ctx.metrics?.upstreamLatency.observe({ provider: provider.name, model: attempt.model.id }, (Date.now() - started) / 1000);
  attempt.status = up.status;
  (attempt as AttemptState)[ANSWER] = up; // responseHeaders reads it when asked
  try {
    if (up.status >= 400) {
      let errText = '';
      try { errText = await readAll(up.body, MAX_ERROR_BODY); } catch { /* message unknown */ }
      attempt.error = mapUpstreamStatus(up.status, up.headers, errText);
      attempt.failure = 'status';
      ctx.metrics?.upstreamAttempts.inc({ provider: provider.name, model: attempt.model.id, outcome: String(up.status) });
      await runOnResponse(ctx, attempt, hooks);
      return false;
    }
    ctx.metrics?.upstreamAttempts.inc({ provider: provider.name, model: attempt.model.id, outcome: 'ok' });
    if (stream) return await deliverStream(ctx, attempt, up, hooks, call.timedOut, call.idleTimedOut);
    return await deliverJson(ctx, attempt, up, hooks);
  } finally {
    call.done();
    gone.removeEventListener('abort', call.abort);
  }
}

/**
 * The upstream body of an attempt: a string (returned as it is, no promise), or a large body's
 * parts built a share of each turn at a time.
 */
function encodeRequest(ctx: RequestContext, attempt: Attempt, conversion: Conversion, stream: boolean): string | Promise<OutgoingBody> {
  let body: string | OutgoingBody;
  try {
    const input = {
      text: attempt.request.text, json: attempt.request.json, stream, upstreamModel: attempt.model.upstream, requestId: ctx.ledgerId, defaultMaxTokens: attempt.model.maxOutputTokens,
    };
    const largeBody = attempt.request.large;
    body = largeBody && conversion.requestParts ? conversion.requestParts(input, largeBody) : conversion.requestBody(input);
  } catch (e) {
    throw encodeError(e);
  }
  return typeof body === 'string' ? body : buildParts(ctx, body);
}

/** Builds a large body's parts a share of each turn at a time. */
async function buildParts(ctx: RequestContext, body: OutgoingBody): Promise<OutgoingBody> {
  try {
    for (;;) {
      if (largeWork.left === 0) await largeWork.next();
      if (ctx.clientGone.aborted) return body;
      const t = performance.now();
      const done = body.step(largeWork.left);
      largeWork.charge(performance.now() - t);
      if (done) return body;
    }
  } catch (e) {
    throw encodeError(e);
  }
}

/** Converting walks the body recursively: a pathologically nested one is the client's error. */
function encodeError(e: unknown): unknown {
  return e instanceof RangeError ? new GatewayError('INVALID_REQUEST', { message: 'Request body is nested too deeply to convert' }) : e;
}

async function deliverJson(ctx: RequestContext, attempt: Attempt, up: UpstreamResponse, hooks: ChainHooks): Promise<boolean> {
  let text: string;
  try {
    text = await readAll(up.body, MAX_JSON_BODY);
  } catch (e) {
    if (ctx.clientGone.aborted) billInput(ctx, attempt); // it was answering when the client left
    attempt.error = ctx.clientGone.aborted
      ? new GatewayError('UPSTREAM_ERROR', { message: 'client went away', status: 499 })
      : new GatewayError('UPSTREAM_ERROR', { message: 'The upstream response was cut off' });
    attempt.failure = 'connect';
    await runOnResponse(ctx, attempt, hooks);
    return false;
  }
  let out: { body: string; usage: Usage | undefined };
  try {
    out = attempt.conversion!.response(text, { model: attempt.model.id, requestId: ctx.ledgerId });
  } catch (e) {
    ctx.log.warn('could not translate upstream response', { error: e as Error });
    attempt.error = new GatewayError('UPSTREAM_ERROR', { message: 'The upstream response could not be read' });
    attempt.failure = 'connect';
    await runOnResponse(ctx, attempt, hooks);
    return false;
  }
  const r = runOnResponse(ctx, attempt, hooks);
  if (r) await r;
  if (attempt.retry) return false;
  ctx.answeredModel = attempt.model;
  ctx.usage = out.usage;
  if (!out.usage) {
    ctx.usage = estimateUsage(ctx, 0, out.body.length);
    ctx.usageEstimated = true;
  }
  // With its length, as the providers send it (not chunked): the whole answer is in hand. An
  // ASCII answer (most are) has the same bytes in latin1, which encodes as a plain copy, far
  // cheaper than UTF-8 (as core/upstream/transport.ts does for request bodies).
  const bytes = Buffer.byteLength(out.body);
  writeHead(ctx, 200, rateLimitHeaders(up.body, { 'content-type': 'application/json', 'content-length': String(bytes) }));
  ctx.res.end(out.body, bytes === out.body.length ? 'latin1' : 'utf8');
  return true;
}

/**
 * A non-streaming request whose client left once the upstream had the request: no answer to bill
 * from, so the input it processed is billed, estimated from the request (docs/limits.md).
 */
function billInput(ctx: RequestContext, attempt: Attempt): void {
  ctx.answeredModel = attempt.model;
  ctx.usage = estimateUsage(ctx, 0);
  ctx.usageEstimated = true;
}

/**
 * Once a stream is committed no other attempt can follow, so the parsed request is let go for the
 * stream's life. The text stays for the failed-request record, which keeps at most its first MiB:
 * of a large body only that head is kept (with the length), so one idle stream holds one copy of
 * a small body and no more than a MiB of a large one.
 */
function dropRequestJson(ctx: RequestContext): void {
  const empty: Record<string, unknown> = {};
  const p = ctx.parsed;
  let text: string | undefined;
  if (p) {
    p.json = empty;
    if (p.large) {
      p.large.ropes.clear();
      text = p.text = p.large.text.head(FAILED_BODY_HEAD);
      p.large = undefined;
    }
  }
  for (const a of ctx.attempts) {
    a.request.json = empty;
    if (a.request.large) a.request = { text: text ?? '', json: empty };
  }
}

/** Characters of a large body kept after commit for the failed-request record (which keeps 1 MiB). */
const FAILED_BODY_HEAD = 1024 * 1024 + 1;

/** Input estimated from the request size, output from generated characters. */
function estimateUsage(ctx: RequestContext, outputChars: number, fallbackChars = 0): Usage {
  return { input: estimateTokens(ctx.requestChars), output: estimateTokens(outputChars || fallbackChars), cacheRead: 0, cacheWrite: 0 };
}

/**
 * What goes to the client for some upstream bytes: text the gateway wrote, or the upstream's own
 * bytes (passthrough forwards views of the chunks as they came).
 */
type Out = string | Buffer;

const view = (buf: Buffer, start: number, end: number): Buffer => (start === 0 && end === buf.length ? buf : buf.subarray(start, end));

/** `a` then `b`, copying only when it must: adjacent views of one chunk become one view. */
function join(a: Out, b: Out): Out {
  if (!b.length) return a;
  if (!a.length) return b;
  if (typeof a === 'string' && typeof b === 'string') return a + b;
  if (typeof a !== 'string' && typeof b !== 'string' && a.buffer === b.buffer && a.byteOffset + a.length === b.byteOffset) {
    return Buffer.from(a.buffer, a.byteOffset, a.length + b.length);
  }
  return Buffer.concat([typeof a === 'string' ? Buffer.from(a) : a, typeof b === 'string' ? Buffer.from(b) : b]);
}

export function writeHead(ctx: RequestContext, status: number, headers: Record<string, string>): void {
  if (ctx.committed) return;
  ctx.committed = true;
  ctx.committedAt = Date.now();
  ctx.res.writeHead(status, headers);
}

async function deliverStream(
  ctx: RequestContext, attempt: Attempt, up: UpstreamResponse, hooks: ChainHooks, totalTimedOut: () => boolean,
  socketIdle: () => boolean,
): Promise<boolean> {
  // Once the charge of what was streamed passes the request's reservation (input as reported, else
  // estimated; output estimated from the streamed text, 4 characters a token), the stream ends as a
  // length stop: no upstream can overspend a limit by more than a reservation. Reported output
  // arrives with the terminal event, so a stream is never cut after its own end. The output that
  // fits is solved for once per stream (OutputCap); each event compares a character count.
  const body0 = ctx.parsed;
  const reserve = ctx.admission.reserve;
  const cap = reserve > 0 && !isFree(attempt.model.price)
    ? new OutputCap(attempt.model.price, chargeRate(ctx.user, ctx.group), reserve, estimateTokens(ctx.requestChars))
    : undefined;
  const translator: ResponseTranslator = attempt.conversion!.stream({
    model: attempt.model.id, requestId: ctx.ledgerId,
    cut: cap && attempt.conversion!.passthrough ? {
      choices: body0 ? choices(body0) : 1,
      includeUsage: (body0?.json.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true,
    } : undefined,
  });
  const parser = new SseParser();
  const res: ServerResponse = ctx.res;
  const body = up.body;
  // Upstream silence is enforced by the transport's socket inactivity timeout (`socketIdle`).
  let firstSent = false;

  const estimate = () => estimateUsage(ctx, translator.outputChars());
  const settleUsage = (complete: boolean) => {
    const reported = translator.usage();
    const chars = translator.outputChars();
    if (reported) {
      const u = { ...reported };
      // A stream cut short may have reported only its start: bill at least what was streamed.
      if (!complete) u.output = Math.max(u.output, estimateTokens(chars));
      ctx.usage = u;
      ctx.usageEstimated = u.output !== reported.output;
    } else if (chars > 0 || complete) {
      ctx.usage = estimate();
      ctx.usageEstimated = true;
    }
  };
  /** Resolves when the client can take more (or went away). */
  const drained = () => new Promise<void>((resolve) => {
    const done = () => {
      res.off('drain', done);
      ctx.clientGone.removeEventListener('abort', done);
      resolve();
    };
    res.on('drain', done);
    ctx.clientGone.addEventListener('abort', done, { once: true });
  });
  /** Writes and reports whether the client's buffer is full (no promise per chunk on the hot path). */
  const writeNow = (out: Out): boolean => !out.length || ctx.clientGone.aborted || res.write(out);
  const write = async (out: Out) => {
    if (!writeNow(out)) await drained();
  };
  /**
   * The client left after this upstream answered 200: no fallback, nothing written, and the usage
   * seen so far is billed to this model (wire-notes: bill what was generated) — even inside the
   * preamble hold, where nothing reached the client yet but the upstream already worked.
   */
  const clientGone = (complete: boolean): true => {
    ctx.answeredModel = attempt.model;
    settleUsage(complete);
    attempt.error = new GatewayError('UPSTREAM_ERROR', { message: 'client went away', status: 499 });
    return true;
  };
  /** After commit() said no: the client left (bill it, done) or a hook asked for the next model. */
  const notCommitted = (complete: boolean): boolean => (ctx.clientGone.aborted && !attempt.retry ? clientGone(complete) : false);
  /** The first client bytes are ready: the attempt succeeded unless a hook asks for a retry. */
  const commit = async (): Promise<boolean> => {
    const r = runOnResponse(ctx, attempt, hooks);
    if (r) await r;
    if (attempt.retry || ctx.clientGone.aborted) return false;
    ctx.answeredModel = attempt.model;
    writeHead(ctx, 200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      ...rateLimitHeaders(up.body),
    });
    firstSent = true;
    ctx.ttftMs = ctx.clock.now() - ctx.startedAt;
    dropRequestJson(ctx);
    return true;
  };
  const failBeforeCommit = async (err: GatewayError, failure: 'connect' | 'event' = 'connect'): Promise<false> => {
    body.destroy();
    attempt.error = err;
    attempt.failure = failure;
    await runOnResponse(ctx, attempt, hooks);
    return false;
  };
  const failAfterCommit = () => {
    settleUsage(false);
    const upstreamErr = translator.upstreamError;
    if (upstreamErr) {
      // The upstream's own error frame already reached the client.
      attempt.error = errorFromEvent(upstreamErr);
      res.end();
      return;
    }
    const message = socketIdle() ? 'The upstream stopped sending data (idle timeout)'
      : totalTimedOut() ? 'The upstream request timed out'
        : 'The upstream stream ended before completion';
    attempt.error = new GatewayError('UPSTREAM_ERROR', { message });
    res.end(translator.fail({ type: attempt.error.type, message, code: attempt.error.code }));
  };
  /** Set once the output passed the cap: the blocks after that one are dropped. */
  let overflow = false;
  const onEvent = hooks.onEvent.length > 0 ? hooks.onEvent : undefined;
  const handOut = (blocks: SseBytesBlock[]): Out => {
    let out: Out = '';
    // Forwarded blocks that follow each other in one buffer go out as one view of it (the whole
    // chunk itself when every block of it is forwarded).
    let run: Buffer | undefined;
    let runStart = 0;
    let runEnd = 0;
    for (const b of blocks) {
      if (overflow) break;
      const piece = translator.block(b);
      if (typeof piece !== 'string') {
        if (run === piece.buf && runEnd === piece.start) runEnd = piece.end;
        else {
          if (run) out = join(out, view(run, runStart, runEnd));
          run = piece.buf;
          runStart = piece.start;
          runEnd = piece.end;
        }
      } else if (piece) {
        if (run) out = join(out, view(run, runStart, runEnd));
        run = undefined;
        out = join(out, piece);
      }
      if (onEvent && b.dataBuf !== undefined) for (const p of onEvent) p.onEvent!(ctx, { event: b.event, data: b.data! });
      if (cap && !translator.upstreamError && cap.over(translator.usage(), translator.outputChars())) overflow = true;
    }
    return run ? join(out, view(run, runStart, runEnd)) : out;
  };

  // The preamble (message_start, response.created, Chat's role chunk) is held until content begins,
  // at most `server.preamble_hold`: a model that thinks silently for minutes still gets its headers out.
  let held: Out = '';
  let committing: Promise<boolean> | undefined;
  let holdTimer: NodeJS.Timeout | undefined;
  const commitHeld = (): Promise<boolean> => (committing ??= (async () => {
    clearTimeout(holdTimer);
    if (!(await commit())) return false;
    const h = held;
    held = '';
    await write(h);
    return true;
  })());
  // Once committed, an upstream silence is bridged with SSE comments (ignored by every SDK) so
  // proxies and clients do not time the stream out.
  let lastWrite = Date.now();
  const keepaliveMs = ctx.config.server.streamKeepaliveMs;
  const keepalive = setInterval(() => {
    if (firstSent && !ctx.clientGone.aborted && !res.writableEnded && Date.now() - lastWrite >= keepaliveMs) {
      res.write(KEEPALIVE);
      lastWrite = Date.now();
    }
  }, Math.max(10, Math.floor(keepaliveMs / 2)));
  keepalive.unref();
  /** Past the reservation: stop the upstream, end the client's stream as a length stop, bill what came. */
  const cut = async (pending: Out): Promise<boolean> => {
    body.destroy();
    clearTimeout(holdTimer);
    if (!firstSent) {
      held = join(held, pending);
      pending = '';
      if (!(await commitHeld())) return notCommitted(false);
    }
    settleUsage(false);
    ctx.usageEstimated = true;
    const usage = ctx.usage ?? estimate();
    const frames = translator.truncate ? translator.truncate(usage) : '';
    ctx.log.warn('stream cut at its reservation: the upstream generated past the output limit', {
      model: attempt.model.id, reserve, output: usage.output,
    });
    if (!ctx.clientGone.aborted) res.end(join(pending, frames));
    return true;
  };
  try {
    for await (const chunk of body) {
      const out = handOut(parser.feedBytes(chunk as Buffer));
      if (overflow) return await cut(out);
      if (!firstSent) {
        held = join(held, out);
        const upstreamErr = translator.upstreamError;
        // The upstream failed before anything reached the client: a real HTTP error, fallback allowed.
        if (upstreamErr && !committing) return await failBeforeCommit(errorFromEvent(upstreamErr), 'event');
        if (!translator.started && !committing) {
          if (held && !holdTimer) holdTimer = setTimeout(() => void commitHeld().catch(() => undefined), ctx.config.server.preambleHoldMs);
          continue;
        }
        if (!(await commitHeld())) {
          body.destroy();
          return notCommitted(false);
        }
        if (held) {
          const h = held;
          held = '';
          await write(h);
        }
        lastWrite = Date.now();
        continue;
      }
      if (out.length) {
        lastWrite = Date.now();
        if (!writeNow(out)) await drained();
      }
    }
    if (committing && !(await committing)) return notCommitted(false);
    let out = join(held, handOut(parser.endBytes(true)));
    held = '';
    const end = translator.end();
    out = join(out, end.text);
    if (!firstSent) {
      if (translator.upstreamError) return await failBeforeCommit(errorFromEvent(translator.upstreamError), 'event');
      if (!end.complete) return await failBeforeCommit(new GatewayError('UPSTREAM_ERROR', { message: 'The upstream stream ended before completion' }));
      if (!(await commit())) return notCommitted(end.complete);
    }
    await write(out);
    if (ctx.clientGone.aborted) return clientGone(end.complete);
    if (!end.complete) {
      failAfterCommit();
      return true;
    }
    const closing = translator.closing(estimate);
    settleUsage(true);
    res.end(closing);
    return true;
  } catch {
    clearTimeout(holdTimer);
    if (committing) await committing.catch(() => false);
    // The client went away: the upstream is aborted; bill what was generated, write nothing.
    if (ctx.clientGone.aborted) return clientGone(false);
    if (!firstSent) {
      return await failBeforeCommit(new GatewayError('UPSTREAM_ERROR', {
        message: socketIdle() ? 'The upstream stopped sending data (idle timeout)' : totalTimedOut() ? 'Upstream request timed out' : 'The upstream connection failed',
      }));
    }
    failAfterCommit();
    return true;
  } finally {
    clearTimeout(holdTimer);
    clearInterval(keepalive);
  }
}
