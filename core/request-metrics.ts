/**
 * What a finished request records in the metrics: fallbacks taken, time to first token, tokens and
 * charge by model and group, and the per-key series when `metrics.key_labels` is on. Apart from
 * core/metrics.ts, which declares the metrics and knows nothing of a request, so the metrics stay
 * below the request context in the import graph.
 */
import type { RequestContext } from './context.js';
import type { ModelConfig } from './config/types.js';
import type { Metrics } from './metrics.js';
import type { Attempt, Outcome } from './types.js';

/** The series a billed request of one model in one group updates, bound once (metrics.ts `series`). */
interface BilledSeries {
  input: { inc(v: number): void };
  output: { inc(v: number): void };
  cacheRead: { inc(v: number): void };
  cacheWrite: { inc(v: number): void };
  cost: { inc(v: number): void };
}

/**
 * Per metrics registry, per model (the config's object: a reload makes new ones, and the old are
 * let go), per group name. Label sets stay what they were: provider, model and group from the config.
 */
const billedSeries = new WeakMap<Metrics, WeakMap<ModelConfig, Map<string, BilledSeries>>>();

function billedFor(m: Metrics, model: ModelConfig, group: string): BilledSeries {
  let byModel = billedSeries.get(m);
  if (!byModel) billedSeries.set(m, (byModel = new WeakMap()));
  let byGroup = byModel.get(model);
  if (!byGroup) byModel.set(model, (byGroup = new Map()));
  let s = byGroup.get(group);
  if (!s) {
    const provider = model.provider;
    const id = model.id;
    byGroup.set(
      group,
      (s = {
        input: m.tokens.series({ provider, model: id, group, bucket: 'input' }),
        output: m.tokens.series({ provider, model: id, group, bucket: 'output' }),
        cacheRead: m.tokens.series({ provider, model: id, group, bucket: 'cache_read' }),
        cacheWrite: m.tokens.series({ provider, model: id, group, bucket: 'cache_write' }),
        cost: m.costMicros.series({ provider, model: id, group }),
      }),
    );
  }
  return s;
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
    m.fallbacks.inc({
      model: ctx.attempts[i].model.id,
      reason: prev.failure === 'status' ? String(prev.status) : (prev.failure ?? 'retry'),
    });
  }
  if (answered && ctx.ttftMs !== undefined)
    m.ttft.observe({ provider: answered.provider.name, model: answered.model.id }, ctx.ttftMs / 1000);
  const billed = ctx.billed;
  if (billed && ctx.usage && ctx.answeredModel && ctx.group) {
    const s = billedFor(m, ctx.answeredModel, ctx.group.name);
    const u = ctx.usage;
    s.input.inc(u.input);
    s.output.inc(u.output);
    s.cacheRead.inc(u.cacheRead);
    s.cacheWrite.inc(u.cacheWrite);
    s.cost.inc(billed.actual);
  }
  if (keyLabels && ctx.key) {
    const labels = { key: ctx.key.id, user: ctx.key.user };
    m.counter({
      name: 'gateway_key_requests_total',
      help: 'Requests by key name and user (metrics.key_labels)',
      labelNames: ['key', 'user', 'status'],
    }).inc({ ...labels, status: String(outcome.status) });
    if (billed) {
      m.counter({
        name: 'gateway_key_charged_micro_usd_total',
        help: 'Charged micro-USD by key name and user (metrics.key_labels)',
        labelNames: ['key', 'user'],
      }).inc(labels, billed.actual);
    }
  }
}

function answering(ctx: RequestContext): Attempt | undefined {
  if (!ctx.answeredModel) return undefined;
  for (let i = ctx.attempts.length - 1; i >= 0; i--) if (ctx.attempts[i].model === ctx.answeredModel) return ctx.attempts[i];
  return undefined;
}

/**
 * The series of one route every request updates (in flight, duration), bound
 * once: the server keeps one per route label for its metrics registry.
 */
export class RouteSeries {
  readonly inFlight: { inc(): void; dec(): void };
  readonly duration: { observe(v: number): void };
  constructor(m: Metrics, route: string) {
    this.inFlight = m.inFlight.series({ route });
    this.duration = m.duration.series({ route });
  }
}
