/**
 * The per-request context every plugin hook receives.
 *
 * The body and the model are read lazily: the first hook that asks (`await ctx.body()`,
 * `await ctx.model()`) triggers the read, so their errors (400, 413, 503) land exactly where that
 * hook sits in the check order, and routes that never need a body never read one.
 *
 * Plugins keep their own per-request state in typed slots (`createSlot<T>(name)`), not in ad-hoc
 * properties, so two plugins cannot clash and the types stay checked.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { GatewayError, type ErrorFormat } from './errors.js';
import type { GatewayConfig, GroupConfig, KeyConfig, ModelConfig, ProtocolName, UserConfig } from './config/types.js';
import type { AdmitResult, Claim, ClientSignal, EstimateReason, Settlement, SlotRequest, SlotResult, Store } from './store/types.js';
import { Abort } from './signal.js';
import type { Usage } from './money.js';
import type { Logger } from './log.js';
import type { Clock } from './clock.js';
import type { Metrics } from './metrics.js';
import type { Attempt, ParsedBody, ResolvedModel, RouteInfo, Slot } from './types.js';
import type { RequestTrace } from './telemetry/types.js';
import { resolveModel } from './routing.js';
import { clientAddress, normaliseIp, trustedProxies } from './client-ip.js';
import type { LogLevel } from './log.js';

export function createSlot<T>(name: string): Slot<T> {
  return Object.freeze({ name });
}

/**
 * Claims collected during onAccess, submitted to the store in one atomic `admit()`.
 * Each claim brings the error to throw if it is the first to fail.
 */
export class Admission {
  private readonly claims: Claim[] = [];
  private readonly errors: Array<(retryAfterMs?: number) => GatewayError | Promise<GatewayError>> = [];
  private committed = false;
  private admitted = false;
  /** Worst-case charge to reserve (micro-USD); plugins raise it, never lower it. */
  reserve = 0;

  constructor(
    private readonly store: Store,
    private readonly requestId: string,
    /** The settlement applied if the process dies before this request settles (store contract). */
    private readonly recovery: () => Settlement | undefined = () => undefined,
  ) {}

  /** `onFail` may look things up (it runs only on refusal, so the common path pays nothing). */
  add(claim: Claim, onFail: (retryAfterMs?: number) => GatewayError | Promise<GatewayError>): void {
    if (this.committed) throw new Error('admission already committed: claims must be added before commit()');
    this.claims.push(claim);
    this.errors.push(onFail);
  }

  get size(): number {
    return this.claims.length;
  }

  /** Submits the claims once (later calls are no-ops); throws the first failing claim's error. */
  async commit(): Promise<void> {
    await this.commitIfPending();
  }

  /**
   * `commit()` for the core's chain: undefined instead of a promise when there is nothing to wait
   * for (already committed, no claims, or a store that answers at once: `Store.admitNow`), so the
   * common path takes no turn of the microtask queue. A refusal is thrown, or rejected when its
   * error had to be looked up.
   */
  commitIfPending(): Promise<void> | undefined {
    const r = this.submit();
    return r instanceof Promise ? r.then(() => undefined) : undefined;
  }

  /**
   * `commit()`, then a concurrency slot — checked after every claim, and taken in the same store
   * call when the claims are submitted here (AdmitRequest.slot: the settlement or cancel of this
   * request then releases it too). The slot's result, or a promise of it when the store must be
   * waited for (Redis) or the request queues.
   */
  commitWithSlot(slot: SlotRequest): SlotResult | Promise<SlotResult> {
    const taken = this.submit(slot);
    if (taken === undefined) return this.store.acquireSlot(slot);
    if (taken instanceof Promise) return taken.then((s) => s ?? this.store.acquireSlot(slot));
    return taken;
  }

  /**
   * The admission itself, once: undefined when nothing was submitted (or no slot came with it), the
   * slot's result when the store answered at once, else a promise of either.
   */
  private submit(slot?: SlotRequest): SlotResult | Promise<SlotResult | undefined> | undefined {
    if (this.committed) return undefined;
    this.committed = true;
    if (this.claims.length === 0) return undefined;
    let answer;
    try {
      // The recovery settlement is priced here: a failure to make it is the billing check's too.
      const req = { requestId: this.requestId, reserve: this.reserve, claims: this.claims, recovery: this.recovery(), slot };
      answer = this.store.admitNow === undefined ? this.store.admit(req) : this.store.admitNow(req);
    } catch (e) {
      throw new GatewayError('BILLING_SERVICE', { cause: e });
    }
    if (!(answer instanceof Promise)) return this.accepted(answer);
    return answer.then(
      (result) => this.accepted(result),
      (e: unknown) => {
        throw new GatewayError('BILLING_SERVICE', { cause: e });
      },
    );
  }

  /** The store's answer: admitted (with the slot's outcome, if one was asked for), or the first failing claim's error thrown. */
  private accepted(result: AdmitResult): SlotResult | Promise<SlotResult> | undefined {
    if (!result.ok) {
      // Transient: the limit has room once the requests in flight settle. Retryable, unlike exhaustion.
      if (result.held) throw new GatewayError('LIMIT_HELD', { retryAfter: 1 });
      const e = this.errors[result.index](result.retryAfterMs);
      if (e instanceof Promise)
        return e.then((x) => {
          throw x;
        });
      throw e;
    }
    this.admitted = true;
    return result.slot;
  }

  /** True once the store accepted the claims (a reservation may be held). */
  get isAdmitted(): boolean {
    return this.admitted;
  }

  /** Releases a reservation that will not be settled (`keepCounts`: the request still counts for RPM). */
  async cancel(opts: { keepCounts?: boolean } = {}): Promise<void> {
    if (!this.admitted) return;
    this.admitted = false;
    await this.store.cancel(this.requestId, opts);
  }

  /** Called once settled: nothing left to cancel. */
  markSettled(): void {
    this.admitted = false;
  }
}

export class RequestContext {
  readonly startedAt: number;
  /**
   * The client's address: the socket's, or behind trusted proxies (`server.trusted_proxies`) the
   * right-most X-Forwarded-For hop that is not one (the socket's when a hop is unreadable).
   */
  clientIp: string;
  key?: KeyConfig;
  user?: UserConfig;
  group?: GroupConfig;
  readonly admission: Admission;
  readonly attempts: Attempt[] = [];
  /** Bytes have been written to the client. */
  committed = false;
  /** When the response was committed (epoch ms): an account's time to first token ends here. */
  committedAt?: number;
  /** Usage of the answering attempt, once known. */
  usage?: Usage;
  /** True when `usage` is an estimate (the upstream never reported it). */
  usageEstimated = false;
  /** Why `usage` is an estimate (its ledger record says so). */
  estimateReason?: EstimateReason;
  /** The model that answered. */
  answeredModel?: ModelConfig;
  /** The stream was cut at the request's reservation (ended as a length stop; its usage is estimated). */
  streamCut = false;
  /** Streams: milliseconds from the request to its first content event sent to the client. */
  ttftMs?: number;
  /** The settled charge (micro-USD, list price and charged), set by the plugin that settles it. */
  billed?: { cost: number; actual: number };
  /** Characters in the request body (for usage estimates). */
  requestChars = 0;
  /**
   * The body as received, kept only when it could not be parsed (failed-request records): all of
   * it, or for a large body its head (the record keeps at most 1 MiB) with `rawBodyLength`.
   */
  rawBody?: Buffer | string;
  rawBodyLength?: number;
  /** Gives the body's bytes back to the body memory (`holdBody`); undefined once called. */
  private releaseBody?: () => void;
  private bodyReleased = false;
  /** The parsed body, once read. */
  parsed?: ParsedBody;
  metrics?: Metrics;
  /** The request's trace, when tracing is on (`tracing:`); undefined otherwise. */
  trace?: RequestTrace;
  /** Set by the fallback plugin: extra models to try, and the attempt budget. */
  fallback: { models: string[]; maxAttempts: number } = { models: [], maxAttempts: 1 };
  private slots?: Map<Slot<unknown>, unknown>;
  /** The requested model, once `model()` resolved it. */
  requested?: ResolvedModel;
  private bodyPromise?: Promise<ParsedBody>;
  private modelPromise?: Promise<ResolvedModel>;

  constructor(
    /** The id echoed in `X-Request-ID` and logs; may come from the client. */
    readonly id: string,
    /**
     * The id the store knows this request by (admission, settlement). Always minted by the gateway:
     * a client-chosen `X-Request-ID` must never be able to collide with, or replay, another request's
     * reservation.
     */
    readonly ledgerId: string,
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    readonly route: RouteInfo,
    readonly config: GatewayConfig,
    readonly store: Store,
    readonly clock: Clock,
    /** The process logger; `log` adds the request id to it (made on first use). */
    private readonly rootLog: Logger,
    private readonly readBody: (ctx: RequestContext) => Promise<ParsedBody>,
    /**
     * The settlement applied if the process dies with this request in flight (the store's crash
     * recovery rule; the server passes core/billing's `recoverySettlement`).
     */
    recovery: (ctx: RequestContext) => Settlement | undefined = () => undefined,
  ) {
    this.startedAt = clock.now();
    const socketIp = normaliseIp(req.socket.remoteAddress ?? '');
    const trusted = trustedProxies(config.server);
    this.clientIp = trusted ? clientAddress(socketIp, this.headerValues('x-forwarded-for'), trusted) || socketIp : socketIp;
    this.admission = new Admission(store, ledgerId, () => recovery(this));
  }

  /**
   * Set when the client disconnects before the response is complete: `clientGone.aborted`, and
   * `abort` listeners. Cheaper than `signal` (which follows it), for the core and plugins alike.
   */
  readonly clientGone = new Abort();
  private closedAbort?: Abort;
  /**
   * Aborted when the client's connection closes, whether or not the response was complete (a
   * body still being read ends then: a 400 for a late body may have answered already). Made on
   * first use.
   */
  get connectionClosed(): ClientSignal {
    return (this.closedAbort ??= new Abort());
  }
  /** The gateway's connection listener: the client's connection closed. */
  connectionEnded(): void {
    this.closedAbort?.abort();
  }
  /**
   * Set when the gateway itself ends the request (`stop()`: shutdown past `server.drain_timeout`):
   * the error the client gets, in-stream once committed.
   */
  stopped?: GatewayError;
  /** What `stop()` interrupts: the upstream call in progress (set by the attempt while it runs). */
  onStop?: () => void;
  private childLog?: Logger;

  /** Ends the request on the gateway's own account: the upstream call is aborted and the client gets `err`. */
  stop(err: GatewayError): void {
    if (this.stopped) return;
    this.stopped = err;
    this.onStop?.();
  }

  /** Aborted when the client disconnects before the response is complete (an AbortSignal, made on first use). */
  get signal(): AbortSignal {
    return this.clientGone.signal();
  }

  /** Whether lines at `level` are written: build a line's fields only then. */
  logs(level: LogLevel): boolean {
    return this.rootLog.enabled?.(level) ?? true;
  }

  /** The request's logger: every line carries its `requestId`. */
  get log(): Logger {
    return (this.childLog ??= this.rootLog.child({ requestId: this.id }));
  }

  get protocol(): ProtocolName | undefined {
    return this.route.protocol;
  }

  /**
   * Body format for protocol-format errors (spec §7.1): Messages-style on the Messages endpoints,
   * `{error:{code,message}}` for Responses on a Messages-style group, Chat-style otherwise; on
   * /v1/models and /v1/usage, Messages-style for clients that speak Messages.
   */
  get errorFormat(): ErrorFormat {
    return routeErrorFormat(this.route.protocol, this.group?.kind, (name) => this.headerValues(name).length > 0);
  }

  /**
   * Sets a header of the response to the client, whichever way it ends (an answer, an error). For
   * the hooks before the response starts — onRequest, onAccess, onAttempt, onResponse; once it has
   * started (onFinally; onEvent, but for a stream's first frames) it throws. The gateway's own headers for the answer (content-type, an
   * error's retry headers) win over a plugin's. Hop-by-hop and framing headers and `x-request-id`
   * are refused: the connection, the body and the request's id are the gateway's.
   */
  setResponseHeader(name: string, value: string | number | readonly string[]): void {
    const lower = typeof name === 'string' ? name.toLowerCase() : '';
    if (!TOKEN.test(lower)) throw new TypeError(`setResponseHeader: '${String(name)}' is not a header name`);
    if (OWN_HEADERS.has(lower))
      throw new TypeError(`setResponseHeader: '${lower}' is the gateway's to set (hop-by-hop, framing or the request id)`);
    const values = Array.isArray(value) ? value.map(String) : [String(value)];
    if (values.some((v) => /[\r\n\0]/.test(v))) throw new TypeError(`setResponseHeader: the value of '${lower}' has a line break or NUL`);
    if (this.res.headersSent || this.committed || this.clientGone.aborted)
      throw new TypeError(
        `setResponseHeader('${lower}'): the response has started; set headers in onRequest, onAccess, onAttempt or onResponse`,
      );
    this.res.setHeader(lower, values.length === 1 ? values[0] : values);
  }

  /** The body's bytes count in the body memory until `releaseHeldBody` (at once if it ran already). */
  holdBody(release: () => void): void {
    if (this.bodyReleased) release();
    else this.releaseBody = release;
  }

  /** The request's handling ended: its body's bytes leave the body memory. */
  releaseHeldBody(): void {
    this.bodyReleased = true;
    const r = this.releaseBody;
    this.releaseBody = undefined;
    r?.();
  }

  get<T>(slot: Slot<T>): T | undefined {
    return this.slots?.get(slot) as T | undefined;
  }

  set<T>(slot: Slot<T>, value: T): void {
    (this.slots ??= new Map()).set(slot, value);
  }

  /** The parsed, validated body (read on first call). Throws 400 / 413. */
  body(): Promise<ParsedBody> {
    return (this.bodyPromise ??= this.readBody(this).then((b) => {
      this.parsed = b;
      this.requestChars = b.text.length;
      return b;
    }));
  }

  /** The requested model, resolved within the key's group (on first call). Throws 503 when not served. */
  model(): Promise<ResolvedModel> {
    return (this.modelPromise ??= this.body().then((b) => {
      const r = resolveModel(this.config, this.group, b.model);
      if (!r) throw new GatewayError('NO_ACCOUNTS', { message: `No available accounts support the model '${b.model}'` });
      this.requested = r;
      return r;
    }));
  }

  /**
   * Headers as Node received them, each name with every value (duplicates preserved). Read from
   * `rawHeaders`: a request asks for two or three names, and Node's `headersDistinct` would build
   * a second map of every header for them.
   */
  headerValues(name: string): string[] {
    const raw = this.req.rawHeaders;
    const lower = name.toLowerCase();
    const len = lower.length;
    let out: string[] | undefined;
    for (let i = 0; i < raw.length; i += 2) {
      const k = raw[i];
      if (k.length === len && (k === lower || k.toLowerCase() === lower)) (out ??= []).push(raw[i + 1]);
    }
    return out ?? [];
  }
}

/**
 * The protocol error format of a route (spec §7.1): Messages-style on the Messages endpoints,
 * `{error:{code,message}}` for Responses on a Messages-style group, Chat-style otherwise; on the
 * routes of no protocol (/v1/models, /v1/usage), Messages-style for clients that speak Messages
 * (`has('anthropic-version')` or `has('x-api-key')`). Without a known group, Responses is Chat-style.
 */
export function routeErrorFormat(
  protocol: ProtocolName | undefined,
  groupKind: string | undefined,
  has: (header: string) => boolean,
): ErrorFormat {
  if (protocol === 'anthropic-messages') return 'messages';
  if (protocol === 'openai-responses') return groupKind === 'messages' ? 'responses-lite' : 'chat';
  if (protocol === 'openai-chat') return 'chat';
  return has('anthropic-version') || has('x-api-key') ? 'messages' : 'chat';
}

export { normaliseIp };

/** RFC 9110 token characters: what a header name may be. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9a-z-]+$/;
/** Hop-by-hop (RFC 9110 §7.6.1), framing and representation headers, and the request id: the gateway writes them. */
const OWN_HEADERS: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'content-encoding',
  'content-type',
  'x-request-id',
]);
