/**
 * Account health, as pure functions: what an attempt's outcome means for its account (nothing,
 * a cooldown, disabled until reload), whether the request may move to another account, how long
 * a cooldown lasts, and which accounts are too slow to keep winning new sessions.
 *
 * | outcome                                   | account                                  | failover |
 * |-------------------------------------------|------------------------------------------|----------|
 * | success                                   | consecutive failures reset               | —        |
 * | 401 / 403 (our credential refused)        | disabled until the config is reloaded    | yes      |
 * | 429, or a rate-limit error event          | cools down: retry-after, else x-ratelimit-reset-* / anthropic-ratelimit-*-reset, else backoff | yes |
 * | 529 / overloaded, other 5xx, 402, 408      | cools down: retry-after, else backoff    | yes      |
 * | timeout, connection error, cut-off answer | cools down with backoff                  | yes      |
 * | 400 / 404 / 413 / 422 (the request's own) | nothing                                  | no       |
 * | client went away; failure after commit    | nothing                                  | no (too late) |
 *
 * Backoff: `cooldown` × 2^(consecutive failures − 1), at most `max_cooldown` (which also caps
 * provider-given delays).
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { GatewayError } from '../errors.js';
import type { SchedulingConfig } from '../config/types.js';
import { ACCOUNT_TTFT_SAMPLES } from '../store/types.js';

export type OutcomeKind =
  | 'ok'
  | 'rate_limited'
  | 'overloaded'
  | 'server_error'
  | 'billing_error'
  | 'timeout'
  | 'connect_error'
  | 'auth_error'
  | 'client_error'
  | 'aborted'
  | 'stream_error';

/** Every kind (metrics label values: a fixed, bounded set). */
export const OUTCOME_KINDS: readonly OutcomeKind[] = [
  'ok',
  'rate_limited',
  'overloaded',
  'server_error',
  'billing_error',
  'timeout',
  'connect_error',
  'auth_error',
  'client_error',
  'aborted',
  'stream_error',
];

export interface OutcomeReport {
  kind: OutcomeKind;
  /** What happens to the account. */
  health: 'success' | 'cooldown' | 'disable' | 'none';
  /** The request may try another account. */
  failover: boolean;
  /** Provider-given delay before the account should be asked again (ms). */
  delayMs?: number;
}

/** The attempt fields health depends on (a subset of core/context.ts's Attempt). */
export interface AttemptView {
  status?: number;
  failure?: 'status' | 'connect' | 'timeout' | 'event';
  error?: GatewayError;
  responseHeaders?: IncomingHttpHeaders;
}

export function classifyOutcome(a: AttemptView, opts: { committed: boolean; now: number }): OutcomeReport {
  if (!a.error) return { kind: 'ok', health: 'success', failover: false };
  if (a.error.status === 499) return { kind: 'aborted', health: 'none', failover: false };
  // An answer that began reaching the client and then failed: too late to move, and the cut may be
  // the gateway's own (a reservation reached), so the account is not blamed.
  if (opts.committed) return { kind: 'stream_error', health: 'none', failover: false };
  if (a.failure === 'timeout') return { kind: 'timeout', health: 'cooldown', failover: true };
  if (a.failure === 'connect') return { kind: 'connect_error', health: 'cooldown', failover: true };
  if (a.failure === 'event') {
    switch (a.error.id) {
      case 'OVERLOADED':
        return { kind: 'overloaded', health: 'cooldown', failover: true };
      case 'PROVIDER_RATE_LIMIT':
        return { kind: 'rate_limited', health: 'cooldown', failover: true };
      case 'INVALID_REQUEST':
        return { kind: 'client_error', health: 'none', failover: false };
      default:
        return { kind: 'server_error', health: 'cooldown', failover: true };
    }
  }
  const s = a.status ?? 0;
  const headers = a.responseHeaders ?? {};
  if (s === 401 || s === 403) return { kind: 'auth_error', health: 'disable', failover: true };
  if (s === 429) return { kind: 'rate_limited', health: 'cooldown', failover: true, delayMs: providerDelayMs(headers, opts.now, true) };
  if (s === 408) return { kind: 'timeout', health: 'cooldown', failover: true };
  if (s === 402) return { kind: 'billing_error', health: 'cooldown', failover: true, delayMs: providerDelayMs(headers, opts.now, false) };
  if (s >= 500) {
    const kind = s === 529 || a.error.id === 'OVERLOADED' ? 'overloaded' : 'server_error';
    return { kind, health: 'cooldown', failover: true, delayMs: providerDelayMs(headers, opts.now, false) };
  }
  return { kind: 'client_error', health: 'none', failover: false };
}

/** How long the account cools down after its `failures`-th consecutive failure. */
export function cooldownMs(report: OutcomeReport, failures: number, s: Pick<SchedulingConfig, 'cooldownMs' | 'maxCooldownMs'>): number {
  if (report.delayMs !== undefined && report.delayMs > 0) return Math.min(report.delayMs, s.maxCooldownMs);
  const n = Math.max(1, Math.min(failures, 31));
  return Math.min(s.cooldownMs * 2 ** (n - 1), s.maxCooldownMs);
}

function first(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/**
 * The delay a provider asked for: `retry-after-ms`, `retry-after` (seconds or an HTTP date), and
 * for rate limits the reset of the exhausted limit — OpenAI's `x-ratelimit-reset-{requests,tokens}`
 * (durations such as `1s`, `6m0s`, `20ms`) and Anthropic's `anthropic-ratelimit-*-reset` (RFC 3339).
 * Among several resets, the longest of those whose `remaining` is 0, else the shortest.
 */
export function providerDelayMs(headers: IncomingHttpHeaders, now: number, resets: boolean): number | undefined {
  const ms = Number(first(headers['retry-after-ms']));
  if (Number.isFinite(ms) && ms > 0) return Math.ceil(ms);
  const ra = first(headers['retry-after'])?.trim();
  if (ra) {
    if (/^\d+(\.\d+)?$/.test(ra)) {
      const s = Number(ra);
      if (s > 0) return Math.ceil(s * 1000);
    } else {
      const t = Date.parse(ra);
      if (!Number.isNaN(t) && t > now) return t - now;
    }
  }
  if (!resets) return undefined;
  const exhausted: number[] = [];
  const others: number[] = [];
  for (const [name, value] of Object.entries(headers)) {
    const v = first(value);
    if (!v) continue;
    let m = /^x-ratelimit-reset-(.+)$/.exec(name);
    let wait: number | undefined;
    let remaining: string | undefined;
    if (m) {
      wait = parseResetDuration(v);
      remaining = first(headers[`x-ratelimit-remaining-${m[1]}`]);
    } else if ((m = /^anthropic-ratelimit-(.+)-reset$/.exec(name))) {
      const t = Date.parse(v);
      wait = Number.isNaN(t) ? undefined : t - now;
      remaining = first(headers[`anthropic-ratelimit-${m[1]}-remaining`]);
    }
    if (wait === undefined || wait <= 0) continue;
    (remaining !== undefined && Number(remaining) === 0 ? exhausted : others).push(wait);
  }
  if (exhausted.length) return Math.max(...exhausted);
  if (others.length) return Math.min(...others);
  return undefined;
}

/** `1s`, `6m0s`, `1h2m3.5s`, `20ms`, or plain seconds. */
export function parseResetDuration(v: string): number | undefined {
  const s = v.trim();
  if (/^\d+(\.\d+)?$/.test(s)) return Math.ceil(Number(s) * 1000);
  const re = /(\d+(?:\.\d+)?)(ms|h|m|s)/g;
  let total = 0;
  let used = 0;
  let m: RegExpExecArray | null;
  while ((m = re.exec(s))) {
    const n = Number(m[1]);
    total += m[2] === 'h' ? n * 3_600_000 : m[2] === 'm' ? n * 60_000 : m[2] === 's' ? n * 1000 : n;
    used += m[0].length;
  }
  return used === s.length && used > 0 ? Math.ceil(total) : undefined;
}

// ---- time to first token -------------------------------------------------------------------------

/** Samples kept per account, and how long one counts. */
export const TTFT_SAMPLES = ACCOUNT_TTFT_SAMPLES; // the store keeps as many (shared.ts)
export const TTFT_WINDOW_MS = 10 * 60_000;
/** Fewer recent samples than this: no figure yet (an account is never judged on one request). */
export const TTFT_MIN_SAMPLES = 3;

/** The last few times to first token of an account, with when they were taken. */
export class TtftWindow {
  // The last TTFT_SAMPLES samples in a ring (the median does not care about their order).
  private readonly at: number[] = [];
  private readonly ms: number[] = [];
  private next = 0;

  add(now: number, ms: number): void {
    if (this.at.length < TTFT_SAMPLES) {
      this.at.push(now);
      this.ms.push(ms);
      return;
    }
    this.at[this.next] = now;
    this.ms[this.next] = ms;
    this.next = (this.next + 1) % TTFT_SAMPLES;
  }

  /** Replaces the samples (oldest first; the last TTFT_SAMPLES are kept): the store's, every instance's. */
  set(samples: ReadonlyArray<readonly [at: number, ms: number]>): void {
    const from = Math.max(0, samples.length - TTFT_SAMPLES);
    this.at.length = 0;
    this.ms.length = 0;
    for (let i = from; i < samples.length; i++) {
      this.at.push(samples[i][0]);
      this.ms.push(samples[i][1]);
    }
    this.next = 0; // full: the oldest, at 0, goes first
  }

  /** Median of the recent samples; undefined with too few. */
  figure(now: number): number | undefined {
    const recent: number[] = [];
    for (let i = 0; i < this.at.length; i++) if (now - this.at[i] <= TTFT_WINDOW_MS) recent.push(this.ms[i]);
    if (recent.length < TTFT_MIN_SAMPLES) return undefined;
    recent.sort((a, b) => a - b);
    const mid = recent.length >> 1;
    return recent.length % 2 ? recent[mid] : Math.round((recent[mid - 1] + recent[mid]) / 2);
  }
}

/**
 * Accounts whose figure is far above the fastest peer's: more than `slowFactor` times it and more
 * than `slowMarginMs` above it (so 40 ms against 10 ms is not "slow"). Peers are the provider's
 * other accounts with a figure.
 */
export function slowAccounts(
  figures: ReadonlyMap<string, number | undefined>,
  s: Pick<SchedulingConfig, 'slowFactor' | 'slowMarginMs'>,
): Set<string> {
  const out = new Set<string>();
  for (const [name, f] of figures) {
    if (f === undefined) continue;
    let best = Infinity;
    for (const [peer, g] of figures) if (peer !== name && g !== undefined && g < best) best = g;
    if (best === Infinity) continue;
    if (f > s.slowFactor * best && f - best > s.slowMarginMs) out.add(name);
  }
  return out;
}
