/**
 * Conversion between two different protocols through the IR hub: the client's request is decoded
 * by its codec and encoded by the upstream's; responses and streams go back the same way. Fields
 * the IR does not carry (`response_format`, `n`, `seed`, `user`, `logprobs`…) are dropped by
 * construction — the spec's rule for converting groups.
 */
import type { ProtocolName } from '../config/types.js';
import type { Usage } from '../money.js';
import type { IRStreamEvent } from './ir.js';
import { GatewayError } from '../errors.js';
import type { IRRequest, IRTool } from './ir.js';
import type { Conversion, EncodeOptions, ErrorInfo, ProtocolCodec, RequestInput, ResponseTranslator } from './types.js';
import { codecFor } from './index.js';
import { estimateTokens, mergeUsage } from './usage.js';
import type { LargeBody } from '../json/parse.js';
import { withRopes, type OutgoingBody } from '../json/text.js';
import { JsonWriter } from '../json/serialize.js';

/**
 * Applies the group's `builtin_tools` policy to the provider-side tools of a converted request:
 * keeps those the upstream's codec can express (unless `drop`), refuses the rest (`reject`) or
 * drops them and reports their types.
 */
function applyBuiltinPolicy(ir: IRRequest, upstream: ProtocolCodec, input: RequestInput): void {
  const all = ir.builtinTools;
  if (!all || all.length === 0) return;
  const policy = input.builtinTools ?? 'map';
  const kept: typeof all = [];
  const dropped: string[] = [];
  for (const t of all) {
    // A function tool of the same name would clash with the provider's tool: the client's wins.
    const mappable = upstream.builtinTools?.has(t.type) === true && !ir.tools?.some((f) => f.name === t.type);
    if (policy !== 'drop' && mappable) kept.push(t);
    else if (policy === 'reject') {
      throw new GatewayError('INVALID_REQUEST', {
        message: `${t.where ?? 'tools'}: '${t.type}' is a built-in tool the upstream of this model cannot run (this group's builtin_tools is 'reject')`,
      });
    } else if (!dropped.includes(t.type)) dropped.push(t.type);
  }
  if (kept.length > 0) ir.builtinTools = kept;
  else delete ir.builtinTools;
  if (dropped.length > 0) input.onDroppedTools?.(dropped);
}

export function hubConversion(client: ProtocolName, upstream: ProtocolName): Conversion | undefined {
  const c = codecFor(client);
  const u = codecFor(upstream);
  if (!c || !u) return undefined;
  // What the request said that its response needs (set by requestBody, which runs first).
  let clientTools: IRTool[] | undefined;
  let inputEstimate: number | undefined;
  const encode = (input: RequestInput): Record<string, unknown> => {
    const ir = c.decodeRequest(input.json);
    ir.model = input.upstreamModel;
    ir.stream = input.stream;
    applyBuiltinPolicy(ir, u, input);
    clientTools = ir.tools;
    inputEstimate = estimateTokens(input.text.length);
    return u.encodeRequest(ir, { model: input.upstreamModel, requestId: input.requestId, defaultMaxTokens: input.defaultMaxTokens });
  };
  return {
    client,
    upstream,
    passthrough: false,
    requestBody(input: RequestInput): string {
      return JSON.stringify(encode(input));
    },
    // A large body: the codecs read its long strings by their parts (the image payload is taken
    // out of a data URL and put into one without a copy), and the upstream text is written a turn
    // at a time.
    requestParts(input: RequestInput, large: LargeBody): OutgoingBody {
      return new JsonWriter(
        withRopes(large.ropes, () => encode(input)),
        large.ropes,
      );
    },
    response(text: string, opts: EncodeOptions) {
      const json = JSON.parse(text);
      const ir = u.decodeResponse(json);
      // An upstream that reported no usage is estimated by the core, not billed as zero.
      return {
        body: JSON.stringify(c.encodeResponse(ir, { ...opts, tools: clientTools })),
        usage: u.usageOf(json) ? ir.usage : undefined,
        upstream: json,
      };
    },
    stream(opts: EncodeOptions): ResponseTranslator {
      const dec = u.createStreamDecoder();
      const enc = c.createStreamEncoder({ ...opts, tools: clientTools, inputEstimate });
      let usage: Usage | undefined;
      let chars = 0;
      let complete = false;
      let upstreamError: ErrorInfo | undefined;
      let started = false;
      let start: { id: string; model: string } | undefined;
      let finish: string | undefined;
      const run = (events: IRStreamEvent[]): string => {
        let out = '';
        for (const ev of events) {
          switch (ev.type) {
            case 'start':
              start = ev;
              if (ev.usage) usage = mergeUsage(usage, ev.usage);
              break;
            case 'usage':
              usage = mergeUsage(usage, ev.usage);
              break;
            case 'finish':
              finish = ev.raw ?? ev.reason;
              started = true;
              break;
            case 'block_start':
              started = true;
              break;
            case 'delta':
              chars +=
                ev.delta.type === 'text' || ev.delta.type === 'thinking'
                  ? ev.delta.text.length
                  : ev.delta.type === 'tool_args'
                    ? ev.delta.json.length
                    : 0;
              break;
            case 'error':
              upstreamError = ev.error;
              break;
            case 'end':
              complete = true;
              break;
          }
          out += enc.push(ev);
        }
        return out;
      };
      return {
        block: (b) => run(dec.push(b)),
        end: () => ({ text: run(dec.end()), complete }),
        closing: () => '',
        fail: (err) => enc.fail(err),
        truncate: (u) =>
          enc.push({ type: 'usage', usage: u }) + enc.push({ type: 'finish', reason: 'max_tokens' }) + enc.push({ type: 'end' }),
        get upstreamError() {
          return upstreamError;
        },
        get started() {
          return started;
        },
        usage: () => usage,
        outputChars: () => chars,
        answer: () => ({ id: start?.id || undefined, model: start?.model || undefined, finishReasons: finish ? [finish] : undefined }),
      };
    },
  };
}
