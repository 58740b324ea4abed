/**
 * The provider transport: one request per attempt on a keep-alive pool of sockets per provider
 * account (core/upstream/h1.ts, the gateway's own HTTP/1.1 client); each endpoint URL is parsed
 * once, the first time it is used (they all come from the config: a provider's or account's base
 * URL and a fixed path).
 *
 * Why its own client, and not http-proxy-3 or `http.request`:
 * - The request is always the gateway's own (headers it chose, body re-encoded) and the response is
 *   always read by the gateway (usage for billing, SSE for commit and in-stream errors, the stream
 *   cut), never piped through unobserved. http-proxy-3's per-request wrapper (a URL parse,
 *   `setupOutgoing` copying headers, listeners on the client's request and response) therefore did
 *   nothing here that was not undone or repeated, and cost about a tenth of the gateway's
 *   per-request CPU. http-proxy-3 remains the project's proxy where a response is passed through as
 *   bytes: the benchmark's baseline (bench/roles.ts). The gateway has no such path: the upstream
 *   must see exactly the headers we choose (never the client's gateway key), and every answer is
 *   metered.
 * - `http.request` with its `Agent` cost more than anything the gateway does itself (42–51 µs of
 *   CPU per request alone at the bench's rate, against 28–33 µs for h1.ts; see h1.ts).
 *
 * The body: a string is handed to the socket as it is (Node encodes it into memory freed once
 * written); a large body (core/json/text.ts) arrives as parts, written as the socket drains. Either
 * way the transport keeps no copy for the life of a stream.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Writable } from 'node:stream';
import type { ProviderConfig } from '../config/types.js';
import type { OutgoingBody } from '../json/text.js';
import { largeWork } from '../json/share.js';
import { Pool, requestHead, type Exchange, type Origin, type UpstreamBody } from './h1.js';

export type { UpstreamBody } from './h1.js';

export interface UpstreamRequest {
  provider: ProviderConfig;
  /** The provider account (its own keep-alive agent). */
  account?: string;
  /** Full URL of the upstream endpoint. */
  url: string;
  headers: Record<string, string>;
  /** A string, or a large body's parts (written a part at a time as the socket drains). */
  body: string | OutgoingBody;
  /** The whole attempt, from now until `done()`, the wait for the response headers included (`upstream_timeout`). */
  timeoutMs: number;
  /**
   * Longest silence once the upstream began answering (its response headers arrived); 0: none.
   * Waiting for the headers is bounded by `timeoutMs` alone.
   */
  idleTimeoutMs: number;
}

export interface UpstreamResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: UpstreamBody;
}

/** An upstream's answer. The header map is built only when it is read: most are never read. */
class Answer implements UpstreamResponse {
  constructor(
    readonly status: number,
    readonly body: UpstreamBody,
  ) {}

  get headers(): IncomingHttpHeaders {
    return this.body.headers;
  }
}

export class TransportError extends Error {
  constructor(
    readonly kind: 'connect' | 'timeout' | 'aborted',
    message: string,
    readonly code?: string,
  ) {
    super(message);
    this.name = 'TransportError';
  }
}

/** An endpoint URL, parsed once. */
interface Target extends Origin {
  /** The Host header: host and port as the URL has them (the port only when not the default). */
  host: string;
  /** Path and query. */
  path: string;
}

export interface UpstreamCall {
  response: Promise<UpstreamResponse>;
  abort: () => void;
  /** The attempt is over (its response read or given up): its timer stops. */
  done: () => void;
  /** The whole attempt took longer than `timeoutMs` (it was aborted then). */
  timedOut: () => boolean;
  /** The upstream went silent past the idle timeout after it began answering. */
  idleTimedOut: () => boolean;
  /** The request was fully handed to the upstream's socket. */
  sent: () => boolean;
}

/** Longest delay a Node timer takes (longer ones fire at once). */
const MAX_DELAY = 2 ** 31 - 1;
/**
 * Silence checks per idle timeout: the attempt's one timer looks at the socket's byte counts this
 * often, so a silence is noticed within 1/8 of the idle timeout after it reached it.
 */
const IDLE_CHECKS = 16;

export class Transport {
  private readonly pools = new Map<string, Pool>();
  private readonly targets = new Map<string, Target>();

  /** One keep-alive pool per provider account and origin. */
  private poolFor(provider: ProviderConfig, t: Target, account = ''): Pool {
    const id = `${provider.name}/${account}|${t.secure}|${t.hostname}|${t.port}|${provider.maxSockets}`;
    let pool = this.pools.get(id);
    if (!pool) {
      pool = new Pool(t, provider.maxSockets, Math.min(64, provider.maxSockets));
      this.pools.set(id, pool);
    }
    return pool;
  }

  private target(url: string): Target {
    let t = this.targets.get(url);
    if (!t) {
      const u = new URL(url);
      const secure = u.protocol === 'https:';
      t = {
        secure,
        hostname: u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname,
        port: u.port ? Number(u.port) : secure ? 443 : 80,
        host: u.host,
        path: u.pathname + u.search,
      };
      this.targets.set(url, t);
    }
    return t;
  }

  /**
   * Sends one attempt. Resolves with the upstream's status line and headers (the body is a stream
   * the caller must consume or destroy); rejects with a TransportError on connection failure or
   * when the upstream is silent past `idleTimeoutMs` once answering, or when `timeoutMs` passes
   * before it answered. `abort()` cancels; `done()` ends the attempt's timer.
   *
   * One timer per attempt covers both limits: it wakes at the whole-attempt deadline, and while
   * the upstream is answering also every 1/16 of the idle timeout to see whether the socket
   * read or wrote anything since (its byte counts), instead of a socket inactivity timer refreshed
   * on every read and a second timer for the deadline.
   */
  send(u: UpstreamRequest): UpstreamCall {
    // Nothing below may keep `u` in a closure: it holds the body, which must not live for a stream's
    // life (the closures returned live as long as the attempt).
    const t = this.target(u.url);
    const idleMs = u.idleTimeoutMs;
    const deadline = Date.now() + u.timeoutMs;
    const step = idleMs > 0 ? Math.max(1, Math.ceil(idleMs / IDLE_CHECKS)) : MAX_DELAY;
    // A string body is handed to the socket as it is: encoded there into memory freed once written
    // (not a Buffer left for the garbage collector). ASCII (most bodies; base64 images always)
    // encodes as latin1, a copy: far cheaper than UTF-8. A large body's parts are encoded one at a
    // time as the socket takes them.
    const body = u.body;
    const bytes = typeof body === 'string' ? Buffer.byteLength(body, 'utf8') : body.bytes;
    const encoding: BufferEncoding = typeof body === 'string' && bytes === body.length ? 'latin1' : 'utf8';
    // A flat [name, value, …] list, checked as it is written into the head. Host and
    // Content-Length are ours to give.
    const given = lowerCaseKeys(u.headers);
    const headers: string[] = ['host', t.host];
    for (const k in given) {
      if (k !== 'host' && k !== 'content-length') headers.push(k, given[k]);
    }
    headers.push('content-length', String(bytes));
    // Outside the promise: a header HTTP does not allow (a plugin's bad value) throws to the caller, as it always did.
    const { head, ascii } = requestHead(t.path, headers);
    let timedOut = false;
    let totalTimedOut = false;
    let sent = false;
    let settled = false;
    /** While the upstream answers: the socket's byte count at the last check, and since when it has not moved. */
    let answering: UpstreamBody | undefined;
    let seen = 0;
    let quietSince = 0;
    let timer: NodeJS.Timeout | undefined;
    let delay = 0;
    const arm = (next: number) => {
      if (timer && next === delay) timer.refresh();
      else {
        clearTimeout(timer);
        delay = next;
        timer = setTimeout(check, next);
      }
    };
    const check = () => {
      const now = Date.now();
      if (now >= deadline) {
        totalTimedOut = true;
        abort();
        return;
      }
      const sock = answering && !answering.complete ? answering.socket : undefined;
      if (sock) {
        const bytes = sock.bytesRead + sock.bytesWritten;
        if (bytes !== seen) {
          seen = bytes;
          quietSince = now;
        } else if (now - quietSince >= idleMs) {
          timedOut = true;
          answering!.destroy(new Error('upstream idle timeout'));
          return;
        }
      }
      arm(Math.min(step, deadline - now, MAX_DELAY));
    };
    const abort = () => {
      clearTimeout(timer);
      // Once answering, the body owns the socket (destroying an unfinished body closes it).
      if (answering) answering.destroy();
      else pool.cancel(ex);
      if (settled) return;
      settled = true;
      reject(new TransportError('aborted', 'aborted'));
    };
    let resolve!: (r: UpstreamResponse) => void;
    let reject!: (e: Error) => void;
    const response = new Promise<UpstreamResponse>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    // The body, until it was handed to the socket (then only the socket's buffer holds it).
    let toWrite: string | OutgoingBody | undefined = body;
    const ex: Exchange = {
      write(socket, done) {
        const b = toWrite!;
        toWrite = undefined;
        // A write that failed (the socket closed first) calls back with its error: not sent.
        const onSent = (err?: Error | null) => {
          if (err) return;
          sent = true;
          done();
        };
        if (typeof b !== 'string') {
          socket.write(head, 'latin1');
          writeParts(b, socket, onSent);
        } else if (encoding === 'latin1' || ascii) {
          // One write, as Node's client does: the head and the body in one string, one encoding.
          socket.write(head + b, encoding, onSent);
        } else {
          socket.cork();
          socket.write(head, 'latin1');
          socket.write(b, 'utf8', onSent);
          socket.uncork();
        }
      },
      onResponse(res) {
        if (settled) return void res.destroy();
        settled = true;
        // From now on, silence is the idle timeout's; before, only the whole-attempt deadline runs.
        answering = res;
        if (idleMs > 0) {
          const sock = res.socket;
          seen = sock ? sock.bytesRead + sock.bytesWritten : 0;
          quietSince = Date.now();
        }
        resolve(new Answer(res.statusCode, res));
      },
      onError(err) {
        toWrite = undefined;
        if (settled) return;
        settled = true;
        reject(new TransportError(timedOut ? 'timeout' : 'connect', err.message, err.code));
      },
    };
    const pool = this.poolFor(u.provider, t, u.account);
    pool.send(ex);
    arm(Math.min(step, u.timeoutMs, MAX_DELAY));
    return {
      response,
      abort,
      done: () => clearTimeout(timer),
      timedOut: () => totalTimedOut,
      idleTimedOut: () => timedOut,
      sent: () => sent,
    };
  }

  close(): void {
    for (const p of this.pools.values()) p.close();
    this.pools.clear();
  }
}

/** The headers with lower-case names, a later spelling of a name replacing an earlier one (as `setHeader` does). */
function lowerCaseKeys(h: Record<string, string>): Record<string, string> {
  for (const k in h) {
    if (k !== k.toLowerCase()) {
      const out: Record<string, string> = {};
      for (const [name, v] of Object.entries(h)) out[name.toLowerCase()] = v;
      return out;
    }
  }
  return h;
}

/**
 * Most characters encoded per write of a large body's parts: Node encodes a string write into a
 * buffer of its own, and below malloc's mmap threshold (128 KiB) those come from reused memory
 * instead of fresh pages for every write.
 */
const WRITE_CHUNK = 64 * 1024;

/**
 * Writes a large body's parts as the upstream socket takes them: one chunk encoded at a time, the
 * next when the socket drained, so the body is never encoded whole (nor held twice); `sent` once
 * the last was handed to the OS. The writes are large-body work and take their turns in its share
 * (core/json/share.ts): a socket that drains at once emits 'drain' in the same turn (a next tick),
 * so without the share one body could be encoded and written for tens of milliseconds while every
 * other request waits.
 */
export function writeParts(body: OutgoingBody, dest: Writable, sent: () => void): void {
  const { parts, asciiParts } = body;
  let k = 0;
  let at = 0;
  const pump = () => {
    while (k < parts.length) {
      if (dest.destroyed) return;
      if (largeWork.left === 0) return largeWork.later(pump);
      const t = performance.now();
      const s = parts[k];
      const ascii = asciiParts[k];
      let end = Math.min(s.length, at + WRITE_CHUNK);
      // Never split a surrogate pair between two UTF-8 writes.
      if (end < s.length && !ascii) {
        const c = s.charCodeAt(end - 1);
        if (c >= 0xd800 && c <= 0xdbff) end--;
      }
      const chunk = at === 0 && end === s.length ? s : s.slice(at, end);
      at = end;
      if (at >= s.length) {
        k++;
        at = 0;
      }
      const more = dest.write(chunk, ascii ? 'latin1' : 'utf8', k === parts.length ? (err) => err || sent() : undefined);
      largeWork.charge(performance.now() - t);
      if (!more) {
        if (k < parts.length) dest.once('drain', pump);
        return;
      }
    }
    if (parts.length === 0) sent();
  };
  pump();
}
