/**
 * The reservation cut's threshold (core/stream-cut.ts `OutputCap`), solved once per stream, must
 * cut exactly where pricing every event did: at the first character count whose charge —
 * `priceUsage` of the input (reported, else estimated) and ceil(chars / 4) output tokens, at the
 * caller's rate — passes the reservation. Checked at the boundary against `priceUsage` itself over
 * seeded random prices, rates, reservations and usages.
 */
import t from 'tap';
import { maxOutputTokens, OutputCap } from '../../core/stream-cut.js';
import { priceUsage, type Price, type Usage } from '../../core/money.js';
import { estimateTokens } from '../../core/protocols/usage.js';

/** What the cut did per event before: price the usage with output estimated from `chars`. */
const pricedOver = (fixed: Usage, chars: number, price: Price, rate: number, reserve: number) =>
  priceUsage({ ...fixed, output: estimateTokens(chars) }, price, rate).actual > reserve;

t.test('the threshold is the boundary priceUsage draws, over random prices and reservations', async (t) => {
  let seed = 7;
  const rand = (n: number) => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n;
  let bad: string | undefined;
  let cuts = 0;
  for (let i = 0; i < 5000 && !bad; i++) {
    const price: Price = {
      input: rand(20_000_000),
      output: rand(4) === 0 ? 0 : rand(80_000_000),
      cacheRead: rand(3_000_000),
      cacheWrite: rand(4_000_000),
    };
    const rate = [1_000_000, 0, 500_000, 1_234_567, 3_000_000][rand(5)];
    const reserve = [1, 10, 999, 107_400, 5_000_000][rand(5)] + rand(1000);
    const fixed: Usage = {
      input: rand(50_000),
      output: 0,
      cacheRead: rand(4) === 0 ? rand(10_000) : 0,
      cacheWrite: rand(4) === 0 ? rand(10_000) : 0,
    };
    const max = maxOutputTokens(fixed, price, rate, reserve);
    const cap = new OutputCap(price, rate, reserve, 0);
    // The boundary in characters: the last count still within, and the first one over.
    const within = max === Infinity ? 4 * 10_000_000 : max * 4;
    for (const chars of [0, 1, within - 1, within, within + 1, within + 4]) {
      if (chars < 0) continue;
      const want = pricedOver(fixed, chars, price, rate, reserve);
      if (want) cuts++;
      if (cap.over(fixed, chars) !== want) bad = JSON.stringify({ price, rate, reserve, fixed, chars, max, want });
    }
  }
  t.equal(bad, undefined, 'cut exactly where pricing every event cut');
  t.ok(cuts > 1000, `the cases cut (${cuts})`);
});

t.test('the threshold follows the reported usage, and the input estimate until then', async (t) => {
  const price: Price = { input: 3_000_000, output: 15_000_000, cacheRead: 300_000, cacheWrite: 3_750_000 };
  const cap = new OutputCap(price, 1_000_000, 107_400, 100);
  // 100 input tokens estimated: 0.3 µ$ + 15 µ$ per output token → 7140 tokens fit, 28,560 characters.
  t.equal(cap.over(undefined, 28_560), false);
  t.equal(cap.over(undefined, 28_561), true);
  const reported: Usage = { input: 10_000, output: 1, cacheRead: 0, cacheWrite: 0 };
  // 10,000 input tokens reported: 30,000 µ$ of input, (107,400 - 30,000) / 15 = 5160 tokens.
  t.equal(cap.over(reported, 5160 * 4), false);
  t.equal(cap.over(reported, 5160 * 4 + 1), true);
  t.equal(new OutputCap(price, 1_000_000, 10, 100_000).over(undefined, 0), true, 'input alone past the reservation: cut at once');
  t.equal(new OutputCap({ ...price, output: 0 }, 1_000_000, 107_400, 100).over(undefined, 1e12), false, 'free output is never cut');
});
