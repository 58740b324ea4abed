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
 *
 * Cost: about fifteen series change per request. prom-client validates the label object and builds
 * a hash string on every `inc`/`observe`; that was ≈ 30 µs per request (bench/README.md "Where the
 * time goes"). Every metric made here is a prom-client metric (same class, same scrape) whose
 * `inc`/`dec`/`observe` first look the series up by its label values in a small tree of Maps (one
 * level per label name, in declaration order) that holds prom-client's own series object, and
 * update that object in place; the first call for a set of label values goes through prom-client
 * (validation, creation) and teaches the tree. So there is nothing to fold at scrape time, and
 * values read through `get()` or the scrape are always current and exact.
 */
import {
  Counter,
  Gauge,
  Histogram,
  Registry,
  collectDefaultMetrics,
  type CounterConfiguration,
  type GaugeConfiguration,
  type HistogramConfiguration,
  type Metric,
} from 'prom-client';
import type {
  AccountChanges,
  AccountHealthEvent,
  AccountHealthSnapshot,
  LimitsInUse,
  LimitsQuery,
  AccountKind,
  AccountRecord,
  AccountsSnapshot,
  AccountWrite,
  AccountWriteResult,
  AuditEntry,
  AuditInput,
  AuditQuery,
  CreditRecord,
  CreditRequest,
  CreditResult,
  Stored,
  Wallet,
  AdmitRequest,
  AdmitResult,
  KeyState,
  KeyStats,
  PeriodUsage,
  Settlement,
  SlotRequest,
  SlotResult,
  Store,
  StoreHealth,
} from './store/types.js';

type Config<T extends string, C> = Omit<C, 'registers'> & { name: string; help: string; labelNames?: readonly T[] };

// ---- series lookup without prom-client's per-call label hashing --------------------------------

type Labels = Record<string, string | number | undefined>;
/** prom-client's series objects (lib/counter.js, gauge.js, histogram.js in 15.x). */
type ValueEntry = { value: number; labels: Labels };
type HistogramEntry = { sum: number; count: number; bucketValues: Record<string, number>; labels: Labels };
interface Internals {
  hashMap: Record<string, unknown>;
}

/**
 * Label values → prom-client's series object for them. Knows only what prom-client created: a
 * lookup that misses goes through prom-client, then `learn()` finds the object it made. The tree is
 * dropped when prom-client replaces its table (`reset()`) and by the overrides below that replace
 * or delete series objects (`set`, `remove`, `zero`). Should a prom-client version keep its series
 * differently, `learn()` sees the unexpected shape and the metric stays on prom-client's own path:
 * slower, never wrong.
 */
class SeriesTree<E> {
  private root = new Map<unknown, unknown>();
  /** prom-client's table the tree's objects belong to. */
  table: unknown;
  /** Changes whenever the tree forgets what it held: a bound series (`bind`) looks its object up again. */
  epoch = 0;
  /** False once prom-client's series objects are not what this expects. */
  enabled: boolean;

  constructor(
    private readonly names: readonly string[],
    private readonly shape: (e: any) => boolean,
  ) {
    this.enabled = names.length > 0;
  }

  get(metric: Internals, labels: Labels): E | undefined {
    if (metric.hashMap !== this.table) {
      this.root.clear();
      this.epoch++;
      this.table = metric.hashMap;
      return undefined;
    }
    const names = this.names;
    let node: unknown = this.root;
    for (let i = 0; i < names.length; i++) {
      node = (node as Map<unknown, unknown>).get(labels[names[i]]);
      if (node === undefined) return undefined;
    }
    return node as E;
  }

  /** After prom-client handled `labels`: remembers the series object it holds for them. */
  learn(metric: Internals, labels: Labels): void {
    if (!this.enabled) return;
    if (metric.hashMap !== this.table) {
      this.root.clear();
      this.epoch++;
      this.table = metric.hashMap;
    }
    const names = this.names;
    // Only label objects that name nothing else (prom-client validated them just now).
    let own = 0;
    for (const k in labels) if (labels[k] !== undefined) own++;
    let entry: unknown;
    for (const e of Object.values(metric.hashMap) as { labels?: Labels }[]) {
      const l = e?.labels;
      if (!l) continue;
      let ok = true;
      for (let i = 0; i < names.length && ok; i++) ok = l[names[i]] === labels[names[i]];
      if (ok) {
        entry = e;
        break;
      }
    }
    if (entry === undefined) return; // e.g. a number where the series holds a string: stays on the slow path
    if (!this.shape(entry)) {
      this.enabled = false;
      this.clear();
      return;
    }
    let defined = 0;
    for (const n of names) if (labels[n] !== undefined) defined++;
    if (defined !== own) return;
    let node = this.root;
    for (let i = 0; i < names.length - 1; i++) {
      const v = labels[names[i]];
      let next = node.get(v) as Map<unknown, unknown> | undefined;
      if (!next) node.set(v, (next = new Map()));
      node = next;
    }
    node.set(labels[names[names.length - 1]], entry);
  }

  clear(): void {
    this.root.clear();
    this.epoch++;
  }

  /**
   * One series, its label values fixed: `update(value)` applies the value to prom-client's series
   * object directly once it is known (no label object, no lookup), and otherwise calls `update`
   * (the metric's own method, fast or slow) and looks the object up for next time. The object is
   * looked up again after anything that makes the tree forget (a reset, a removal, a `set`).
   */
  bind(
    self: Internals,
    labels: Labels,
    update: (labels: Labels, value?: number) => void,
    apply: (e: E, value: number | undefined) => boolean,
  ): (value?: number) => void {
    let entry: E | undefined;
    let epoch = -1;
    return (value?: number): void => {
      if (entry !== undefined && epoch === this.epoch && self.hashMap === this.table && apply(entry, value)) return;
      update(labels, value);
      entry = this.get(self, labels);
      epoch = this.epoch;
    };
  }

  /**
   * prom-client's own `slow(labels, value)` with a fast path: once the series for `labels` is
   * known, `apply` updates it in place, returning false for a value prom-client must see itself.
   */
  wrap(self: Internals, slow: (labels?: unknown, value?: number) => void, apply: (e: E, value: number | undefined) => boolean) {
    return (labels?: Labels | number, value?: number): void => {
      if (isObject(labels) && this.enabled) {
        const e = this.get(self, labels);
        if (e !== undefined && apply(e, value)) return;
        slow(labels, value);
        if (e === undefined) this.learn(self, labels);
        return;
      }
      slow(labels, value);
    };
  }
}

const isValueEntry = (e: any): boolean => typeof e?.value === 'number';

const isObject = (x: unknown): x is Labels => typeof x === 'object' && x !== null;

/** A prom-client Counter whose `inc` with labels skips prom-client's hashing once the series exists. */
/** A counter's `inc` applied to its series object; false for a value prom-client must see itself. */
function incValue(e: ValueEntry, value: number | undefined): boolean {
  const v = value ?? 1; // as prom-client reads undefined and null
  // Anything prom-client would refuse (negative, infinite) or treat oddly (NaN) takes its path.
  if (!(v >= 0 && v < Infinity)) return false;
  e.value += v;
  return true;
}

const never = (): boolean => false;

export class HotCounter<T extends string = string> extends Counter<T> {
  private readonly tree: SeriesTree<ValueEntry>;
  private readonly exemplars: boolean;

  constructor(cfg: CounterConfiguration<T>) {
    super(cfg);
    this.tree = new SeriesTree(cfg.labelNames ?? [], isValueEntry);
    this.exemplars = cfg.enableExemplars === true;
    if (this.exemplars) return; // `inc` takes another argument shape then
    const slow = this.inc.bind(this) as (labels?: unknown, value?: number) => void;
    (this as { inc: unknown }).inc = this.tree.wrap(this as unknown as Internals, slow, incValue);
  }

  /**
   * The series of these label values, bound: `inc(value)` without a label object or a lookup (for
   * the series every request updates; callers keep it, e.g. per model and group).
   */
  series(labels: Partial<Record<T, string | number>>): { inc(value?: number): void } {
    const inc = this.inc.bind(this) as (labels: Labels, value?: number) => void;
    return { inc: this.tree.bind(this as unknown as Internals, { ...labels }, inc, this.exemplars ? never : incValue) };
  }

  override remove(...args: any[]): void {
    this.tree.clear();
    (super.remove as (...a: unknown[]) => void)(...args);
  }
}

/** A prom-client Gauge whose `inc`/`dec` with labels skip prom-client's hashing once the series exists. */
export class HotGauge<T extends string = string> extends Gauge<T> {
  private readonly tree: SeriesTree<ValueEntry>;

  constructor(cfg: GaugeConfiguration<T>) {
    super(cfg);
    this.tree = new SeriesTree(cfg.labelNames ?? [], isValueEntry);
  }

  private delta(labels: Labels | number | undefined, value: number | undefined, sign: 1 | -1): boolean {
    if (!isObject(labels) || !this.tree.enabled) return false;
    const e = this.tree.get(this as unknown as Internals, labels);
    if (e === undefined || (value !== undefined && typeof value !== 'number')) return false;
    e.value += sign * (value ?? 1);
    return true;
  }

  override inc(labels?: any, value?: number): void {
    if (this.delta(labels, value, 1)) return;
    (super.inc as (l?: unknown, v?: number) => void)(labels, value);
    if (isObject(labels)) this.tree.learn(this as unknown as Internals, labels);
  }

  override dec(labels?: any, value?: number): void {
    if (this.delta(labels, value, -1)) return;
    (super.dec as (l?: unknown, v?: number) => void)(labels, value);
    if (isObject(labels)) this.tree.learn(this as unknown as Internals, labels);
  }

  /** The series of these label values, bound: `inc`/`dec` without a label object or a lookup. */
  series(labels: Partial<Record<T, string | number>>): { inc(value?: number): void; dec(value?: number): void } {
    const own = { ...labels } as Labels;
    const self = this as unknown as Internals;
    const apply = (sign: 1 | -1) => (e: ValueEntry, value: number | undefined) => {
      if (value !== undefined && typeof value !== 'number') return false;
      e.value += sign * (value ?? 1);
      return true;
    };
    return {
      inc: this.tree.bind(self, own, (l, v) => this.inc(l, v), apply(1)),
      dec: this.tree.bind(self, own, (l, v) => this.dec(l, v), apply(-1)),
    };
  }

  /** prom-client replaces the series object on `set`: forget the one held. */
  override set(labels: any, value?: number): void {
    this.tree.clear();
    (super.set as (l: unknown, v?: number) => void)(labels, value);
  }

  override remove(...args: any[]): void {
    this.tree.clear();
    (super.remove as (...a: unknown[]) => void)(...args);
  }
}

/** A prom-client Histogram whose `observe` with labels skips prom-client's hashing once the series exists. */
export class HotHistogram<T extends string = string> extends Histogram<T> {
  private readonly tree: SeriesTree<HistogramEntry>;

  constructor(cfg: HistogramConfiguration<T>) {
    super(cfg);
    const bounds: number[] = [...((this as unknown as { upperBounds: number[] }).upperBounds ?? [])];
    // prom-client keys bucket counts by the bound's string form.
    const keys = bounds.map(String);
    this.tree = new SeriesTree(
      cfg.labelNames ?? [],
      (e: any) =>
        typeof e?.sum === 'number' &&
        typeof e.count === 'number' &&
        isObject(e.bucketValues) &&
        bounds.length > 0 &&
        keys.every((k) => typeof e.bucketValues[k] === 'number'),
    );
    this.apply = cfg.enableExemplars
      ? never
      : (e, value) => {
          if (!Number.isFinite(value)) return false;
          const v = value as number;
          e.sum += v;
          e.count += 1;
          for (let i = 0; i < bounds.length; i++) {
            if (v <= bounds[i]) {
              e.bucketValues[keys[i]] += 1;
              break;
            }
          }
          return true;
        };
    if (cfg.enableExemplars) return; // `observe` takes another argument shape then
    const slow = this.observe.bind(this) as (labels?: unknown, value?: number) => void;
    (this as { observe: unknown }).observe = this.tree.wrap(this as unknown as Internals, slow, this.apply);
  }

  private readonly apply: (e: HistogramEntry, value: number | undefined) => boolean;

  /** The series of these label values, bound: `observe(value)` without a label object or a lookup. */
  series(labels: Partial<Record<T, string | number>>): { observe(value: number): void } {
    const observe = this.observe.bind(this) as unknown as (labels: Labels, value?: number) => void;
    const bound = this.tree.bind(this as unknown as Internals, { ...labels }, observe, this.apply);
    return { observe: (v: number) => bound(v) };
  }

  override remove(...args: any[]): void {
    this.tree.clear();
    (super.remove as (...a: unknown[]) => void)(...args);
  }

  override zero(labels: any): void {
    this.tree.clear();
    super.zero(labels);
  }
}

export interface Metrics {
  /** The gateway's own series (and plugins'); `scrape()` adds the process-wide default metrics. */
  registry: Registry;
  /** The Prometheus text of everything. */
  scrape(): Promise<string>;
  contentType: string;
  requests: HotCounter<'route' | 'status' | 'error'>;
  inFlight: HotGauge<'route'>;
  duration: HotHistogram<'route'>;
  ttft: HotHistogram<'provider' | 'model'>;
  upstreamAttempts: HotCounter<'provider' | 'model' | 'outcome'>;
  upstreamLatency: HotHistogram<'provider' | 'model'>;
  fallbacks: Counter<'model' | 'reason'>;
  tokens: HotCounter<'provider' | 'model' | 'group' | 'bucket'>;
  costMicros: HotCounter<'provider' | 'model' | 'group'>;
  limitRejections: Counter<'code'>;
  pluginErrors: Counter<'plugin'>;
  storeLatency: HotHistogram<'store' | 'op'>;
  storeErrors: Counter<'store' | 'op'>;
  queueWaiting: Gauge;
  configReloads: Counter<'result'>;
  /** 1 while the shared store (Redis) is unreachable. */
  storeDegraded: Gauge;
  /** Failed-request records not kept (core/failed-requests.ts), by reason. */
  failedRequestsDropped: Counter<'reason'>;

  // ---- the ledger's PostgreSQL sink (core/ledger/postgres.ts) --------------------------------
  /** Bytes of the day files not yet shipped to PostgreSQL (the outbox's backlog). */
  ledgerOutboxBytes: Gauge;
  ledgerShipped: Counter;
  ledgerRejected: Counter;
  /** 1 while PostgreSQL takes the records, 0 while it is unavailable. */
  ledgerPostgresUp: Gauge;

  // ---- upstream account pools (core/pool) -------------------------------------------------
  // Labels: provider and account names from the config, outcome/reason/state from fixed lists.
  accountRequests: HotCounter<'provider' | 'account' | 'outcome'>;
  accountCooldowns: Counter<'provider' | 'account' | 'reason'>;
  accountFailovers: Counter<'provider'>;
  accountInFlight: HotGauge<'provider' | 'account'>;
  accountTtft: HotHistogram<'provider' | 'account'>;
  /** 1 for each account's current state; filled at scrape time from `accountStates`. */
  accountState: Gauge<'provider' | 'account' | 'state'>;
  accountStates?: () => Iterable<{ provider: string; account: string; state: string }>;

  /** A counter for a plugin: the one already registered under this name, else a new one. */
  counter<T extends string = string>(cfg: Config<T, CounterConfiguration<T>>): Counter<T>;
  gauge<T extends string = string>(cfg: Config<T, GaugeConfiguration<T>>): Gauge<T>;
  histogram<T extends string = string>(cfg: Config<T, HistogramConfiguration<T>>): Histogram<T>;
}

/** A counter by `reason` with every reason's series at 0 from the start (rates and alerts see them before the first). */
function zeroed<C extends Counter<'reason'>>(reasons: readonly string[], c: C): C {
  for (const reason of reasons) c.inc({ reason }, 0);
  return c;
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
    // Gauges whose names end in _total break the naming rules (`promtool check metrics`); each is
    // the sum of its labelled sibling (`sum(nodejs_active_handles)`), so nothing is lost.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'])
      processRegistry.removeSingleMetric(name);
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
    own(
      new HotGauge({
        name: 'gateway_build_info',
        help: 'Always 1; the labels say which gateway runs',
        labelNames: ['version', 'node'],
        registers,
      }),
    ).set({ version: opts.version, node: process.version }, 1);
  }
  /** The metric registered as `name` when it has the same kind, else a new one (plugin helper). */
  function reuse<M extends Metric>(kind: new (c: any) => M, cfg: { name: string }, make: new (c: any) => M): M {
    if (core.has(cfg.name)) throw new Error(`metric '${cfg.name}' belongs to the gateway; pick another name`);
    const existing = registry.getSingleMetric(cfg.name);
    if (existing) {
      if (!(existing instanceof kind)) throw new Error(`metric '${cfg.name}' is already registered as another kind of metric`);
      return existing;
    }
    return new make({ ...cfg, registers });
  }
  const m: Metrics = {
    registry,
    contentType: registry.contentType,
    scrape: async () => (process_ ? await process_.metrics() : '') + (await registry.metrics()),
    requests: own(
      new HotCounter({
        name: 'gateway_requests_total',
        help: 'Requests answered, by route, HTTP status and error (the catalogue id in lower case, e.g. no_accounts for a model not served; empty on success); health, readiness and metrics probes excluded',
        labelNames: ['route', 'status', 'error'],
        registers,
      }),
    ),
    inFlight: own(new HotGauge({ name: 'gateway_requests_in_flight', help: 'Requests being served', labelNames: ['route'], registers })),
    duration: own(
      new HotHistogram({
        name: 'gateway_request_duration_seconds',
        help: 'Time from request to the end of the response',
        labelNames: ['route'],
        registers,
        buckets: LATENCY,
      }),
    ),
    ttft: own(
      new HotHistogram({
        name: 'gateway_time_to_first_token_seconds',
        help: 'Streams: time from the request to its first content event sent to the client, by the answering provider and model',
        labelNames: ['provider', 'model'],
        registers,
        buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120],
      }),
    ),
    upstreamAttempts: own(
      new HotCounter({
        name: 'gateway_upstream_attempts_total',
        help: 'Upstream attempts by provider, model and outcome (ok, an HTTP status, connect_error, timeout)',
        labelNames: ['provider', 'model', 'outcome'],
        registers,
      }),
    ),
    upstreamLatency: own(
      new HotHistogram({
        name: 'gateway_upstream_latency_seconds',
        help: 'Time from sending an upstream attempt to its response headers',
        labelNames: ['provider', 'model'],
        registers,
        buckets: LATENCY,
      }),
    ),
    fallbacks: own(
      new HotCounter({
        name: 'gateway_fallback_attempts_total',
        help: 'Attempts on a fallback model, by that model and why the previous attempt failed (an HTTP status, connect, timeout, event)',
        labelNames: ['model', 'reason'],
        registers,
      }),
    ),
    tokens: own(
      new HotCounter({
        name: 'gateway_tokens_total',
        help: 'Tokens billed, by provider, model, group and bucket (input, output, cache_read, cache_write)',
        labelNames: ['provider', 'model', 'group', 'bucket'],
        registers,
      }),
    ),
    costMicros: own(
      new HotCounter({
        name: 'gateway_charged_micro_usd_total',
        help: 'Charged cost in micro-USD, by provider, model and group',
        labelNames: ['provider', 'model', 'group'],
        registers,
      }),
    ),
    limitRejections: own(
      new HotCounter({
        name: 'gateway_limit_rejections_total',
        help: "The gateway's own key, access and limit refusals (no upstream involved), by the error's catalogue id in lower case (rpm_exceeded, invalid_api_key, …)",
        labelNames: ['code'],
        registers,
      }),
    ),
    pluginErrors: own(
      new HotCounter({
        name: 'gateway_plugin_errors_total',
        help: 'Exceptions thrown by a plugin (answered 500), by plugin instance',
        labelNames: ['plugin'],
        registers,
      }),
    ),
    storeLatency: own(
      new HotHistogram({
        name: 'gateway_store_operation_seconds',
        help: 'Store calls by store kind and operation',
        labelNames: ['store', 'op'],
        registers,
        buckets: STORE,
      }),
    ),
    storeErrors: own(
      new HotCounter({
        name: 'gateway_store_errors_total',
        help: 'Store calls that failed, by store kind and operation',
        labelNames: ['store', 'op'],
        registers,
      }),
    ),
    queueWaiting: own(
      new HotGauge({ name: 'gateway_concurrency_queue_waiting', help: 'Requests waiting for a concurrency slot', registers }),
    ),
    configReloads: own(
      new HotCounter({
        name: 'gateway_config_reloads_total',
        help: 'Config reloads by result (ok, rejected)',
        labelNames: ['result'],
        registers,
      }),
    ),
    storeDegraded: own(
      new HotGauge({
        name: 'gateway_store_degraded',
        help: '1 while the shared store (Redis) is unreachable: money paths refused, RPM and concurrency per instance',
        registers,
      }),
    ),
    failedRequestsDropped: own(
      zeroed(
        ['sampled', 'evicted', 'backlog', 'too_large', 'write_error'],
        new HotCounter({
          name: 'gateway_failed_requests_dropped_total',
          help:
            'Failed-request records not kept (failed_requests), by reason: sampled (a refusal past its sample), evicted (an older record ' +
            'deleted to stay within max_size / max_files), backlog (too many records waiting to be written), too_large, write_error',
          labelNames: ['reason'],
          registers,
        }),
      ),
    ),

    // ---- the ledger's PostgreSQL sink -----------------------------------------------------------
    ledgerOutboxBytes: own(
      new HotGauge({
        name: 'gateway_ledger_outbox_bytes',
        help: 'Bytes of the ledger day files not yet shipped to PostgreSQL (ledger.postgres): grows while PostgreSQL is unavailable',
        registers,
      }),
    ),
    ledgerShipped: own(
      new HotCounter({
        name: 'gateway_ledger_shipped_records_total',
        help: 'Ledger records sent to PostgreSQL (a record sent again after a crash is counted again; the table keeps one row)',
        registers,
      }),
    ),
    ledgerRejected: own(
      new HotCounter({
        name: 'gateway_ledger_rejected_records_total',
        help: 'Day-file lines not shipped to PostgreSQL: not a ledger record, or refused by the database (logged; they stay in the file)',
        registers,
      }),
    ),
    ledgerPostgresUp: own(
      new HotGauge({
        name: 'gateway_ledger_postgres_up',
        help: '1 while the ledger ships to PostgreSQL, 0 while PostgreSQL is unavailable (records wait in the day files)',
        registers,
      }),
    ),

    // ---- upstream account pools (core/pool) -------------------------------------------------
    accountRequests: own(
      new HotCounter({
        name: 'gateway_account_requests_total',
        help: 'Upstream attempts per account, by outcome (ok, rate_limited, overloaded, server_error, timeout, connect_error, auth_error, …)',
        labelNames: ['provider', 'account', 'outcome'],
        registers,
      }),
    ),
    accountCooldowns: own(
      new HotCounter({
        name: 'gateway_account_cooldowns_total',
        help: 'Accounts put in cooldown or disabled, by reason',
        labelNames: ['provider', 'account', 'reason'],
        registers,
      }),
    ),
    accountFailovers: own(
      new HotCounter({
        name: 'gateway_account_failovers_total',
        help: 'Requests moved to another account of the same model after a failed attempt',
        labelNames: ['provider'],
        registers,
      }),
    ),
    accountInFlight: own(
      new HotGauge({
        name: 'gateway_account_in_flight',
        help: 'Upstream requests in flight per account (this instance)',
        labelNames: ['provider', 'account'],
        registers,
      }),
    ),
    accountTtft: own(
      new HotHistogram({
        name: 'gateway_account_ttft_seconds',
        help: 'Time to first token (to the response for non-streaming calls) per account',
        labelNames: ['provider', 'account'],
        registers,
        buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
      }),
    ),
    accountState: own(
      new HotGauge({
        name: 'gateway_account_state',
        help: 'Account state (available, cooling, disabled, demoted): 1 for the current one',
        labelNames: ['provider', 'account', 'state'],
        registers,
        collect() {
          this.reset();
          for (const s of m.accountStates?.() ?? []) this.set(s, 1);
        },
      }),
    ),

    counter: (cfg) => reuse(Counter, cfg, HotCounter),
    gauge: (cfg) => reuse(Gauge, cfg, HotGauge),
    histogram: (cfg) => reuse(Histogram, cfg, HotHistogram),
  };
  return m;
}

/**
 * The store with every call timed and every failure counted. `acquireSlot` is counted but not
 * timed: its duration is the wait for a slot, not store latency.
 *
 * An explicit wrapper (not a Proxy: a Proxy's `get` trap, a lookup of the wrapped function and a
 * rest-argument call on every store call cost ≈ 4 µs per request). Each method calls `inner`'s
 * method of that name when called, so a method replaced on `inner` at run time (a test's fault
 * injection) is timed and counted too. The Store interface's methods are listed here; TypeScript
 * refuses this class if one is missing.
 */
export class InstrumentedStore implements Store {
  readonly kind: Store['kind'];
  private readonly latency: HotHistogram<'store' | 'op'>;
  private readonly errors: Counter<'store' | 'op'>;
  /** Label objects made once per operation. */
  private readonly labels: Record<string, { store: string; op: string }> = {};
  /** Each operation's latency series, bound once. */
  private readonly latencies: Record<string, { observe(v: number): void }> = {};

  constructor(
    readonly inner: Store,
    m: Metrics,
  ) {
    this.kind = inner.kind;
    this.latency = m.storeLatency;
    this.errors = m.storeErrors;
  }

  private l(op: string): { store: string; op: string } {
    return (this.labels[op] ??= { store: this.kind, op });
  }

  /** Times the promise `call` returned (started at `t0`); counts a failure, thrown or rejected. */
  private timed<T>(op: string, t0: number, p: Promise<T>): Promise<T> {
    return p.then(
      (x) => {
        this.observe(op, t0);
        return x;
      },
      (e) => {
        this.errors.inc(this.l(op));
        throw e;
      },
    );
  }

  /** Records the latency of an operation started at `t0`. */
  private observe(op: string, t0: number): void {
    (this.latencies[op] ??= this.latency.series(this.l(op))).observe((performance.now() - t0) / 1000);
  }

  private call<T>(op: string, f: () => Promise<T>): Promise<T> {
    const t0 = performance.now();
    let p: Promise<T>;
    try {
      p = f();
    } catch (e) {
      this.errors.inc(this.l(op));
      throw e;
    }
    return this.timed(op, t0, p);
  }

  // The two calls of every request, written out (no closure per call).
  admit(req: AdmitRequest): Promise<AdmitResult> {
    const t0 = performance.now();
    let p: Promise<AdmitResult>;
    try {
      p = this.inner.admit(req);
    } catch (e) {
      this.errors.inc(this.l('admit'));
      throw e;
    }
    return this.timed('admit', t0, p);
  }

  /** `inner`'s synchronous forms, timed as the promise forms are; undefined when it has none (looked up per call, as above). */
  get admitNow(): ((req: AdmitRequest) => AdmitResult) | undefined {
    return this.inner.admitNow === undefined ? undefined : this.admitNowTimed;
  }

  get settleNow(): ((requestId: string, s: Settlement) => void) | undefined {
    return this.inner.settleNow === undefined ? undefined : this.settleNowTimed;
  }

  private readonly admitNowTimed = (req: AdmitRequest): AdmitResult => {
    const t0 = performance.now();
    let r: AdmitResult;
    try {
      r = this.inner.admitNow!(req);
    } catch (e) {
      this.errors.inc(this.l('admit'));
      throw e;
    }
    this.observe('admit', t0);
    return r;
  };

  private readonly settleNowTimed = (requestId: string, s: Settlement): void => {
    const t0 = performance.now();
    try {
      this.inner.settleNow!(requestId, s);
    } catch (e) {
      this.errors.inc(this.l('settle'));
      throw e;
    }
    this.observe('settle', t0);
  };

  settle(requestId: string, s: Settlement): Promise<void> {
    const t0 = performance.now();
    let p: Promise<void>;
    try {
      p = this.inner.settle(requestId, s);
    } catch (e) {
      this.errors.inc(this.l('settle'));
      throw e;
    }
    return this.timed('settle', t0, p);
  }

  cancel(requestId: string, opts?: { keepCounts?: boolean }): Promise<void> {
    return this.call('cancel', () => this.inner.cancel(requestId, opts));
  }

  acquireSlot(req: SlotRequest): Promise<SlotResult> {
    let p: Promise<SlotResult>;
    try {
      p = this.inner.acquireSlot(req);
    } catch (e) {
      this.errors.inc(this.l('acquireSlot'));
      throw e;
    }
    return p.catch((e) => {
      this.errors.inc(this.l('acquireSlot'));
      throw e;
    });
  }

  balanceSpent(user: string): Promise<number> {
    return this.call('balanceSpent', () => this.inner.balanceSpent(user));
  }

  keyState(keyId: string): Promise<KeyState> {
    return this.call('keyState', () => this.inner.keyState(keyId));
  }

  planUsage(user: string, group: string): Promise<PeriodUsage> {
    return this.call('planUsage', () => this.inner.planUsage(user, group));
  }

  spendCapUsage(user: string): Promise<{ weekly: number; monthly: number }> {
    return this.call('spendCapUsage', () => this.inner.spendCapUsage(user));
  }

  keyStats(keyId: string, fromDay: string, toDay: string): Promise<KeyStats> {
    return this.call('keyStats', () => this.inner.keyStats(keyId, fromDay, toDay));
  }

  resetKeyQuota(keyId: string): Promise<void> {
    return this.call('resetKeyQuota', () => this.inner.resetKeyQuota(keyId));
  }

  remember(namespace: string, entries: ReadonlyArray<readonly [id: string, value: string]>, ttlMs: number): Promise<void> {
    return this.call('remember', () => this.inner.remember(namespace, entries, ttlMs));
  }

  recall(namespace: string, ids: readonly string[]): Promise<Array<string | undefined>> {
    return this.call('recall', () => this.inner.recall(namespace, ids));
  }

  wallet(user: string): Promise<Wallet> {
    return this.call('wallet', () => this.inner.wallet(user));
  }

  getAccount<K extends AccountKind>(kind: K, name: string): Promise<Stored<AccountRecord<K>> | undefined> {
    return this.call('getAccount', () => this.inner.getAccount(kind, name));
  }

  writeAccount(w: AccountWrite): Promise<AccountWriteResult> {
    return this.call('writeAccount', () => this.inner.writeAccount(w));
  }

  loadAccounts(): Promise<AccountsSnapshot> {
    return this.call('loadAccounts', () => this.inner.loadAccounts());
  }

  accountChanges(version: number): Promise<AccountChanges | undefined> {
    return this.call('accountChanges', () => this.inner.accountChanges(version));
  }

  onAccountsChanged(listener: () => void): () => void {
    return this.inner.onAccountsChanged(listener);
  }

  credit(req: CreditRequest): Promise<CreditResult> {
    return this.call('credit', () => this.inner.credit(req));
  }

  credits(user: string, opts: { limit: number; before?: string }): Promise<CreditRecord[]> {
    return this.call('credits', () => this.inner.credits(user, opts));
  }

  appendAudit(entry: AuditInput): Promise<AuditEntry> {
    return this.call('appendAudit', () => this.inner.appendAudit(entry));
  }

  readAudit(q: AuditQuery): Promise<AuditEntry[]> {
    return this.call('readAudit', () => this.inner.readAudit(q));
  }

  reportAccountHealth(events: readonly AccountHealthEvent[]): Promise<number> {
    return this.call('reportAccountHealth', () => this.inner.reportAccountHealth(events));
  }

  accountHealth(version?: number): Promise<AccountHealthSnapshot | undefined> {
    return this.call('accountHealth', () => this.inner.accountHealth(version));
  }

  onAccountHealthChanged(listener: () => void): () => void {
    return this.inner.onAccountHealthChanged(listener);
  }

  limitsInUse(q: LimitsQuery): Promise<LimitsInUse> {
    return this.call('limitsInUse', () => this.inner.limitsInUse(q));
  }

  health(): Promise<StoreHealth> {
    return this.call('health', () => this.inner.health());
  }

  flush(): Promise<void> {
    return this.call('flush', () => this.inner.flush());
  }

  close(): Promise<void> {
    return this.call('close', () => this.inner.close());
  }
}

export function instrumentStore(store: Store, m: Metrics): InstrumentedStore {
  return new InstrumentedStore(store, m);
}
