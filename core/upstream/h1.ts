/**
 * The gateway's HTTP/1.1 client for provider calls: a keep-alive pool of sockets per provider
 * account, one request at a time on each, and a response parser of its own.
 *
 * Why not `http.request` and its `Agent`: every upstream request the gateway makes is the same
 * shape (a POST with headers the gateway chose and a body of known length, its response read by
 * the gateway), and Node's client pays for generality on each one: the `ClientRequest` and
 * `OutgoingMessage` machinery, the Agent's bookkeeping, the parser's callbacks into JavaScript.
 * Measured alone on this project's machine at 8k requests/s over loopback
 * (bench/micro/upstream-client.mjs), the client side of one request cost 42–51 µs of CPU through
 * Node's client and 28–33 µs through this one; inside the gateway the bench's CPU per request fell
 * by more than that (bench/README.md, twelfth update).
 *
 * What it does, as Node's client did for us:
 * - sockets: plain TCP or TLS (with the TLS session reused for new connections); `maxSockets` per
 *   pool, requests beyond it wait in order; at most `maxFree` idle sockets kept, the most recently
 *   used taken first; an idle socket is dropped when the server closes it, when it sends anything,
 *   or once idle longer than the server's `Keep-Alive: timeout=N` hint less a second;
 * - the request: header names and values checked as Node checks them (a bad one throws at once),
 *   head and body written together;
 * - the response: status line and headers (1xx interim responses skipped), the body framed by
 *   `Content-Length`, `Transfer-Encoding: chunked` (extensions and trailers allowed) or the end of
 *   the connection, as an `UpstreamBody`: the fields of Node's `IncomingMessage` the gateway reads,
 *   and the bytes for one reader; its back-pressure pauses the socket. A socket goes back to the pool only
 *   after a complete, well-framed response to a completely written request, never with bytes left
 *   over.
 * Anything malformed fails the exchange with an error whose `code` starts `HPE_` (as Node's
 * parser's do) and closes the socket.
 */
import net from 'node:net';
import tls from 'node:tls';
import type { IncomingHttpHeaders } from 'node:http';

/** Where a pool connects. */
export interface Origin {
  secure: boolean;
  /** Without IPv6 brackets. */
  hostname: string;
  port: number;
}

/** The response headers' largest size (status line included); Node's parser allows 16 KiB. */
const MAX_HEAD = 64 * 1024;
/** A chunk-size line's largest size (extensions included). */
const MAX_CHUNK_LINE = 4096;
/** Trailer section's largest size. */
const MAX_TRAILERS = 16 * 1024;
/**
 * A socket idle for this long is not used again when the server gave no `Keep-Alive` hint (Node's
 * Agent keeps such a socket for ever; a server that closes one sooner is seen doing so, and the
 * socket leaves the pool then).
 */
const DEFAULT_IDLE_MS = 60_000;

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/**
 * A response's header lines when every one is valid: a token, a colon, a value without control
 * characters but tab. One test for the whole head instead of two per line; a head it refuses is
 * checked line by line, for the error Node's parser would give.
 */
const HEADER_LINES =
  /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\x00-\x08\x0a-\x1f\x7f]*(?:\r\n[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\x00-\x08\x0a-\x1f\x7f]*)*$/;
/** What Node refuses in a header value: control characters other than tab, and anything above 0xff. */
const BAD_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
const NOT_ASCII = /[^\x00-\x7f]/;
/** A value both allowed and ASCII has none of these: tab and printable ASCII only. */
const NOT_PLAIN = /[^\t\x20-\x7e]/;

/** The value of a hex digit's byte, or -1 (undefined, past the end, included). */
function hexDigit(b: number | undefined): number {
  if (b === undefined) return -1;
  if (b >= 0x30 && b <= 0x39) return b - 0x30;
  const l = b | 0x20;
  return l >= 0x61 && l <= 0x66 ? l - 0x57 : -1;
}

/** An error of the exchange, with a code as Node's client would give. */
function fail(code: string, message: string): Error & { code: string } {
  return Object.assign(new Error(message), { code });
}

/**
 * A request's head: `POST path HTTP/1.1` and the headers given as a flat [name, value, …] list.
 * Throws (code `ERR_INVALID_HTTP_TOKEN` or `ERR_INVALID_CHAR`, as Node does) for a name that is
 * not a token or a value with a character HTTP does not allow. `ascii` says whether the head is
 * ASCII (then it may be written with a UTF-8 body as one string).
 */
export function requestHead(path: string, headers: string[]): { head: string; ascii: boolean } {
  // `ascii` from the parts as they are checked (names are tokens), not from the joined head after:
  // a regular expression over it made V8 flatten it first, about 2 µs a request in the profile.
  let ascii = NOT_ASCII.test(path) === false;
  let head = `POST ${path} HTTP/1.1\r\n`;
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i];
    const value = headers[i + 1];
    if (!TOKEN.test(name))
      throw Object.assign(new TypeError(`Header name must be a valid HTTP token ["${name}"]`), { code: 'ERR_INVALID_HTTP_TOKEN' });
    if (NOT_PLAIN.test(value)) {
      if (BAD_VALUE.test(value))
        throw Object.assign(new TypeError(`Invalid character in header content ["${name}"]`), { code: 'ERR_INVALID_CHAR' });
      ascii = false;
    }
    head += `${name}: ${value}\r\n`;
  }
  head += '\r\n';
  return { head, ascii };
}

/** One request and its response, from the moment it asks the pool for a socket. */
export interface Exchange {
  /** Writes the request (head and body) to the socket, then calls `sent` once it was all handed to the OS. */
  write(socket: net.Socket, sent: () => void): void;
  /** The response's head arrived: its body follows (consume or destroy it). */
  onResponse(body: UpstreamBody): void;
  /** The exchange failed before the response's head arrived (a failure after it ends the body). */
  onError(err: Error & { code?: string }): void;
  /** Set by the pool: the socket it was given. */
  conn?: Conn;
}

/**
 * Unread bytes past which a body asks its connection to stop reading (a Node `Readable`'s default
 * high-water mark): an unread body holds at most about this much, the rest waits in the kernel.
 */
const HIGH_WATER = 16 * 1024;

/** What the body gives its reader when the body has nothing yet. */
export const NOTHING_YET = undefined;

/**
 * A response body as the gateway reads it: the status, the raw header list (names as sent), the
 * header map built on first use (as Node's `IncomingMessage.headers`), `complete` once its last
 * byte arrived, and its bytes for one reader.
 *
 * Not a Node `Readable`. Its one reader takes the chunks as they came (`take()`) and is told when to
 * look again (`onWake`): more bytes, the end, or a failure. The gateway's readers (a stream's
 * delivery, `readAll`) never needed more, and a `Readable`'s machinery around that (its
 * constructor, buffer list, events and next ticks) was several microseconds of every request.
 *
 * - Back-pressure: once `HIGH_WATER` bytes wait unread, `push` answers false and the connection
 *   pauses its socket; taking the buffer below that resumes it.
 * - `destroy(err?)` drops what waits and ends the body for its reader. An unfinished body closes
 *   its socket (it cannot carry another exchange) and tells its reader only once that socket has
 *   closed, as Node's `IncomingMessage` does: the close comes in a later phase of the event loop,
 *   so when many bodies are destroyed at once (thousands of clients leaving together) every socket
 *   is closed first, and the work each reader then does (billing what was streamed, the records)
 *   follows, instead of each upstream waiting for the work of those closed before it.
 * - A body that failed (its connection broke, the framing was wrong, it was destroyed before its
 *   end) throws from `take()`: the error given, or "the upstream body closed before its end".
 */
export class UpstreamBody {
  complete = false;
  destroyed = false;
  private headerCache: IncomingHttpHeaders | undefined;
  /** Chunks not taken yet, in order. */
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** The connection was asked to stop reading (HIGH_WATER reached). */
  private full = false;
  /** The last byte was pushed. */
  private ended = false;
  /** What `take()` throws once the body failed. */
  private failure: Error | undefined;
  private wake: (() => void) | undefined;

  constructor(
    readonly statusCode: number,
    readonly rawHeaders: string[],
    private conn: Conn | undefined,
  ) {}

  /** The socket while the body is being read (its byte counts tell whether the upstream is quiet). */
  get socket(): net.Socket | undefined {
    return this.conn?.socket;
  }

  get headers(): IncomingHttpHeaders {
    return (this.headerCache ??= headerMap(this.rawHeaders));
  }

  /**
   * The reader's wake-up: called (synchronously, from the connection's callbacks or `destroy`)
   * whenever `take()` may have something new. One reader: a second call replaces the first.
   */
  onWake(wake: (() => void) | undefined): void {
    this.wake = wake;
  }

  /**
   * The next chunk, as it arrived; null once the body ended and everything was taken;
   * `NOTHING_YET` (undefined) while it waits for bytes. Throws the error the body failed with.
   */
  take(): Buffer | null | undefined {
    const { chunks } = this;
    if (chunks.length > 0 && !this.destroyed) {
      const c = chunks.length === 1 ? chunks.pop()! : chunks.shift()!;
      this.buffered -= c.length;
      if (this.full && this.buffered < HIGH_WATER) {
        this.full = false;
        this.conn?.resume();
      }
      return c;
    }
    if (this.failure) throw this.failure;
    return this.ended ? null : NOTHING_YET;
  }

  /** Reads the rest whole: resolves with its bytes at the end, rejects past `limit` bytes (destroying it) or with its failure. */
  readAll(limit: number): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const parts: Buffer[] = [];
      let size = 0;
      const pump = () => {
        try {
          for (let c = this.take(); c !== NOTHING_YET; c = this.take()) {
            if (c === null) {
              this.onWake(undefined);
              resolve(parts.length === 1 ? parts[0] : Buffer.concat(parts, size));
              return;
            }
            size += c.length;
            if (size > limit) {
              this.onWake(undefined);
              this.destroy();
              reject(new Error('upstream body too large'));
              return;
            }
            parts.push(c);
          }
        } catch (e) {
          this.onWake(undefined);
          reject(e instanceof Error ? e : new Error(String(e)));
        }
      };
      this.onWake(pump);
      pump();
    });
  }

  /** Its chunks for `for await` (tests and tools; the gateway's readers use `take`). */
  async *[Symbol.asyncIterator](): AsyncGenerator<Buffer> {
    for (;;) {
      const c = this.take();
      if (c === null) return;
      if (c !== NOTHING_YET) yield c;
      else await new Promise<void>((resolve) => this.onWake(resolve));
    }
  }

  /** Ends the body for its reader (see the top); nothing happens to one destroyed already. */
  destroy(err?: Error): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.chunks = [];
    this.buffered = 0;
    const conn = this.conn;
    this.conn = undefined;
    const done = () => {
      if (err) this.failure = err;
      else if (!this.ended) this.failure = new Error('the upstream body closed before its end');
      else this.failure = undefined;
      this.signal();
    };
    if (!this.complete && conn) conn.destroy(undefined, done);
    else done();
  }

  /** @internal The connection is done with this body. */
  detach(): void {
    this.conn = undefined;
  }

  /** @internal Bytes from the connection: false once it should stop reading (back-pressure). */
  push(chunk: Buffer): boolean {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    if (this.buffered >= HIGH_WATER) this.full = true;
    this.signal();
    return !this.full;
  }

  /** @internal The last byte arrived. */
  end(): void {
    this.ended = true;
    this.signal();
  }

  private signal(): void {
    const w = this.wake;
    if (w !== undefined) w();
  }
}

/** Header names whose repeats Node drops (the first is kept) rather than joins. */
const SINGLE = new Set([
  'age',
  'authorization',
  'content-length',
  'content-type',
  'etag',
  'expires',
  'from',
  'host',
  'if-modified-since',
  'if-unmodified-since',
  'last-modified',
  'location',
  'max-forwards',
  'proxy-authorization',
  'referer',
  'retry-after',
  'server',
  'user-agent',
]);

/** Node's `IncomingMessage.headers` from a raw list: lower-case names; repeats joined with ", " (`cookie` with "; "), `set-cookie` a list, some kept first only. */
export function headerMap(raw: string[]): IncomingHttpHeaders {
  const out: Record<string, string | string[]> = {};
  for (let i = 0; i < raw.length; i += 2) {
    const k = raw[i].toLowerCase();
    const v = raw[i + 1];
    const had = out[k];
    if (k === 'set-cookie') {
      if (had === undefined) out[k] = [v];
      else (had as string[]).push(v);
    } else if (had === undefined) out[k] = v;
    else if (!SINGLE.has(k)) out[k] = `${had as string}${k === 'cookie' ? '; ' : ', '}${v}`;
  }
  return out;
}

/** How the body ends. */
const enum Framing {
  Length,
  Chunked,
  Close,
}

/** Where the parser is. */
const enum Phase {
  Idle,
  Head,
  Body,
  ChunkSize,
  ChunkData,
  ChunkEnd,
  Trailers,
  Done,
}

/** One socket of a pool and the exchange it carries. */
export class Conn {
  readonly socket: net.Socket;
  private ex: Exchange | undefined;
  private body: UpstreamBody | undefined;
  private phase = Phase.Idle;
  /** Bytes of an unfinished head, chunk-size line or trailer section. */
  private pending: Buffer | undefined;
  private framing = Framing.Length;
  /** Bytes left: of a Content-Length body, or of the current chunk. */
  private left = 0;
  private keepAlive = true;
  private sent = false;
  private dead = false;
  /** When it became idle, and for how long it may stay so. */
  idleSince = 0;
  idleMs = DEFAULT_IDLE_MS;

  constructor(
    private readonly pool: Pool,
    socket: net.Socket,
  ) {
    this.socket = socket;
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 1000);
    socket.on('data', this.onData);
    socket.on('end', this.onEnd);
    socket.on('error', this.onError);
    socket.on('close', this.onClose);
  }

  /** Carries one exchange: writes its request and reads its response. */
  start(ex: Exchange): void {
    this.ex = ex;
    ex.conn = this;
    this.phase = Phase.Head;
    this.keepAlive = true;
    this.sent = false;
    this.pending = undefined;
    ex.write(this.socket, this.markSent);
  }

  private readonly markSent = (): void => {
    this.sent = true;
    if (this.phase === Phase.Done) this.finish();
  };

  resume(): void {
    if (this.socket.isPaused()) this.socket.resume();
  }

  /** Closes the socket; `closed` is called once it has (at once when it already had). */
  destroy(err?: Error, closed?: () => void): void {
    if (closed) {
      if (this.dead || this.socket.closed) closed();
      else this.socket.once('close', closed);
    }
    if (!this.dead) this.socket.destroy(err);
  }

  private readonly onData = (chunk: Buffer): void => {
    try {
      this.read(chunk);
    } catch (e) {
      this.protocolError(e as Error);
      return;
    }
    // Complete, with no byte left over: free once the request is written too.
    if (this.phase === Phase.Done && this.sent) this.finish();
  };

  private read(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      switch (this.phase) {
        case Phase.Idle:
        case Phase.Done:
          // Nothing was asked, or the response was complete: bytes now break the framing.
          throw fail('HPE_INVALID_CONSTANT', 'Unexpected data after the response');
        case Phase.Head:
          at = this.readHead(chunk, at);
          break;
        case Phase.Body: {
          if (this.framing === Framing.Close) {
            this.push(chunk, at, chunk.length);
            return;
          }
          const end = Math.min(chunk.length, at + this.left);
          this.left -= end - at;
          this.push(chunk, at, end);
          at = end;
          if (this.left === 0) this.complete();
          break;
        }
        case Phase.ChunkSize:
          at = this.readChunkSize(chunk, at);
          break;
        case Phase.ChunkData: {
          const end = Math.min(chunk.length, at + this.left);
          this.left -= end - at;
          this.push(chunk, at, end);
          at = end;
          if (this.left === 0) {
            this.phase = Phase.ChunkEnd;
            this.left = 2;
          }
          break;
        }
        case Phase.ChunkEnd: {
          // The CRLF after a chunk's data (its two bytes may come in two reads).
          const want = this.left === 2 ? 13 : 10;
          if (chunk[at] !== want) throw fail('HPE_STRICT', 'Expected CRLF after chunk data');
          at++;
          if (--this.left === 0) this.phase = Phase.ChunkSize;
          break;
        }
        case Phase.Trailers:
          at = this.readTrailers(chunk, at);
          break;
      }
    }
  }

  /** Bytes `chunk[at…]` with what was pending: the line or section up to `mark`, or undefined (all kept). */
  private gather(chunk: Buffer, at: number, mark: string, limit: number, code: string): { text: Buffer; next: number } | undefined {
    const prev = this.pending;
    const buf = prev ? Buffer.concat([prev, chunk.subarray(at)]) : at === 0 ? chunk : chunk.subarray(at);
    const from = prev ? Math.max(0, prev.length - mark.length + 1) : 0;
    const i = buf.indexOf(mark, from, 'latin1');
    if (i < 0) {
      if (buf.length > limit) throw fail(code, 'Header overflow');
      this.pending = Buffer.from(buf); // a copy: the socket's chunk is not kept alive by a fragment
      return undefined;
    }
    if (i > limit) throw fail(code, 'Header overflow');
    this.pending = undefined;
    // `next` is in `chunk`'s positions: what of `buf` was consumed, less the pending part.
    return { text: buf.subarray(0, i), next: at + (i + mark.length - (prev ? prev.length : 0)) };
  }

  private readHead(chunk: Buffer, at: number): number {
    const got = this.gather(chunk, at, '\r\n\r\n', MAX_HEAD, 'HPE_HEADER_OVERFLOW');
    if (!got) return chunk.length;
    const text = got.text.toString('latin1');
    const lines = text.split('\r\n');
    const m = /^HTTP\/1\.([01]) ([1-9]\d\d)(?: [^\r\n]*)?$/.exec(lines[0]);
    if (!m) throw fail('HPE_INVALID_CONSTANT', 'Invalid response status line');
    const status = Number(m[2]);
    // Every header line valid at once (the usual case), or each checked for the error to give.
    const valid = lines.length === 1 || HEADER_LINES.test(text.slice(lines[0].length + 2));
    const raw: string[] = [];
    let length = -1;
    let chunked = false;
    let transferEncoding = false;
    let connection = '';
    let keepAliveHint = '';
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i];
      const colon = line.indexOf(':');
      if (colon <= 0) throw fail('HPE_INVALID_HEADER_TOKEN', 'Invalid header line');
      const name = line.slice(0, colon);
      if (!valid && !TOKEN.test(name)) throw fail('HPE_INVALID_HEADER_TOKEN', 'Invalid header name');
      const value = line.slice(colon + 1).trim();
      if (!valid && /[\x00-\x08\x0a-\x1f\x7f]/.test(value)) throw fail('HPE_INVALID_HEADER_TOKEN', 'Invalid header value');
      raw.push(name, value);
      switch (name.length) {
        case 10: {
          const lower = name.toLowerCase();
          if (lower === 'connection') connection += `,${value.toLowerCase()}`;
          else if (lower === 'keep-alive') keepAliveHint = value;
          break;
        }
        case 14:
          if (name.toLowerCase() === 'content-length') {
            // As Node's parser: one Content-Length, digits only.
            if (length >= 0) throw fail('HPE_UNEXPECTED_CONTENT_LENGTH', 'Duplicate Content-Length');
            if (!/^\d{1,15}$/.test(value)) throw fail('HPE_INVALID_CONTENT_LENGTH', 'Invalid Content-Length');
            length = Number(value);
          }
          break;
        case 17:
          if (name.toLowerCase() === 'transfer-encoding') {
            transferEncoding = true;
            const codings = value.toLowerCase().split(',');
            chunked = codings[codings.length - 1].trim() === 'chunked';
          }
          break;
      }
    }
    if (transferEncoding && length >= 0) throw fail('HPE_UNEXPECTED_CONTENT_LENGTH', 'Content-Length with Transfer-Encoding');
    if (status < 200) {
      // An interim response (100 Continue, 103 Early Hints): the real one follows.
      if (status === 101) throw fail('HPE_INVALID_CONSTANT', 'Unexpected protocol switch');
      return got.next;
    }
    const http10 = m[1] === '0';
    this.keepAlive = http10 ? /(^|,)\s*keep-alive\s*(,|$)/.test(connection) : !/(^|,)\s*close\s*(,|$)/.test(connection);
    const hint = /(?:^|[,;\s])timeout\s*=\s*(\d+)/i.exec(keepAliveHint);
    if (hint) this.idleMs = Number(hint[1]) * 1000 - 1000;
    if (status === 204 || status === 304) length = 0;
    else if (chunked) length = -2;
    else if (transferEncoding) length = -1;
    const body = new UpstreamBody(status, raw, this);
    this.body = body;
    if (length === -2) {
      this.framing = Framing.Chunked;
      this.phase = Phase.ChunkSize;
    } else if (length < 0) {
      this.framing = Framing.Close;
      this.keepAlive = false;
      this.phase = Phase.Body;
    } else {
      this.framing = Framing.Length;
      this.left = length;
      this.phase = Phase.Body;
    }
    const ex = this.ex!;
    ex.onResponse(body);
    if (length === 0) this.complete();
    return got.next;
  }

  private readChunkSize(chunk: Buffer, at: number): number {
    // The usual line, whole in this read: hex digits and CRLF, read from the bytes (no text made).
    if (this.pending === undefined) {
      let n = 0;
      let i = at;
      for (let d = hexDigit(chunk[i]); d >= 0 && i - at < 12; d = hexDigit(chunk[++i])) n = n * 16 + d;
      if (i > at && chunk[i] === 13 && chunk[i + 1] === 10) {
        this.chunkSize(n);
        return i + 2;
      }
    }
    const got = this.gather(chunk, at, '\r\n', MAX_CHUNK_LINE, 'HPE_INVALID_CHUNK_SIZE');
    if (!got) return chunk.length;
    const line = got.text.toString('latin1');
    const semi = line.indexOf(';');
    const size = (semi < 0 ? line : line.slice(0, semi)).trim();
    if (!/^[0-9a-fA-F]{1,12}$/.test(size)) throw fail('HPE_INVALID_CHUNK_SIZE', 'Invalid chunk size');
    this.chunkSize(parseInt(size, 16));
    return got.next;
  }

  private chunkSize(n: number): void {
    if (n === 0) this.phase = Phase.Trailers;
    else {
      this.left = n;
      this.phase = Phase.ChunkData;
    }
  }

  /** Trailer lines (read and dropped) up to the empty line that ends the body. */
  private readTrailers(chunk: Buffer, at: number): number {
    const got = this.gather(chunk, at, '\r\n', MAX_TRAILERS, 'HPE_HEADER_OVERFLOW');
    if (!got) return chunk.length;
    if (got.text.length === 0) this.complete();
    return got.next;
  }

  private push(chunk: Buffer, start: number, end: number): void {
    if (end <= start) return;
    const body = this.body!;
    if (body.destroyed) return;
    if (!body.push(start === 0 && end === chunk.length ? chunk : chunk.subarray(start, end))) this.socket.pause();
  }

  /** The response's last byte arrived. */
  private complete(): void {
    this.phase = Phase.Done;
    const body = this.body!;
    body.complete = true;
    body.detach();
    this.body = undefined;
    if (!body.destroyed) body.end();
  }

  /** Request written and response read: the socket is free again, or closed. */
  private finish(): void {
    const { ex } = this;
    if (!ex) return;
    this.ex = undefined;
    ex.conn = undefined;
    this.phase = Phase.Idle;
    this.resume();
    if (this.keepAlive && this.idleMs > 0 && !this.dead && !this.socket.destroyed) this.pool.release(this);
    else this.destroy();
  }

  private protocolError(e: Error): void {
    this.keepAlive = false;
    this.socket.destroy(e);
  }

  private readonly onEnd = (): void => {
    if (this.phase === Phase.Body && this.framing === Framing.Close) {
      this.keepAlive = false;
      this.complete();
      this.finish();
    }
    this.socket.destroy();
  };

  private readonly onError = (err: Error): void => {
    this.end(err);
  };

  private readonly onClose = (): void => {
    this.end(undefined);
  };

  /** The socket is gone: an exchange in progress fails (before its response) or its body is cut. */
  private end(err: (Error & { code?: string }) | undefined): void {
    if (this.dead) return;
    this.dead = true;
    this.pool.gone(this);
    const { ex, body } = this;
    this.ex = undefined;
    this.body = undefined;
    if (!ex) return;
    ex.conn = undefined;
    if (this.phase === Phase.Head) {
      ex.onError(err ?? fail('ECONNRESET', 'socket hang up'));
    } else if (body && !body.complete) {
      body.detach();
      body.destroy(err ?? fail('ECONNRESET', 'aborted'));
    }
  }
}

/**
 * The sockets to one origin for one provider account: at most `maxSockets` open, at most
 * `maxFree` of them idle; requests beyond `maxSockets` wait in order.
 */
export class Pool {
  private readonly free: Conn[] = [];
  private readonly waiting: Exchange[] = [];
  /** Every socket open or opening (busy or idle). */
  private readonly all = new Set<Conn>();
  private session: Buffer | undefined;
  private closed = false;

  constructor(
    private readonly origin: Origin,
    private readonly maxSockets: number,
    private readonly maxFree: number,
  ) {}

  /** Gives the exchange a socket now, or when one is free. */
  send(ex: Exchange): void {
    if (this.closed) return ex.onError(fail('ECONNRESET', 'The transport was closed'));
    const now = Date.now();
    for (let c = this.free.pop(); c; c = this.free.pop()) {
      if (now - c.idleSince <= c.idleMs && !c.socket.destroyed) return c.start(ex);
      c.destroy();
    }
    if (this.all.size < this.maxSockets) return this.connect().start(ex);
    this.waiting.push(ex);
  }

  /** An exchange given up: taken out of the queue, or its socket closed. */
  cancel(ex: Exchange): void {
    if (ex.conn) ex.conn.destroy();
    else {
      const i = this.waiting.indexOf(ex);
      if (i >= 0) this.waiting.splice(i, 1);
    }
  }

  /** @internal A connection finished its exchange cleanly. */
  release(c: Conn): void {
    const next = this.waiting.shift();
    if (next) return c.start(next);
    if (this.closed || this.free.length >= this.maxFree) return c.destroy();
    c.idleSince = Date.now();
    this.free.push(c);
  }

  /** @internal A connection's socket closed. */
  gone(c: Conn): void {
    this.all.delete(c);
    const i = this.free.indexOf(c);
    if (i >= 0) this.free.splice(i, 1);
    // A request that waited for a free slot takes the closed one's.
    const next = this.closed ? undefined : this.waiting.shift();
    if (next) this.connect().start(next);
  }

  /** Closes every socket, busy ones too (their exchanges fail), and refuses what waits or comes. */
  close(): void {
    this.closed = true;
    this.free.length = 0;
    for (const c of this.all) c.destroy();
    for (const ex of this.waiting.splice(0)) ex.onError(fail('ECONNRESET', 'The transport was closed'));
  }

  private connect(): Conn {
    const { secure, hostname, port } = this.origin;
    let socket: net.Socket;
    if (secure) {
      const s = tls.connect({
        host: hostname,
        port,
        servername: net.isIP(hostname) ? undefined : hostname,
        session: this.session,
      });
      s.on('session', (session: Buffer) => (this.session = session));
      socket = s;
    } else {
      socket = net.connect({ host: hostname, port });
    }
    const c = new Conn(this, socket);
    this.all.add(c);
    return c;
  }
}
