/**
 * metering: prices the answer and settles it — one usage record per request, for the model that
 * answered, at the group multiplier or the user's personal rate; `cost` at list price and
 * `actual_cost` charged. Settlement replaces the admission's reservation (idempotent per request).
 * A request that failed before any output is not billed; a stream cut short is billed for what
 * was generated (usage seen so far, else an estimate from the streamed text).
 */
import { definePlugin } from '../../core/plugin.js';
import { priceUsage } from '../../core/money.js';
import { chargeRate, keyWindows } from '../../core/billing.js';
import { meteringSchema, type MeteringOptions } from './schema.js';
import type { ModelConfig } from '../../core/config/types.js';
import type { Settlement } from '../../core/store/types.js';
import type { Attempt } from '../../core/types.js';
import type { RequestContext } from '../../core/context.js';
import type { Logger } from '../../core/log.js';

/** The attempt that answered: the last one of the answering model. */
function answeringAttempt(attempts: readonly Attempt[], model: ModelConfig): Attempt | undefined {
  for (let i = attempts.length - 1; i >= 0; i--) if (attempts[i].model === model) return attempts[i];
  return undefined;
}

/** Settled: nothing left to cancel, and the charge for the core's token and cost metrics and the access line. */
function settled(ctx: RequestContext, charge: { cost: number; actual: number }): void {
  ctx.admission.markSettled();
  ctx.billed = { cost: charge.cost, actual: charge.actual };
}

function failed(log: Logger, ctx: RequestContext, e: unknown): void {
  log.error('settlement failed', { requestId: ctx.id, error: e as Error });
}

export default definePlugin<MeteringOptions>({
  name: 'metering',
  description: 'Usage records and settlement of the charge',
  schema: meteringSchema,
  requires: ['auth'],
  create(_o, { log }) {
    return {
      onFinally(ctx, outcome) {
        const { key, user, group, usage, answeredModel: model } = ctx;
        if (!key || !group || !usage || !model || ctx.route.handler) return;
        const ratePpm = chargeRate(user, group);
        const charge = priceUsage(usage, model.price, ratePpm);
        const answering = answeringAttempt(ctx.attempts, model);
        const s: Settlement = {
          keyId: key.id,
          user: key.user,
          group: group.name,
          model: model.id,
          billing: group.billing,
          usage,
          cost: charge.cost,
          actual: charge.actual,
          durationMs: ctx.clock.now() - ctx.startedAt,
          windows: keyWindows(key),
          estimated: ctx.usageEstimated || undefined,
          // The ledger record's details (core/ledger), stored with the settlement.
          detail: {
            requestedModel: ctx.requested?.model.id ?? ctx.parsed?.model ?? model.id,
            provider: model.provider,
            account: answering?.account?.id,
            protocolIn: ctx.route.protocol ?? answering?.upstreamProtocol ?? 'openai-chat',
            protocolOut: answering?.upstreamProtocol ?? ctx.route.protocol ?? 'openai-chat',
            stream: ctx.parsed?.stream ?? false,
            status: outcome.status,
            reasoning: usage.reasoning,
            estimateReason: ctx.usageEstimated
              ? (ctx.estimateReason ?? (outcome.clientAborted ? 'client_disconnect' : 'no_usage_reported'))
              : undefined,
            ratePpm,
            ttftMs: ctx.ttftMs,
            attempts: ctx.attempts.length,
          },
        };
        // A store that answers at once (Store.settleNow) settles in this turn: no promise to wait for.
        const store = ctx.store;
        if (store.settleNow === undefined)
          return store.settle(ctx.ledgerId, s).then(
            () => settled(ctx, charge),
            (e: unknown) => failed(log, ctx, e),
          );
        try {
          store.settleNow(ctx.ledgerId, s);
          settled(ctx, charge);
        } catch (e) {
          failed(log, ctx, e);
        }
      },
    };
  },
});
