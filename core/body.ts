/**
 * Reads and validates a request body, within the configured limit and the gateway's body memory.
 *
 * - An oversized `Content-Length` is refused before a byte is kept; a body without one is counted
 *   as it arrives and refused the moment it passes the limit. Either way the rest of the body is
 *   then read and dropped (`discard`), so the client reads its 413 instead of a connection reset;
 *   the connection stays usable when the body ends.
 * - `server.body_memory` bounds the bytes held by all requests at once: a body whose bytes do not
 *   fit waits (paused) up to BODY_MEMORY_WAIT_MS for others to finish, then gets 503. Its bytes
 *   are released when its response closes. A small body that fits never waits behind large ones.
 * - A body up to LARGE_BODY is read into one buffer (with a `Content-Length`, one allocation
 *   filled as the bytes arrive), decoded and parsed by JSON.parse in one go: the common case keeps
 *   the native path. The buffer is dropped once decoded unless the body could not be parsed (then
 *   it is kept for the failed-request record).
 * - A larger body is decoded as it arrives, a block at a time, and parsed by the incremental
 *   parser (core/json), all within the large bodies' share of each event-loop turn, so it never
 *   holds the requests around it back for long; it is held once, as the decoded pieces.
 * - Slow bodies are Node's `requestTimeout` (server.ts): they never reach here as a hang.
 */
import type { IncomingMessage } from 'node:http';
import { isAscii } from 'node:buffer';
import { GatewayError } from './errors.js';
import { closeInStages } from './connection.js';
import type { RequestContext } from './context.js';
import type { ParsedBody } from './types.js';
import type { ClientSignal } from './store/types.js';
import { wireFor } from './protocols/index.js';
import { BLOCK, LargeText } from './json/text.js';
import { IncrementalJsonParser, JsonSyntaxError } from './json/parse.js';
import { largeWork } from './json/share.js';

const decoder = new TextDecoder('utf-8', { fatal: true });

/** Bytes of a refused body read and dropped with the connection kept; then it closes in stages. */
export const DISCARD_MAX = 64 * 1024 * 1024;
/** How long a body waits for room in `server.body_memory` before its 503. */
export const BODY_MEMORY_WAIT_MS = 2_000;

/** The gateway-wide budget of request bytes in flight (`server.body_memory`). */
export class BodyMemory {
  used = 0;
  private readonly waiters: Array<{ n: number; small: boolean; grant: (ok: boolean) => void }> = [];

  constructor(public limit: number) {}

  /**
   * Takes `n` bytes now if they fit (a body alone in the budget always fits). Bodies wait their
   * turn behind those already waiting, except a small body (`small`: at most the large-body size
   * in all) that fits: it is read at once, so the small requests around large bodies are never
   * queued behind them for room they do not need.
   */
  tryTake(n: number, small = false): boolean {
    if ((this.waiters.length > 0 && !small) || (this.used > 0 && this.used + n > this.limit)) return false;
    this.used += n;
    return true;
  }

  /** Takes `n` bytes, waiting up to `ms` for room (FIFO); false when none came. */
  take(n: number, ms: number, small = false): Promise<boolean> {
    if (this.tryTake(n, small)) return Promise.resolve(true);
    return new Promise((resolve) => {
      const w = {
        n,
        small,
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

  /** Grants waiters in order while they fit; a small waiter that fits need not wait for those before it. */
  private pump(): void {
    let i = 0;
    while (i < this.waiters.length) {
      const w = this.waiters[i];
      if ((i === 0 || w.small) && (this.used === 0 || this.used + w.n <= this.limit)) {
        this.waiters.splice(i, 1);
        this.used += w.n;
        w.grant(true);
      } else i++;
    }
  }
}

/**
 * Reads the rest of a refused body and drops it, so the client can read the answer: up to
 * DISCARD_MAX bytes with the connection kept (usable again once the body ends); past that the
 * connection closes in stages (core/connection.ts), dropping at most DISCARD_MAX more.
 */
function discard(req: IncomingMessage): void {
  let n = 0;
  req.removeAllListeners('data');
  req.on('data', (c: Buffer) => {
    n += c.length;
    if (n > 2 * DISCARD_MAX) req.socket.destroy();
    else if (n > DISCARD_MAX) closeInStages(req.socket, req);
  });
  req.resume();
}

/**
 * A large body's bytes decoded to text as they arrive, a block at a time: each full block is
 * checked (ASCII natively, else UTF-8 by a fatal decoder, never splitting a character), decoded
 * into one flat piece and the block reused, so the body is held once, as text, and no step touches
 * more than a block. Bytes that are not UTF-8 stop the decoding; the rest is only counted.
 */
export class TextCollector {
  readonly text = new LargeText();
  /** Bytes received. */
  bytes = 0;
  /** The bytes are not valid UTF-8. */
  invalid = false;
  /** When invalid: the body's first bytes (at most a block), for the failed-request record. */
  rawHead?: Buffer;
  private block: Buffer;
  private fill = 0;

  constructor(readonly blockSize = BLOCK) {
    this.block = Buffer.allocUnsafe(blockSize);
  }

  write(c: Buffer): void {
    this.bytes += c.length;
    if (this.invalid) return;
    let at = 0;
    while (at < c.length) {
      const n = Math.min(c.length - at, this.block.length - this.fill);
      c.copy(this.block, this.fill, at, at + n);
      this.fill += n;
      at += n;
      if (this.fill === this.block.length) this.flush(false);
      if (this.invalid) return;
    }
  }

  end(): void {
    if (!this.invalid && this.fill > 0) this.flush(true);
    this.block = Buffer.alloc(0);
  }

  private flush(final: boolean): void {
    const b = this.block;
    let n = this.fill;
    if (!final) {
      // Keep an incomplete UTF-8 sequence at the end for the next block.
      let k = n - 1;
      while (k >= 0 && n - k <= 4 && (b[k] & 0xc0) === 0x80) k--;
      if (k >= 0 && b[k] >= 0xc0) {
        const len = b[k] >= 0xf0 ? 4 : b[k] >= 0xe0 ? 3 : 2;
        if (k + len > n) n = k;
      }
      if (n === 0) n = this.fill; // not UTF-8 at all: let the decoder say so
    }
    const bytes = b.subarray(0, n);
    const ascii = isAscii(bytes);
    let piece: string;
    if (ascii) piece = bytes.toString('latin1');
    else {
      try {
        piece = decoder.decode(bytes);
      } catch {
        this.invalid = true;
        const first = this.text.pieces[0];
        this.rawHead = first === undefined ? Buffer.from(bytes) : Buffer.from(first, this.text.ascii[0] ? 'latin1' : 'utf8');
        this.block = Buffer.alloc(0);
        return;
      }
    }
    this.text.push(piece, ascii, !hasControl(bytes), n);
    b.copy(b, 0, n, this.fill);
    this.fill -= n;
  }
}

/**
 * Whether any byte is below 0x20: four bytes a word (a byte x < 0x20 sets the high bit of
 * (x - 0x20) & ~x), four words a step; blocks from allocUnsafe are aligned.
 */
function hasControl(b: Buffer): boolean {
  let i = 0;
  if (b.byteOffset % 4 === 0) {
    const u = new Uint32Array(b.buffer, b.byteOffset, b.length >>> 2);
    const n = u.length;
    let w = 0;
    for (; w + 4 <= n; w += 4) {
      const p = u[w];
      const q = u[w + 1];
      const r = u[w + 2];
      const s = u[w + 3];
      if ((((p - 0x20202020) & ~p) | ((q - 0x20202020) & ~q) | ((r - 0x20202020) & ~r) | ((s - 0x20202020) & ~s)) & 0x80808080) return true;
    }
    for (; w < n; w++) if (((u[w] - 0x20202020) & ~u[w] & 0x80808080) !== 0) return true;
    i = n * 4;
  }
  for (; i < b.length; i++) if (b[i] < 0x20) return true;
  return false;
}

export interface RawBody {
  /** A body up to LARGE_BODY bytes, as received. */
  buf?: Buffer;
  /** A larger body, decoded as it arrived. */
  large?: TextCollector;
  release: () => void;
}

/**
 * Reads a request's body. `closed` is aborted when the client's connection closes (the gateway's
 * one listener per connection does it, so a read adds no listener to the socket): a parse error
 * or a timeout answered by clientError closes the socket without ending `req`.
 */
export function readRaw(
  req: IncomingMessage,
  limit: number,
  closed: ClientSignal,
  memory?: BodyMemory,
  largeAt = LARGE_BODY,
): Promise<RawBody> {
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
  return new Promise<RawBody>((resolve, reject) => {
    const known = declared !== undefined && Number.isSafeInteger(declared) && declared > 0;
    // A large body is decoded block by block as it arrives; a small one with a Content-Length goes
    // into one allocation filled as the bytes arrive; a small one without, into a chunk list until
    // it passes the large-body size.
    let large = known && declared > largeAt ? new TextCollector() : undefined;
    const whole = known && !large ? Buffer.allocUnsafe(declared) : undefined;
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (err?: Error) => {
      if (done) return;
      done = true;
      closed.removeEventListener('abort', onAborted);
      if (err) {
        // The rest of the body is discarded: nothing here may see it. (After `end` nothing comes:
        // the request's own listeners stay, it is dropped with them.)
        req.off('data', onData);
        req.off('end', onEnd);
        req.off('error', onError);
        req.off('aborted', onAborted);
        release();
        return reject(err);
      }
      if (large) {
        large.end();
        return resolve({ large, release });
      }
      const buf = whole ? whole.subarray(0, size) : chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size);
      resolve({ buf, release });
    };
    const fail = (err: GatewayError) => {
      finish(err);
      discard(req);
    };
    // A large body is decoded within the large bodies' share of each turn (core/json/share.ts):
    // Node reads up to 32 chunks of a socket at once, and decoding them all in one go (for each of
    // several bodies) would hold every other request back. A chunk that arrives once this turn's
    // share is spent is not decoded: it waits (as the Buffer it came in, counted already) for a
    // later turn with room, and reading pauses meanwhile. Checking before decoding rather than
    // after matters: with eight bodies in flight, each decoding "one more chunk" (which may
    // complete a 1 MiB block) after the share ran out made turns of 20 ms and more.
    let waiting = false;
    let throttled = false;
    let ended = false;
    const queued: Buffer[] = [];
    const decodeQueued = () => {
      while (queued.length > 0 && largeWork.left > 0 && !done) decode(queued.shift()!);
      if (done) return;
      if (queued.length > 0) return largeWork.later(decodeQueued);
      throttled = false;
      if (ended) return finish();
      if (!waiting) req.resume();
    };
    const decode = (c: Buffer) => {
      const t = performance.now();
      large!.write(c);
      largeWork.charge(performance.now() - t);
    };
    const keep = (c: Buffer) => {
      if (known && size + c.length > declared)
        return fail(new GatewayError('INVALID_REQUEST', { message: 'The request body is longer than its Content-Length' }));
      size += c.length;
      if (large) {
        if (throttled || largeWork.left === 0) {
          queued.push(c);
          if (!throttled) {
            throttled = true;
            req.pause();
            largeWork.later(decodeQueued);
          }
        } else decode(c);
      } else if (whole) c.copy(whole, size - c.length);
      else {
        chunks.push(c);
        if (size > largeAt) {
          large = new TextCollector();
          for (const k of chunks.splice(0)) large.write(k);
        }
      }
    };
    const onData = (c: Buffer) => {
      if (size + c.length > limit) return fail(tooLarge(limit));
      if (!memory || known) return keep(c);
      const small = size + c.length <= largeAt;
      if (memory.tryTake(c.length, small)) {
        held += c.length;
        return keep(c);
      }
      // No room: stop reading until there is, or give up.
      req.pause();
      waiting = true;
      void memory.take(c.length, BODY_MEMORY_WAIT_MS, small).then((ok) => {
        waiting = false;
        if (done) {
          if (ok) memory.give(c.length);
          return;
        }
        if (!ok) return fail(memoryFull());
        held += c.length;
        keep(c);
        if (!throttled) req.resume();
      });
    };
    // The body ended while some of it still waits for its turn to be decoded: done once it was.
    const onEnd = () => {
      if (queued.length > 0) ended = true;
      else finish();
    };
    const onError = (e: Error) => finish(new GatewayError('INVALID_REQUEST', { message: 'Could not read the request body', cause: e }));
    const onAborted = () => finish(new GatewayError('INVALID_REQUEST', { message: 'The request body was not received completely' }));
    const start = () => {
      req.on('data', onData);
      req.on('end', onEnd);
      req.on('error', onError);
      req.on('aborted', onAborted);
      if (closed.aborted) onAborted();
      else closed.addEventListener('abort', onAborted);
    };
    if (known && memory) {
      // The declared size is taken up front, waiting for room like any other body.
      const n = declared;
      if (memory.tryTake(n, n <= largeAt)) {
        held = n;
        return start();
      }
      req.pause();
      void memory.take(n, BODY_MEMORY_WAIT_MS, n <= largeAt).then((ok) => {
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

/** Bodies above this are decoded as they arrive and parsed over many event-loop turns (docs/operations.md "Hostile and broken clients"). */
export const LARGE_BODY = 1024 * 1024;
/** Lets other requests run between the steps of a large body. */
export const yieldTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** The core's own rules for every model call: a JSON object, a string `model`, a boolean `stream`. */
export function parseBody(buf: Buffer, ctx: Pick<RequestContext, 'protocol' | 'route'>): ParsedBody {
  const text = decodeBody(buf);
  if (text.trim() === '') throw bad('Request body is empty');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    const msg = e instanceof RangeError ? 'nesting is too deep' : (e as Error).message;
    throw bad(`Request body is not valid JSON: ${msg}`);
  }
  return checkBody(json, text, buf.length, ctx);
}

/**
 * A large body, parsed a slice of time per event-loop turn: the result is what JSON.parse would
 * give, its long strings views of the text (core/json/parse.ts).
 */
export async function parseLarge(large: TextCollector, ctx: Pick<RequestContext, 'protocol' | 'route' | 'signal'>): Promise<ParsedBody> {
  if (large.invalid) throw bad('Request body is not valid UTF-8');
  const parser = new IncrementalJsonParser(large.text);
  try {
    for (;;) {
      if (largeWork.left === 0) await largeWork.next();
      if (ctx.signal.aborted) throw new GatewayError('UPSTREAM_ERROR', { message: 'client went away', status: 499 });
      const t = performance.now();
      const done = parser.run(largeWork.left);
      largeWork.charge(performance.now() - t);
      if (done) break;
    }
  } catch (e) {
    if (!(e instanceof JsonSyntaxError)) throw e;
    if (parser.empty) throw bad('Request body is empty');
    throw bad(`Request body is not valid JSON: ${e.message}`);
  }
  const text = large.text.toString();
  const body = checkBody(parser.value, text, large.bytes, ctx);
  body.large = { text: large.text, top: parser.top!, ropes: parser.ropes };
  return body;
}

function checkBody(json: unknown, text: string, bytes: number, ctx: Pick<RequestContext, 'protocol' | 'route'>): ParsedBody {
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
  if (ctx.route.handler !== 'count-tokens') checkOutputCap(obj);
  if (ctx.protocol) wireFor(ctx.protocol).validate(obj, { history: ctx.route.handler !== 'count-tokens' });
  return { text, json: obj, model: obj.model, stream: obj.stream === true, fallback, bytes };
}

/**
 * The largest output cap a request may ask for (2³¹ − 1). The cap prices the request's reservation
 * (docs/limits.md "Admission"): no model produces anywhere near so many tokens, and a larger one
 * could not be priced in integer micro-USD, so it is the client's error (400, not retried) rather
 * than a billing failure it would retry forever.
 */
export const MAX_OUTPUT_TOKENS = 2_147_483_647;

/** Every output-cap field the reservation reads (core/billing.ts `requestedMaxTokens`), whatever the protocol. */
function checkOutputCap(obj: Record<string, unknown>): void {
  for (const k of ['max_completion_tokens', 'max_tokens', 'max_output_tokens']) {
    const v = obj[k];
    if (typeof v === 'number' && !(v <= MAX_OUTPUT_TOKENS)) {
      throw bad(`'${k}' must be at most ${MAX_OUTPUT_TOKENS} (no model produces that many tokens)`);
    }
  }
}

/** Reads and parses a model call's body; its bytes count in `memory` until the request's handling ends. */
export async function readBody(ctx: RequestContext, memory?: BodyMemory): Promise<ParsedBody> {
  const { buf, large, release } = await readRaw(ctx.req, ctx.config.server.bodyLimit, ctx.connectionClosed, memory);
  ctx.holdBody(release);
  if (large) {
    try {
      return await parseLarge(large, ctx);
    } catch (e) {
      // What arrived, for the failed-request record: its first bytes or characters (the record
      // keeps no more than that) and its full length.
      ctx.rawBody = large.rawHead ?? large.text.head(RAW_HEAD);
      ctx.rawBodyLength = large.invalid ? large.bytes : large.text.length;
      throw e;
    }
  }
  try {
    return parseBody(buf!, ctx);
  } catch (e) {
    // Kept only when it could not be parsed: the failed-request record shows what arrived.
    ctx.rawBody = buf;
    throw e;
  }
}

/** Characters of a large body kept for the failed-request record (it keeps at most 1 MiB of a body). */
const RAW_HEAD = 1024 * 1024 + 1;

/**
 * The body for a failed-request record, which keeps at most its first MiB: what could not be
 * parsed, else the parsed text; of a large body only its head, with its full length.
 */
export function recordedBody(ctx: Pick<RequestContext, 'rawBody' | 'rawBodyLength' | 'parsed' | 'requestChars'>): {
  body?: Buffer | string;
  bodyLength?: number;
} {
  if (ctx.rawBody !== undefined) return { body: ctx.rawBody, bodyLength: ctx.rawBodyLength };
  const p = ctx.parsed;
  if (!p) return {};
  if (p.large) return { body: p.large.text.head(RAW_HEAD), bodyLength: p.large.text.length };
  return { body: p.text, bodyLength: ctx.requestChars > p.text.length ? ctx.requestChars : undefined };
}
