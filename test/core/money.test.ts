/**
 * `priceUsage` computes in doubles when that is exact and in BigInt otherwise; both must give the
 * charge the BigInt formula gives (half-up rounding of the exact sum, once), for any usage, price
 * and rate, realistic or at the edge of the safe range. Seeded fast-check runs (reproducible).
 */
import t from 'tap';
import fc from 'fast-check';
import { PPM, priceUsage, type Price, type Usage } from '../../core/money.js';
import type { TapTest } from '../helpers/gateway.js';

/** The definition: exact products in BigInt, rounded half up once. */
function reference(u: Usage, p: Price, rate: number): { cost: number; actual: number } {
  const exact =
    BigInt(u.input) * BigInt(p.input) +
    BigInt(u.output) * BigInt(p.output) +
    BigInt(u.cacheRead) * BigInt(p.cacheRead) +
    BigInt(u.cacheWrite) * BigInt(p.cacheWrite);
  const round = (n: bigint, d: bigint) => Number((n + d / 2n) / d);
  return { cost: round(exact, 1_000_000n), actual: round(exact * BigInt(rate), 1_000_000_000_000n) };
}

const usage = (tokens: fc.Arbitrary<number>) =>
  fc.record({ input: tokens, output: tokens, cacheRead: tokens, cacheWrite: tokens }) as fc.Arbitrary<Usage>;
const price = (micros: fc.Arbitrary<number>) =>
  fc.record({ input: micros, output: micros, cacheRead: micros, cacheWrite: micros }) as fc.Arbitrary<Price>;

/** `runs` seeded cases of usage, price and rate drawn from the three: each priced as the definition prices it. */
function agrees(t: TapTest, tokens: fc.Arbitrary<number>, micros: fc.Arbitrary<number>, rate: fc.Arbitrary<number>, seed: number) {
  const runs = 20_000;
  fc.assert(
    fc.property(usage(tokens), price(micros), rate, (u, p, r) => {
      const got = priceUsage(u, p, r);
      const want = reference(u, p, r);
      return got.cost === want.cost && got.actual === want.actual;
    }),
    { numRuns: runs, seed },
  );
  t.pass(`${runs.toLocaleString('en')} cases agree`);
}

t.test('realistic usage, prices and rates: the same charge as the BigInt definition', async (t) => {
  // Up to 2M tokens a bucket, up to $1,000 per Mtok, rates from 0 to ×5 (and exactly ×1 often).
  agrees(t, fc.nat(2_000_000), fc.nat(1_000_000_000), fc.oneof(fc.constant(PPM), fc.integer({ min: 0, max: 5 * PPM })), 20261127);
});

t.test('at the edge of the safe range and past it: still exact', async (t) => {
  // Products around 2^53 pico-USD, where doubles would round: the slow path must take these.
  const big = fc.oneof(fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), fc.integer({ min: 2 ** 25, max: 2 ** 28 }));
  agrees(t, big, big, fc.oneof(fc.constant(PPM), fc.integer({ min: 0, max: 1_000 * PPM })), 53);
});

t.test('half up at the boundaries, and the cases chosen at the threshold', async (t) => {
  const one = (input: number, priceIn: number, rate = PPM) =>
    priceUsage({ input, output: 0, cacheRead: 0, cacheWrite: 0 }, { input: priceIn, output: 0, cacheRead: 0, cacheWrite: 0 }, rate);
  t.same(one(1, 499_999), { cost: 0, actual: 0 }, '0.499999 micro-USD rounds down');
  t.same(one(1, 500_000), { cost: 1, actual: 1 }, '0.5 rounds up');
  t.same(one(3, 500_000, 333_333), { cost: 2, actual: 0 }, '1.5 × 0.333333 = 0.4999995 rounds down');
  t.same(one(3, 500_000, 333_334), { cost: 2, actual: 1 }, '1.5 × 0.333334 = 0.500001 rounds up');
  // Sums just under, at and over the fast path's limit (2^53 − 1 − 10^12), with a rate.
  for (const input of [Number.MAX_SAFE_INTEGER - PPM * PPM - 1, Number.MAX_SAFE_INTEGER - PPM * PPM, Number.MAX_SAFE_INTEGER]) {
    for (const rate of [PPM, 999_999, 1_000_001, 7 * PPM]) {
      const u = { input, output: 0, cacheRead: 0, cacheWrite: 0 };
      const p = { input: 1, output: 0, cacheRead: 0, cacheWrite: 0 };
      t.same(priceUsage(u, p, rate), reference(u, p, rate), `${input} pico-USD at rate ${rate}`);
    }
  }
  t.throws(
    () => priceUsage({ input: 1.5, output: 0, cacheRead: 0, cacheWrite: 0 }, { input: 3, output: 0, cacheRead: 0, cacheWrite: 0 }, PPM),
    RangeError,
    'a fractional token count is refused, as BigInt refuses it',
  );
});
