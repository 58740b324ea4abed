/**
 * The provider transport: one plain `http.request` (or `https.request`) per attempt on one
 * keep-alive agent per provider account; each endpoint URL is parsed once, the first time it is
 * used (they all come from the config: a provider's or account's base URL and a fixed path).
 *
 * Which path uses what, and why:
 * - Model calls and count_tokens (every upstream request the gateway makes) use `http.request`
 *   directly. The request is always the gateway's own (headers it chose, body re-encoded) and the
 *   response is always read by the gateway (usage for billing, SSE for commit and in-stream errors,
 *   the stream cut), never piped through unobserved. http-proxy-3's per-request wrapper (a URL parse,
 *   `setupOutgoing` copying headers, listeners on the client's request and response) therefore did
 *   nothing here that was not undone or repeated, and cost about a tenth of the gateway's
 *   per-request CPU.
 * - http-proxy-3 remains the project's proxy where a response is passed through as bytes: the
 *   benchmark's baseline (bench/roles.ts). The gateway has no such path: the upstream must see
 *   exactly the headers we choose (never the client's gateway key), and every answer is metered.
 *
 * The body: a string is handed to the request as it is (Node encodes it into memory freed once
 * written); a large body (core/json/text.ts) arrives as parts, written as the socket drains. Either
 * way the transport keeps no copy for the life of a stream.
 */
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import type { ProviderConfig } from '../config/types.js';
import type { OutgoingBody } from '../json/text.js';
import { largeWork } from '../json/share.js';

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
  headers: IncomingMessage['headers'];
  body: IncomingMessage;
}

/** An upstream's answer. Node builds the header map of a response only when it is read: most are never read. */
class Answer implements UpstreamResponse {
  constructor(
    readonly status: number,
    readonly body: IncomingMessage,
  ) {}

  get headers(): IncomingMessage['headers'] {
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
interface Target {
  secure: boolean;
  /** Without IPv6 brackets (what the resolver takes). */
  hostname: string;
  port: number;
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
  private readonly agents = new Map<string, http.Agent>();
  private readonly targets = new Map<string, Target>();

  /** One keep-alive agent per provider account (and scheme). */
  agentFor(provider: ProviderConfig, secure: boolean, account = ''): http.Agent {
    const id = `${provider.name}/${account}|${secure}|${provider.maxSockets}`;
    let agent = this.agents.get(id);
    if (!agent) {
      const opts = {
        keepAlive: true,
        maxSockets: provider.maxSockets,
        maxFreeSockets: Math.min(64, provider.maxSockets),
        scheduling: 'lifo' as const,
      };
      agent = secure ? new https.Agent(opts) : new http.Agent(opts);
      this.agents.set(id, agent);
    }
    return agent;
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
    // A flat [name, value, …] list: Node validates each header as it writes it, without building
    // the per-name header map an object costs. Host and Content-Length are ours to give then.
    const given = lowerCaseKeys(u.headers);
    const headers: string[] = ['host', t.host];
    for (const k in given) {
      if (k !== 'host' && k !== 'content-length') headers.push(k, given[k]);
    }
    headers.push('content-length', String(bytes));
    let timedOut = false;
    let totalTimedOut = false;
    let sent = false;
    let settled = false;
    /** While the upstream answers: the socket's byte count at the last check, and since when it has not moved. */
    let answering: IncomingMessage | undefined;
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
      const sock = answering && !answering.complete ? req.socket : null;
      if (sock) {
        const bytes = sock.bytesRead + sock.bytesWritten;
        if (bytes !== seen) {
          seen = bytes;
          quietSince = now;
        } else if (now - quietSince >= idleMs) {
          timedOut = true;
          req.destroy(new Error('upstream idle timeout'));
          return;
        }
      }
      arm(Math.min(step, deadline - now, MAX_DELAY));
    };
    const abort = () => {
      clearTimeout(timer);
      req.destroy();
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
    // Outside the promise: a header Node refuses (a plugin's bad value) throws to the caller, as it always did.
    const req = (t.secure ? https : http).request(
      {
        hostname: t.hostname,
        port: t.port,
        path: t.path,
        method: 'POST',
        headers: headers as unknown as http.OutgoingHttpHeaders,
        agent: this.agentFor(u.provider, t.secure, u.account),
      },
      (res) => {
        settled = true;
        // From now on, silence is the idle timeout's; before, only the whole-attempt deadline runs.
        if (idleMs > 0) {
          answering = res;
          const sock = req.socket;
          seen = sock ? sock.bytesRead + sock.bytesWritten : 0;
          quietSince = Date.now();
        }
        resolve(new Answer(res.statusCode ?? 502, res));
      },
    );
    // Once the response began, errors surface on its body stream; this listener only keeps them from throwing.
    req.on('error', (err: Error & { code?: string }) => {
      if (settled) return;
      settled = true;
      reject(new TransportError(timedOut ? 'timeout' : 'connect', err.message, err.code));
    });
    req.once('finish', () => {
      sent = true;
    });
    if (typeof body === 'string') req.end(body, encoding);
    else writeParts(body, req);
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
    for (const a of this.agents.values()) a.destroy();
    this.agents.clear();
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
 * next when the socket drained, so the body is never encoded whole (nor held twice). The writes
 * are large-body work and take their turns in its share (core/json/share.ts): a socket that drains
 * at once emits 'drain' in the same turn (a next tick), so without the share one body could be
 * encoded and written for tens of milliseconds while every other request waits.
 */
export function writeParts(body: OutgoingBody, dest: http.ClientRequest): void {
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
      const more = dest.write(chunk, ascii ? 'latin1' : 'utf8');
      largeWork.charge(performance.now() - t);
      if (!more) {
        dest.once('drain', pump);
        return;
      }
    }
    dest.end();
  };
  pump();
}
