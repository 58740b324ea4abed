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
import type { KeyConfig, ModelConfig, UserConfig, Window } from '../../core/config/types.js';
import type { Claim, Store } from '../../core/store/types.js';
import type { Clock } from '../../core/clock.js';
import { perObject } from '../../core/memo.js';
import { nextMonthStart } from '../../core/store/types.js';
import { windowsSchema, type WindowsOptions } from './schema.js';

export default definePlugin<WindowsOptions>({
  name: 'windows',
  description: 'Key spend windows, plan allowances and account spend caps',
  schema: windowsSchema,
  requires: ['auth'],
  create(_options, { store, clock }) {
    // Claims are data of the config: made once per key or user object (a reload, or an admin
    // change, makes new objects), not on every request.
    const windowClaims = perObject(keyWindowClaims);
    const capClaims = perObject((user: UserConfig) => spendCapClaims(user, store, clock));
    return {
      // A promise only while the candidate models are not known yet (quota, earlier in the
      // shipped chain, resolves them): an await costs a turn of the microtask queue.
      onAccess(ctx) {
        const { key, user, group } = ctx;
        if (!key || !user || !group || !isModelCall(ctx)) return;
        const windows = windowClaims(key);
        for (let i = 0; i < windows.length; i++) ctx.admission.add(windows[i], WINDOW_ERRORS[windows[i].window]);
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
        const claims = capClaims(user);
        const models = candidateModelsNow(ctx);
        if (models) return addCaps(ctx, claims, models);
        return candidateModels(ctx).then((m) => addCaps(ctx, claims, m));
      },
    };
  },
});

/** The refusal of each key window, one function each (they need nothing of the request). */
const WINDOW_ERRORS = Object.fromEntries(
  WINDOWS.map((w) => [w, () => new GatewayError('WINDOW_EXHAUSTED', { message: WINDOW_MESSAGES[w] })]),
) as Record<Window, () => GatewayError>;

type WindowClaim = Extract<Claim, { kind: 'key-window' }>;

/** A key's window claims, in the spec's order (5h, 1d, 7d), those with a limit. */
function keyWindowClaims(key: KeyConfig): readonly WindowClaim[] {
  const out: WindowClaim[] = [];
  for (const window of WINDOWS) {
    const limit = key.windows[window];
    if (limit > 0) out.push(Object.freeze({ kind: 'key-window', key: key.id, window, limit }));
  }
  return out;
}

/** A spend-cap claim and the refusal it brings. */
interface CapClaim {
  claim: Claim;
  onFail: (ms?: number) => Promise<GatewayError>;
}

/** A user's spend-cap claims (weekly, then monthly), those with a limit. */
function spendCapClaims(user: UserConfig, store: Store, clock: Clock): readonly CapClaim[] {
  const caps = user.spendCaps;
  const out: CapClaim[] = [];
  for (const period of ['weekly', 'monthly'] as const) {
    const limit = caps[period];
    if (limit <= 0) continue;
    out.push({
      claim: Object.freeze({ kind: 'spend-cap', user: user.name, period, limit }),
      onFail: async (ms) => {
        let wait = ms ?? 0;
        // A refused weekly cap names the later reset when the monthly one is reached too
        // (read only on refusal: the common path stays one store call).
        const both = period === 'weekly' && caps.monthly > 0 ? await store.spendCapUsage(user.name) : undefined;
        if (period === 'weekly' && both && both.monthly >= caps.monthly) {
          const now = clock.now();
          wait = Math.max(wait, nextMonthStart(now) - now);
        }
        return new GatewayError('SPEND_CAP_REACHED', {
          message: `Account ${period} spend cap reached`,
          retryAfter: Math.max(1, Math.ceil(wait / 1000)),
        });
      },
    });
  }
  return out;
}

/** The account spend-cap claims of a balance request, unless every candidate model is free. */
function addCaps(ctx: RequestContext, claims: readonly CapClaim[], models: ModelConfig[]): void {
  if (allFree(models)) return;
  for (let i = 0; i < claims.length; i++) ctx.admission.add(claims[i].claim, claims[i].onFail);
}
