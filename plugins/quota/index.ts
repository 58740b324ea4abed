/**
 * quota: billing eligibility and the key's quota — the money checks that come first in the
 * spec's order (eligibility → key quota), and the worst-case reservation for the request.
 *
 * Balance groups: a priced model needs balance > 0 (403 billing_error); models priced at $0 stay
 * callable at zero balance under `limits.free_rpm_at_zero_balance` (429 rate_limit_exceeded).
 * Plan groups: no subscription or an expired one → 403 SUBSCRIPTION_NOT_FOUND; a suspended one →
 * 403 SUBSCRIPTION_INVALID (flat). Key quota: 429 API_KEY_QUOTA_EXHAUSTED, x-should-retry: false.
 * On routes that call no model (/v1/models, count_tokens) only eligibility is checked, and a
 * balance at or below zero is the key check's flat 403 INSUFFICIENT_BALANCE.
 */
import { definePlugin } from '../../core/plugin.js';
import { GatewayError } from '../../core/errors.js';
import type { RequestContext } from '../../core/context.js';
import { allFree, candidateModels, candidateModelsNow, chargeRate, isModelCall, worstCaseCharge } from '../../core/billing.js';
import type { GroupConfig, KeyConfig, ModelConfig, UserConfig } from '../../core/config/types.js';
import type { Claim } from '../../core/store/types.js';
import { perObject } from '../../core/memo.js';
import { quotaSchema, type QuotaOptions } from './schema.js';

function checkSubscription(ctx: RequestContext): void {
  const sub = ctx.user!.subscriptions.find((s) => s.group === ctx.group!.name);
  if (!sub || sub.expiresAt <= ctx.clock.now()) throw new GatewayError('SUBSCRIPTION_NOT_FOUND');
  if (sub.status !== 'active') throw new GatewayError('SUBSCRIPTION_INVALID');
}

/** Routes that call no model: a plan needs its subscription, a balance some credit left. */
async function eligible(ctx: RequestContext, user: UserConfig, group: GroupConfig): Promise<void> {
  if (group.billing === 'plan') return checkSubscription(ctx);
  // The file's credit (`balance`), what top-ups stored, minus the spend.
  const wallet = await ctx.store.wallet(user.name);
  if (user.balance + wallet.credit - wallet.spent <= 0) throw new GatewayError('INSUFFICIENT_BALANCE');
}

const balanceError = () =>
  new GatewayError('BILLING_ERROR', { message: 'Insufficient balance: top up to use this model, or use a model priced at $0' });
const freeRpmError = (ms?: number) =>
  new GatewayError('FREE_RPM_EXCEEDED', { retryAfter: Math.ceil((ms ?? 60_000) / 1000), retryAfterMs: ms });
const quotaError = () => new GatewayError('API_KEY_QUOTA_EXHAUSTED');

export default definePlugin<QuotaOptions>({
  name: 'quota',
  description: 'Billing eligibility (balance or plan), key quota, and the admission reservation',
  schema: quotaSchema,
  requires: ['auth'],
  create(_options, { config }) {
    // A claim is data of the config: made once per user or key object (a reload, or an admin
    // change to a user or key, makes new objects), not on every request.
    const balanceClaims = perObject((user: UserConfig): readonly [paid: Claim, free: Claim] => {
      const freeRpm = config.limits.freeRpmAtZeroBalance;
      const of = (free: boolean): Claim => Object.freeze({ kind: 'balance', user: user.name, credit: user.balance, free, freeRpm });
      return [of(false), of(true)];
    });
    const quotaClaim = perObject((key: KeyConfig): Claim => Object.freeze({ kind: 'key-quota', key: key.id, limit: key.quota }));
    /** The reservation and the money claims of a model call, once its candidate models are known. */
    const claim = (ctx: RequestContext, user: UserConfig, group: GroupConfig, models: ModelConfig[]): void => {
      const key = ctx.key!;
      const rate = chargeRate(user, group);
      ctx.admission.reserve = Math.max(ctx.admission.reserve, worstCaseCharge(ctx.parsed!, models, rate));
      if (group.billing === 'plan') {
        checkSubscription(ctx);
      } else {
        const free = allFree(models);
        ctx.admission.add(balanceClaims(user)[free ? 1 : 0], free ? freeRpmError : balanceError);
      }
      if (key.quota > 0) ctx.admission.add(quotaClaim(key), quotaError);
    };
    return {
      // Synchronous once the body and model are resolved; until then it waits for them (a
      // promise only then: an await costs a turn of the microtask queue).
      onAccess(ctx) {
        const { key, user, group } = ctx;
        if (!key || !user || !group) return;
        if (!isModelCall(ctx)) return eligible(ctx, user, group);
        const models = candidateModelsNow(ctx);
        if (models) return claim(ctx, user, group, models);
        return candidateModels(ctx).then((m) => claim(ctx, user, group, m));
      },
    };
  },
});
