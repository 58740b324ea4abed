/**
 * Reads and validates a request body, within the configured limit and the gateway's body memory.
 *
 * - An oversized `Content-Length` is refused before a byte is kept; a body without one is counted
 *   as it arrives and refused the moment it passes the limit. Either way the rest of the body is
 *   then read and dropped (up to DISCARD_MAX bytes), so the client reads its 413 instead of a
 *   connection reset; the connection stays usable when the body ends.
 * - `server.body_memory` bounds the bytes held by all requests at once: a body whose bytes do not
 *   fit waits (paused) up to BODY_MEMORY_WAIT_MS for others to finish, then gets 503. Its bytes
 *   are released when its response closes.
 * - One buffer per body: with a `Content-Length` the bytes are copied into one allocation as they
 *   arrive (no chunk list plus a concatenated copy); the buffer is dropped once decoded unless the
 *   body could not be parsed (then it is kept for the failed-request record).
 * - Slow bodies are Node's `requestTimeout` (server.ts): they never reach here as a hang.
 */
import type { IncomingMessage } from 'node:http';
import { isAscii } from 'node:buffer';
import { GatewayError } from './errors.js';
import type { ParsedBody, RequestContext } from './context.js';
import { wireFor } from './protocols/index.js';

const decoder = new TextDecoder('utf-8', { fatal: true });

/** Bytes of a refused body read and dropped before the connection is closed instead. */
export const DISCARD_MAX = 64 * 1024 * 1024;
/** How long a body waits for room in `server.body_memory` before its 503. */
export const BODY_MEMORY_WAIT_MS = 2_000;

/** The gateway-wide budget of request bytes in flight (`server.body_memory`). */
export class BodyMemory {
  used = 0;
  private readonly waiters: Array<{ n: number; grant: (ok: boolean) => void }> = [];

  constructor(public limit: number) {}

  /** Takes `n` bytes now if they fit (a body alone in the budget always fits). */
  tryTake(n: number): boolean {
    if (this.waiters.length > 0 || (this.used > 0 && this.used + n > this.limit)) return false;
    this.used += n;
    return true;
  }

  /** Takes `n` bytes, waiting up to `ms` for room (FIFO); false when none came. */
  take(n: number, ms: number): Promise<boolean> {
    if (this.tryTake(n)) return Promise.resolve(true);
    return new Promise((resolve) => {
      const w = {
        n,
        grant: (ok: boolean) => {
          clearTimeout(timer);
          resolve(ok);
        },
      };
      const timer = setTimeout(() => {
        const i = this.waiters.indexOf(w);
        if (i >= 0) this.waiters.splice(i, 1);
        w.grant(false);
        this.pump();
      }, ms);
      this.waiters.push(w);
    });
  }

  give(n: number): void {
    this.used = Math.max(0, this.used - n);
    this.pump();
  }

  private pump(): void {
    while (this.waiters.length > 0) {
      const w = this.waiters[0];
      if (this.used > 0 && this.used + w.n > this.limit) return;
      this.waiters.shift();
      this.used += w.n;
      w.grant(true);
    }
  }
}

/** Reads the rest of a refused body and drops it (bounded), so the client can read the answer. */
function discard(req: IncomingMessage): void {
  let n = 0;
  req.removeAllListeners('data');
  req.on('data', (c: Buffer) => {
    n += c.length;
    if (n > DISCARD_MAX) req.socket.destroy();
  });
  req.resume();
}

export function readRaw(req: IncomingMessage, limit: number, memory?: BodyMemory): Promise<{ buf: Buffer; release: () => void }> {
  const declaredText = req.headers['content-length'];
  const declared = declaredText === undefined ? undefined : Number(declaredText);
  if (declared !== undefined && declared > limit) {
    discard(req);
    return Promise.reject(tooLarge(limit));
  }
  let held = 0;
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    memory?.give(held);
  };
  return new Promise<{ buf: Buffer; release: () => void }>((resolve, reject) => {
    // With a Content-Length, one allocation filled as the bytes arrive.
    const whole = declared !== undefined && Number.isSafeInteger(declared) && declared > 0 ? Buffer.allocUnsafe(declared) : undefined;
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (err?: Error) => {
      if (done) return;
      done = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
      req.socket?.off('close', onAborted);
      if (err) {
        release();
        return reject(err);
      }
      const buf = whole ? whole.subarray(0, size) : chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size);
      resolve({ buf, release });
    };
    const fail = (err: GatewayError) => {
      finish(err);
      discard(req);
    };
    const keep = (c: Buffer) => {
      if (whole) {
        if (size + c.length > whole.length) return fail(new GatewayError('INVALID_REQUEST', { message: 'The request body is longer than its Content-Length' }));
        c.copy(whole, size);
      } else chunks.push(c);
      size += c.length;
    };
    const onData = (c: Buffer) => {
      if (size + c.length > limit) return fail(tooLarge(limit));
      if (!memory || whole) return keep(c);
      if (memory.tryTake(c.length)) {
        held += c.length;
        return keep(c);
      }
      // No room: stop reading until there is, or give up.
      req.pause();
      void memory.take(c.length, BODY_MEMORY_WAIT_MS).then((ok) => {
        if (done) {
          if (ok) memory.give(c.length);
          return;
        }
        if (!ok) return fail(memoryFull());
        held += c.length;
        keep(c);
        req.resume();
      });
    };
    const onEnd = () => finish();
    const onError = (e: Error) => finish(new GatewayError('INVALID_REQUEST', { message: 'Could not read the request body', cause: e }));
    const onAborted = () => finish(new GatewayError('INVALID_REQUEST', { message: 'The request body was not received completely' }));
    const start = () => {
      req.on('data', onData);
      req.on('end', onEnd);
      req.on('error', onError);
      req.on('aborted', onAborted);
      // A parse error or a timeout answered by clientError closes the socket without ending `req`.
      req.socket?.once('close', onAborted);
    };
    if (whole && memory) {
      // The declared size is taken up front, waiting for room like any other body.
      const n = whole.length;
      if (memory.tryTake(n)) {
        held = n;
        return start();
      }
      req.pause();
      void memory.take(n, BODY_MEMORY_WAIT_MS).then((ok) => {
        if (!ok) {
          done = true;
          discard(req);
          return reject(memoryFull());
        }
        held = n;
        start();
        req.resume();
      });
      return;
    }
    start();
  });
}

function tooLarge(limit: number): GatewayError {
  return new GatewayError('BODY_TOO_LARGE', { message: `Request body is larger than the limit of ${limit} bytes` });
}

function memoryFull(): GatewayError {
  return new GatewayError('BODY_MEMORY_FULL', { retryAfter: 1 });
}

const bad = (message: string) => new GatewayError('INVALID_REQUEST', { message });

/** The body as text; ASCII (checked natively) is copied, anything else validated as UTF-8. */
function decodeBody(buf: Buffer): string {
  if (buf.length === 0) throw bad('Request body is empty');
  if (isAscii(buf)) return buf.toString('latin1');
  try {
    return decoder.decode(buf);
  } catch {
    throw bad('Request body is not valid UTF-8');
  }
}

/** Bodies above this yield to the event loop between decoding, parsing and sending. */
export const LARGE_BODY = 1024 * 1024;
/** Lets other requests run between the steps of a large body. */
export const yieldTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** The core's own rules for every model call: a JSON object, a string `model`, a boolean `stream`. */
export function parseBody(buf: Buffer, ctx: Pick<RequestContext, 'protocol' | 'route'>): ParsedBody {
  return parseText(decodeBody(buf), ctx);
}

function parseText(text: string, ctx: Pick<RequestContext, 'protocol' | 'route'>): ParsedBody {
  if (text.trim() === '') throw bad('Request body is empty');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    const msg = e instanceof RangeError ? 'nesting is too deep' : (e as Error).message;
    throw bad(`Request body is not valid JSON: ${msg}`);
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) throw bad('Request body must be a JSON object');
  const obj = json as Record<string, unknown>;
  if (!Object.prototype.hasOwnProperty.call(obj, 'model') || obj.model === undefined || obj.model === null) {
    throw bad("'model' is required");
  }
  if (typeof obj.model !== 'string') throw bad("'model' must be a string");
  if (obj.model.trim() === '') throw bad("'model' must not be empty");
  if (obj.stream !== undefined && obj.stream !== null && typeof obj.stream !== 'boolean') throw bad("'stream' must be a boolean");
  let fallback: string[] = [];
  if (obj.models !== undefined && obj.models !== null) {
    if (!Array.isArray(obj.models) || !obj.models.every((m) => typeof m === 'string' && m.length > 0)) {
      throw bad("'models' must be an array of model names");
    }
    fallback = (obj.models as string[]).filter((m) => m !== obj.model);
  }
  if (ctx.protocol) wireFor(ctx.protocol).validate(obj, { history: ctx.route.handler !== 'count-tokens' });
  return { text, json: obj, model: obj.model, stream: obj.stream === true, fallback };
}

/** Reads and parses a model call's body; its bytes count in `memory` until the response closes. */
export async function readBody(ctx: RequestContext, memory?: BodyMemory): Promise<ParsedBody> {
  const { buf, release } = await readRaw(ctx.req, ctx.config.server.bodyLimit, memory);
  if (ctx.res.closed) release();
  else ctx.res.once('close', release);
  try {
    // A large body is decoded and parsed in separate event-loop turns, so the small requests
    // around it wait for one step, not for all of them (docs/limits.md "Request bodies").
    if (buf.length <= LARGE_BODY) return parseBody(buf, ctx);
    await yieldTurn();
    const text = decodeBody(buf);
    await yieldTurn();
    return parseText(text, ctx);
  } catch (e) {
    // Kept only when it could not be parsed: the failed-request record shows what arrived.
    ctx.rawBody = buf;
    throw e;
  }
}
