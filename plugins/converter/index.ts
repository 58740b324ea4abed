/**
 * converter: when an attempt's upstream speaks another protocol than the client (Chat on a
 * Messages-style group, Messages on a Responses-style group that allows it, Responses on a
 * Messages-style group, or a provider that lacks the client's protocol), it installs the IR hub
 * conversion for that pair. Without it in the chain, such requests get 503 "no available channels".
 *
 * Around the conversion it keeps what a stateless protocol change would lose:
 *  - provider-side tools the upstream cannot run follow the group's `builtin_tools`; dropped ones
 *    are named in the `x-gateway-dropped-tools` response header;
 *  - Responses clients that store responses (the AI SDK does by default) refer to earlier output
 *    items by id (`item_reference`); the items of every converted Responses answer are kept in
 *    the store's bounded, expiring cache (`remember` / `recall`), namespaced by API key so no key
 *    can read another's, and references are replaced by them before the request is converted.
 * Mapping choices are documented in docs/conversion.md.
 */
import { definePlugin } from '../../core/plugin.js';
import { GatewayError } from '../../core/errors.js';
import type { RequestContext } from '../../core/context.js';
import type { Attempt } from '../../core/types.js';
import type { Conversion, RequestInput } from '../../core/protocols/types.js';
import type { LargeBody } from '../../core/json/parse.js';
import { hubConversion } from '../../core/protocols/convert.js';
import { parseDuration } from '../../core/units.js';
import { converterSchema, type ConverterOptions } from './schema.js';

export const DROPPED_TOOLS_HEADER = 'x-gateway-dropped-tools';

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Namespace of a key's remembered items. */
const itemsOf = (ctx: RequestContext): string | undefined => (ctx.key ? `items:${ctx.key.id}` : undefined);

/**
 * Input items that need the cache: references, and reasoning items replayed by id without the
 * `encrypted_content` that carries an Anthropic signature (stored clients send the id only).
 */
function wanted(item: unknown): string | undefined {
  if (!isObj(item) || typeof item.id !== 'string') return undefined;
  if (item.type === 'item_reference') return item.id;
  if (item.type === 'reasoning' && !item.encrypted_content) return item.id;
  return undefined;
}

/** Replaces what the cache holds; leaves the rest for the codec (unknown references stay a 400). */
async function resolveItems(ctx: RequestContext, attempt: Attempt): Promise<void> {
  const ns = itemsOf(ctx);
  const input = attempt.request.json.input;
  if (!ns || !Array.isArray(input)) return;
  const ids = input.map(wanted);
  const need = [...new Set(ids.filter((x): x is string => x !== undefined))];
  if (need.length === 0) return;
  let found: Array<string | undefined>;
  try {
    found = await ctx.store.recall(ns, need);
  } catch (e) {
    ctx.log.warn('could not recall remembered items', { error: e as Error });
    return;
  }
  const byId = new Map<string, Obj>();
  need.forEach((id, i) => {
    const text = found[i];
    if (text === undefined) return;
    try {
      byId.set(id, JSON.parse(text));
    } catch {
      /* not ours: ignored */
    }
  });
  if (byId.size === 0) return;
  const resolved = input.map((item, i) => {
    const hit = ids[i] === undefined ? undefined : byId.get(ids[i]);
    if (!hit) return item;
    // A replayed reasoning item keeps what the client sent and gains what it left out.
    return (item as Obj).type === 'reasoning' ? { ...hit, ...(item as Obj), encrypted_content: hit.encrypted_content } : hit;
  });
  const json = { ...attempt.request.json, input: resolved };
  attempt.request = { json, text: JSON.stringify(json) };
}

export default definePlugin<ConverterOptions>({
  name: 'converter',
  description: 'Protocol conversion between Chat Completions, Messages and Responses',
  schema: converterSchema,
  create(options) {
    const ttlMs = parseDuration(options.item_ttl ?? '1h');
    return {
      // A promise only when there are remembered items to look up (an attempt on the same protocol costs no await).
      onAttempt(ctx, attempt) {
        const client = ctx.protocol;
        if (!client || attempt.upstreamProtocol === client) {
          if (ctx.res.hasHeader(DROPPED_TOOLS_HEADER)) ctx.res.removeHeader(DROPPED_TOOLS_HEADER);
          return;
        }
        const conv = hubConversion(client, attempt.upstreamProtocol);
        if (!conv) {
          throw new GatewayError('NO_CHANNELS', {
            message: `No available channels: conversion from ${client} to ${attempt.upstreamProtocol} is not available`,
          });
        }
        const responses = client === 'openai-responses';
        const install = () => {
          const remember = responses && ttlMs > 0 && attempt.request.json.store !== false;
          attempt.conversion = wrap(ctx, conv, remember ? ttlMs : 0);
        };
        if (responses && ttlMs > 0) return resolveItems(ctx, attempt).then(install);
        install();
      },
    };
  },
});

/** The hub conversion with the group's policy applied and the answer's items remembered. */
function wrap(ctx: RequestContext, conv: Conversion, ttlMs: number): Conversion {
  const policy = ctx.group?.builtinTools ?? 'map';
  const ns = itemsOf(ctx);
  const onOutputItems =
    ttlMs > 0 && ns
      ? (items: ReadonlyArray<Record<string, unknown>>) => {
          const entries: Array<[string, string]> = [];
          for (const item of items) if (typeof item.id === 'string') entries.push([item.id, JSON.stringify(item)]);
          if (entries.length === 0) return;
          ctx.store.remember(ns, entries, ttlMs).catch((e) => ctx.log.warn('could not remember output items', { error: e as Error }));
        }
      : undefined;
  const withPolicy = (input: RequestInput): RequestInput => {
    // Each attempt decides afresh (a fallback model may sit on another protocol).
    ctx.res.removeHeader(DROPPED_TOOLS_HEADER);
    return {
      ...input,
      builtinTools: policy,
      onDroppedTools: (types) => {
        if (!ctx.res.headersSent) ctx.res.setHeader(DROPPED_TOOLS_HEADER, types.join(', '));
      },
    };
  };
  const parts = conv.requestParts ? (input: RequestInput, large: LargeBody) => conv.requestParts!(withPolicy(input), large) : undefined;
  return {
    client: conv.client,
    upstream: conv.upstream,
    passthrough: conv.passthrough,
    requestBody: (input) => conv.requestBody(withPolicy(input)),
    ...(parts ? { requestParts: parts } : {}),
    response: (text, opts) => conv.response(text, onOutputItems ? { ...opts, onOutputItems } : opts),
    stream: (opts) => conv.stream(onOutputItems ? { ...opts, onOutputItems } : opts),
  };
}
