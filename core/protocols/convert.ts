/**
 * Conversion between two different protocols through the IR hub: the client's request is decoded
 * by its codec and encoded by the upstream's; responses and streams go back the same way. Fields
 * the IR does not carry (`response_format`, `n`, `seed`, `user`, `logprobs`…) are dropped by
 * construction — the spec's rule for converting groups.
 */
import type { ProtocolName } from '../config/types.js';
import type { Usage } from '../money.js';
import type { IRStreamEvent } from './ir.js';
import type { Conversion, EncodeOptions, ErrorInfo, RequestInput, ResponseTranslator } from './types.js';
import { codecFor } from './index.js';
import { mergeUsage } from './usage.js';

export function hubConversion(client: ProtocolName, upstream: ProtocolName): Conversion | undefined {
  const c = codecFor(client);
  const u = codecFor(upstream);
  if (!c || !u) return undefined;
  return {
    client,
    upstream,
    passthrough: false,
    requestBody(input: RequestInput): string {
      const ir = c.decodeRequest(input.json);
      ir.model = input.upstreamModel;
      ir.stream = input.stream;
      return JSON.stringify(u.encodeRequest(ir, { model: input.upstreamModel, requestId: input.requestId, defaultMaxTokens: input.defaultMaxTokens }));
    },
    response(text: string, opts: EncodeOptions) {
      const json = JSON.parse(text);
      const ir = u.decodeResponse(json);
      // An upstream that reported no usage is estimated by the core, not billed as zero.
      return { body: JSON.stringify(c.encodeResponse(ir, opts)), usage: u.usageOf(json) ? ir.usage : undefined };
    },
    stream(opts: EncodeOptions): ResponseTranslator {
      const dec = u.createStreamDecoder();
      const enc = c.createStreamEncoder(opts);
      let usage: Usage | undefined;
      let chars = 0;
      let complete = false;
      let upstreamError: ErrorInfo | undefined;
      let started = false;
      const run = (events: IRStreamEvent[]): string => {
        let out = '';
        for (const ev of events) {
          switch (ev.type) {
            case 'start':
              if (ev.usage) usage = mergeUsage(usage, ev.usage);
              break;
            case 'usage':
              usage = mergeUsage(usage, ev.usage);
              break;
            case 'block_start':
            case 'finish':
              started = true;
              break;
            case 'delta':
              chars += ev.delta.type === 'text' || ev.delta.type === 'thinking' ? ev.delta.text.length
                : ev.delta.type === 'tool_args' ? ev.delta.json.length : 0;
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
        get upstreamError() {
          return upstreamError;
        },
        get started() {
          return started;
        },
        usage: () => usage,
        outputChars: () => chars,
      };
    },
  };
}
