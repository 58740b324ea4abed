/**
 * The mock upstream (`kind: mock` providers): a real HTTP server speaking OpenAI Chat Completions,
 * Anthropic Messages and OpenAI Responses as the recorded transcripts do, streaming or not, with
 * per-request failure directives. Used by the tests, the demo config and the benchmark.
 * Behaviour and directives: docs/mock.md.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import { once } from 'node:events';
import { SseParser } from '../core/sse.js';
import { parseDirectives, splitModel, type Directives } from './directives.js';
import { buildPlan, sha256, makeId, type Extracted, type Plan, type Protocol } from './content.js';
import { protocolError, type ErrorReply } from './errors.js';
import { chatFrames, chatStreamError, extractChat, renderChat, validateChat, type StreamErrorCtx } from './chat.js';
import { countTokensBody, extractMessages, messageFrames, messagesStreamError, renderMessage, validateMessages } from './messages.js';
import { extractResponses, inputTokensBody, renderResponse, responseFrames, responsesStreamError, validateResponses } from './responses.js';

export interface MockServer {
  /** e.g. http://127.0.0.1:45678 (no trailing slash, no /v1). */
  url: string;
  port: number;
  /** The last `keepRequests` requests received, oldest first. */
  requests: MockRequestRecord[];
  /**
   * Per credential (the `x-api-key`, else the `Authorization: Bearer` token; `''` for none): what
   * it received, created on first use. Tells the accounts of a pool apart.
   */
  credential(key: string): CredentialStats;
  /** Every credential seen (or scripted) so far. */
  readonly credentials: ReadonlyMap<string, CredentialStats>;
  /**
   * Scripts the answers to one credential (replacing its previous script): `always` directives on
   * every request, and `next` one-shot directives consumed one per request, in order. They apply
   * after the request's own directives (so they win). Directive syntax: docs/mock.md.
   */
  script(key: string, script: CredentialScript): void;
  /** POSTs to a known endpoint being answered now (from arrival until the response ends or the client goes). */
  readonly inFlight: number;
  /** The most `inFlight` has been since start or the last `resetPeak()`. */
  readonly peakInFlight: number;
  resetPeak(): void;
  close(): Promise<void>;
}

export interface CredentialStats {
  /** Requests received. */
  requests: number;
  /** Requests received and not yet answered to the end (or abandoned). */
  inFlight: number;
  /** The highest `inFlight` seen. */
  maxInFlight: number;
  /** Arrival times (epoch ms) of the last `keepRequests` requests. */
  arrivals: number[];
}

export interface CredentialScript {
  /** Directives for every request, e.g. `delay=2000`. */
  always?: string;
  /** One-shot directives, one per request, e.g. `['status=429 retry_after=2']`. */
  next?: string[];
}

export interface MockRequestRecord {
  method: string;
  /** Path as received, query string included. */
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** The credential it carried (see `MockServer.credential`). */
  credential: string;
  /** Arrival time, epoch ms. */
  at: number;
}

/** The credential a request carries: `x-api-key`, else a Bearer token, else `''`. */
function credentialOf(req: IncomingMessage): string {
  const key = req.headers['x-api-key'];
  if (typeof key === 'string' && key) return key;
  const m = /^bearer\s+(.+)$/i.exec(req.headers.authorization ?? '');
  return m ? m[1].trim() : '';
}

export interface MockServerOptions {
  host?: string;
  port?: number;
  /** Folder the `replay=` directive reads from (no folder: replay answers 400). */
  fixturesDir?: string;
  /** How many requests `requests` keeps (default 50). */
  keepRequests?: number;
}

type Endpoint = 'chat' | 'messages' | 'count_tokens' | 'responses' | 'input_tokens';

const ROUTES: Record<string, Endpoint> = {
  '/chat/completions': 'chat',
  '/messages': 'messages',
  '/messages/count_tokens': 'count_tokens',
  '/responses': 'responses',
  '/responses/input_tokens': 'input_tokens',
};

function protocolOf(e: Endpoint | undefined, pathname: string): Protocol {
  if (e === 'messages' || e === 'count_tokens') return 'messages';
  if (e === 'responses' || e === 'input_tokens') return 'responses';
  if (e === 'chat') return 'chat';
  return pathname.includes('messages') ? 'messages' : 'chat';
}

/** Strips the query, a trailing slash and the optional `/v1` prefix. */
function routePath(url: string): string {
  let p = url.split('?')[0] || '/';
  if (p.length > 1 && p.endsWith('/')) p = p.slice(0, -1);
  if (p === '/v1') return '/';
  if (p.startsWith('/v1/')) p = p.slice(3);
  return p;
}

const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' };

interface Ctx {
  req: IncomingMessage;
  res: ServerResponse;
  protocol: Protocol;
  endpoint?: Endpoint;
  body: string;
  json: unknown;
  model: string;
  d: Directives;
  seed: string;
  requestId: string;
  /** Aborted when the client goes away or the server closes. */
  signal: AbortSignal;
}

function idHeaders(ctx: Ctx): Record<string, string> {
  return ctx.protocol === 'messages' ? { 'request-id': ctx.requestId } : { 'x-request-id': ctx.requestId, 'openai-processing-ms': '1' };
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted || ms <= 0) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

function gone(res: ServerResponse): boolean {
  return res.destroyed || res.writableEnded;
}

/** Writes and resolves once the bytes are handed to the socket (or the socket is gone). */
function writeFlushed(res: ServerResponse, chunk: string | Buffer): Promise<void> {
  return new Promise((resolve) => {
    if (gone(res)) return resolve();
    res.write(chunk, () => resolve());
  });
}

async function writeOrDrain(res: ServerResponse, chunk: string | Buffer, signal: AbortSignal): Promise<void> {
  if (gone(res)) return;
  if (res.write(chunk)) return;
  if (signal.aborted) return;
  await Promise.race([once(res, 'drain'), once(res, 'close')]).catch(() => undefined);
}

function sendError(ctx: Ctx, e: ErrorReply): void {
  const { res } = ctx;
  if (gone(res)) return;
  const data = Buffer.from(e.body);
  res.writeHead(e.status, { ...e.headers, 'content-length': String(data.length) });
  res.end(data);
}

function fail(ctx: Ctx, status: number, message?: string): void {
  sendError(ctx, protocolError(ctx.protocol, status, ctx.d, ctx.model, ctx.requestId, message));
}

/** A JSON body; with `cut_after=n` only its first n bytes (at most all but one) are written, then the socket dies. */
async function sendBody(ctx: Ctx, status: number, headers: Record<string, string>, data: Buffer): Promise<void> {
  const { res, d } = ctx;
  if (gone(res)) return;
  if (d.cutAfter === undefined) {
    res.writeHead(status, { ...headers, 'content-length': String(data.length) });
    res.end(data);
    return;
  }
  res.writeHead(status, { ...headers, 'content-length': String(data.length) });
  res.flushHeaders();
  const n = Math.min(d.cutAfter, Math.max(0, data.length - 1));
  if (n > 0) await writeFlushed(res, data.subarray(0, n));
  else await sleep(10, ctx.signal);
  res.destroy();
}

/**
 * Streams `frames` honouring chunk_delay, cut_after (destroy after n frames), hang_after (go silent
 * after n frames) and stream_error (after n frames, the protocol's error frames, then end).
 */
async function sendFrames(
  ctx: Ctx,
  status: number,
  headers: Record<string, string>,
  frames: string[],
  errorFrames: (n: number) => string[],
): Promise<void> {
  const { res, d, signal } = ctx;
  if (gone(res)) return;
  res.writeHead(status, headers);
  res.flushHeaders();
  const cut = d.cutAfter;
  let n = 0;
  const pause = async () => {
    if (n > 0 && d.chunkDelay) await sleep(d.chunkDelay, signal);
  };
  for (const frame of frames) {
    if (d.streamError !== undefined && n >= d.streamError) break;
    if (cut !== undefined && n >= cut) break;
    if (d.hangAfter !== undefined && n >= d.hangAfter) return; // silent; close() or the client ends it
    await pause();
    if (gone(res)) return;
    if (cut !== undefined) await writeFlushed(res, frame);
    else await writeOrDrain(res, frame, signal);
    n++;
  }
  if (gone(res)) return;
  if (d.streamError !== undefined && n >= d.streamError) {
    await pause();
    for (const f of errorFrames(n)) await writeOrDrain(res, f, signal);
    res.end();
    return;
  }
  if (cut !== undefined) {
    // Give the written frames a moment on the wire, then die without a terminal chunk.
    await sleep(5, signal);
    res.destroy();
    return;
  }
  if (d.hangAfter !== undefined && n >= d.hangAfter) return;
  res.end();
}

function streamErrorFor(ctx: Ctx, created: number, body: Record<string, any>): (n: number) => string[] {
  const ectx: StreamErrorCtx = { model: ctx.model, seed: ctx.seed, created, body, directives: ctx.d };
  if (ctx.protocol === 'messages') return () => messagesStreamError(ectx);
  if (ctx.protocol === 'responses') return (n) => responsesStreamError(ectx, n);
  return () => chatStreamError(ectx);
}

function contentTypeOf(file: string): string {
  const ext = path.extname(file).toLowerCase();
  if (ext === '.sse') return 'text/event-stream; charset=utf-8';
  if (ext === '.json') return 'application/json';
  return 'text/plain; charset=utf-8';
}

async function replay(ctx: Ctx, fixturesDir: string | undefined): Promise<void> {
  const rel = ctx.d.replay ?? '';
  if (!fixturesDir) return fail(ctx, 400, 'mock: replay needs a fixtures directory (fixtures_dir) and none is configured');
  const parts = rel.split(/[\\/]+/);
  if (rel === '' || path.isAbsolute(rel) || /^[a-zA-Z]:/.test(rel) || rel.includes('\0') || parts.includes('..')) {
    return fail(ctx, 400, `mock: replay path must be relative to the fixtures directory without "..": ${rel}`);
  }
  let root: string;
  let file: string;
  try {
    root = await realpath(fixturesDir);
  } catch {
    return fail(ctx, 400, 'mock: the fixtures directory does not exist');
  }
  try {
    file = await realpath(path.resolve(root, rel));
  } catch {
    return fail(ctx, 404, `mock: no such fixture: ${rel}`);
  }
  if (!file.startsWith(root + path.sep)) return fail(ctx, 400, `mock: replay path escapes the fixtures directory: ${rel}`);
  let data: Buffer;
  try {
    data = await readFile(file);
  } catch {
    return fail(ctx, 404, `mock: cannot read fixture: ${rel}`);
  }
  const d = ctx.d;
  const status = d.status ?? 200;
  const headers: Record<string, string> = { ...idHeaders(ctx), 'content-type': contentTypeOf(file) };
  const isSse = path.extname(file).toLowerCase() === '.sse';
  if (isSse) {
    headers['cache-control'] = 'no-cache';
    if (d.chunkDelay || d.cutAfter !== undefined || d.streamError !== undefined || d.hangAfter !== undefined) {
      // Frame by frame: each block's exact source text; anything after the last blank line is one more frame.
      const parser = new SseParser();
      const frames = parser.feed(data).map((b) => b.raw);
      const tail = parser.pending;
      if (tail.length > 0) frames.push(tail);
      const body = ctx.json && typeof ctx.json === 'object' ? (ctx.json as Record<string, any>) : {};
      return sendFrames(ctx, status, headers, frames, streamErrorFor(ctx, Math.floor(Date.now() / 1000), body));
    }
    if (gone(ctx.res)) return;
    ctx.res.writeHead(status, headers);
    ctx.res.write(data);
    ctx.res.end();
    return;
  }
  return sendBody(ctx, status, headers, data);
}

function extract(protocol: Protocol, body: Record<string, any>): Extracted {
  return protocol === 'messages' ? extractMessages(body) : protocol === 'responses' ? extractResponses(body) : extractChat(body);
}

async function answer(ctx: Ctx, fixturesDir: string | undefined): Promise<void> {
  const { d, endpoint } = ctx;
  if (d.hang) return; // never answered; the client's timeout or close() ends it
  if (d.delay) await sleep(d.delay, ctx.signal);
  if (gone(ctx.res) || ctx.signal.aborted) return;
  if (d.replay !== undefined) return replay(ctx, fixturesDir);
  if (d.status !== undefined && d.status >= 400) return fail(ctx, d.status);
  if (ctx.json === undefined) {
    const msg =
      ctx.protocol === 'messages'
        ? 'There was an error parsing the body of your request.'
        : "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)";
    return fail(ctx, 400, msg);
  }
  if (!ctx.json || typeof ctx.json !== 'object' || Array.isArray(ctx.json))
    return fail(ctx, 400, 'The request body must be a JSON object.');
  const body = ctx.json as Record<string, any>;
  const invalid =
    endpoint === 'chat'
      ? validateChat(body)
      : endpoint === 'messages' || endpoint === 'count_tokens'
        ? validateMessages(body, endpoint === 'count_tokens')
        : validateResponses(body);
  if (invalid) return fail(ctx, 400, invalid);
  const json = { ...idHeaders(ctx), 'content-type': 'application/json' };
  if (endpoint === 'count_tokens') return sendBody(ctx, 200, json, Buffer.from(JSON.stringify(countTokensBody(body, d.inputTokens))));
  if (endpoint === 'input_tokens') return sendBody(ctx, 200, json, Buffer.from(JSON.stringify(inputTokensBody(body, d.inputTokens))));
  const plan: Plan = buildPlan(ctx.protocol, ctx.model, body, extract(ctx.protocol, body), d, ctx.seed);
  if (!plan.stream) {
    const rendered =
      ctx.protocol === 'messages' ? renderMessage(plan) : ctx.protocol === 'responses' ? renderResponse(plan) : renderChat(plan);
    return sendBody(ctx, 200, json, Buffer.from(JSON.stringify(rendered)));
  }
  const frames = ctx.protocol === 'messages' ? messageFrames(plan) : ctx.protocol === 'responses' ? responseFrames(plan) : chatFrames(plan);
  return sendFrames(ctx, 200, { ...idHeaders(ctx), ...SSE_HEADERS }, frames, streamErrorFor(ctx, plan.created, body));
}

export async function startMockServer(opts: MockServerOptions = {}): Promise<MockServer> {
  const keep = Math.max(0, opts.keepRequests ?? 50);
  const requests: MockRequestRecord[] = [];
  const credentials = new Map<string, CredentialStats>();
  const scripts = new Map<string, { always?: string; next: string[] }>();
  const credential = (key: string): CredentialStats => {
    let c = credentials.get(key);
    if (!c) credentials.set(key, (c = { requests: 0, inFlight: 0, maxInFlight: 0, arrivals: [] }));
    return c;
  };
  const sockets = new Set<Socket>();
  const controllers = new Set<AbortController>();
  let counter = 0;
  let closing: Promise<void> | undefined;
  let inFlight = 0;
  let peakInFlight = 0;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const ac = new AbortController();
    controllers.add(ac);
    res.on('close', () => {
      ac.abort();
      controllers.delete(ac);
    });
    const cred = credentialOf(req);
    const stats = credential(cred);
    stats.requests++;
    stats.maxInFlight = Math.max(stats.maxInFlight, ++stats.inFlight);
    res.on('close', () => {
      stats.inFlight--;
    });
    const at = Date.now();
    stats.arrivals.push(at);
    if (stats.arrivals.length > Math.max(keep, 1)) stats.arrivals.shift();
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    const method = req.method ?? 'GET';
    const url = req.url ?? '/';
    if (keep > 0) {
      requests.push({ method, path: url, headers: { ...req.headers }, body, credential: cred, at });
      if (requests.length > keep) requests.splice(0, requests.length - keep);
    }
    // The credential's script comes after the request's own directives, so it wins.
    const script = scripts.get(cred);
    let scripted = '';
    if (script) {
      if (script.always) scripted += ` [[mock: ${script.always}]]`;
      const once = script.next.shift();
      if (once) scripted += ` [[mock: ${once}]]`;
    }
    const rp = routePath(url);
    const endpoint = ROUTES[rp];
    let json: unknown;
    try {
      json = body.length > 0 ? JSON.parse(body) : undefined;
    } catch {
      json = undefined;
    }
    const rawModel =
      json && typeof json === 'object' && typeof (json as any).model === 'string' ? ((json as any).model as string) : undefined;
    const seed = sha256(`${++counter}:${method}:${url}:${body}`).toString('hex');
    const ctx: Ctx = {
      req,
      res,
      protocol: protocolOf(endpoint, rp),
      endpoint,
      body,
      json,
      model: rawModel !== undefined ? splitModel(rawModel).name : '',
      d: parseDirectives(rawModel, body + scripted),
      seed,
      requestId: makeId(seed, 'req', 'req_', 24),
      signal: ac.signal,
    };
    if (!endpoint) {
      if (rp === '/' && (method === 'GET' || method === 'HEAD')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(method === 'HEAD' ? undefined : '{"status":"ok","mock":true}');
        return;
      }
      return fail(ctx, 404, `mock: unknown path ${method} ${url.split('?')[0]}`);
    }
    if (method !== 'POST') return fail(ctx, 405, `mock: ${method} is not allowed on ${url.split('?')[0]}`);
    inFlight++;
    peakInFlight = Math.max(peakInFlight, inFlight);
    if (res.closed) inFlight--;
    else res.once('close', () => inFlight--);
    await answer(ctx, opts.fixturesDir);
  }

  const server = http.createServer({ requestTimeout: 0, headersTimeout: 65_000, keepAliveTimeout: 65_000 }, (req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent && !res.destroyed) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"mock: internal error","type":"server_error","param":null,"code":null}}');
      } else {
        res.destroy();
      }
    });
  });
  server.keepAliveTimeout = 65_000;
  server.on('connection', (s: Socket) => {
    s.setNoDelay(true);
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
    else socket.destroy();
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    // exclusive: in a node:cluster worker (server.workers > 1) each worker keeps its own mock
    // upstream; a shared port would hand one worker's upstream calls to another worker's mock.
    server.listen({ port: opts.port ?? 0, host: opts.host ?? '127.0.0.1', exclusive: true }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' || addr.address.includes(':') ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${host === '[::]' ? '[::1]' : host === '0.0.0.0' ? '127.0.0.1' : host}:${addr.port}`,
    port: addr.port,
    requests,
    credential,
    credentials,
    script(key: string, sc: CredentialScript): void {
      credential(key);
      scripts.set(key, { always: sc.always, next: [...(sc.next ?? [])] });
    },
    get inFlight() {
      return inFlight;
    },
    get peakInFlight() {
      return peakInFlight;
    },
    resetPeak() {
      peakInFlight = inFlight;
    },
    close(): Promise<void> {
      closing ??= new Promise<void>((resolve) => {
        for (const ac of controllers) ac.abort();
        server.close(() => resolve());
        server.closeAllConnections();
        for (const s of sockets) s.destroy();
      });
      return closing;
    },
  };
}
