/**
 * Every Prometheus metric, declared once, on one registry per gateway process (not prom-client's
 * global one, so tests can run several gateways in one process), plus Node.js's and the process's
 * default metrics (`process_*`, `nodejs_*`).
 *
 * Label sets stay bounded: route, HTTP status, error code, provider, model, group and bucket all
 * come from the config or the code, never from the client; key and user names appear only in the
 * `gateway_key_*` series, which exist only when `metrics.key_labels` is on.
 *
 * Plugins get the same object (`deps.metrics`) and create their own metrics with `counter()`,
 * `gauge()` and `histogram()`: these return the metric already registered under that name, so a
 * plugin that creates a metric in `create()` survives every reload.
 */
import {
  Counter, Gauge, Histogram, Registry, collectDefaultMetrics,
  type CounterConfiguration, type GaugeConfiguration, type HistogramConfiguration, type Metric,
} from 'prom-client';
import type { Attempt, RequestContext } from './context.js';
import type { Store } from './store/types.js';
import type { Outcome } from './plugin.js';

type Config<T extends string, C> = Omit<C, 'registers'> & { name: string; help: string; labelNames?: readonly T[] };

export interface Metrics {
  /** The gateway's own series (and plugins'); `scrape()` adds the process-wide default metrics. */
  registry: Registry;
  /** The Prometheus text of everything. */
  scrape(): Promise<string>;
  contentType: string;
  requests: Counter<'route' | 'status'>;
  inFlight: Gauge<'route'>;
  duration: Histogram<'route'>;
  ttft: Histogram<'provider' | 'model'>;
  upstreamAttempts: Counter<'provider' | 'model' | 'outcome'>;
  upstreamLatency: Histogram<'provider' | 'model'>;
  fallbacks: Counter<'model' | 'reason'>;
  tokens: Counter<'provider' | 'model' | 'group' | 'bucket'>;
  costMicros: Counter<'provider' | 'model' | 'group'>;
  limitRejections: Counter<'code'>;
  pluginErrors: Counter<'plugin'>;
  storeLatency: Histogram<'store' | 'op'>;
  storeErrors: Counter<'store' | 'op'>;
  queueWaiting: Gauge;
  configReloads: Counter<'result'>;
  /** 1 while the shared store (Redis) is unreachable. */
  storeDegraded: Gauge;

  // ---- upstream account pools (core/pool) -------------------------------------------------
  // Labels: provider and account names from the config, outcome/reason/state from fixed lists.
  accountRequests: Counter<'provider' | 'account' | 'outcome'>;
  accountCooldowns: Counter<'provider' | 'account' | 'reason'>;
  accountFailovers: Counter<'provider'>;
  accountInFlight: Gauge<'provider' | 'account'>;
  accountTtft: Histogram<'provider' | 'account'>;
  /** 1 for each account's current state; filled at scrape time from `accountStates`. */
  accountState: Gauge<'provider' | 'account' | 'state'>;
  accountStates?: () => Iterable<{ provider: string; account: string; state: string }>;

  /** A counter for a plugin: the one already registered under this name, else a new one. */
  counter<T extends string = string>(cfg: Config<T, CounterConfiguration<T>>): Counter<T>;
  gauge<T extends string = string>(cfg: Config<T, GaugeConfiguration<T>>): Gauge<T>;
  histogram<T extends string = string>(cfg: Config<T, HistogramConfiguration<T>>): Histogram<T>;
}

const LATENCY = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const STORE = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/**
 * Node.js and process metrics describe the process, not a gateway: one registry per process
 * (collecting them starts observers that live as long as the process), scraped by every gateway.
 */
let processRegistry: Registry | undefined;
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

export function createMetrics(opts: { defaultMetrics?: boolean; version?: string } = {}): Metrics {
  const registry = new Registry();
  const process_ = opts.defaultMetrics === false ? undefined : processMetrics();
  const registers = [registry];
  const core = new Set<string>();
  const own = <M extends Metric>(m: M): M => {
    core.add((m as unknown as { name: string }).name);
    return m;
  };
  if (opts.version) {
    own(new Gauge({ name: 'gateway_build_info', help: 'Always 1; the labels say which gateway runs', labelNames: ['version', 'node'], registers }))
      .set({ version: opts.version, node: process.version }, 1);
  }
  /** The metric registered as `name` when it has the same kind, else a new one (plugin helper). */
  function reuse<M extends Metric>(kind: new (c: any) => M, cfg: { name: string }): M {
    if (core.has(cfg.name)) throw new Error(`metric '${cfg.name}' belongs to the gateway; pick another name`);
    const existing = registry.getSingleMetric(cfg.name);
    if (existing) {
      if (!(existing instanceof kind)) throw new Error(`metric '${cfg.name}' is already registered as another kind of metric`);
      return existing as M;
    }
    return new kind({ ...cfg, registers });
  }
  const m: Metrics = {
    registry,
    contentType: registry.contentType,
    scrape: async () => (process_ ? await process_.metrics() : '') + await registry.metrics(),
    requests: own(new Counter({ name: 'gateway_requests_total', help: 'Requests answered, by route and HTTP status (health, readiness and metrics probes excluded)', labelNames: ['route', 'status'], registers })),
    inFlight: own(new Gauge({ name: 'gateway_requests_in_flight', help: 'Requests being served', labelNames: ['route'], registers })),
    duration: own(new Histogram({
      name: 'gateway_request_duration_seconds', help: 'Time from request to the end of the response', labelNames: ['route'], registers, buckets: LATENCY,
    })),
    ttft: own(new Histogram({
      name: 'gateway_time_to_first_token_seconds', help: 'Streams: time from the request to its first content event sent to the client, by the answering provider and model',
      labelNames: ['provider', 'model'], registers, buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120],
    })),
    upstreamAttempts: own(new Counter({
      name: 'gateway_upstream_attempts_total', help: 'Upstream attempts by provider, model and outcome (ok, an HTTP status, connect_error, timeout)',
      labelNames: ['provider', 'model', 'outcome'], registers,
    })),
    upstreamLatency: own(new Histogram({
      name: 'gateway_upstream_latency_seconds', help: 'Time from sending an upstream attempt to its response headers', labelNames: ['provider', 'model'], registers, buckets: LATENCY,
    })),
    fallbacks: own(new Counter({
      name: 'gateway_fallback_attempts_total', help: 'Attempts on a fallback model, by that model and why the previous attempt failed (an HTTP status, connect, timeout, event)',
      labelNames: ['model', 'reason'], registers,
    })),
    tokens: own(new Counter({ name: 'gateway_tokens_total', help: 'Tokens billed, by provider, model, group and bucket (input, output, cache_read, cache_write)', labelNames: ['provider', 'model', 'group', 'bucket'], registers })),
    costMicros: own(new Counter({ name: 'gateway_charged_micro_usd_total', help: 'Charged cost in micro-USD, by provider, model and group', labelNames: ['provider', 'model', 'group'], registers })),
    limitRejections: own(new Counter({ name: 'gateway_limit_rejections_total', help: 'Requests refused with a 4xx before reaching a model, by error code', labelNames: ['code'], registers })),
    pluginErrors: own(new Counter({ name: 'gateway_plugin_errors_total', help: 'Exceptions thrown by a plugin (answered 500), by plugin instance', labelNames: ['plugin'], registers })),
    storeLatency: own(new Histogram({ name: 'gateway_store_operation_seconds', help: 'Store calls by store kind and operation', labelNames: ['store', 'op'], registers, buckets: STORE })),
    storeErrors: own(new Counter({ name: 'gateway_store_errors_total', help: 'Store calls that failed, by store kind and operation', labelNames: ['store', 'op'], registers })),
    queueWaiting: own(new Gauge({ name: 'gateway_concurrency_queue_waiting', help: 'Requests waiting for a concurrency slot', registers })),
    configReloads: own(new Counter({ name: 'gateway_config_reloads_total', help: 'Config reloads by result (ok, rejected)', labelNames: ['result'], registers })),
    storeDegraded: own(new Gauge({ name: 'gateway_store_degraded', help: '1 while the shared store (Redis) is unreachable: money paths refused, RPM and concurrency per instance', registers })),

    // ---- upstream account pools (core/pool) -------------------------------------------------
    accountRequests: own(new Counter({
      name: 'gateway_account_requests_total', help: 'Upstream attempts per account, by outcome (ok, rate_limited, overloaded, server_error, timeout, connect_error, auth_error, …)',
      labelNames: ['provider', 'account', 'outcome'], registers,
    })),
    accountCooldowns: own(new Counter({
      name: 'gateway_account_cooldowns_total', help: 'Accounts put in cooldown or disabled, by reason', labelNames: ['provider', 'account', 'reason'], registers,
    })),
    accountFailovers: own(new Counter({
      name: 'gateway_account_failovers_total', help: 'Requests moved to another account of the same model after a failed attempt', labelNames: ['provider'], registers,
    })),
    accountInFlight: own(new Gauge({ name: 'gateway_account_in_flight', help: 'Upstream requests in flight per account (this instance)', labelNames: ['provider', 'account'], registers })),
    accountTtft: own(new Histogram({
      name: 'gateway_account_ttft_seconds', help: 'Time to first token (to the response for non-streaming calls) per account', labelNames: ['provider', 'account'], registers,
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
    })),
    accountState: own(new Gauge({
      name: 'gateway_account_state', help: 'Account state (available, cooling, disabled, demoted): 1 for the current one', labelNames: ['provider', 'account', 'state'], registers,
      collect() {
        this.reset();
        for (const s of m.accountStates?.() ?? []) this.set(s, 1);
      },
    })),

    counter: (cfg) => reuse(Counter, cfg),
    gauge: (cfg) => reuse(Gauge, cfg),
    histogram: (cfg) => reuse(Histogram, cfg),
  };
  return m;
}

/**
 * The per-request series, recorded once the request is over (the per-account series are recorded
 * by core/pool as each attempt ends).
 */
export function recordRequest(m: Metrics, ctx: RequestContext, outcome: Outcome, keyLabels: boolean): void {
  const answered = answering(ctx);
  for (let i = 1; i < ctx.attempts.length; i++) {
    const prev = ctx.attempts[i - 1];
    if (ctx.attempts[i].model === prev.model) continue; // another account of the same model: a failover, not a fallback
    m.fallbacks.inc({ model: ctx.attempts[i].model.id, reason: prev.failure === 'status' ? String(prev.status) : prev.failure ?? 'retry' });
  }
  if (answered && ctx.ttftMs !== undefined) m.ttft.observe({ provider: answered.provider.name, model: answered.model.id }, ctx.ttftMs / 1000);
  const billed = ctx.billed;
  if (billed && ctx.usage && ctx.answeredModel && ctx.group) {
    const labels = { provider: ctx.answeredModel.provider, model: ctx.answeredModel.id, group: ctx.group.name };
    const u = ctx.usage;
    m.tokens.inc({ ...labels, bucket: 'input' }, u.input);
    m.tokens.inc({ ...labels, bucket: 'output' }, u.output);
    m.tokens.inc({ ...labels, bucket: 'cache_read' }, u.cacheRead);
    m.tokens.inc({ ...labels, bucket: 'cache_write' }, u.cacheWrite);
    m.costMicros.inc(labels, billed.actual);
  }
  if (keyLabels && ctx.key) {
    const labels = { key: ctx.key.id, user: ctx.key.user };
    m.counter({ name: 'gateway_key_requests_total', help: 'Requests by key name and user (metrics.key_labels)', labelNames: ['key', 'user', 'status'] })
      .inc({ ...labels, status: String(outcome.status) });
    if (billed) {
      m.counter({ name: 'gateway_key_charged_micro_usd_total', help: 'Charged micro-USD by key name and user (metrics.key_labels)', labelNames: ['key', 'user'] })
        .inc(labels, billed.actual);
    }
  }
}

function answering(ctx: RequestContext): Attempt | undefined {
  if (!ctx.answeredModel) return undefined;
  for (let i = ctx.attempts.length - 1; i >= 0; i--) if (ctx.attempts[i].model === ctx.answeredModel) return ctx.attempts[i];
  return undefined;
}

/**
 * The store with every call timed and every failure counted. `acquireSlot` is counted but not
 * timed: its duration is the wait for a slot, not store latency.
 */
export function instrumentStore(store: Store, m: Metrics): Store {
  const kind = store.kind;
  // Keyed by the function itself: a method replaced at run time (a test's fault injection) is wrapped afresh.
  const wrapped = new WeakMap<object, unknown>();
  return new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof v !== 'function' || typeof prop !== 'string') return v;
      let w = wrapped.get(v);
      if (!w) {
        const op = prop;
        const timed = op !== 'acquireSlot';
        w = function (this: unknown, ...args: unknown[]) {
          const t0 = performance.now();
          const failed = () => m.storeErrors.inc({ store: kind, op });
          let r: unknown;
          try {
            r = (v as (...a: unknown[]) => unknown).apply(target, args);
          } catch (e) {
            failed();
            throw e;
          }
          if (!(r instanceof Promise)) return r;
          return r.then((x) => {
            if (timed) m.storeLatency.observe({ store: kind, op }, (performance.now() - t0) / 1000);
            return x;
          }, (e) => {
            failed();
            throw e;
          });
        };
        wrapped.set(v, w);
      }
      return w;
    },
  });
}
