/**
 * Pricing decisions shared by the limit plugins and metering: the rate a user pays in a group,
 * the models a request may be answered by, and the worst-case charge reserved at admission.
 */
import type { GroupConfig, KeyConfig, ModelConfig, UserConfig, Window } from './config/types.js';
import type { RequestContext } from './context.js';
import type { ParsedBody } from './types.js';
import { isFree, priceUsage } from './money.js';
import { resolveModel } from './routing.js';
import { estimateTokens } from './protocols/usage.js';
import { WINDOWS } from './config/types.js';
import type { Settlement } from './store/types.js';

/** The user's personal rate for the group (ppm) replaces the group's multiplier. */
export function chargeRate(user: UserConfig | undefined, group: GroupConfig | undefined): number {
  if (group && user && Object.prototype.hasOwnProperty.call(user.rates, group.name)) return user.rates[group.name];
  return group?.multiplierPpm ?? 1_000_000;
}

/**
 * The windows configured on a key (those with a limit), which its settlements name: one frozen list
 * per key object (config keys are immutable; a changed key is a new object), so a settlement
 * carries no list of its own and the journal writes each list's text once.
 */
const keyWindowLists = new WeakMap<KeyConfig, readonly Window[]>();
export function keyWindows(key: KeyConfig): readonly Window[] {
  let w = keyWindowLists.get(key);
  if (w === undefined) keyWindowLists.set(key, (w = Object.freeze(WINDOWS.filter((x) => key.windows[x] > 0))));
  return w;
}

/** The requested model and the served fallback models: any of them may answer. */
export function candidateModels(ctx: RequestContext): Promise<ModelConfig[]> {
  // The model is resolved once the body is read: one promise to wait for.
  return ctx.model().then(() => candidateModelsNow(ctx)!);
}

/**
 * `candidateModels` without a promise once the requested model is resolved (an earlier hook
 * asked for it); undefined before.
 */
export function candidateModelsNow(ctx: RequestContext): ModelConfig[] | undefined {
  const body = ctx.parsed;
  const requested = ctx.requested;
  if (!body || !requested) return undefined;
  const out = [requested.model];
  for (const name of body.fallback) {
    const r = resolveModel(ctx.config, ctx.group, name);
    if (r && !out.some((m) => m.id === r.model.id)) out.push(r.model);
  }
  return out;
}

export function allFree(models: readonly ModelConfig[]): boolean {
  return models.every((m) => isFree(m.price));
}

/** The output cap the request asks for, whatever its protocol calls it. */
export function requestedMaxTokens(body: ParsedBody): number | undefined {
  for (const k of ['max_completion_tokens', 'max_tokens', 'max_output_tokens']) {
    const v = body.json[k];
    if (typeof v === 'number' && Number.isFinite(v) && v > 0) return Math.floor(v);
  }
  return undefined;
}

/** Choices a Chat request asks for (`n`); each may produce the full output cap. */
export function choices(body: ParsedBody): number {
  const n = body.json.n;
  return typeof n === 'number' && Number.isInteger(n) && n > 1 ? Math.min(n, 128) : 1;
}

/**
 * Worst-case charge of a request, reserved at admission (docs/limits.md "Admission").
 *  - Input: a token per 2 bytes of the UTF-8 body. Generous for English (about 4 characters a
 *    token) and still covering CJK text (3 bytes a character, about a token each) and dense digits
 *    or base64; priced at the dearer of the input and cache-write rates, since the provider decides
 *    which bucket the prompt lands in.
 *  - Output: the requested cap, else the model's `max_output_tokens`, times `n` choices.
 * The overrun bound of one request holds as long as this covers the actual charge, which is why it
 * errs high: a large reservation only limits how many requests run at once near a limit.
 */
export function worstCaseCharge(body: ParsedBody, models: readonly ModelConfig[], ratePpm: number): number {
  const input = Math.ceil((body.bytes ?? Buffer.byteLength(body.text, 'utf8')) / 2);
  const n = choices(body);
  let worst = 0;
  for (const m of models) {
    const output = (requestedMaxTokens(body) ?? m.maxOutputTokens) * n;
    const asInput = priceUsage({ input, output, cacheRead: 0, cacheWrite: 0 }, m.price, ratePpm).actual;
    const asCacheWrite = priceUsage({ input: 0, output, cacheRead: 0, cacheWrite: input }, m.price, ratePpm).actual;
    worst = Math.max(worst, asInput, asCacheWrite);
  }
  return worst;
}

/** Routes that call no model (models, usage, count_tokens) check eligibility but reserve nothing. */
export function isModelCall(ctx: RequestContext): boolean {
  return !ctx.route.handler;
}

/**
 * The crash-recovery settlement of a model call (docs/limits.md "Crash recovery"): the input the
 * upstream would have processed, estimated from the body as every other estimate is (4 characters
 * a token), at the requested model's price and the user's rate; no output. Undefined when the
 * request is not a priced-and-metered model call yet (no key, or no body or model read).
 */
export function recoverySettlement(ctx: RequestContext): Settlement | undefined {
  const { key, user, group, requested } = ctx;
  if (!key || !group || !requested || !isModelCall(ctx)) return undefined;
  const usage = { input: estimateTokens(ctx.requestChars), output: 0, cacheRead: 0, cacheWrite: 0 };
  const charge = priceUsage(usage, requested.model.price, chargeRate(user, group));
  return {
    keyId: key.id,
    user: key.user,
    group: group.name,
    model: requested.model.id,
    billing: group.billing,
    usage,
    cost: charge.cost,
    actual: charge.actual,
    durationMs: 0,
    windows: keyWindows(key),
    estimated: true,
    recovered: true,
  };
}
