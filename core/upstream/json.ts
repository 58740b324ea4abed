/**
 * Delivery of a non-streaming answer (`deliverJson`), once the upstream answered < 400: the body is
 * read whole (at most MAX_JSON_BODY), translated to the client's protocol, judged by the
 * onResponse hooks, then written in one piece with its length.
 *
 * Returns true when it answered the client. False (nothing was written) leaves `attempt.error` and
 * `attempt.failure` set, or a hook set `attempt.retry`: the loop may try another account or model.
 * The usage is the upstream's, else estimated from the answer's size; a client that left while the
 * body was read is billed its input (`billInput`).
 */
import type { RequestContext } from '../context.js';
import type { Attempt } from '../types.js';
import { GatewayError } from '../errors.js';
import type { Usage } from '../money.js';
import { rateLimitHeaders, readAll } from './http.js';
import { billInput, estimateUsage, runOnResponse, writeHead } from './outcome.js';
import type { UpstreamResponse } from './transport.js';
import type { ChainHooks } from './types.js';
import { answerOf } from '../protocols/answer.js';
import { parsed } from '../json/scan.js';

/** The largest non-stream upstream body the gateway buffers. */
const MAX_JSON_BODY = 64 * 1024 * 1024;

export async function deliverJson(ctx: RequestContext, attempt: Attempt, up: UpstreamResponse, hooks: ChainHooks): Promise<boolean> {
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
  let out: { body: string; usage: Usage | undefined; upstream?: unknown };
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
    ctx.estimateReason = 'no_usage_reported';
  }
  ctx.trace?.answered(attempt, answerOf(attempt.upstreamProtocol, out.upstream ?? parsed(text)));
  // With its length, as the providers send it (not chunked): the whole answer is in hand. An
  // ASCII answer (most are) has the same bytes in latin1, which encodes as a plain copy, far
  // cheaper than UTF-8 (as core/upstream/transport.ts does for request bodies).
  const bytes = Buffer.byteLength(out.body);
  writeHead(ctx, 200, rateLimitHeaders(up.body, { 'content-type': 'application/json', 'content-length': String(bytes) }));
  ctx.res.end(out.body, bytes === out.body.length ? 'latin1' : 'utf8');
  return true;
}
