/**
 * What the strict parsers of `/v1/usage` written by others accept (wire-notes: "`/v1/usage` is a
 * frozen contract"). Read from their code and fixtures — Go gateways that probe an upstream's
 * `/v1/usage`, opencode/openchamber's quota provider, a browser dashboard's usage client, a relay's
 * daily-history reader — and written down here as rules of our own, with example bodies shaped as
 * those consumers' tests feed them. `problems(body)` lists every rule a body breaks ([] = accepted).
 *
 * The rules, per mode:
 * - every body: `isValid: true`; `usage.today` / `usage.total` and `model_stats` rows are counters
 *   (whole, non-negative token and request counts; non-negative USD); `daily_usage`, when sent, is a
 *   list (at most 366) of `{date: YYYY-MM-DD, requests, input_tokens, output_tokens,
 *   cache_read_tokens, cache_write_tokens, total_tokens, cost, actual_cost}`, one row per date, oldest
 *   first; money has at most 6 decimals.
 * - `quota_limited`: `status` is active, quota_exhausted or expired; each `rate_limits` item is one
 *   of 5h, 1d, 7d (no repeats) with `limit` > 0, `used` ≥ 0, `remaining` = max(0, limit − used),
 *   `window_start` present (a time or null) and `reset_at` a time or null. With `quota`: its `unit`
 *   and the top-level `unit` are USD, `limit` > 0, `quota.remaining` = max(0, limit − used) =
 *   `remaining`. Without `quota`: at least one window, and neither `remaining` nor `unit`.
 * - `unrestricted`: `unit` USD, a non-blank `planName`, a numeric `remaining`, exactly one of
 *   `balance` and `subscription`. A wallet's `remaining` equals its `balance` (negative allowed). A
 *   subscription has its three `*_usage_usd` (≥ 0), limits (≥ 0 or null; 0 or null = none),
 *   `expires_at` (a time) and `weekly_window_start` (a time or null; the weekly reset is it + 7 days);
 *   with no limit at all `remaining` is -1, otherwise the smallest max(0, limit − usage).
 */

type Body = Record<string, any>;

const micro = (usd: number): number => Math.round(usd * 1e6);
const isNum = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const isCount = (v: unknown): boolean => isNum(v) && Number.isInteger(v) && v >= 0;
const isMoney = (v: unknown): boolean => isNum(v) && Math.abs(v * 1e6 - Math.round(v * 1e6)) < 1e-6;
const isTime = (v: unknown): boolean => typeof v === 'string' && /^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)$/.test(v);
const has = (o: Body, k: string): boolean => Object.prototype.hasOwnProperty.call(o, k);

const COUNTS = ['requests', 'input_tokens', 'output_tokens', 'cache_read_tokens', 'total_tokens'] as const;

export function problems(body: Body): string[] {
  const out: string[] = [];
  const no = (why: string) => out.push(why);
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return ['not an object'];
  if (body.isValid !== true) no('isValid must be true');

  const counters = (c: unknown, where: string, cacheWrite: string) => {
    if (typeof c !== 'object' || c === null) return no(`${where}: not an object`);
    const r = c as Body;
    for (const k of [...COUNTS, cacheWrite]) if (!isCount(r[k])) no(`${where}.${k}: not a whole non-negative number`);
    for (const k of ['cost', 'actual_cost']) if (!isMoney(r[k]) || r[k] < 0) no(`${where}.${k}: not non-negative USD`);
    if (isCount(r.total_tokens) && r.total_tokens !== r.input_tokens + r.output_tokens + r.cache_read_tokens + r[cacheWrite])
      no(`${where}.total_tokens: not the sum of the four buckets`);
  };
  if (body.usage !== undefined) {
    counters(body.usage.today, 'usage.today', 'cache_creation_tokens');
    counters(body.usage.total, 'usage.total', 'cache_creation_tokens');
  }
  if (body.model_stats !== undefined) {
    if (!Array.isArray(body.model_stats)) no('model_stats: not a list');
    else
      body.model_stats.forEach((m: Body, i: number) => {
        if (typeof m?.model !== 'string' || m.model.trim() === '') no(`model_stats[${i}].model: missing`);
        counters(m, `model_stats[${i}]`, 'cache_creation_tokens');
      });
  }
  if (body.daily_usage !== undefined) {
    if (!Array.isArray(body.daily_usage) || body.daily_usage.length > 366) no('daily_usage: not a list of at most 366 days');
    else {
      let last = '';
      body.daily_usage.forEach((d: Body, i: number) => {
        if (typeof d?.date !== 'string' || !/^\d{4}-\d{2}-\d{2}$/.test(d.date)) no(`daily_usage[${i}].date: not YYYY-MM-DD`);
        else if (d.date <= last) no(`daily_usage[${i}].date: not after the row before`);
        else last = d.date;
        counters(d, `daily_usage[${i}]`, 'cache_write_tokens');
      });
    }
  }

  if (body.mode === 'quota_limited') {
    if (!['active', 'quota_exhausted', 'expired'].includes(body.status))
      no(`status '${body.status}' is not active, quota_exhausted or expired`);
    const windows: Body[] = body.rate_limits ?? [];
    if (!Array.isArray(windows)) no('rate_limits: not a list');
    const seen = new Set<string>();
    for (const w of Array.isArray(windows) ? windows : []) {
      const id = `rate_limits[${w?.window}]`;
      if (!['5h', '1d', '7d'].includes(w?.window)) no(`${id}: not 5h, 1d or 7d`);
      if (seen.has(w?.window)) no(`${id}: listed twice`);
      seen.add(w?.window);
      if (!isMoney(w.limit) || w.limit <= 0 || !isMoney(w.used) || w.used < 0 || !isMoney(w.remaining) || w.remaining < 0)
        no(`${id}: limit, used and remaining must be USD (limit > 0)`);
      else if (micro(w.remaining) !== Math.max(0, micro(w.limit) - micro(w.used))) no(`${id}: remaining is not max(0, limit - used)`);
      if (!has(w, 'window_start')) no(`${id}: window_start missing`);
      else if (w.window_start !== null && !isTime(w.window_start)) no(`${id}: window_start not a time`);
      if (w.reset_at !== undefined && w.reset_at !== null && !isTime(w.reset_at)) no(`${id}: reset_at not a time`);
    }
    const q = body.quota;
    if (q === undefined || q === null) {
      if (seen.size === 0) no('quota_limited without quota needs at least one window');
      if (has(body, 'remaining')) no('quota_limited without quota: no top-level remaining');
      if (has(body, 'unit')) no('quota_limited without quota: no top-level unit');
    } else {
      if (q.unit !== 'USD' || body.unit !== 'USD') no('quota.unit and unit must be USD');
      if (!isMoney(q.limit) || q.limit <= 0 || !isMoney(q.used) || q.used < 0) no('quota: limit > 0 and used >= 0');
      else if (micro(q.remaining) !== Math.max(0, micro(q.limit) - micro(q.used))) no('quota.remaining is not max(0, limit - used)');
      if (!isMoney(body.remaining) || body.remaining !== q.remaining) no('remaining must equal quota.remaining');
    }
  } else if (body.mode === 'unrestricted') {
    if (body.unit !== 'USD') no('unit must be USD');
    if (typeof body.planName !== 'string' || body.planName.trim() === '') no('planName must not be blank');
    if (!isMoney(body.remaining)) no('remaining must be a number');
    const wallet = has(body, 'balance') && body.balance !== null;
    const sub = has(body, 'subscription') && body.subscription !== null;
    if (wallet === sub) no('exactly one of balance and subscription');
    if (wallet && (!isMoney(body.balance) || body.balance !== body.remaining)) no('a wallet: remaining must equal balance');
    if (sub) {
      const s = body.subscription as Body;
      for (const p of ['daily', 'weekly', 'monthly'])
        if (!isMoney(s[`${p}_usage_usd`]) || s[`${p}_usage_usd`] < 0) no(`subscription.${p}_usage_usd: not non-negative USD`);
      if (!isTime(s.expires_at)) no('subscription.expires_at: not a time');
      if (s.weekly_window_start !== undefined && s.weekly_window_start !== null && !isTime(s.weekly_window_start))
        no('subscription.weekly_window_start: not a time');
      const left: number[] = [];
      for (const p of ['daily', 'weekly', 'monthly']) {
        const limit = s[`${p}_limit_usd`];
        if (limit === null || limit === undefined || limit === 0) continue;
        if (!isMoney(limit) || limit < 0) no(`subscription.${p}_limit_usd: not a non-negative number or null`);
        else left.push(Math.max(0, micro(limit) - micro(s[`${p}_usage_usd`])));
      }
      if (left.length === 0 && body.remaining !== -1) no('a subscription without limits: remaining must be -1');
      if (left.length > 0 && micro(body.remaining) !== Math.min(...left)) no('remaining must be the smallest allowance left');
    }
  } else no(`mode '${body.mode}' is neither quota_limited nor unrestricted`);
  return out;
}

const day = (date: string, requests: number, input: number, output: number, read: number, write: number, cost: number) => ({
  date,
  requests,
  input_tokens: input,
  output_tokens: output,
  cache_read_tokens: read,
  cache_write_tokens: write,
  total_tokens: input + output + read + write,
  cost,
  actual_cost: cost,
});
const stat = {
  requests: 3,
  input_tokens: 300,
  output_tokens: 60,
  cache_creation_tokens: 0,
  cache_read_tokens: 40,
  total_tokens: 400,
  cost: 0.5,
  actual_cost: 0.4,
};

/** Bodies of each kind as the consumers' own tests use them: every one must pass. */
export const ACCEPTED: Record<string, Body> = {
  'wallet with history': {
    mode: 'unrestricted',
    isValid: true,
    planName: 'Wallet',
    remaining: 12.25,
    unit: 'USD',
    balance: 12.25,
    usage: { today: stat, total: stat, average_duration_ms: 900, rpm: 1, tpm: 400 },
    daily_usage: [day('2026-03-01', 1, 100, 20, 0, 10, 0.1), day('2026-03-02', 2, 200, 40, 40, 0, 0.4)],
    model_stats: [{ model: 'some-model', ...stat }],
  },
  'overdrawn wallet': { mode: 'unrestricted', isValid: true, planName: 'Wallet', remaining: -3.5, unit: 'USD', balance: -3.5 },
  'plan with a weekly window': {
    mode: 'unrestricted',
    isValid: true,
    planName: 'Weekly',
    remaining: 6,
    unit: 'USD',
    subscription: {
      daily_usage_usd: 4,
      weekly_usage_usd: 9,
      monthly_usage_usd: 9,
      daily_limit_usd: 10,
      weekly_limit_usd: 15,
      monthly_limit_usd: null,
      weekly_window_start: '2026-03-02T00:00:00Z',
      expires_at: '2026-04-01T00:00:00Z',
    },
  },
  'unlimited plan': {
    mode: 'unrestricted',
    isValid: true,
    planName: 'Unlimited',
    remaining: -1,
    unit: 'USD',
    subscription: {
      daily_usage_usd: 0,
      weekly_usage_usd: 0,
      monthly_usage_usd: 0,
      daily_limit_usd: null,
      weekly_limit_usd: null,
      monthly_limit_usd: null,
      weekly_window_start: null,
      expires_at: '2026-04-01T00:00:00Z',
    },
  },
  'key quota and a window': {
    mode: 'quota_limited',
    isValid: true,
    status: 'active',
    quota: { limit: 50, used: 12.5, remaining: 37.5, unit: 'USD' },
    remaining: 37.5,
    unit: 'USD',
    rate_limits: [{ window: '5h', limit: 5, used: 1, remaining: 4, window_start: null, reset_at: null }],
  },
  'windows only': {
    mode: 'quota_limited',
    isValid: true,
    status: 'quota_exhausted',
    rate_limits: [
      { window: '1d', limit: 2, used: 2.5, remaining: 0, window_start: '2026-03-02T08:00:00+08:00', reset_at: '2026-03-03T08:00:00+08:00' },
    ],
  },
};

/** Bodies those parsers refuse, each for one reason (two are what this gateway used to answer). */
export const REFUSED: Record<string, Body> = {
  'windows only with remaining -1 and a unit': {
    ...ACCEPTED['windows only'],
    remaining: -1,
    unit: 'USD',
  },
  'overdrawn wallet with remaining clamped to 0': { ...ACCEPTED['overdrawn wallet'], remaining: 0 },
  'quota remaining off by one cent': {
    ...ACCEPTED['key quota and a window'],
    quota: { limit: 50, used: 12.5, remaining: 37.51, unit: 'USD' },
    remaining: 37.51,
  },
  'a window listed twice': {
    ...ACCEPTED['windows only'],
    rate_limits: [...ACCEPTED['windows only'].rate_limits, ...ACCEPTED['windows only'].rate_limits],
  },
  'a window without window_start': {
    ...ACCEPTED['windows only'],
    rate_limits: [{ window: '1d', limit: 2, used: 1, remaining: 1 }],
  },
  'both balance and subscription': { ...ACCEPTED['plan with a weekly window'], balance: 6 },
  'daily_usage not a list': { ...ACCEPTED['wallet with history'], daily_usage: 'recent' },
  'daily_usage with a date-time': {
    ...ACCEPTED['wallet with history'],
    daily_usage: [{ ...day('2026-03-01', 1, 1, 1, 0, 0, 0.1), date: '2026-03-01T00:00:00Z' }],
  },
  'weekly_window_start not a time': {
    ...ACCEPTED['plan with a weekly window'],
    subscription: { ...ACCEPTED['plan with a weekly window'].subscription, weekly_window_start: 'monday' },
  },
};
