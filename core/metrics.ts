/**
 * Every Prometheus metric, declared once. One registry per gateway process (not prom-client's
 * global one, so tests can run several gateways in one process). Labels stay low-cardinality:
 * route, status class, model id, provider — never keys or users.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface Metrics {
  registry: Registry;
  requests: Counter<'route' | 'status'>;
  inFlight: Gauge<'route'>;
  duration: Histogram<'route'>;
  upstreamAttempts: Counter<'provider' | 'outcome'>;
  upstreamLatency: Histogram<'provider'>;
  tokens: Counter<'model' | 'bucket'>;
  costMicros: Counter<'model'>;
  limitRejections: Counter<'code'>;
  queueWaiting: Gauge;
  configReloads: Counter<'result'>;

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
}

export function createMetrics(opts: { defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry();
  if (opts.defaultMetrics) collectDefaultMetrics({ register: registry, prefix: 'gateway_process_' });
  const registers = [registry];
  const m: Metrics = {
    registry,
    requests: new Counter({ name: 'gateway_requests_total', help: 'Requests by route and HTTP status', labelNames: ['route', 'status'], registers }),
    inFlight: new Gauge({ name: 'gateway_requests_in_flight', help: 'Requests being served', labelNames: ['route'], registers }),
    duration: new Histogram({
      name: 'gateway_request_duration_seconds', help: 'Time from request to the end of the response', labelNames: ['route'], registers,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
    }),
    upstreamAttempts: new Counter({ name: 'gateway_upstream_attempts_total', help: 'Upstream attempts by provider and outcome', labelNames: ['provider', 'outcome'], registers }),
    upstreamLatency: new Histogram({
      name: 'gateway_upstream_headers_seconds', help: 'Time to upstream response headers', labelNames: ['provider'], registers,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    }),
    tokens: new Counter({ name: 'gateway_tokens_total', help: 'Tokens billed, by model and bucket', labelNames: ['model', 'bucket'], registers }),
    costMicros: new Counter({ name: 'gateway_charged_micro_usd_total', help: 'Charged cost in micro-USD, by model', labelNames: ['model'], registers }),
    limitRejections: new Counter({ name: 'gateway_limit_rejections_total', help: 'Requests rejected by a limit, by error code', labelNames: ['code'], registers }),
    queueWaiting: new Gauge({ name: 'gateway_concurrency_queue_waiting', help: 'Requests waiting for a concurrency slot', registers }),
    configReloads: new Counter({ name: 'gateway_config_reloads_total', help: 'Config reloads by result', labelNames: ['result'], registers }),

    // ---- upstream account pools (core/pool) -------------------------------------------------
    accountRequests: new Counter({
      name: 'gateway_account_requests_total', help: 'Upstream attempts per account, by outcome (ok, rate_limited, overloaded, server_error, timeout, connect_error, auth_error, …)',
      labelNames: ['provider', 'account', 'outcome'], registers,
    }),
    accountCooldowns: new Counter({
      name: 'gateway_account_cooldowns_total', help: 'Accounts put in cooldown or disabled, by reason', labelNames: ['provider', 'account', 'reason'], registers,
    }),
    accountFailovers: new Counter({
      name: 'gateway_account_failovers_total', help: 'Requests moved to another account of the same model after a failed attempt', labelNames: ['provider'], registers,
    }),
    accountInFlight: new Gauge({ name: 'gateway_account_in_flight', help: 'Upstream requests in flight per account (this instance)', labelNames: ['provider', 'account'], registers }),
    accountTtft: new Histogram({
      name: 'gateway_account_ttft_seconds', help: 'Time to first token (to the response for non-streaming calls) per account', labelNames: ['provider', 'account'], registers,
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
    }),
    accountState: new Gauge({
      name: 'gateway_account_state', help: 'Account state (available, cooling, disabled, demoted): 1 for the current one', labelNames: ['provider', 'account', 'state'], registers,
      collect() {
        this.reset();
        for (const s of m.accountStates?.() ?? []) this.set(s, 1);
      },
    }),
  };
  return m;
}
