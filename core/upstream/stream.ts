/**
 * Delivery of a stream, once the upstream answered < 400: `new StreamDelivery(…).run()`, one
 * instance per streamed attempt, its steps named methods over the state they share.
 *
 * The contract with the attempt (core/upstream/attempt.ts), which awaits `run()`:
 * - true: the client was answered. Either the stream was committed (status line written after the
 *   onResponse hooks, once the first content event was ready or the preamble hold expired), and
 *   then ends as the upstream's end, as a length stop at the reservation, or, on a failure, with
 *   the client protocol's error event (never a silent close); or the client left after the
 *   upstream answered, and the usage seen so far is billed. `ctx.usage` is settled either way.
 * - false: nothing reached the client; `attempt.error` and `attempt.failure` are set after the
 *   onResponse hooks ran (or a hook set `attempt.retry`), and the loop may try another account or
 *   model. The upstream body is destroyed (unless it had already ended).
 * Its timers (the preamble hold, the keepalive) are cleared when `run()` settles.
 *
 * The hot path (one upstream chunk: parse, translate, write) makes no closure and no promise: the
 * upstream's chunks are read as they are buffered (`BodyChunks`, a promise only to wait for the
 * next), `writeNow()` returns a boolean, and only a full client buffer is waited for.
 */
import type { ServerResponse } from 'node:http';
import type { RequestContext } from '../context.js';
import type { Attempt } from '../types.js';
import { GatewayError } from '../errors.js';
import type { PluginInstance } from '../plugin.js';
import { KEEPALIVE, SseParser, type SseBytesBlock } from '../sse.js';
import type { ResponseTranslator } from '../protocols/types.js';
import { estimateTokens } from '../protocols/usage.js';
import { isFree, type Usage } from '../money.js';
import { chargeRate, choices } from '../billing.js';
import { OutputCap } from '../stream-cut.js';
import { errorFromEvent, rateLimitHeaders } from './http.js';
import { estimateUsage, runOnResponse, writeHead } from './outcome.js';
import type { UpstreamBody, UpstreamResponse } from './transport.js';
import { NOTHING_YET } from './h1.js';
import type { ChainHooks } from './types.js';

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

/**
 * The upstream body's chunks for the delivery loop: `next()` returns a chunk already there at
 * once, null at the end, and a promise only when it must wait (then it is called again); it
 * throws what the body failed with (its connection's error, a close before its end). `close()`
 * ends the reading: the body is destroyed (nothing happens to one that ended).
 */
class BodyChunks {
  private waiting: (() => void) | undefined;

  constructor(private readonly body: UpstreamBody) {
    body.onWake(this.wake);
  }

  next(): Buffer | null | Promise<void> {
    const chunk = this.body.take();
    if (chunk !== NOTHING_YET) return chunk;
    return new Promise<void>((resolve) => (this.waiting = resolve));
  }

  close(): void {
    this.body.onWake(undefined);
    this.body.destroy();
  }

  private readonly wake = (): void => {
    const w = this.waiting;
    this.waiting = undefined;
    w?.();
  };
}

/** One streamed attempt's delivery to the client (see the contract above). */
export class StreamDelivery {
  private readonly ctx: RequestContext;
  private readonly attempt: Attempt;
  private readonly hooks: ChainHooks;
  /** The attempt's whole deadline passed (the transport aborted it). */
  private readonly totalTimedOut: () => boolean;
  /** The transport's idle timeout fired (upstream silence is enforced there, not here). */
  private readonly socketIdle: () => boolean;
  private readonly res: ServerResponse;
  /** The upstream's body. */
  private readonly body: UpstreamBody;
  /** The request's reservation (what the cut protects), for the log. */
  private readonly reserve: number;
  /** The output that fits the reservation; undefined when nothing caps this stream. */
  private readonly cap: OutputCap | undefined;
  private readonly translator: ResponseTranslator;
  private readonly parser: SseParser;
  private readonly onEvent: PluginInstance[] | undefined;
  private readonly keepaliveMs: number;
  /** The status line and the first bytes went out (commit() succeeded). */
  private firstSent: boolean;
  /** Set once the output passed the cap: the blocks after that one are dropped. */
  private overflow: boolean;
  /** The preamble held until content begins (written right after the status line). */
  private held: Out;
  /**
   * The one commit of the held preamble, once begun (by content or by the hold's timer): its
   * result, or its promise while a hook or the client's buffer makes it wait.
   */
  private committing: boolean | Promise<boolean> | undefined;
  private holdTimer: NodeJS.Timeout | undefined;
  /** When the client was last written to (the keepalive's reference). */
  private lastWrite: number;
  private keepaliveTimer: NodeJS.Timeout | undefined;

  constructor(
    ctx: RequestContext,
    attempt: Attempt,
    up: UpstreamResponse,
    hooks: ChainHooks,
    totalTimedOut: () => boolean,
    socketIdle: () => boolean,
  ) {
    this.ctx = ctx;
    this.attempt = attempt;
    this.hooks = hooks;
    this.totalTimedOut = totalTimedOut;
    this.socketIdle = socketIdle;
    this.res = ctx.res;
    this.body = up.body;
    // Once the charge of what was streamed passes the request's reservation (input as reported, else
    // estimated; output estimated from the streamed text, 4 characters a token), the stream ends as a
    // length stop: no upstream can overspend a limit by more than a reservation. Reported output
    // arrives with the terminal event, so a stream is never cut after its own end. The output that
    // fits is solved for once per stream (OutputCap); each event compares a character count.
    const body0 = ctx.parsed;
    const reserve = (this.reserve = ctx.admission.reserve);
    const cap = (this.cap =
      reserve > 0 && !isFree(attempt.model.price)
        ? new OutputCap(attempt.model.price, chargeRate(ctx.user, ctx.group), reserve, estimateTokens(ctx.requestChars))
        : undefined);
    this.translator = attempt.conversion!.stream({
      model: attempt.model.id,
      requestId: ctx.ledgerId,
      cut:
        cap && attempt.conversion!.passthrough
          ? {
              choices: body0 ? choices(body0) : 1,
              includeUsage: (body0?.json.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true,
            }
          : undefined,
    });
    this.parser = new SseParser();
    this.onEvent = hooks.onEvent.length > 0 ? hooks.onEvent : undefined;
    this.keepaliveMs = ctx.config.server.streamKeepaliveMs;
    this.firstSent = false;
    this.overflow = false;
    this.held = '';
    this.committing = undefined;
    this.holdTimer = undefined;
    this.lastWrite = Date.now();
    this.keepaliveTimer = undefined;
  }

  /** Streams the upstream's answer to the client; true when the client was answered (the contract above). */
  async run(): Promise<boolean> {
    const { ctx, res, body, translator } = this;
    this.keepaliveTimer = setInterval(StreamDelivery.keepaliveTick, Math.max(10, Math.floor(this.keepaliveMs / 2)), this);
    this.keepaliveTimer.unref();
    const chunks = new BodyChunks(body);
    try {
      for (;;) {
        const chunk = chunks.next();
        if (chunk === null) break;
        if (chunk instanceof Promise) {
          await chunk;
          continue;
        }
        const out = this.handOut(this.parser.feedBytes(chunk));
        if (this.overflow) return await this.cut(out);
        if (!this.firstSent) {
          this.held = join(this.held, out);
          const upstreamErr = translator.upstreamError;
          // The upstream failed before anything reached the client: a real HTTP error, fallback allowed.
          if (upstreamErr && this.committing === undefined) return await this.failBeforeCommit(errorFromEvent(upstreamErr), 'event');
          if (this.holdPreamble()) continue;
          const c = this.commitHeld();
          if (!(typeof c === 'boolean' ? c : await c)) {
            body.destroy();
            return this.notCommitted(false);
          }
          if (this.held) {
            const h = this.held;
            this.held = '';
            const w = this.write(h);
            if (w) await w;
          }
          this.lastWrite = Date.now();
          continue;
        }
        if (out.length) {
          this.lastWrite = Date.now();
          if (!this.writeNow(out)) await this.drained();
        }
      }
      // The upstream's stream ended: what is left of it, then its end (complete or not).
      const c = this.committing;
      if (c !== undefined && !(typeof c === 'boolean' ? c : await c)) return this.notCommitted(false);
      let out = join(this.held, this.handOut(this.parser.endBytes(true)));
      this.held = '';
      const end = translator.end();
      out = join(out, end.text);
      if (!this.firstSent) {
        if (translator.upstreamError) return await this.failBeforeCommit(errorFromEvent(translator.upstreamError), 'event');
        if (!end.complete)
          return await this.failBeforeCommit(
            new GatewayError('UPSTREAM_ERROR', { message: 'The upstream stream ended before completion' }),
          );
        const committed = this.commit();
        if (!(typeof committed === 'boolean' ? committed : await committed)) return this.notCommitted(end.complete);
      }
      const w = this.write(out);
      if (w) await w;
      if (ctx.clientGone.aborted) return this.clientGone(end.complete);
      if (!end.complete) {
        this.failAfterCommit();
        return true;
      }
      const closing = translator.closing(() => this.estimate());
      this.settleUsage(true);
      res.end(closing);
      return true;
    } catch {
      clearTimeout(this.holdTimer);
      if (this.committing instanceof Promise) await this.committing.catch(() => false);
      // The client went away: the upstream is aborted; bill what was generated, write nothing.
      if (ctx.clientGone.aborted) return this.clientGone(false);
      if (!this.firstSent) {
        return await this.failBeforeCommit(
          new GatewayError('UPSTREAM_ERROR', {
            message: this.socketIdle()
              ? 'The upstream stopped sending data (idle timeout)'
              : this.totalTimedOut()
                ? 'Upstream request timed out'
                : 'The upstream connection failed',
          }),
        );
      }
      this.failAfterCommit();
      return true;
    } finally {
      chunks.close();
      clearTimeout(this.holdTimer);
      clearInterval(this.keepaliveTimer);
    }
  }

  /**
   * Translates one chunk's blocks into what goes to the client, running the onEvent hooks and
   * setting `overflow` at the block that passes the cap (the blocks after it are dropped).
   */
  private handOut(blocks: SseBytesBlock[]): Out {
    const { translator, onEvent, cap, ctx } = this;
    let out: Out = '';
    // Forwarded blocks that follow each other in one buffer go out as one view of it (the whole
    // chunk itself when every block of it is forwarded).
    let run: Buffer | undefined;
    let runStart = 0;
    let runEnd = 0;
    for (const b of blocks) {
      if (this.overflow) break;
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
      if (cap && !translator.upstreamError && cap.over(translator.usage(), translator.outputChars())) this.overflow = true;
    }
    return run ? join(out, view(run, runStart, runEnd)) : out;
  }

  /**
   * Holds the preamble (message_start, response.created, Chat's role chunk) until content begins,
   * at most `server.preamble_hold`: a model that thinks silently for minutes still gets its headers
   * out. True while the preamble is held (nothing to write yet).
   */
  private holdPreamble(): boolean {
    if (this.translator.started || this.committing !== undefined) return false;
    if (this.held && !this.holdTimer) this.holdTimer = setTimeout(StreamDelivery.holdExpired, this.ctx.config.server.preambleHoldMs, this);
    return true;
  }

  /** The preamble hold's timer: the held preamble is committed without waiting for content. */
  private static holdExpired(this: void, d: StreamDelivery): void {
    const c = d.commitHeld();
    if (c instanceof Promise) c.catch(() => undefined); // the stream's own run reports a failure
  }

  /**
   * Commits, then writes the held preamble; begun once, every caller gets the same result (or
   * promise). Without a promise when nothing waits: the usual case, no promise per stream for it.
   * A failure is a rejected promise, never a throw (the hold's timer calls this too).
   */
  private commitHeld(): boolean | Promise<boolean> {
    if (this.committing === undefined) {
      try {
        this.committing = this.commitWithHeld();
      } catch (e) {
        this.committing = Promise.reject(e instanceof Error ? e : new Error(String(e)));
      }
    }
    return this.committing;
  }

  private commitWithHeld(): boolean | Promise<boolean> {
    clearTimeout(this.holdTimer);
    const c = this.commit();
    if (typeof c !== 'boolean') return c.then((ok) => ok && this.writeHeld());
    return c && this.writeHeld();
  }

  /** Writes the held preamble: true once the client's buffer took it. */
  private writeHeld(): true | Promise<true> {
    const h = this.held;
    this.held = '';
    const w = this.write(h);
    return w ? w.then(() => true as const) : true;
  }

  /**
   * The first client bytes are ready: the attempt succeeded unless a hook asks for a retry. True
   * when the status line was written (the onResponse hooks ran, no retry, the client is there).
   */
  private commit(): boolean | Promise<boolean> {
    const r = runOnResponse(this.ctx, this.attempt, this.hooks);
    return r ? r.then(() => this.commitNow()) : this.commitNow();
  }

  /** commit() once the onResponse hooks are done. */
  private commitNow(): boolean {
    const { ctx, attempt } = this;
    if (attempt.retry || ctx.clientGone.aborted) return false;
    ctx.answeredModel = attempt.model;
    writeHead(ctx, 200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      ...rateLimitHeaders(this.body),
    });
    this.firstSent = true;
    ctx.ttftMs = ctx.clock.now() - ctx.startedAt;
    dropRequestJson(ctx);
    return true;
  }

  /** Writes and reports whether the client's buffer is full (no promise per chunk on the hot path). */
  private writeNow(out: Out): boolean {
    return !out.length || this.ctx.clientGone.aborted || this.res.write(out);
  }

  /** Writes; a promise (to wait for) only while the client's buffer is full and the client is there. */
  private write(out: Out): Promise<void> | undefined {
    return this.writeNow(out) ? undefined : this.drained();
  }

  /** Resolves when the client can take more (or went away). */
  private drained(): Promise<void> {
    const { res, ctx } = this;
    // The one closure left: a listener that removes itself from both emitters (only under backpressure).
    return new Promise<void>((resolve) => {
      const done = () => {
        res.off('drain', done);
        ctx.clientGone.removeEventListener('abort', done);
        resolve();
      };
      res.on('drain', done);
      ctx.clientGone.addEventListener('abort', done, { once: true });
    });
  }

  /** The keepalive's interval timer (one per stream, unref'd). */
  private static keepaliveTick(this: void, d: StreamDelivery): void {
    d.keepalive();
  }

  /**
   * Once committed, an upstream silence is bridged with SSE comments (ignored by every SDK) so
   * proxies and clients do not time the stream out.
   */
  private keepalive(): void {
    if (this.firstSent && !this.ctx.clientGone.aborted && !this.res.writableEnded && Date.now() - this.lastWrite >= this.keepaliveMs) {
      this.res.write(KEEPALIVE);
      this.lastWrite = Date.now();
    }
  }

  /** Past the reservation: stop the upstream, end the client's stream as a length stop, bill what came. */
  private async cut(pending: Out): Promise<boolean> {
    const { ctx, translator } = this;
    this.body.destroy();
    clearTimeout(this.holdTimer);
    if (!this.firstSent) {
      this.held = join(this.held, pending);
      pending = '';
      const c = this.commitHeld();
      if (!(typeof c === 'boolean' ? c : await c)) return this.notCommitted(false);
    }
    this.settleUsage(false);
    ctx.usageEstimated = true;
    ctx.estimateReason = 'cut_at_reservation';
    ctx.streamCut = true;
    const usage = ctx.usage ?? this.estimate();
    const frames = translator.truncate ? translator.truncate(usage) : '';
    ctx.log.warn('stream cut at its reservation: the upstream generated past the output limit', {
      model: this.attempt.model.id,
      reserve: this.reserve,
      output: usage.output,
    });
    if (!ctx.clientGone.aborted) this.res.end(join(pending, frames));
    return true;
  }

  /** Nothing reached the client: the upstream is stopped and the attempt fails (fallback allowed) after the onResponse hooks. */
  private async failBeforeCommit(err: GatewayError, failure: 'connect' | 'event' = 'connect'): Promise<false> {
    this.body.destroy();
    this.attempt.error = err;
    this.attempt.failure = failure;
    await runOnResponse(this.ctx, this.attempt, this.hooks);
    return false;
  }

  /** After commit: usage settled, and the stream ends with the protocol's error event (the upstream's own if it sent one). */
  private failAfterCommit(): void {
    const { attempt, translator, res } = this;
    this.settleUsage(false);
    const stopped = this.ctx.stopped;
    if (stopped) {
      // The gateway ended the stream itself (shutdown past server.drain_timeout): its own doing,
      // said in the protocol's error event, and what was streamed is billed (above).
      attempt.error = stopped;
      res.end(translator.fail({ type: stopped.type, message: stopped.message, code: stopped.code }));
      return;
    }
    const upstreamErr = translator.upstreamError;
    if (upstreamErr) {
      // The upstream's own error frame already reached the client.
      attempt.error = errorFromEvent(upstreamErr);
      res.end();
      return;
    }
    const message = this.socketIdle()
      ? 'The upstream stopped sending data (idle timeout)'
      : this.totalTimedOut()
        ? 'The upstream request timed out'
        : 'The upstream stream ended before completion';
    attempt.error = new GatewayError('UPSTREAM_ERROR', { message });
    res.end(translator.fail({ type: attempt.error.type, message, code: attempt.error.code }));
  }

  /** After commit() said no: the client left (bill it, done) or a hook asked for the next model. */
  private notCommitted(complete: boolean): boolean {
    return this.ctx.clientGone.aborted && !this.attempt.retry ? this.clientGone(complete) : false;
  }

  /**
   * The client left after this upstream answered 200: no fallback, nothing written, and the usage
   * seen so far is billed to this model (wire-notes: bill what was generated) — even inside the
   * preamble hold, where nothing reached the client yet but the upstream already worked.
   */
  private clientGone(complete: boolean): true {
    this.ctx.answeredModel = this.attempt.model;
    this.settleUsage(complete);
    this.attempt.error = new GatewayError('UPSTREAM_ERROR', { message: 'client went away', status: 499 });
    return true;
  }

  /**
   * Puts the stream's usage on the request: the upstream's report (a stream cut short billed at
   * least what was streamed), else an estimate from the streamed text once there is any.
   */
  private settleUsage(complete: boolean): void {
    const { ctx, translator } = this;
    ctx.trace?.answered(this.attempt, translator.answer?.());
    const reported = translator.usage();
    const chars = translator.outputChars();
    if (reported) {
      const u = { ...reported };
      // A stream cut short may have reported only its start: bill at least what was streamed.
      if (!complete) u.output = Math.max(u.output, estimateTokens(chars));
      ctx.usage = u;
      ctx.usageEstimated = u.output !== reported.output;
      if (ctx.usageEstimated) ctx.estimateReason = ctx.clientGone.aborted ? 'client_disconnect' : 'upstream_cut';
    } else if (chars > 0 || complete) {
      ctx.usage = this.estimate();
      ctx.usageEstimated = true;
      ctx.estimateReason = complete ? 'no_usage_reported' : ctx.clientGone.aborted ? 'client_disconnect' : 'upstream_cut';
    }
  }

  /** Usage estimated from the request's size and the streamed text. */
  private estimate(): Usage {
    return estimateUsage(this.ctx, this.translator.outputChars());
  }
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
