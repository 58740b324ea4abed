/**
 * Delivery of a stream (`deliverStream`), once the upstream answered < 400.
 */
import type { ServerResponse } from 'node:http';
import type { Attempt, RequestContext } from '../context.js';
import { GatewayError } from '../errors.js';
import { KEEPALIVE, SseParser, type SseBytesBlock } from '../sse.js';
import type { ResponseTranslator } from '../protocols/types.js';
import { estimateTokens } from '../protocols/usage.js';
import { isFree } from '../money.js';
import { chargeRate, choices } from '../billing.js';
import { OutputCap } from '../stream-cut.js';
import { errorFromEvent, rateLimitHeaders } from './http.js';
import { estimateUsage, runOnResponse, writeHead } from './outcome.js';
import type { UpstreamResponse } from './transport.js';
import type { ChainHooks } from './types.js';

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

export async function deliverStream(
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
