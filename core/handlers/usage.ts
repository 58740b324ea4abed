/**
 * GET /v1/usage — a frozen contract (spec §2.9, wire-notes): third-party clients parse it strictly.
 * It answers for expired and exhausted keys too (auth lets this route through), and never spends.
 *
 * - `quota_limited` when the key has its own quota or spend windows: `status`, one `rate_limits`
 *   item per configured window; with a quota also `quota`, `remaining` (== `quota.remaining`) and
 *   `unit`; without one neither `remaining` nor `unit` (strict parsers refuse them there).
 * - `unrestricted` otherwise: `planName` (the plan group, or the wallet `钱包余额`) and exactly one
 *   of `balance` / `subscription`; `remaining: -1` means unlimited; a wallet's `remaining` is its
 *   `balance`, negative when overdrawn.
 * - every kind: `usage`, `daily_usage` (one row per UTC day of the range that has usage, oldest
 *   first) and `model_stats`.
 * Money is USD with at most 6 decimals (integer micro-USD inside).
 */
import { GatewayError } from '../errors.js';
import { microsToUsd } from '../units.js';
import { WINDOWS, WINDOW_MS, type KeyConfig, type Window } from '../config/types.js';
import { dayKey, weekStart, type UsageCounters } from '../store/types.js';
import type { Handler } from './types.js';
import { sendJson } from './types.js';

export const WALLET_PLAN_NAME = '钱包余额';
const DAY = 86_400_000;
const DATE = /^\d{4}-\d{2}-\d{2}$/;

/** Usage counters as /v1/usage shows them (tokens, USD). */
export function counters(c: UsageCounters) {
  const total = c.input + c.output + c.cacheRead + c.cacheWrite;
  return {
    requests: c.requests,
    input_tokens: c.input,
    output_tokens: c.output,
    cache_creation_tokens: c.cacheWrite,
    cache_read_tokens: c.cacheRead,
    total_tokens: total,
    cost: microsToUsd(c.cost),
    actual_cost: microsToUsd(c.actual),
  };
}

/** A `daily_usage` row: one UTC day's counters (cache writes named as the consumers read them). */
function dayRow(date: string, c: UsageCounters) {
  return {
    date,
    requests: c.requests,
    input_tokens: c.input,
    output_tokens: c.output,
    cache_read_tokens: c.cacheRead,
    cache_write_tokens: c.cacheWrite,
    total_tokens: c.input + c.output + c.cacheRead + c.cacheWrite,
    cost: microsToUsd(c.cost),
    actual_cost: microsToUsd(c.actual),
  };
}

function validDate(s: string): boolean {
  if (!DATE.test(s)) return false;
  const t = Date.parse(`${s}T00:00:00Z`);
  return !Number.isNaN(t) && new Date(t).toISOString().slice(0, 10) === s;
}

export function isQuotaLimited(key: KeyConfig): boolean {
  return key.quota > 0 || WINDOWS.some((w) => key.windows[w] > 0);
}

export const usageHandler: Handler = async (ctx) => {
  const key = ctx.key;
  if (!key) throw new GatewayError('API_KEY_REQUIRED');
  const now = ctx.clock.now();
  const url = new URL(ctx.req.url ?? '/', 'http://gateway');
  const badDate = () => new GatewayError('INVALID_REQUEST', { message: 'start_date and end_date must be dates in the form YYYY-MM-DD' });
  const end = url.searchParams.get('end_date') ?? dayKey(now);
  if (!validDate(end)) throw badDate(); // before deriving the default start from it
  const start = url.searchParams.get('start_date') ?? dayKey(Date.parse(`${end}T00:00:00Z`) - 30 * DAY);
  if (!validDate(start)) throw badDate();
  if (start > end) throw new GatewayError('INVALID_REQUEST', { message: 'start_date must not be after end_date' });

  const store = ctx.store;
  const [state, stats] = await Promise.all([store.keyState(key.id), store.keyStats(key.id, start, end)]);
  const usage = {
    today: counters(stats.today),
    total: counters(stats.total),
    average_duration_ms: stats.total.requests > 0 ? Math.round(stats.total.durationMs / stats.total.requests) : 0,
    rpm: stats.rpm,
    tpm: stats.tpm,
  };
  const modelStats = Object.entries(stats.byModel)
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([model, c]) => ({ model, ...counters(c) }));
  const dailyUsage = Object.entries(stats.byDay)
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([date, c]) => dayRow(date, c));
  const expiry =
    key.expiresAt !== undefined
      ? { expires_at: new Date(key.expiresAt).toISOString(), days_until_expiry: Math.max(0, Math.ceil((key.expiresAt - now) / DAY)) }
      : {};

  if (isQuotaLimited(key)) {
    const expired = key.expiresAt !== undefined && key.expiresAt <= now;
    const exhausted = key.quota > 0 && state.used >= key.quota;
    const remaining = microsToUsd(Math.max(0, key.quota - state.used));
    const rateLimits = WINDOWS.filter((w) => key.windows[w] > 0).map((w: Window) => {
      const ws = state.windows[w];
      const limit = key.windows[w];
      return {
        window: w,
        limit: microsToUsd(limit),
        used: microsToUsd(ws.used),
        remaining: microsToUsd(Math.max(0, limit - ws.used)),
        window_start: ws.start !== undefined ? new Date(ws.start).toISOString() : null,
        reset_at: ws.start !== undefined ? new Date(ws.start + WINDOW_MS[w]).toISOString() : null,
      };
    });
    sendJson(ctx, 200, {
      mode: 'quota_limited',
      isValid: true,
      status: expired ? 'expired' : exhausted ? 'quota_exhausted' : 'active',
      // Windows only: the key has no amount of its own left to report (each window has its own).
      ...(key.quota > 0
        ? { remaining, unit: 'USD', quota: { limit: microsToUsd(key.quota), used: microsToUsd(state.used), remaining, unit: 'USD' } }
        : {}),
      rate_limits: rateLimits,
      ...expiry,
      usage,
      daily_usage: dailyUsage,
      model_stats: modelStats,
    });
    return;
  }

  const group = ctx.group;
  const user = ctx.user;
  if (group?.billing === 'plan') {
    const sub = user?.subscriptions.find((s) => s.group === group.name);
    const p = await store.planUsage(key.user, group.name);
    const allowances = (['daily', 'weekly', 'monthly'] as const)
      .filter((k) => group.plan[k] > 0)
      .map((k) => Math.max(0, group.plan[k] - p[k]));
    const active = sub !== undefined && sub.status === 'active' && sub.expiresAt > now;
    const remaining = !active ? 0 : allowances.length ? microsToUsd(Math.min(...allowances)) : -1;
    sendJson(ctx, 200, {
      mode: 'unrestricted',
      isValid: true,
      planName: group.name,
      remaining,
      unit: 'USD',
      subscription: {
        daily_usage_usd: microsToUsd(p.daily),
        weekly_usage_usd: microsToUsd(p.weekly),
        monthly_usage_usd: microsToUsd(p.monthly),
        daily_limit_usd: microsToUsd(group.plan.daily),
        weekly_limit_usd: microsToUsd(group.plan.weekly),
        monthly_limit_usd: microsToUsd(group.plan.monthly),
        // Plan weeks are UTC calendar weeks: the reset is this plus 7 days.
        weekly_window_start: new Date(weekStart(now)).toISOString(),
        expires_at: sub ? new Date(sub.expiresAt).toISOString() : null,
      },
      ...expiry,
      usage,
      daily_usage: dailyUsage,
      model_stats: modelStats,
    });
    return;
  }
  // The file's credit (a file user's `balance`) plus what top-ups stored, minus the spend.
  const wallet = await store.wallet(key.user);
  const left = (user?.balance ?? 0) + wallet.credit - wallet.spent;
  const balance = microsToUsd(left);
  sendJson(ctx, 200, {
    mode: 'unrestricted',
    isValid: true,
    planName: WALLET_PLAN_NAME,
    // Strict parsers require `remaining` == `balance`, also when the last request overdrew it.
    remaining: balance,
    unit: 'USD',
    balance,
    ...expiry,
    usage,
    daily_usage: dailyUsage,
    model_stats: modelStats,
  });
};
