/**
 * The provider transport: http-proxy-3 with `selfHandleResponse` and `buffer` (never its fetch
 * mode), one keep-alive agent per provider account.
 *
 * The upstream must see exactly the headers we choose — never the client's gateway key. http-proxy-3
 * copies `req.headers` into the outgoing request synchronously inside `web()`, so we hand it our
 * header set for the duration of that call instead of scrubbing afterwards (its `proxyReq` event
 * is not even emitted when the client sent `Expect`).
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import { Readable } from 'node:stream';
import httpProxy from 'http-proxy-3';
import type { ProviderConfig } from './config/types.js';

export interface UpstreamRequest {
  req: IncomingMessage;
  res: ServerResponse;
  provider: ProviderConfig;
  /** The provider account (its own keep-alive agent). */
  account?: string;
  /** Full URL of the upstream endpoint. */
  url: string;
  headers: Record<string, string>;
  body: string;
  /**
   * Longest silence once the upstream began answering (its response headers arrived). Waiting for
   * the headers is bounded by the caller's whole-attempt timer (`upstream_timeout`) alone.
   */
  idleTimeoutMs: number;
}

export interface UpstreamResponse {
  status: number;
  headers: IncomingMessage['headers'];
  body: IncomingMessage;
}

export class TransportError extends Error {
  constructor(readonly kind: 'connect' | 'timeout' | 'aborted', message: string, readonly code?: string) {
    super(message);
    this.name = 'TransportError';
  }
}

type Pending = {
  resolve: (r: UpstreamResponse) => void;
  reject: (e: Error) => void;
  idleMs: number;
  proxyReq?: http.ClientRequest;
  timedOut?: boolean;
  /** The request was fully handed to the upstream's socket. */
  sent?: boolean;
};

export class Transport {
  private readonly proxy = httpProxy.createProxyServer({});
  private readonly agents = new Map<string, http.Agent>();
  private readonly pending = new WeakMap<IncomingMessage, Pending>();

  constructor() {
    this.proxy.on('proxyRes', (proxyRes, req) => {
      const p = this.pending.get(req);
      if (!p) {
        proxyRes.resume();
        return;
      }
      this.pending.delete(req);
      // From now on, silence is the idle timeout's; before, only the whole-attempt timer runs.
      const proxyReq = p.proxyReq;
      proxyReq?.setTimeout(p.idleMs, () => {
        p.timedOut = true;
        proxyReq.destroy(new Error('upstream idle timeout'));
      });
      p.resolve({ status: proxyRes.statusCode ?? 502, headers: proxyRes.headers, body: proxyRes });
    });
    this.proxy.on('proxyReq', (proxyReq, req) => {
      const p = this.pending.get(req);
      if (!p) return;
      p.proxyReq = proxyReq;
      proxyReq.once('finish', () => { p.sent = true; });
    });
    // Errors are delivered to the per-call callback; this keeps an unhandled one from throwing.
    this.proxy.on('error', () => {});
  }

  /** One keep-alive agent per provider account (and scheme). */
  agentFor(provider: ProviderConfig, url: string, account = ''): http.Agent {
    const secure = url.startsWith('https:');
    const id = `${provider.name}/${account}|${secure}|${provider.maxSockets}`;
    let agent = this.agents.get(id);
    if (!agent) {
      const opts = { keepAlive: true, maxSockets: provider.maxSockets, maxFreeSockets: Math.min(64, provider.maxSockets), scheduling: 'lifo' as const };
      agent = secure ? new https.Agent(opts) : new http.Agent(opts);
      this.agents.set(id, agent);
    }
    return agent;
  }

  /**
   * Sends one attempt. Resolves with the upstream's status line and headers (the body is a stream
   * the caller must consume or destroy); rejects with a TransportError on connection failure or
   * when the upstream is silent past `idleTimeoutMs` before answering. `abort()` cancels.
   */
  send(u: UpstreamRequest): { response: Promise<UpstreamResponse>; abort: () => void; idleTimedOut: () => boolean; sent: () => boolean } {
    let pending!: Pending;
    const response = new Promise<UpstreamResponse>((resolve, reject) => {
      pending = { resolve, reject, idleMs: u.idleTimeoutMs };
    });
    const req = u.req;
    this.pending.set(req, pending);
    // The one encoded copy of the body; dropped once handed to the socket (not held for a stream's life).
    // ASCII (most bodies; base64 images always) encodes as a copy: far cheaper than UTF-8 encoding.
    let body: Buffer | undefined = Buffer.from(u.body, Buffer.byteLength(u.body, 'utf8') === u.body.length ? 'latin1' : 'utf8');
    const headers: Record<string, string> = { ...u.headers, 'content-length': String(body.length) };
    const saved = u.req.headers;
    const savedMethod = u.req.method;
    u.req.headers = headers;
    u.req.method = 'POST';
    try {
      this.proxy.web(u.req, u.res, {
        target: u.url,
        ignorePath: true,
        changeOrigin: true,
        selfHandleResponse: true,
        // http-proxy-3 only calls `buffer.pipe(proxyReq)`: hand it the whole body in one end()
        // (headers and body in one write) instead of streaming a one-chunk Readable.
        buffer: {
          pipe: (dest: NodeJS.WritableStream) => {
            const b = body;
            body = undefined;
            dest.end(b ?? Buffer.alloc(0));
          },
        } as unknown as Readable,
        agent: this.agentFor(u.provider, u.url, u.account),
        xfwd: false,
      }, (err: Error & { code?: string }) => {
        // After the response began, errors surface on the body stream instead; a settled promise ignores this.
        if (this.pending.get(req) === pending) this.pending.delete(req);
        pending.reject(new TransportError(pending.timedOut ? 'timeout' : 'connect', err.message, err.code));
      });
    } finally {
      u.req.headers = saved;
      u.req.method = savedMethod;
    }
    const abort = () => {
      this.pending.delete(req);
      pending.proxyReq?.destroy();
      pending.reject(new TransportError('aborted', 'aborted'));
    };
    return { response, abort, idleTimedOut: () => pending.timedOut === true, sent: () => pending.sent === true };
  }

  close(): void {
    for (const a of this.agents.values()) a.destroy();
    this.agents.clear();
    this.proxy.close();
  }
}
