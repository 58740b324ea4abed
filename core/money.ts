/**
 * Money is integer micro-USD everywhere (1 USD = 1_000_000). Prices are kept as integer
 * micro-USD per million tokens (so $0.025 / Mtok is 25_000 and a token costs 0.025 micro-USD);
 * multipliers and personal rates are integer parts-per-million. Products are computed in BigInt
 * and rounded once, half up, at the end: a request's cost is never the sum of rounded pieces.
 */

export interface Price {
  /** micro-USD per million tokens, per bucket. */
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
}

/** The four disjoint token buckets every usage is normalised to (wire-notes "Usage and money"). */
export interface Usage {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  /** Reasoning tokens counted within `output`, when the upstream reports them (never priced apart). */
  reasoning?: number;
}

export const ZERO_USAGE: Readonly<Usage> = Object.freeze({ input: 0, output: 0, cacheRead: 0, cacheWrite: 0 });

export const PPM = 1_000_000;

const MTOK = 1_000_000n;

/** Exact cost in pico-USD-per-token units (micro-USD × 1e6), before any rounding. */
function exactCost(usage: Usage, price: Price): bigint {
  return (
    BigInt(usage.input) * BigInt(price.input) +
    BigInt(usage.output) * BigInt(price.output) +
    BigInt(usage.cacheRead) * BigInt(price.cacheRead) +
    BigInt(usage.cacheWrite) * BigInt(price.cacheWrite)
  );
}

function roundDiv(n: bigint, d: bigint): number {
  return Number((n + d / 2n) / d);
}

/** Below this, `n + d / 2` for any `d` up to 10^12 is still a safe integer. */
const SAFE = Number.MAX_SAFE_INTEGER - PPM * PPM;

/** `roundDiv` for an integer `n` in [0, SAFE] and an even `d`: `%` and a division of an exact multiple are exact. */
function roundDivSafe(n: number, d: number): number {
  const x = n + d / 2;
  return (x - (x % d)) / d;
}

export interface Charge {
  /** At list price (spec: `cost`). */
  cost: number;
  /** What the account is charged after the group multiplier or the personal rate (`actual_cost`). */
  actual: number;
}

/**
 * Cost of `usage` at `price`, and the charge after `multiplierPpm` (1_000_000 = ×1).
 *
 * Computed in doubles when that is exact (a few BigInt conversions per call were a measurable
 * part of a request): with non-negative terms, rounding is monotone, so a sum that comes out as an
 * integer below 2^53 − 10^12 means no product or partial sum ever left the safe range. Anything
 * else (a charge near 2^53 pico-USD, a negative or fractional term) takes the BigInt path unchanged.
 */
export function priceUsage(usage: Usage, price: Price, multiplierPpm: number): Charge {
  const a = usage.input * price.input;
  const b = usage.output * price.output;
  const c = usage.cacheRead * price.cacheRead;
  const d = usage.cacheWrite * price.cacheWrite;
  const sum = a + b + c + d;
  if (a >= 0 && b >= 0 && c >= 0 && d >= 0 && Number.isInteger(sum) && sum <= SAFE) {
    const cost = roundDivSafe(sum, PPM);
    // ×1 is the common case: (sum × 10^6) / 10^12 rounds exactly as sum / 10^6.
    if (multiplierPpm === PPM) return { cost, actual: cost };
    const scaled = sum * multiplierPpm;
    if (multiplierPpm >= 0 && Number.isInteger(scaled) && scaled <= SAFE) return { cost, actual: roundDivSafe(scaled, PPM * PPM) };
  }
  const exact = exactCost(usage, price);
  return {
    cost: roundDiv(exact, MTOK),
    actual: roundDiv(exact * BigInt(multiplierPpm), MTOK * BigInt(PPM)),
  };
}

export function isFree(price: Price): boolean {
  return price.input === 0 && price.output === 0 && price.cacheRead === 0 && price.cacheWrite === 0;
}

export function addUsage(a: Usage, b: Usage): Usage {
  return {
    input: a.input + b.input,
    output: a.output + b.output,
    cacheRead: a.cacheRead + b.cacheRead,
    cacheWrite: a.cacheWrite + b.cacheWrite,
  };
}

export function totalTokens(u: Usage): number {
  return u.input + u.output + u.cacheRead + u.cacheWrite;
}
