/**
 * Usage normalisation: every protocol's usage object ⇄ the four disjoint buckets.
 * OpenAI `prompt_tokens` / Responses `input_tokens` INCLUDE cached tokens; Anthropic
 * `input_tokens` EXCLUDES cache reads and cache writes (wire-notes "Usage and money").
 */
import type { Usage } from '../money.js';

const n = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);

export function fromChatUsage(u: any): Usage | undefined {
  if (!u || typeof u !== 'object') return undefined;
  const cached = n(u.prompt_tokens_details?.cached_tokens);
  // `prompt_tokens_details.cache_write_tokens` is counted inside `prompt_tokens`; the top-level
  // `cache_creation_input_tokens` LiteLLM adds is not (its prompt_tokens = input + cache read,
  // ANALYSIS §5.4), so only the former is taken out of the input bucket.
  const detailWrite = u.prompt_tokens_details?.cache_write_tokens;
  const write = n(detailWrite ?? u.cache_creation_input_tokens);
  const inside = detailWrite !== undefined ? write : 0;
  const out: Usage = {
    input: Math.max(0, n(u.prompt_tokens) - cached - inside),
    output: n(u.completion_tokens),
    cacheRead: cached,
    cacheWrite: write,
  };
  return withReasoning(out, u.completion_tokens_details?.reasoning_tokens);
}

/** Reasoning tokens, when reported, on the usage (not a bucket: they are part of `output`). */
function withReasoning(u: Usage, reasoning: unknown): Usage {
  if (typeof reasoning === 'number' && Number.isFinite(reasoning) && reasoning > 0) u.reasoning = Math.floor(reasoning);
  return u;
}

export function toChatUsage(u: Usage, reasoningTokens?: number): Record<string, unknown> {
  const prompt = u.input + u.cacheRead + u.cacheWrite;
  const out: Record<string, unknown> = {
    prompt_tokens: prompt,
    completion_tokens: u.output,
    total_tokens: prompt + u.output,
    prompt_tokens_details: { cached_tokens: u.cacheRead, ...(u.cacheWrite ? { cache_write_tokens: u.cacheWrite } : {}) },
  };
  if (reasoningTokens !== undefined) out.completion_tokens_details = { reasoning_tokens: reasoningTokens };
  return out;
}

/** Anthropic usage; fields absent from a partial (message_delta) usage come back undefined. */
export function fromAnthropicUsagePartial(u: any): Partial<Usage> | undefined {
  if (!u || typeof u !== 'object') return undefined;
  const out: Partial<Usage> = {};
  if (typeof u.input_tokens === 'number') out.input = n(u.input_tokens);
  if (typeof u.output_tokens === 'number') out.output = n(u.output_tokens);
  if (typeof u.cache_read_input_tokens === 'number') out.cacheRead = n(u.cache_read_input_tokens);
  if (typeof u.cache_creation_input_tokens === 'number') out.cacheWrite = n(u.cache_creation_input_tokens);
  return out;
}

export function fromAnthropicUsage(u: any): Usage | undefined {
  const p = fromAnthropicUsagePartial(u);
  return p ? { input: p.input ?? 0, output: p.output ?? 0, cacheRead: p.cacheRead ?? 0, cacheWrite: p.cacheWrite ?? 0 } : undefined;
}

export function toAnthropicUsage(u: Usage): Record<string, number> {
  return {
    input_tokens: u.input,
    cache_creation_input_tokens: u.cacheWrite,
    cache_read_input_tokens: u.cacheRead,
    output_tokens: u.output,
  };
}

export function fromResponsesUsage(u: any): Usage | undefined {
  if (!u || typeof u !== 'object') return undefined;
  const cached = n(u.input_tokens_details?.cached_tokens);
  const write = n(u.input_tokens_details?.cache_write_tokens);
  const out: Usage = {
    input: Math.max(0, n(u.input_tokens) - cached - write),
    output: n(u.output_tokens),
    cacheRead: cached,
    cacheWrite: write,
  };
  return withReasoning(out, u.output_tokens_details?.reasoning_tokens);
}

export function toResponsesUsage(u: Usage, reasoningTokens?: number): Record<string, unknown> {
  const input = u.input + u.cacheRead + u.cacheWrite;
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: u.cacheRead, ...(u.cacheWrite ? { cache_write_tokens: u.cacheWrite } : {}) },
    output_tokens: u.output,
    output_tokens_details: { reasoning_tokens: reasoningTokens ?? 0 },
    total_tokens: input + u.output,
  };
}

/** Merges a cumulative partial usage into what is known (later values overwrite). */
export function mergeUsage(known: Usage | undefined, p: Partial<Usage>): Usage {
  const out: Usage = {
    input: p.input ?? known?.input ?? 0,
    output: p.output ?? known?.output ?? 0,
    cacheRead: p.cacheRead ?? known?.cacheRead ?? 0,
    cacheWrite: p.cacheWrite ?? known?.cacheWrite ?? 0,
  };
  const reasoning = p.reasoning ?? known?.reasoning;
  if (reasoning !== undefined) out.reasoning = reasoning;
  return out;
}

/** Rough token estimate of text (≈ 4 characters a token), for when no usage was reported. */
export function estimateTokens(chars: number): number {
  return chars <= 0 ? 0 : Math.ceil(chars / 4);
}

/**
 * Length of the text a delta event carries: the JSON string value of the first of `keys` present
 * in `data` (a delta carries one), found without parsing. The passthrough taps run it on every
 * delta event to estimate generated text, so it scans once and stops at the first match.
 */
export function stringValueLength(data: string, keys: readonly string[]): number {
  for (const key of keys) {
    const needle = `"${key}":`;
    let k = data.indexOf(needle);
    while (k !== -1) {
      let i = k + needle.length;
      while (data.charCodeAt(i) === 32) i++;
      if (data.charCodeAt(i) === 34) return stringLength(data, i + 1);
      k = data.indexOf(needle, i);
    }
  }
  return 0;
}

/** `textLength`'s keys, compiled once: one pattern finds any of them with a string value. */
export interface TextKeys {
  readonly keys: readonly string[];
  readonly pattern: RegExp;
  /** The first key alone: what nearly every delta carries, found by a literal search. */
  readonly first: RegExp;
}

export function textKeys(keys: readonly string[]): TextKeys {
  return { keys, pattern: new RegExp(`"(${keys.join('|')})": *"`, 'g'), first: new RegExp(`"${keys[0]}": *"`, 'g') };
}

/**
 * `stringValueLength` in one pass: the same answer (the first string value of the first of the
 * keys, in their order, that has one), found by one compiled pattern instead of an `indexOf` per
 * key — the keys a delta does not carry were each a scan of the whole event. The first key is
 * looked for alone first: a literal pattern scans about three times faster than the alternation,
 * and when it matches its first match is the answer.
 */
export function textLength(data: string, keys: TextKeys): number {
  const first = keys.first;
  first.lastIndex = 0;
  if (first.test(data)) return stringLength(data, first.lastIndex); // `test`: no match array made per event
  const re = keys.pattern;
  re.lastIndex = 0;
  let best = keys.keys.length;
  let at = -1;
  for (let m = re.exec(data); m !== null; m = re.exec(data)) {
    const rank = keys.keys.indexOf(m[1]);
    if (rank < best) {
      best = rank;
      at = re.lastIndex;
    }
  }
  return at < 0 ? 0 : stringLength(data, at);
}

/** Characters of the JSON string starting after its opening quote at `i` (escapes count once). */
function stringLength(data: string, i: number): number {
  let len = 0;
  while (i < data.length) {
    const c = data.charCodeAt(i);
    if (c === 92) {
      i += data.charCodeAt(i + 1) === 117 ? 6 : 2;
      len++;
      continue;
    }
    if (c === 34) break;
    i++;
    len++;
  }
  return len;
}
