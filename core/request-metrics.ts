/**
 * What a finished request records in the metrics: fallbacks taken, time to first token, tokens and
 * charge by model and group, and the per-key series when `metrics.key_labels` is on. Apart from
 * core/metrics.ts, which declares the metrics and knows nothing of a request, so the metrics stay
 * below the request context in the import graph.
 */
import type { RequestContext } from './context.js';
import type { Metrics } from './metrics.js';
import type { Attempt, Outcome } from './types.js';

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
    // Literal label objects of one shape each (no spreads): the series lookup reads them by name.
    const provider = ctx.answeredModel.provider;
    const model = ctx.answeredModel.id;
    const group = ctx.group.name;
    const u = ctx.usage;
    m.tokens.inc({ provider, model, group, bucket: 'input' }, u.input);
    m.tokens.inc({ provider, model, group, bucket: 'output' }, u.output);
    m.tokens.inc({ provider, model, group, bucket: 'cache_read' }, u.cacheRead);
    m.tokens.inc({ provider, model, group, bucket: 'cache_write' }, u.cacheWrite);
    m.costMicros.inc({ provider, model, group }, billed.actual);
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
