/**
 * One attempt: a model on one account, sent once through the transport.
 *
 * `newAttempt` makes the attempt the loop (core/upstream/index.ts) records in `ctx.attempts`;
 * `tryAttempt` encodes the request in the upstream's protocol, sends it, and hands an answer < 400
 * to its delivery (core/upstream/json.ts or stream.ts). It returns true when the client was
 * answered (successfully, or with a committed stream that failed later); false, after the
 * onResponse hooks ran, leaves `attempt.error` and `attempt.failure` set (or a hook set
 * `attempt.retry`) for the loop to try another account or model. What ends the request is thrown:
 * a body that cannot be converted, a client gone while a large body was encoded, a header Node
 * refuses, a hook's error.
 */
import type { RequestContext } from '../context.js';
import type { Attempt, ParsedBody, ResolvedModel } from '../types.js';
import { GatewayError } from '../errors.js';
import type { AccountConfig } from '../config/types.js';
import type { Conversion } from '../protocols/types.js';
import { upstreamProtocol } from '../routing.js';
import { LARGE_BODY, yieldTurn } from '../body.js';
import { largeWork } from '../json/share.js';
import { type OutgoingBody } from '../json/text.js';
import { accountBaseUrl, mapUpstreamStatus, readAll, upstreamHeaders, upstreamPath } from './http.js';
import { deliverJson } from './json.js';
import { billInput, runOnResponse } from './outcome.js';
import { StreamDelivery } from './stream.js';
import { TransportError, type UpstreamResponse } from './transport.js';
import type { ChainHooks, UpstreamDeps } from './types.js';
import type { Metrics } from '../metrics.js';
import type { ModelConfig } from '../config/types.js';

/** The series every answered attempt of a model updates, bound once per metrics registry and model object. */
interface AttemptSeries {
  provider: string;
  latency: { observe(v: number): void };
  ok: { inc(): void };
}
const attemptSeries = new WeakMap<Metrics, WeakMap<ModelConfig, AttemptSeries>>();

function seriesFor(m: Metrics, provider: string, model: ModelConfig): AttemptSeries {
  let byModel = attemptSeries.get(m);
  if (!byModel) attemptSeries.set(m, (byModel = new WeakMap()));
  let s = byModel.get(model);
  if (!s || s.provider !== provider) {
    byModel.set(
      model,
      (s = {
        provider,
        latency: m.upstreamLatency.series({ provider, model: model.id }),
        ok: m.upstreamAttempts.series({ provider, model: model.id, outcome: 'ok' }),
      }),
    );
  }
  return s;
}

/** Upstream error bodies are read for their message, up to this much. */
const MAX_ERROR_BODY = 256 * 1024;

const ANSWER = Symbol('answer');
const HEADERS = Symbol('headers');
/**
 * An attempt as the core makes it: its `responseHeaders` are the upstream's (Node parses them
 * only when read, and most requests never read them) until a plugin sets its own. A class, not an
 * object literal with accessors and symbol keys, which V8 builds on a slow path (4 µs a request in
 * the gateway's profile); every field is set in the constructor, so all attempts share one shape.
 */
class AttemptState implements Attempt {
  readonly index: number;
  readonly model: Attempt['model'];
  readonly provider: Attempt['provider'];
  readonly account: AccountConfig;
  readonly upstreamProtocol: Attempt['upstreamProtocol'];
  readonly headers: Record<string, string> = {};
  request: Attempt['request'];
  conversion: Conversion | undefined = undefined;
  status: number | undefined = undefined;
  error: Attempt['error'] = undefined;
  failure: Attempt['failure'] = undefined;
  retry = false;
  [ANSWER]: UpstreamResponse | undefined = undefined;
  [HEADERS]: Attempt['responseHeaders'] = undefined;

  constructor(ctx: RequestContext, cand: ResolvedModel, account: AccountConfig, body: ParsedBody) {
    this.index = ctx.attempts.length;
    this.model = cand.model;
    this.provider = cand.provider;
    this.account = account;
    this.upstreamProtocol = upstreamProtocol(ctx.protocol!, ctx.group, cand.provider.protocols);
    this.request = { text: body.text, json: body.json, large: body.large };
  }

  get responseHeaders(): Attempt['responseHeaders'] {
    return this[HEADERS] ?? this[ANSWER]?.headers;
  }
  set responseHeaders(v: Attempt['responseHeaders']) {
    this[HEADERS] = v;
  }
}

/** A new attempt of `cand` on `account`, numbered after those already in `ctx.attempts`. */
export function newAttempt(ctx: RequestContext, cand: ResolvedModel, account: AccountConfig, body: ParsedBody): Attempt {
  return new AttemptState(ctx, cand, account, body);
}

/** One attempt. True when it answered the client (successfully or with a committed stream). */
export async function tryAttempt(
  ctx: RequestContext,
  attempt: Attempt,
  stream: boolean,
  hooks: ChainHooks,
  deps: UpstreamDeps,
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
  const call = deps.transport.send({
    provider,
    account: attempt.account?.name,
    url,
    headers,
    body: requestBody,
    timeoutMs: totalMs,
    idleTimeoutMs: idleMs,
  });
  requestBody = ''; // the transport holds the one encoded copy until it is sent; not this frame for a stream's life
  const gone = ctx.clientGone;
  gone.addEventListener('abort', call.abort);
  ctx.onStop = call.abort;
  if (ctx.stopped) call.abort();
  let up: UpstreamResponse;
  try {
    up = await call.response;
  } catch (e) {
    call.done();
    gone.removeEventListener('abort', call.abort);
    ctx.onStop = undefined;
    const te = e as TransportError;
    const timeout = call.timedOut() || te.kind === 'timeout';
    // The client left after the upstream took the request: it processed the input, so that is billed.
    if (gone.aborted && call.sent()) billInput(ctx, attempt);
    attempt.error = gone.aborted
      ? new GatewayError('UPSTREAM_ERROR', { message: 'client went away', status: 499 })
      : (ctx.stopped ??
        new GatewayError('UPSTREAM_ERROR', { message: timeout ? 'Upstream request timed out' : 'Could not reach the upstream provider' }));
    attempt.failure = timeout ? 'timeout' : 'connect';
    ctx.metrics?.upstreamAttempts.inc({ provider: provider.name, model: attempt.model.id, outcome: timeout ? 'timeout' : 'connect_error' });
    const r = runOnResponse(ctx, attempt, hooks);
    if (r) await r;
    return false;
  }
  const series = ctx.metrics && seriesFor(ctx.metrics, provider.name, attempt.model);
  series?.latency.observe((Date.now() - started) / 1000);
  attempt.status = up.status;
  (attempt as AttemptState)[ANSWER] = up; // responseHeaders reads it when asked
  try {
    if (up.status >= 400) {
      let errText = '';
      try {
        errText = await readAll(up.body, MAX_ERROR_BODY);
      } catch {
        /* message unknown */
      }
      attempt.error = mapUpstreamStatus(up.status, up.headers, errText);
      attempt.failure = 'status';
      ctx.metrics?.upstreamAttempts.inc({ provider: provider.name, model: attempt.model.id, outcome: String(up.status) });
      await runOnResponse(ctx, attempt, hooks);
      return false;
    }
    series?.ok.inc();
    if (stream) return await new StreamDelivery(ctx, attempt, up, hooks, call.timedOut, call.idleTimedOut).run();
    return await deliverJson(ctx, attempt, up, hooks);
  } finally {
    call.done();
    gone.removeEventListener('abort', call.abort);
    ctx.onStop = undefined;
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
      text: attempt.request.text,
      json: attempt.request.json,
      stream,
      upstreamModel: attempt.model.upstream,
      requestId: ctx.ledgerId,
      defaultMaxTokens: attempt.model.maxOutputTokens,
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
