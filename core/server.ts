/**
 * The gateway process: node:http server → router → plugin chain → upstream or handler.
 * Owns what outlives a config load (store, transport, mock upstreams, metrics) and swaps the
 * Runtime on reload (file change, SIGHUP, or `reload()`): a valid config goes in atomically, an
 * invalid one is logged and the old one keeps serving. `close()` drains requests in flight.
 *
 * Probes need no key and stay out of the request metrics and the access log: `/healthz` (and `/`)
 * answer while the process lives; `/readyz` answers 200 only while the config is loaded, the
 * store says it is ready and not degraded, and shutdown has not begun.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import path from 'node:path';
import type { Socket } from 'node:net';
import { ConfigError, loadConfigFile, type LoadedConfig } from './config/load.js';
import type { GatewayConfig, ProviderConfig, RouteHandler } from './config/types.js';
import type { PluginRegistry } from './plugin.js';
import type { Outcome, ParsedBody, RouteInfo } from './types.js';
import { RequestContext, routeErrorFormat } from './context.js';
import { GatewayError, renderError, toGatewayError, type ErrorFormat } from './errors.js';
import { BodyMemory, readBody, recordedBody } from './body.js';
import { closeInStages, isClosing, lastExchange, lingerOnClose, noteExchange } from './connection.js';
import { KEEPALIVE } from './sse.js';
import { runChain, runFinally, type CompiledChain } from './pipeline.js';
import { Runtime, type CompiledRoute } from './runtime.js';
import { Transport } from './upstream/transport.js';
import { runModelCall, type UpstreamDeps } from './upstream/index.js';
import type { Store } from './store/types.js';
import { openStore } from './store/index.js';
import { systemClock, type Clock } from './clock.js';
import { createLogger, logLine, type Logger } from './log.js';
import { member, quoted } from './json/quote.js';
import { createMetrics, instrumentStore, type Metrics } from './metrics.js';
import { recordRequest, RouteSeries } from './request-metrics.js';
import { recoverySettlement } from './billing.js';
import { VERSION } from './version.js';
import type { Handler } from './handlers/types.js';
import { modelsHandler } from './handlers/models.js';
import { countTokensHandler } from './handlers/count-tokens.js';
import { usageHandler } from './handlers/usage.js';
import { AdminApi } from './admin/index.js';
import { ConsoleFiles } from './console.js';
import { FileLedgerReader, type LedgerReader } from './ledger/index.js';
import { LedgerFiles } from './ledger/files.js';
import { LedgerDrainer } from './ledger/drain.js';
import { FailedRequestLog, redactSecrets, type Secrets } from './failed-requests.js';
import { clientAddress, normaliseIp, trustedProxies } from './client-ip.js';
import { AccountPools } from './pool/index.js';
import { AccountDirectory } from './accounts/directory.js';
import { loadTracing, type Tracing } from './telemetry/index.js';
import { perObject } from './memo.js';

const HANDLERS: Record<RouteHandler, Handler> = {
  models: modelsHandler,
  usage: usageHandler,
  'count-tokens': countTokensHandler,
};

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * A provider the gateway runs itself: `kind: mock` providers are served by the built-in demo
 * upstream (mock/, outside core/), which whoever starts the gateway passes in (the CLI and
 * `llm-gateway/testing` do). Started once per provider, closed at shutdown.
 */
export interface LocalUpstream {
  /** e.g. http://127.0.0.1:45678 (no trailing slash, no /v1). */
  readonly url: string;
  close(): Promise<void>;
}

export type LocalUpstreamFactory<U extends LocalUpstream = LocalUpstream> = (opts: { fixturesDir?: string }) => Promise<U>;

export interface GatewayOptions<U extends LocalUpstream = LocalUpstream> {
  configFile: string;
  registry: PluginRegistry;
  /** Serves `kind: mock` providers; a config that has one fails to start without it. */
  mockUpstream?: LocalUpstreamFactory<U>;
  clock?: Clock;
  log?: Logger;
  /** Override server.host / server.port (tests use port 0). */
  host?: string;
  port?: number;
  /** Reload when the config file changes (default true). */
  watch?: boolean;
  /** Reload on SIGHUP (default false: only the CLI process owns signals). */
  sighup?: boolean;
  env?: NodeJS.ProcessEnv;
  /** Use this store instead of opening the configured one (tests). */
  store?: Store;
  /** After a successful reload through the admin API (workers: the others reload too). */
  onAdminReload?: () => void;
  /** The built console's folder (default dist/console/, core/console.ts). */
  consoleDir?: string;
}

const PROBE_HEADERS = { 'content-type': 'application/json', 'cache-control': 'no-store' };

export class Gateway<U extends LocalUpstream = LocalUpstream> implements UpstreamDeps {
  readonly transport = new Transport();
  readonly pools: AccountPools;
  /** The `kind: mock` providers' servers, by provider name. */
  readonly mocks = new Map<string, U>();
  private runtime!: Runtime;
  private server!: http.Server;
  /** The separate metrics listener (`metrics.listen`). */
  private opsServer?: http.Server;
  /** The metrics listener's URL, when there is one. */
  metricsUrl?: string;
  private watcher?: FSWatcher;
  private reloadTimer?: NodeJS.Timeout;
  private reloading: Promise<unknown> = Promise.resolve();
  private readonly sockets = new Set<Socket>();
  /** Sockets carrying a request right now; the others can be closed at shutdown. */
  private readonly busy = new Set<Socket>();
  /** Checks the connections' body deadlines (server.body_timeout; `checkBodies`). */
  private bodyTimer?: NodeJS.Timeout;
  /** Connections whose malformed bytes are answered once the answers before them are written. */
  private readonly answerQueued = new WeakSet<Socket>();
  private closing = false;
  private closed?: Promise<void>;
  private cutShutdownDelay?: () => void;
  private onHup?: () => void;
  private failed?: FailedRequestLog;
  /** OpenTelemetry traces (`tracing:`, read at start); undefined when off. */
  private tracing?: Tracing;
  /** Request bytes in flight (server.body_memory; fixed at start like the other server settings). */
  private bodyMemory = new BodyMemory(Number.MAX_SAFE_INTEGER);
  /** Each route label's request series, bound once (request-metrics.ts). */
  private readonly routes = new Map<string, RouteSeries>();
  url = '';

  /** The store's users and keys, followed by this process (core/accounts). */
  readonly accounts: AccountDirectory;
  private readonly admin: AdminApi;
  /** The web console's static files (`console.enabled`). */
  private readonly consoleFiles: ConsoleFiles;
  /** Where ledger queries are answered (the day files the store writes, or PostgreSQL). */
  private ledgerReader?: LedgerReader;
  /** The ledger's PostgreSQL sink (`ledger.postgres`, read at start): ships the day files. */
  private pgLedger?: { close(): Promise<void> };
  /** A shared store's ledger (Redis): the day files this instance drains its records into. */
  private ledgerDrain?: { files: LedgerFiles; drainer: LedgerDrainer };

  private constructor(
    private readonly opts: GatewayOptions<U>,
    readonly store: Store,
    readonly clock: Clock,
    readonly log: Logger,
    readonly metrics: Metrics,
  ) {
    this.pools = new AccountPools({ store, clock, log, metrics });
    this.accounts = new AccountDirectory(store, log);
    this.consoleFiles = new ConsoleFiles(opts.consoleDir);
    this.admin = new AdminApi({
      current: () => this.runtime,
      directory: this.accounts,
      store,
      pools: this.pools,
      clock,
      log,
      ledger: () => this.ledgerReader,
      reload: async () => {
        const err = await this.reload();
        if (!err) this.opts.onAdminReload?.();
        return err;
      },
    });
  }

  static async start<U extends LocalUpstream = LocalUpstream>(opts: GatewayOptions<U>): Promise<Gateway<U>> {
    const log = opts.log ?? createLogger();
    const clock = opts.clock ?? systemClock;
    const loaded = await loadConfigFile(opts.configFile, { registry: opts.registry, env: opts.env });
    for (const w of loaded.warnings) log.warn('config warning', { path: w.path, line: w.line, message: w.message });
    const metrics = createMetrics({ version: VERSION });
    const opened =
      opts.store ??
      (await openStore(loaded.config.store, clock, log, {
        workers: loaded.config.server.workers,
        onHealth: (h) => metrics.storeDegraded.set(h.degraded ? 1 : 0),
        auditRetentionMs: loaded.config.admin.auditRetentionMs,
        ledger: loaded.config.ledger.dir ? { dir: loaded.config.ledger.dir, retentionMs: loaded.config.ledger.retentionMs } : undefined,
      }));
    metrics.storeDegraded.set((await opened.health()).degraded ? 1 : 0);
    const store = instrumentStore(opened, metrics);
    const gw = new Gateway<U>(opts, store, clock, log, metrics);
    const files = (opened as { ledger?: LedgerFiles }).ledger;
    if (files) gw.ledgerReader = new FileLedgerReader(files);
    try {
      await gw.drainLedger(opened, loaded.config);
      await gw.startPostgresLedger(loaded.config, files ?? gw.ledgerDrain?.files);
      await gw.startMocks(loaded.config);
      await gw.accounts.start();
      gw.runtime = await Runtime.create(loaded, { store, accounts: gw.accounts, clock, log, metrics });
      gw.pools.configure(loaded.config);
      gw.pools.start();
      gw.keepFailedRequests(loaded.config);
      gw.tracing = await loadTracing(loaded.config.tracing, log);
      await gw.listen(loaded.config);
      await gw.listenMetrics(loaded.config);
    } catch (e) {
      await gw.shutdownResources();
      throw e;
    }
    if (opts.watch !== false) gw.watchConfig();
    if (opts.sighup) {
      gw.onHup = () => void gw.reload();
      process.on('SIGHUP', gw.onHup);
    }
    return gw;
  }

  get config(): GatewayConfig {
    return this.runtime.config;
  }

  baseUrl(provider: ProviderConfig): string {
    return provider.kind === 'mock' ? (this.mocks.get(provider.name)?.url ?? '') : provider.baseUrl;
  }

  /**
   * A store shared by several instances (Redis) keeps the ledger's records until an instance takes
   * them: this one drains them into its day files (ledger.dir) and answers ledger queries from
   * those, which hold what it drained (docs/operations.md, "Scale out").
   */
  private async drainLedger(store: Store, config: GatewayConfig): Promise<void> {
    const dir = config.ledger.dir;
    if (!store.takeLedger || !dir) return;
    const files = new LedgerFiles({ dir, retentionMs: config.ledger.retentionMs, log: this.log });
    const source = { takeLedger: (max: number) => store.takeLedger!(max) };
    let drainer: LedgerDrainer;
    try {
      drainer = await LedgerDrainer.start({ source, files, log: this.log });
    } catch (e) {
      files.close();
      throw e;
    }
    this.ledgerDrain = { files, drainer };
    this.ledgerReader = new FileLedgerReader(files, { scope: 'instance', refresh: () => drainer.catchUp() });
  }

  private async startMocks(config: GatewayConfig): Promise<void> {
    for (const p of Object.values(config.providers)) {
      if (p.kind !== 'mock' || this.mocks.has(p.name)) continue;
      const start = this.opts.mockUpstream;
      if (!start) {
        throw new Error(
          `provider '${p.name}' is kind: mock, and this gateway was started without the mock upstream ` +
            '(the `gateway` command and llm-gateway/testing provide it; embedders pass GatewayOptions.mockUpstream)',
        );
      }
      this.mocks.set(p.name, await start({ fixturesDir: p.fixturesDir }));
    }
  }

  /**
   * With `ledger.postgres`, the day files are shipped to PostgreSQL and ledger queries answered
   * from it (core/ledger/postgres.ts, loaded only then). Nothing here waits for PostgreSQL.
   */
  private async startPostgresLedger(config: GatewayConfig, files: LedgerFiles | undefined): Promise<void> {
    const pgc = config.ledger.postgres;
    if (!pgc) return;
    // The memory store's own files; a store that keeps none of its own writes them in ledger.dir.
    const dir = files?.dir ?? (config.store.kind === 'memory' ? undefined : config.ledger.dir);
    if (!dir) {
      // The config loader refuses this (memory store without a folder); a store passed in by an embedder may still have none.
      this.log.warn('ledger.postgres is set but this store writes no ledger day files: nothing is shipped to PostgreSQL');
      return;
    }
    const { openPostgresLedger } = await import('./ledger/postgres.js');
    const m = this.metrics;
    const sink = await openPostgresLedger({
      url: pgc.url,
      table: pgc.table,
      batchSize: pgc.batchSize,
      dir,
      log: this.log,
      metrics: {
        backlog: (bytes) => m.ledgerOutboxBytes.set(bytes),
        shipped: (n) => m.ledgerShipped.inc(n),
        rejected: (n) => m.ledgerRejected.inc(n),
        reachable: (up) => m.ledgerPostgresUp.set(up ? 1 : 0),
      },
    });
    this.pgLedger = sink;
    this.ledgerReader = sink.reader;
  }

  private keepFailedRequests(config: GatewayConfig): void {
    // The old log finishes writing what it accepted by itself.
    void this.failed?.close();
    const { dir, retentionMs, maxSize, maxFiles } = config.failedRequests;
    this.failed = dir
      ? new FailedRequestLog(
          dir,
          {
            retentionMs,
            maxBytes: maxSize,
            maxFiles,
            secrets: () => this.secrets(),
            dropped: (reason) => this.metrics.failedRequestsDropped.inc({ reason }),
          },
          this.clock,
          this.log,
        )
      : undefined;
  }

  /** Every configured client key (by digest) and provider credential: never in a failed-request record or a log line. */
  private secrets(): Secrets {
    const c = this.runtime?.config;
    if (!c) return { plain: [], digests: new Set() };
    let known = secretsOf.get(c);
    if (!known) secretsOf.set(c, (known = this.collectSecrets(c)));
    return known;
  }

  private collectSecrets(c: GatewayConfig): Secrets {
    const plain: string[] = [];
    for (const p of Object.values(c.providers)) {
      if (p.apiKey) plain.push(p.apiKey);
      for (const v of Object.values(p.headers)) plain.push(v);
      for (const a of p.accounts) {
        if (a.apiKey) plain.push(a.apiKey);
        for (const v of Object.values(a.headers)) plain.push(v);
      }
    }
    if (c.server.adminToken) plain.push(c.server.adminToken);
    return { plain: plain.filter((s) => s.length >= 6), digests: new Set([...c.keysByDigest.keys(), ...this.accounts.digests()]) };
  }

  private listen(config: GatewayConfig): Promise<void> {
    const s = config.server;
    this.bodyMemory = new BodyMemory(s.bodyMemory);
    this.server = http.createServer(
      {
        headersTimeout: s.headersTimeoutMs,
        // The whole request (headers, then body) must arrive within both limits; checked every 500 ms,
        // so a slow sender is closed within its limit + 1 s. Expired requests come to clientError.
        requestTimeout: s.headersTimeoutMs + s.bodyTimeoutMs,
        connectionsCheckingInterval: 500,
        // A missing Host gets our own JSON 400 (handle()), not Node's empty one.
        requireHostHeader: false,
      },
      (req, res) => {
        // A request pipelined behind one whose answer closed the connection: never answered (the
        // client was told the connection closes), and never run.
        if (isClosing(req.socket) || this.answerQueued.has(req.socket)) return void req.resume();
        noteExchange(res);
        if (
          req.headers['content-length'] !== undefined
            ? req.headers['content-length'] !== '0'
            : req.headers['transfer-encoding'] !== undefined
        ) {
          (req.socket as Conn)[BODY_DUE] = Date.now() + s.bodyTimeoutMs;
        } else (req.socket as Conn)[BODY_DUE] = 0;
        void this.handle(req, res);
      },
    );
    // server.body_timeout counts from the end of the headers (Node's requestTimeout, the whole
    // request's bound, counts from their start): checked every 500 ms like Node's own timeouts.
    this.bodyTimer = setInterval(() => this.checkBodies(), 500);
    this.bodyTimer.unref();
    // A client that half-closes after sending (shutdown(SHUT_WR)) still gets its response: Node
    // would otherwise abort the request at the FIN. A client that left for good is found when its
    // response is written (and billed as a disconnect then); a reset is found at once.
    (this.server as http.Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
    this.server.keepAliveTimeout = 5_000;
    this.server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
      noteExchange(res); // its body may still be arriving when the connection closes
      this.refuse(
        req,
        res,
        new GatewayError('MALFORMED_HTTP', {
          message: `Expect: ${String(req.headers.expect).slice(0, 64)} is not supported (only 100-continue)`,
        }),
      );
    });
    this.server.on('connection', (s: Socket) => {
      this.sockets.add(s);
      lingerOnClose(s);
      // One listener per connection, not per request: the requests in flight on it learn of the
      // client's FIN (`end`) and of its disconnect (`close`) from here.
      (s as Conn)[IN_FLIGHT] = [];
      (s as Conn)[BODY_DUE] = 0;
      s.on('end', () => {
        for (const ctx of (s as Conn)[IN_FLIGHT].slice()) probeClient(ctx, 20);
      });
      s.on('close', () => {
        this.sockets.delete(s);
        for (const ctx of (s as Conn)[IN_FLIGHT].slice()) {
          ctx.connectionEnded();
          if (!ctx.res.writableFinished) ctx.clientGone.abort();
        }
      });
    });
    this.server.on('clientError', (err: Error & { code?: string }, socket: Socket) => this.onClientError(err, socket));
    const host = this.opts.host ?? config.server.host;
    const port = this.opts.port ?? config.server.port;
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        const addr = this.server.address();
        const p = typeof addr === 'object' && addr ? addr.port : port;
        this.url = `http://${host.includes(':') ? `[${host}]` : host}:${p}`;
        resolve();
      });
    });
  }

  /**
   * Malformed HTTP (bad header characters or chunking, oversized headers) and requests that did
   * not arrive in time: a 400 with an X-Request-ID, in the endpoint's error format when the
   * request line could be read (else Chat-style), then the connection closes in stages
   * (core/connection.ts). Where the error lies decides how it is answered:
   * - in the head of a request (no request object yet): on the socket, after the answers to the
   *   requests before it on the connection (pipelining: each gets its own answer first);
   * - in the body of the latest request (bad chunking, a body too slow): through its response,
   *   unless that was answered already (a refused body being dropped), then only the close.
   */
  private onClientError(err: Error & { code?: string; rawPacket?: unknown }, socket: Socket): void {
    // Answered already, or an answer waits its turn: what still arrives (and fails to parse) is dropped.
    if (isClosing(socket) || this.answerQueued.has(socket)) return;
    if (err.code === 'ECONNRESET' || !socket.writable) return void socket.destroy();
    const id =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? 'HEADERS_TOO_LARGE'
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? 'REQUEST_TIMEOUT'
          : 'MALFORMED_HTTP';
    const answer = new GatewayError(id);
    const last = lastExchange(socket);
    if (last && !last.req.complete) return this.refuseBody(last, answer);
    // The format of the request line in the bytes, or (their start may be an earlier request
    // on the connection) of the connection's previous request.
    const format = last
      ? this.formatFor(last.req.method, last.req.url, (h) => last.req.headers[h] !== undefined)
      : this.rawFormat(err.rawPacket);
    if (last && !last.writableFinished) {
      this.answerQueued.add(socket);
      last.once('finish', () => this.answerOnSocket(socket, answer, format));
      last.once('close', () => {
        if (!last.writableFinished) socket.destroy();
      });
      return;
    }
    this.answerOnSocket(socket, answer, format);
  }

  /**
   * Requests whose body is late (server.body_timeout): 400 request_timeout, or a close when they
   * were answered already. Only a connection's latest request can still be receiving its body (the
   * next one's headers come after it), so the deadline is kept on the connection and the
   * connections are walked: a list of requests would keep each one (and all its body read holds)
   * alive for up to 500 ms after its answer, long enough for the collector to promote it to the
   * old generation (issue 29: that was a third of the gateway's scavenge work).
   */
  private checkBodies(): void {
    const now = Date.now();
    for (const s of this.sockets) {
      const due = (s as Conn)[BODY_DUE];
      if (!due || now < due) continue;
      (s as Conn)[BODY_DUE] = 0;
      const last = lastExchange(s);
      if (last && !last.req.complete && !last.req.destroyed) this.refuseBody(last, new GatewayError('REQUEST_TIMEOUT'));
    }
  }

  /** The error of a request whose body is still arriving: answered through its response, then a staged close. */
  private refuseBody(res: ServerResponse, answer: GatewayError): void {
    const socket = res.req.socket;
    if (isClosing(socket)) return;
    if (res.headersSent) {
      // Answered already (a refused body being dropped): only the close. A response still being
      // written (a request whose body broke while it was answered) cannot be finished: cut it.
      if (res.writableFinished) closeInStages(socket, res.req);
      else socket.destroy();
      return;
    }
    const r = renderError(
      answer,
      this.formatFor(res.req.method, res.req.url, (h) => res.req.headers[h] !== undefined),
    );
    res.setHeader('connection', 'close');
    res.writeHead(r.status, { 'content-type': 'application/json', ...r.headers });
    res.end(JSON.stringify(r.body));
    closeInStages(socket, res.req);
  }

  /** An answer written on the socket itself (no request object), then a staged close. */
  private answerOnSocket(socket: Socket, answer: GatewayError, format: ErrorFormat): void {
    this.answerQueued.delete(socket);
    // The answers before it closed the connection (`Connection: close`): nothing more to say.
    if (!socket.writable || isClosing(socket)) return;
    const r = renderError(answer, format);
    const body = JSON.stringify(r.body);
    const requestId = newRequestId();
    let head = `HTTP/1.1 ${r.status} ${http.STATUS_CODES[r.status]}\r\ncontent-type: application/json\r\nx-request-id: ${requestId}\r\n`;
    for (const [k, v] of Object.entries(r.headers)) head += `${k}: ${v}\r\n`;
    socket.write(`${head}content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
    closeInStages(socket);
    this.refused(requestId, undefined, answer, this.origin(undefined, socket));
  }

  /** The error format of the endpoint a request targets (spec §7.1), as far as its method, path and headers tell. */
  private formatFor(method: string | undefined, url: string | undefined, has: (header: string) => boolean): ErrorFormat {
    const route = this.runtime.match(method ?? 'GET', pathOf(url ?? '/'));
    return route ? routeErrorFormat(route.info.protocol, undefined, has) : 'chat';
  }

  /** `formatFor` from the bytes Node could not parse: their request line and header names, when they begin a request. */
  private rawFormat(raw: unknown): ErrorFormat {
    if (!Buffer.isBuffer(raw)) return 'chat';
    const text = raw.subarray(0, 64 * 1024).toString('latin1');
    const line = /^([A-Z]+) (\S+) HTTP\/1\.[01]\r?\n/.exec(text);
    if (!line) return 'chat';
    const head = text.slice(line[0].length);
    return this.formatFor(line[1], line[2], (h) => new RegExp(`(^|\\n)${h}[ \\t]*:`, 'i').test(head));
  }

  /**
   * The metrics and the access line of an answer given before any route (malformed HTTP, a
   * missing Host, an unsupported Expect): route `unmatched`, like a path no route serves.
   */
  private refused(requestId: string, method: string | undefined, err: GatewayError, from: RequestOrigin): void {
    this.metrics.requests.inc({ route: 'unmatched', status: String(err.status), error: errorLabel(err) });
    this.metrics.duration.observe({ route: 'unmatched' }, 0);
    this.log.info('request', {
      requestId,
      method,
      route: 'unmatched',
      ...from,
      status: err.status,
      durationMs: 0,
      errorCode: err.code,
      errorMessage: err.message,
    });
  }

  /**
   * Where a request came from, for its access line: the client's address (behind trusted proxies,
   * the forwarded one), the path (no query string) and the user agent, with anything shaped like a
   * credential or matching a configured key removed. Routed requests log their route's path.
   */
  private origin(req: IncomingMessage | undefined, socket: Socket, path?: string): RequestOrigin {
    const socketIp = normaliseIp(socket.remoteAddress ?? '');
    const trusted = this.runtime ? trustedProxies(this.runtime.config.server) : undefined;
    const forwarded = req?.headers['x-forwarded-for'];
    const clientIp = (trusted && clientAddress(socketIp, forwarded === undefined ? [] : [forwarded].flat(), trusted)) || socketIp;
    const ua = req?.headers['user-agent'];
    return {
      clientIp: clientIp || undefined,
      path: path === undefined ? undefined : this.loggable(path),
      userAgent: ua ? this.loggable(ua) : undefined,
    };
  }

  /**
   * Client-sent text as a log line may hold it: at most 512 characters, secrets removed. A client's
   * user agent comes with every request it sends and its redaction costs 0.6–4 µs (regular
   * expressions, a SHA-256 per key-shaped word), so short texts are remembered per set of secrets:
   * a reload that changes the secrets starts afresh.
   */
  private loggable(text: string): string {
    const secrets = this.secrets();
    if (text.length > 512) return redactSecrets(`${text.slice(0, 512)}…`, secrets);
    const seen = redactedOf(secrets);
    let out = seen.get(text);
    if (out === undefined) {
      out = redactSecrets(text, secrets);
      // A client sending a new text every time (a random user agent) costs only the redaction.
      if (seen.size >= REDACTED_MAX) seen.clear();
      seen.set(text, out);
    }
    return out;
  }

  /** Answers a request the routes never see (Expect, missing Host) and closes its connection. */
  private refuse(req: IncomingMessage, res: ServerResponse, err: GatewayError): void {
    const given = req.headers['x-request-id'];
    const requestId = typeof given === 'string' && REQUEST_ID.test(given) ? given : newRequestId();
    const r = renderError(
      err,
      this.formatFor(req.method, req.url, (h) => req.headers[h] !== undefined),
    );
    res.writeHead(r.status, { 'content-type': 'application/json', 'x-request-id': requestId, connection: 'close', ...r.headers });
    res.end(JSON.stringify(r.body));
    this.refused(requestId, req.method, err, this.origin(req, req.socket, pathOf(req.url ?? '/')));
  }

  /** `metrics.listen`: metrics and the probes on their own address (the API port then has neither metrics). */
  private listenMetrics(config: GatewayConfig): Promise<void> {
    const at = config.metrics.listen;
    if (!at) return Promise.resolve();
    const server = http.createServer((req, res) => {
      void this.probe(req, res, true).then(
        (served) => {
          if (served) return;
          req.resume();
          const r = renderError(new GatewayError('ROUTE_NOT_FOUND', { message: 'Not found' }), 'chat');
          res.writeHead(r.status, PROBE_HEADERS);
          res.end(JSON.stringify(r.body));
        },
        () => res.destroy(),
      );
    });
    this.opsServer = server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(at.port, at.host, () => {
        server.off('error', reject);
        const addr = server.address();
        const p = typeof addr === 'object' && addr ? addr.port : at.port;
        this.metricsUrl = `http://${at.host.includes(':') ? `[${at.host}]` : at.host}:${p}`;
        resolve();
      });
    });
  }

  get port(): number {
    const addr = this.server.address();
    return typeof addr === 'object' && addr ? addr.port : 0;
  }

  // ---- reload ------------------------------------------------------------------------------

  private watchConfig(): void {
    const file = path.resolve(this.opts.configFile);
    const dir = path.dirname(file);
    const base = path.basename(file);
    try {
      // Watch the folder: editors replace files by rename, which a file watch would lose.
      this.watcher = watch(dir, (_event, name) => {
        if (name && name.toString() !== base) return;
        clearTimeout(this.reloadTimer);
        this.reloadTimer = setTimeout(() => void this.reload(), 150);
      });
      this.watcher.on('error', (e) => this.log.warn('config watch failed', { error: e }));
    } catch (e) {
      this.log.warn('cannot watch the config file; reload with SIGHUP', { error: e as Error });
    }
  }

  /** Loads the config file again; swaps it in when valid. Resolves to the ConfigError when it is not. */
  reload(): Promise<ConfigError | undefined> {
    const next = this.reloading.then(() => this.doReload());
    this.reloading = next.catch(() => undefined);
    return next;
  }

  private async doReload(): Promise<ConfigError | undefined> {
    if (this.closing) return undefined;
    let loaded: LoadedConfig;
    try {
      loaded = await loadConfigFile(this.opts.configFile, { registry: this.opts.registry, env: this.opts.env });
      if (JSON.stringify(loaded.config.store) !== JSON.stringify(this.runtime.config.store)) {
        this.log.warn('store settings changed: they take effect on restart');
      }
      if (loaded.config.server.port !== this.runtime.config.server.port || loaded.config.server.host !== this.runtime.config.server.host) {
        this.log.warn('server address changed: it takes effect on restart');
      }
      if (JSON.stringify(loaded.config.metrics.listen) !== JSON.stringify(this.runtime.config.metrics.listen)) {
        this.log.warn('metrics.listen changed: it takes effect on restart');
      }
      if (JSON.stringify(loaded.config.tracing) !== JSON.stringify(this.runtime.config.tracing)) {
        this.log.warn('tracing settings changed: they take effect on restart');
      }
      await this.startMocks(loaded.config);
      const next = await Runtime.create(loaded, {
        store: this.store,
        accounts: this.accounts,
        clock: this.clock,
        log: this.log,
        metrics: this.metrics,
      });
      const old = this.runtime;
      this.runtime = next;
      this.pools.configure(next.config);
      const fr = (c: GatewayConfig) => JSON.stringify(c.failedRequests);
      if (fr(next.config) !== fr(old.config)) {
        this.keepFailedRequests(next.config);
      }
      this.metrics.configReloads.inc({ result: 'ok' });
      this.log.info('config reloaded', { file: this.opts.configFile });
      void old.retire();
      return undefined;
    } catch (e) {
      this.metrics.configReloads.inc({ result: 'rejected' });
      const err = e instanceof ConfigError ? e : new ConfigError(this.opts.configFile, [{ path: '', message: (e as Error).message }]);
      this.log.error('config rejected; the previous config keeps serving', { error: err.message });
      return err;
    }
  }

  // ---- requests ----------------------------------------------------------------------------

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.headers.host === undefined && req.httpVersion === '1.1') {
      return this.refuse(req, res, new GatewayError('MALFORMED_HTTP', { message: 'The Host header is required (HTTP/1.1)' }));
    }
    const rt = this.runtime;
    rt.enter();
    const socket = req.socket;
    this.busy.add(socket);
    const started = Date.now();
    const given = req.headers['x-request-id'];
    const id = typeof given === 'string' && REQUEST_ID.test(given) ? given : newRequestId();
    res.setHeader('x-request-id', id);
    let routeLabel = 'unmatched';
    let failure: GatewayError | undefined;
    let probe = false;
    try {
      if (this.isProbe(req, !this.opsServer) && (await this.probe(req, res, !this.opsServer))) {
        probe = true;
        return;
      }
      const pathname = pathOf(req.url ?? '/');
      const method = req.method ?? 'GET';
      if (rt.config.console.enabled && (pathname === '/console' || pathname.startsWith('/console/'))) {
        routeLabel = 'console';
        await this.consoleFiles.serve(req, res, pathname);
        return;
      }
      if (pathname.startsWith('/admin/')) {
        routeLabel = 'admin';
        await this.admin.handle(req, res, normaliseIp(req.socket.remoteAddress ?? ''));
        return;
      }
      const route = rt.match(method, pathname);
      if (!route) {
        const err = new GatewayError(rt.hasPath(pathname) ? 'METHOD_NOT_ALLOWED' : 'ROUTE_NOT_FOUND', {
          message: rt.hasPath(pathname) ? `Method ${method} is not allowed on ${pathname}` : `No route for ${method} ${pathname}`,
        });
        const r = renderError(err, 'chat');
        res.writeHead(r.status, { 'content-type': 'application/json', ...r.headers });
        res.end(JSON.stringify(r.body));
        failure = err;
        return;
      }
      routeLabel = route.info.name;
      failure = await this.serveRoute(rt, route, id, req, res);
    } catch (e) {
      this.log.error('request failed outside the pipeline', { error: e as Error, requestId: id });
      if (!res.headersSent) {
        // A known error keeps its answer (e.g. the admin API's store call: 503 while Redis is away).
        failure = toGatewayError(e);
        const r = renderError(failure, 'chat');
        res.writeHead(r.status, { 'content-type': 'application/json', ...r.headers });
        res.end(JSON.stringify(r.body));
      } else res.destroy();
    } finally {
      if (!probe) {
        this.metrics.requests.inc({ route: routeLabel, status: String(res.statusCode), error: failure ? errorLabel(failure) : '' });
        this.routeSeries(routeLabel).duration.observe((Date.now() - started) / 1000);
        // Routed requests write their own, richer access line.
        if (routeLabel === 'unmatched' || routeLabel === 'admin' || routeLabel === 'console') {
          const line = {
            requestId: id,
            method: req.method,
            route: routeLabel,
            ...this.origin(req, socket, pathOf(req.url ?? '/')),
            status: res.statusCode,
            durationMs: Date.now() - started,
            errorCode: failure?.code,
          };
          if (res.statusCode >= 500) this.log.warn('request', line);
          else this.log.info('request', line);
        }
      }
      this.busy.delete(socket);
      rt.leave();
    }
  }

  /** Whether `probe()` may answer this request (a check without a promise, for every request). */
  private isProbe(req: IncomingMessage, metrics: boolean): boolean {
    if (req.method !== 'GET' && req.method !== 'HEAD') return false;
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const pathname = q === -1 ? url : url.slice(0, q);
    return (
      pathname === '/' || pathname === '/healthz' || pathname === '/readyz' || (metrics && pathname === this.runtime.config.metrics.path)
    );
  }

  /**
   * Health, readiness and (when `metrics` is true) the metrics path. True when it answered.
   * None needs an API key; metrics may need `metrics.token`.
   */
  private async probe(req: IncomingMessage, res: ServerResponse, metrics: boolean): Promise<boolean> {
    const method = req.method ?? 'GET';
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const pathname = q === -1 ? url : url.slice(0, q);
    if (method !== 'GET' && method !== 'HEAD') return false;
    const head = method === 'HEAD';
    if (pathname === '/' || pathname === '/healthz') {
      req.resume();
      res.writeHead(200, PROBE_HEADERS);
      res.end(head ? undefined : JSON.stringify({ status: 'ok' }));
      return true;
    }
    if (pathname === '/readyz') {
      req.resume();
      const r = await this.readiness();
      res.writeHead(r.ready ? 200 : 503, PROBE_HEADERS);
      res.end(head ? undefined : JSON.stringify(r.body));
      return true;
    }
    const config = this.runtime.config.metrics;
    if (metrics && config.path && pathname === config.path && !head) {
      req.resume();
      if (config.token && !bearerIs(req, config.token)) {
        const r = renderError(new GatewayError('UNAUTHORIZED_ADMIN', { message: 'Metrics token required' }), 'chat');
        res.writeHead(r.status, { ...PROBE_HEADERS, 'www-authenticate': 'Bearer' });
        res.end(JSON.stringify(r.body));
        return true;
      }
      const text = await this.metrics.scrape();
      res.writeHead(200, { 'content-type': this.metrics.contentType, 'cache-control': 'no-store' });
      res.end(text);
      return true;
    }
    return false;
  }

  /** Ready: config loaded (always, once listening), store ready and not degraded, not shutting down. */
  private async readiness(): Promise<{ ready: boolean; body: Record<string, unknown> }> {
    if (this.closing) return { ready: false, body: { status: 'draining' } };
    let health;
    try {
      health = await this.store.health();
    } catch (e) {
      this.log.warn('store health check failed', { error: e as Error });
      return { ready: false, body: { status: 'unavailable', store: this.store.kind, reason: 'the store did not answer' } };
    }
    if (!health.ready)
      return { ready: false, body: { status: 'unavailable', store: this.store.kind, reason: health.degraded ?? 'the store is not ready' } };
    if (health.degraded) return { ready: false, body: { status: 'degraded', store: this.store.kind, reason: health.degraded } };
    return { ready: true, body: { status: 'ready', store: this.store.kind } };
  }

  /** Serves a routed request; resolves with the error it ended with, if any. */
  private async serveRoute(
    rt: Runtime,
    route: CompiledRoute,
    id: string,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<GatewayError | undefined> {
    const ctx = new RequestContext(
      id,
      newLedgerId(),
      req,
      res,
      route.info,
      rt.config,
      this.store,
      this.clock,
      this.log,
      this.readBody,
      recoverySettlement,
    );
    // The client leaving (its connection closes before the response is complete) aborts the
    // request; its FIN starts the half-close probes (probeClient). Both come from the connection.
    const inFlight = (req.socket as Conn)[IN_FLIGHT];
    inFlight.push(ctx);
    ctx.metrics = this.metrics;
    if (this.tracing) ctx.trace = this.tracing.request(ctx);
    const series = this.routeSeries(route.info.name);
    series.inFlight.inc();
    const gone = ctx.clientGone;
    const run = await runChain(ctx, route.chain, route.info.handler ? this.handlerCall : this.modelCall);
    let error = run.error;
    if (error && !ctx.committed && !gone.aborted) this.sendError(ctx, error);
    if (!error && ctx.attempts.length > 0) error = ctx.attempts[ctx.attempts.length - 1].error;
    if (!res.writableEnded && !gone.aborted) {
      // A terminal step that returned without ending the response is a bug; do not leave the client hanging.
      if (!ctx.committed) this.sendError(ctx, new GatewayError('INTERNAL'));
      else res.end();
    }
    ctx.releaseHeldBody();
    const outcome: Outcome = {
      status: gone.aborted && !res.writableFinished ? 499 : res.statusCode,
      error,
      committed: ctx.committed,
      clientAborted: gone.aborted,
    };
    const finals = runFinally(ctx, route.chain, run.reached, outcome);
    if (finals) await finals;
    if (ctx.admission.isAdmitted) {
      // Admitted but never settled (no metering on this route, or it failed first): release the hold.
      // A request that reached an upstream still counts as a request (RPM); one refused before did not.
      try {
        await ctx.admission.cancel({ keepCounts: ctx.attempts.length > 0 });
      } catch (e) {
        ctx.log.error('could not release a reservation', { error: e as Error });
      }
    }
    series.inFlight.dec();
    // Usually the only one (the last): no search. Not a Set: emptying one shrinks its table, an
    // allocation per request in V8.
    if (inFlight[inFlight.length - 1] === ctx) inFlight.pop();
    else {
      const i = inFlight.indexOf(ctx);
      if (i >= 0) inFlight.splice(i, 1);
    }
    const probing = probes.get(ctx);
    if (probing) clearTimeout(probing);
    if (this.failed && (outcome.status >= 400 || error)) {
      this.failed.record({
        requestId: id,
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        status: outcome.status,
        error: error ? { code: error.code, type: error.type, message: error.message } : undefined,
        key: ctx.key?.id,
        model: ctx.answeredModel?.id ?? ctx.attempts[0]?.model.id,
        // The gateway's own refusal (a limit, a key, the balance, the billing service): nothing went
        // upstream and the request itself was not at fault, so its body explains nothing.
        refused:
          !!error && ctx.attempts.length === 0 && error.entry.category !== 'request' && error.id !== 'INTERNAL' && error.status !== 499,
        ...recordedBody(ctx),
      });
    }
    recordRequest(this.metrics, ctx, outcome, rt.config.metrics.keyLabels);
    if (error?.id === 'INTERNAL') {
      // A bug (the gateway's or a plugin's): its stack, and the plugin that threw when it was one.
      if (error.plugin) this.metrics.pluginErrors.inc({ plugin: error.plugin });
      ctx.log.error(error.plugin ? `plugin '${error.plugin}' threw` : 'internal error', {
        route: route.info.name,
        plugin: error.plugin,
        error: error.cause ?? error,
      });
    }
    ctx.trace?.end(outcome, error);
    // On the process logger with the request id as its first field: the same line as through a
    // child logger, without making one per request. A 5xx is a warning: `warn` keeps failures.
    const ua = req.headers['user-agent'];
    const level = outcome.status >= 500 ? 'warn' : 'info';
    if (this.log.enabled?.(level) !== false)
      logLine(this.log, level, 'request', accessLine(ctx, route.info, outcome, error, ua ? this.loggable(ua) : undefined));
    return error;
  }

  private routeSeries(route: string): RouteSeries {
    let s = this.routes.get(route);
    if (!s) this.routes.set(route, (s = new RouteSeries(this.metrics, route)));
    return s;
  }

  // The terminal steps and the body reader: one function each for every request, not closures per request.
  private readonly modelCall = (ctx: RequestContext, chain: CompiledChain): Promise<void> => runModelCall(ctx, chain, this);
  private readonly handlerCall = (ctx: RequestContext): Promise<void> => HANDLERS[ctx.route.handler!](ctx, this);

  private readonly readBody = (ctx: RequestContext): Promise<ParsedBody> => readBody(ctx, this.bodyMemory);

  private sendError(ctx: RequestContext, err: GatewayError): void {
    if (ctx.res.headersSent) return; // answered by clientError (malformed or too slow a body)
    const r = renderError(toGatewayError(err), ctx.errorFormat);
    const headers: Record<string, string> = { 'content-type': 'application/json', ...r.headers };
    ctx.committed = true;
    ctx.res.writeHead(r.status, headers);
    ctx.res.end(JSON.stringify(r.body));
    if (isLimitDecision(err, ctx)) this.metrics.limitRejections.inc({ code: errorLabel(err) });
  }

  // ---- shutdown ----------------------------------------------------------------------------

  /** Stops accepting, lets requests in flight finish (up to drain_timeout), then releases everything. */
  /**
   * Shutdown: /readyz turns 503 at once; for `server.shutdown_delay` everything is still served (so
   * load balancers see the 503 and stop sending traffic); then the listener stops accepting and
   * requests in flight get up to `drain_timeout` to finish. Calling it again while the delay runs
   * cuts the delay short (a second SIGTERM); every call resolves when the gateway is closed.
   */
  close(): Promise<void> {
    if (this.closed) {
      this.cutShutdownDelay?.();
      return this.closed;
    }
    this.closing = true;
    this.closed = this.shutdown();
    return this.closed;
  }

  private async shutdown(): Promise<void> {
    if (this.onHup) process.off('SIGHUP', this.onHup);
    this.watcher?.close();
    clearTimeout(this.reloadTimer);
    const delay = this.runtime.config.server.shutdownDelayMs;
    if (delay > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delay);
        this.cutShutdownDelay = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    await this.reloading;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    // Connections not carrying a request (keep-alive between requests, or opened and unused) are
    // closed now, and the others as soon as their response ends.
    const sweep = () => {
      for (const s of this.sockets) if (!this.busy.has(s)) s.destroy();
    };
    const sweeper = setInterval(sweep, 50);
    sweep();
    const wait = (ms: number) => new Promise<false>((resolve) => setTimeout(() => resolve(false), ms).unref());
    const drained = closed.then(() => true as const);
    if (!(await Promise.race([drained, wait(this.runtime.config.server.drainTimeoutMs)]))) {
      // Past drain_timeout the gateway ends what is still in flight itself, and says so: a
      // committed stream gets its protocol's error event (and is billed what it streamed), a
      // request not yet answered a 503; their upstream calls are aborted. Then a moment for those
      // answers to be written before every connection is closed.
      const stop = new GatewayError('SHUTTING_DOWN');
      let stopped = 0;
      for (const s of this.sockets) {
        for (const ctx of (s as Conn)[IN_FLIGHT]?.slice() ?? []) {
          ctx.stop(stop);
          stopped++;
        }
      }
      if (stopped > 0) {
        this.log.warn('drain_timeout passed: requests still in flight were ended by the gateway', { requests: stopped });
        await Promise.race([drained, wait(STOP_GRACE_MS)]);
      }
    }
    clearInterval(sweeper);
    clearInterval(this.bodyTimer);
    for (const s of this.sockets) s.destroy();
    await this.runtime.retire();
    await this.shutdownResources();
  }

  private async shutdownResources(): Promise<void> {
    clearInterval(this.bodyTimer);
    if (this.opsServer) {
      const ops = this.opsServer;
      await new Promise<void>((resolve) => {
        ops.close(() => resolve());
        ops.closeAllConnections();
      });
    }
    // Written before the process goes: the records of the last requests' failures.
    await this.failed?.close();
    this.transport.close();
    this.accounts.close();
    this.pools.close();
    for (const m of this.mocks.values()) await m.close();
    this.mocks.clear();
    if (this.ledgerDrain) {
      // Settlements queued while the store was away go first, so their records are drained too.
      await this.store.flush().catch(() => undefined);
      await this.ledgerDrain.drainer.close();
      this.ledgerDrain.files.close();
      this.ledgerDrain = undefined;
    }
    if (!this.opts.store) await this.store.close();
    // After the store: its last lines are in the day files, and a last pass ships them.
    await this.pgLedger?.close();
    // Last: the spans of the requests that just finished are exported before the process goes.
    await this.tracing?.shutdown();
  }
}

/** How long the answers of requests ended at shutdown (drain_timeout passed) get to be written. */
const STOP_GRACE_MS = 1_000;

/** The requests in flight on a connection, oldest first (more than one only when the client pipelines). */
const IN_FLIGHT = Symbol('inFlight');
/** When the body of the connection's latest request must have arrived (epoch ms); 0: nothing due. */
const BODY_DUE = Symbol('bodyDue');
type Conn = Socket & { [IN_FLIGHT]: RequestContext[]; [BODY_DUE]: number };

/** The half-close probe timer of a request, while one runs. */
const probes = new WeakMap<RequestContext, NodeJS.Timeout>();

/**
 * The client's FIN: a half-close (it still reads) or gone for good. Interim 102s tell them apart
 * without touching the response: a closed socket answers the first with a reset, which the next
 * write reports (then the connection's `close` aborts the request); a half-closed one ignores them,
 * as HTTP requires of 1xx (on a stream already committed the probe is an SSE comment, which clients
 * ignore too). Probes at 20 ms, 200 ms, 2 s, then every 10 s until the response ends.
 */
function probeClient(ctx: RequestContext, next: number): void {
  const { req, res } = ctx;
  if (res.writableEnded || res.destroyed) return;
  if (!res.headersSent) {
    if (req.httpVersion === '1.0') return; // 1xx is not for HTTP/1.0 clients: served as a half-close
    res.writeProcessing();
  } else if (String(res.getHeader('content-type') ?? '').startsWith('text/event-stream')) res.write(KEEPALIVE);
  else return;
  const t = setTimeout(() => probeClient(ctx, Math.min(next * 10, 10_000)), next);
  t.unref();
  probes.set(ctx, t);
}

// Request ids: a random per-process prefix and a counter — unique, unguessable across restarts,
// and no crypto call per request (it showed in profiles). Ledger ids (the store's and the ledger's
// name of a request; its x-request-id may be the client's) have a prefix and counter of their own,
// so those of consecutive requests are consecutive: the Redis store keeps their done markers
// together by their leading characters (store/redis/keys.ts `done`). Keep both fixed-width, the
// counter last.
function idSource(): () => string {
  const prefix = `req_${randomBytes(6).toString('hex')}`;
  let counter = 0;
  return () => {
    counter = (counter + 1) % 0x1000000000000;
    return prefix + counter.toString(16).padStart(12, '0');
  };
}
const newRequestId = idSource();
const newLedgerId = idSource();

/** A path of letters, digits, `_`, `-` and single leading `/` is its own normalised form. */
const PLAIN_PATH = /^\/(?!\/)[A-Za-z0-9_/-]*$/;

/** The path of a request target as WHATWG URL normalises it; plain paths (API paths are) without a parse. */
function pathOf(url: string): string {
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  if (PLAIN_PATH.test(path)) return path;
  try {
    return new URL(url, 'http://gateway').pathname;
  } catch {
    return '';
  }
}

function bearerIs(req: IncomingMessage, token: string): boolean {
  const m = /^bearer\s+(.+)$/i.exec(req.headers.authorization ?? '');
  if (!m) return false;
  const a = createHash('sha256').update(m[1].trim()).digest();
  return timingSafeEqual(a, createHash('sha256').update(token).digest());
}

/**
 * The access log line: who, what, how it ended, what it cost. Key names only (never a key), no
 * bodies, no query strings; the upstream account as `<provider>/<name>`, never its key. Its
 * members as JSON text, written in one pass (log.ts, `line`): names through `quoted` (they repeat
 * on every line), ids and free text through JSON.stringify; absent values left out.
 */
export function accessLine(
  ctx: RequestContext,
  route: RouteInfo,
  outcome: Outcome,
  error: GatewayError | undefined,
  userAgent: string | undefined,
): string {
  const answered = ctx.answeredModel;
  const usage = ctx.usage;
  const first = ctx.attempts[0];
  const account = ctx.attempts[ctx.attempts.length - 1]?.account?.id;
  const billed = ctx.billed;
  return (
    `"requestId":${JSON.stringify(ctx.id)},"route":${quoted(route.name)}` +
    member(',"method":', ctx.req.method) +
    (ctx.clientIp ? `,"clientIp":${JSON.stringify(ctx.clientIp)}` : '') +
    member(',"path":', route.path) +
    (userAgent === undefined ? '' : `,"userAgent":${JSON.stringify(userAgent)}`) +
    `,"status":${outcome.status},"durationMs":${ctx.clock.now() - ctx.startedAt}` +
    member(',"ttftMs":', ctx.ttftMs) +
    member(',"key":', ctx.key?.id) +
    member(',"user":', ctx.key?.user) +
    member(',"group":', ctx.group?.name) +
    member(',"model":', answered?.id ?? first?.model.id) +
    member(',"provider":', answered?.provider ?? first?.provider.name) +
    member(',"account":', account) +
    `,"attempts":${ctx.attempts.length}` +
    (error ? member(',"errorCode":', error.code) + `,"errorMessage":${JSON.stringify(error.message)}` : '') +
    (usage
      ? `,"tokens":{"input":${usage.input},"output":${usage.output},"cacheRead":${usage.cacheRead},"cacheWrite":${usage.cacheWrite}}`
      : '') +
    (ctx.usageEstimated ? ',"estimated":true' : '') +
    (billed ? member(',"costMicroUsd":', billed.actual) + member(',"listCostMicroUsd":', billed.cost) : '') +
    (outcome.clientAborted ? ',"clientAborted":true' : '')
  );
}

/** Where an access line's request came from (see `Gateway.origin`). */
interface RequestOrigin {
  clientIp?: string;
  path?: string;
  userAgent?: string;
}

/** Clients' secrets by config: collected once per loaded config. */
const secretsOf = new WeakMap<GatewayConfig, Secrets>();
/** Client texts redacted against a set of secrets (`Gateway.loggable`): at most REDACTED_MAX each. */
const redactedOf = perObject((_: Secrets) => new Map<string, string>());
const REDACTED_MAX = 1024;

/** An error as a metric label: its catalogue id in lower case (`rpm_exceeded`, `no_accounts`). */
function errorLabel(err: GatewayError): string {
  return err.id.toLowerCase();
}

/** Upstream-side refusals: throttled, but about the providers, not a limit the gateway keeps. */
const UPSTREAM_SIDE: ReadonlySet<string> = new Set(['PROVIDER_RATE_LIMIT', 'ACCOUNTS_COOLING']);

/**
 * Whether an answer is one of the gateway's own key, access and limit decisions
 * (`gateway_limit_rejections_total`): a refusal of the credential, denied, exhausted or throttled
 * kind, made before any upstream attempt. An upstream's 400, 413 or 429 passed on is not one.
 */
function isLimitDecision(err: GatewayError, ctx: RequestContext): boolean {
  const c = err.entry.category;
  return (
    err.status >= 400 &&
    err.status < 500 &&
    ctx.attempts.length === 0 &&
    !UPSTREAM_SIDE.has(err.id) &&
    (c === 'credential' || c === 'denied' || c === 'exhausted' || c === 'throttled')
  );
}
