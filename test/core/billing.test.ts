/**
 * The worst-case reservation (docs/limits.md "Admission"): it must cover what a request can cost,
 * whatever its script, its choice count or the bucket the provider bills the prompt in.
 */
import t from 'tap';
import { worstCaseCharge } from '../../core/billing.js';
import type { ModelConfig } from '../../core/config/types.js';
import type { ParsedBody } from '../../core/types.js';

const model = (price: Partial<ModelConfig['price']>, maxOutputTokens = 1000): ModelConfig =>
  ({
    id: 'm',
    upstream: 'm',
    provider: 'p',
    maxOutputTokens,
    price: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, ...price },
  }) as unknown as ModelConfig;
const body = (json: Record<string, unknown>): ParsedBody => {
  const text = JSON.stringify(json);
  return { text, json, model: 'm', stream: false, fallback: [] };
};
const PPM = 1_000_000;

t.test('input: a token per 2 UTF-8 bytes, so CJK text (3 bytes a character) reserves at least a token a character', async (t) => {
  const cjk = body({ model: 'm', max_tokens: 1, messages: [{ role: 'user', content: '你'.repeat(3000) }] });
  const inputOnly = worstCaseCharge(cjk, [model({ input: 1_000_000 })], PPM); // $1 per token: micro-USD = tokens
  t.ok(inputOnly >= 3000, `3000 CJK characters reserve ${inputOnly} input tokens`);
  t.equal(inputOnly, Math.ceil(Buffer.byteLength(cjk.text) / 2));
});

t.test('output: the requested cap, else the model ceiling, times n', async (t) => {
  const price = { output: 1_000_000 };
  t.equal(worstCaseCharge(body({ max_tokens: 50 }), [model(price)], PPM), 50);
  t.equal(worstCaseCharge(body({ max_completion_tokens: 70, max_tokens: 50 }), [model(price)], PPM), 70, 'max_completion_tokens wins');
  t.equal(worstCaseCharge(body({ max_output_tokens: 30 }), [model(price)], PPM), 30, 'Responses cap');
  t.equal(worstCaseCharge(body({}), [model(price, 4096)], PPM), 4096, 'no cap: the model ceiling');
  t.equal(worstCaseCharge(body({ max_tokens: 50, n: 4 }), [model(price)], PPM), 200, 'n choices');
  t.equal(worstCaseCharge(body({ n: 2 }), [model(price, 4096)], PPM), 8192, 'n choices of the ceiling');
  t.equal(worstCaseCharge(body({ max_tokens: 50, n: 'x' }), [model(price)], PPM), 50, 'a malformed n counts once');
});

t.test('the prompt is priced at the dearer of input and cache write; the dearest candidate model wins', async (t) => {
  const b = body({ max_tokens: 0, x: 'abcd' });
  const tokens = Math.ceil(Buffer.byteLength(b.text) / 2);
  t.equal(worstCaseCharge(b, [model({ input: 1_000_000, cacheWrite: 3_000_000 })], PPM), 3 * tokens, 'cache write dearer');
  t.equal(worstCaseCharge(b, [model({ input: 2_000_000, cacheWrite: 1_000_000 })], PPM), 2 * tokens, 'input dearer');
  const cheap = model({ output: 1_000_000 }, 10);
  const dear = model({ output: 1_000_000 }, 500);
  t.equal(worstCaseCharge(body({}), [cheap, dear], PPM), 500, 'a fallback model that may answer is covered');
  t.equal(worstCaseCharge(body({ max_tokens: 100 }), [model({ output: 1_000_000 })], 1_500_000), 150, "at the user's rate");
});
