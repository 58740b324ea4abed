/**
 * Shared helpers for the limit and billing tests: deterministic keys, request bodies that pick the
 * mock's exact usage, error assertions per wire-notes, and polling of /v1/usage.
 */
import { bearer, call, type Reply, type TapTest } from '../helpers/gateway.js';
import { sleep, until } from '../helpers/upstream.js';
import { priceUsage, type Price, type Usage } from '../../core/money.js';

export { sleep, until };

/** A deterministic `sk-` key from a small number. */
export const key = (n: number): string => `sk-${n.toString(16).padStart(64, '0')}`;

/** The mock directive that makes the upstream report exactly this usage. */
export function directive(u: Partial<Usage> & { extra?: string } = {}): string {
  const parts = [
    `input_tokens=${u.input ?? 10}`,
    `output_tokens=${u.output ?? 20}`,
    `cache_read=${u.cacheRead ?? 0}`,
    `cache_write=${u.cacheWrite ?? 0}`,
  ];
  if (u.extra) parts.push(u.extra);
  return `[[mock: ${parts.join(' ')}]]`;
}

export type Proto = 'chat' | 'messages' | 'responses';

export const PATHS: Record<Proto, string> = {
  chat: '/v1/chat/completions',
  messages: '/v1/messages',
  responses: '/v1/responses',
};

/** A request body of the protocol whose user text carries `text` (e.g. a directive). */
export function bodyFor(proto: Proto, model: string, text: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  if (proto === 'messages') return { model, max_tokens: 1000, messages: [{ role: 'user', content: `Hello ${text}` }], ...extra };
  if (proto === 'responses') return { model, input: `Hello ${text}`, ...extra };
  return { model, messages: [{ role: 'user', content: `Hello ${text}` }], ...extra };
}

export interface Gw {
  url: string;
}

/** POSTs a model call with `usage` picked by directive; returns the reply. */
export function modelCall(
  g: Gw,
  apiKey: string,
  proto: Proto,
  model: string,
  u: Partial<Usage> & { extra?: string } = {},
  extra: Record<string, unknown> = {},
): Promise<Reply> {
  return call(g.url + PATHS[proto], { headers: bearer(apiKey), json: bodyFor(proto, model, directive(u), extra) });
}

export async function usageOf(g: Gw, apiKey: string, query = ''): Promise<any> {
  const r = await call(g.url + '/v1/usage' + query, { headers: bearer(apiKey) });
  if (r.status !== 200) throw new Error(`/v1/usage answered ${r.status}: ${r.text}`);
  return r.json;
}

/** micro-USD → the USD number /v1/usage reports. */
export const usd = (micros: number): number => Number((micros / 1e6).toFixed(6));

/** Price in USD per Mtok (as in gateway.yaml) → the integer micro-USD per Mtok the gateway uses. */
export function priceOf(p: { input: number; output: number; cache_read?: number; cache_write?: number }): Price {
  const m = (v: number | undefined) => Math.round((v ?? 0) * 1e6);
  return { input: m(p.input), output: m(p.output), cacheRead: m(p.cache_read), cacheWrite: m(p.cache_write) };
}

/** The charge of a usage: list cost and actual (after the multiplier / rate, as a decimal). */
export function charge(
  u: Partial<Usage>,
  price: { input: number; output: number; cache_read?: number; cache_write?: number },
  multiplier = 1,
): { cost: number; actual: number } {
  const usage: Usage = { input: u.input ?? 10, output: u.output ?? 20, cacheRead: u.cacheRead ?? 0, cacheWrite: u.cacheWrite ?? 0 };
  return priceUsage(usage, priceOf(price), Math.round(multiplier * 1e6));
}

export interface ErrorExpectation {
  status: number;
  /** Flat `code`, or the protocol body's `error.type`. */
  code?: string;
  type?: string;
  message?: string | RegExp;
  retryAfter?: string | null;
  shouldRetryFalse?: boolean;
}

/** Asserts an error reply: status, body, and the retry headers (absent unless expected). */
export function assertError(t: TapTest, r: Reply, e: ErrorExpectation, label = ''): void {
  const p = label ? `${label}: ` : '';
  t.equal(r.status, e.status, `${p}status ${e.status}`);
  if (e.code !== undefined) {
    t.equal(r.json?.code, e.code, `${p}flat code ${e.code}`);
    t.same(Object.keys(r.json ?? {}).sort(), ['code', 'error', 'message'], `${p}flat body`);
    t.same(
      r.json?.error,
      { type: r.json?.error?.type, code: e.code, message: r.json?.message },
      `${p}flat body's error object says the same`,
    );
  }
  if (e.type !== undefined) {
    const type = r.json?.error?.type;
    t.equal(type, e.type, `${p}error.type ${e.type}`);
  }
  if (e.message !== undefined) {
    const msg = r.json?.message ?? r.json?.error?.message;
    if (typeof e.message === 'string') t.equal(msg, e.message, `${p}message`);
    else t.match(msg, e.message, `${p}message`);
  }
  if (e.retryAfter !== undefined) {
    if (e.retryAfter === null) t.equal(r.headers.get('retry-after'), null, `${p}no Retry-After`);
    else t.equal(r.headers.get('retry-after'), e.retryAfter, `${p}Retry-After ${e.retryAfter}`);
  }
  if (e.shouldRetryFalse !== undefined) {
    t.equal(r.headers.get('x-should-retry'), e.shouldRetryFalse ? 'false' : null, `${p}x-should-retry`);
  }
}

export { bearer, call };
