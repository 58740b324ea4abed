/**
 * windows: every spend limit measured over time, after the key quota in the spec's order:
 *   key windows 5h / 1d / 7d (fixed, from first use) → 429 rate_limit_exceeded, the Chinese message
 *     naming the window, no Retry-After (read reset_at in /v1/usage), x-should-retry: false
 *   plan allowances daily / weekly / monthly (UTC calendar) → 429 USAGE_LIMIT_EXCEEDED (flat)
 *   account spend caps weekly (Monday 00:00 UTC) / monthly (the 1st), balance spend only →
 *     402 spend_cap_reached with Retry-After = seconds until the reset
 * The claims join the request's single atomic admission.
 *
 * Spend caps count balance spend only, and models priced at $0 stay available (spec §8 rule 3):
 * a request whose every candidate model is free adds no cap claim. When both caps are reached,
 * Retry-After names the later reset (the first moment the request can pass).
 */
import { definePlugin } from '../../core/plugin.js';
import { GatewayError, WINDOW_MESSAGES } from '../../core/errors.js';
import { WINDOWS } from '../../core/config/types.js';
import { allFree, candidateModels, candidateModelsNow, isModelCall } from '../../core/billing.js';
import type { RequestContext } from '../../core/context.js';
import type { ModelConfig, UserConfig } from '../../core/config/types.js';
import { nextMonthStart } from '../../core/store/types.js';
import { windowsSchema, type WindowsOptions } from './schema.js';

export default definePlugin<WindowsOptions>({
  name: 'windows',
  description: 'Key spend windows, plan allowances and account spend caps',
  schema: windowsSchema,
  requires: ['auth'],
  create() {
    return {
      // A promise only while the candidate models are not known yet (quota, earlier in the
      // shipped chain, resolves them): an await costs a turn of the microtask queue.
      onAccess(ctx) {
        const { key, user, group } = ctx;
        if (!key || !user || !group || !isModelCall(ctx)) return;
        for (const w of WINDOWS) {
          const limit = key.windows[w];
          if (limit > 0) {
            ctx.admission.add(
              { kind: 'key-window', key: key.id, window: w, limit },
              () => new GatewayError('WINDOW_EXHAUSTED', { message: WINDOW_MESSAGES[w] }),
            );
          }
        }
        if (group.billing === 'plan') {
          const p = group.plan;
          if (p.daily > 0 || p.weekly > 0 || p.monthly > 0) {
            ctx.admission.add(
              { kind: 'plan', user: user.name, group: group.name, limits: p },
              () => new GatewayError('USAGE_LIMIT_EXCEEDED'),
            );
          }
          return;
        }
        const caps = user.spendCaps;
        if (caps.weekly <= 0 && caps.monthly <= 0) return;
        const models = candidateModelsNow(ctx);
        if (models) return capClaims(ctx, user, models);
        return candidateModels(ctx).then((m) => capClaims(ctx, user, m));
      },
    };
  },
});

/** The account spend-cap claims of a balance request, unless every candidate model is free. */
function capClaims(ctx: RequestContext, user: UserConfig, models: ModelConfig[]): void {
  const caps = user.spendCaps;
  if (allFree(models)) return;
  for (const period of ['weekly', 'monthly'] as const) {
    const limit = caps[period];
    if (limit <= 0) continue;
    ctx.admission.add({ kind: 'spend-cap', user: user.name, period, limit }, async (ms) => {
      let wait = ms ?? 0;
      // A refused weekly cap names the later reset when the monthly one is reached too
      // (read only on refusal: the common path stays one store call).
      const both = period === 'weekly' && caps.monthly > 0 ? await ctx.store.spendCapUsage(user.name) : undefined;
      if (period === 'weekly' && both && both.monthly >= caps.monthly) {
        const now = ctx.clock.now();
        wait = Math.max(wait, nextMonthStart(now) - now);
      }
      return new GatewayError('SPEND_CAP_REACHED', {
        message: `Account ${period} spend cap reached`,
        retryAfter: Math.max(1, Math.ceil(wait / 1000)),
      });
    });
  }
}
