/**
 * Same protocol on both sides: the client's bytes go up with only `model` rewritten (`models`
 * removed; Chat streams also get `stream_options.include_usage: true`, since usage is always
 * requested), and the upstream's bytes come back unchanged — complete SSE blocks only, so an
 * error frame appended after a failure never lands inside a half-written event. A stream's blocks
 * are forwarded as the bytes they came in (never decoded and re-encoded); the tap reads them in place.
 */
import type { ProtocolName } from '../config/types.js';
import type { Usage } from '../money.js';
import type { SseBytesBlock } from '../sse.js';
import { PassthroughCut } from '../stream-cut.js';
import type { Conversion, EncodeOptions, ErrorInfo, RequestInput, ResponseTranslator } from './types.js';
import { spliceJson, spliceLarge, type SpliceOps } from './splice.js';
import type { OutgoingBody } from '../json/text.js';
import type { LargeBody } from '../json/parse.js';
import { wireFor } from './index.js';

export function passthrough(protocol: ProtocolName): Conversion {
  const wire = wireFor(protocol);
  const edits = (input: RequestInput): SpliceOps => {
    const set: Record<string, unknown> = { model: input.upstreamModel };
    if (protocol === 'openai-chat' && input.stream) {
      const so = input.json.stream_options;
      set.stream_options = { ...(so && typeof so === 'object' && !Array.isArray(so) ? so : {}), include_usage: true };
    }
    return { set, remove: ['models'] };
  };
  return {
    client: protocol,
    upstream: protocol,
    passthrough: true,
    requestBody(input: RequestInput): string {
      return spliceJson(input.text, edits(input));
    },
    requestParts(input: RequestInput, large: LargeBody): OutgoingBody {
      return spliceLarge(large, edits(input));
    },
    response(text: string) {
      let usage: Usage | undefined;
      let upstream: unknown;
      try {
        const j = JSON.parse(text);
        if (j && typeof j === 'object') {
          usage = wire.usageOf(j);
          upstream = j;
        }
      } catch {
        /* forwarded as is; no usage */
      }
      return { body: text, usage, upstream };
    },
    stream(opts: EncodeOptions): ResponseTranslator {
      const tap = wire.createTap();
      let upstreamError: ErrorInfo | undefined;
      const cut = opts.cut ? new PassthroughCut(protocol, opts.cut, () => tap.meta) : undefined;
      const translator: ResponseTranslator = {
        block(b: SseBytesBlock): string | SseBytesBlock {
          cut?.observe(b);
          const forward = tap.observe(b);
          if (tap.errored && !upstreamError && b.data !== undefined) {
            upstreamError = readError(b.data);
            // OpenAI sends its Chat in-stream error as a bare `data:` frame; clients of the gateway
            // get the named `event: error` frame wire-notes fix (the other protocols' upstream
            // error frames are already named and pass unchanged).
            if (protocol === 'openai-chat' && b.event === undefined) return wire.streamError(upstreamError, tap.meta);
          }
          return forward ? b : '';
        },
        end() {
          return { text: '', complete: tap.complete };
        },
        closing(estimate: () => Usage) {
          return tap.closing(estimate);
        },
        fail(err: ErrorInfo) {
          return wire.streamError(err, tap.meta);
        },
        get upstreamError() {
          return upstreamError;
        },
        get started() {
          return tap.started;
        },
        usage: () => tap.usage,
        outputChars: () => tap.outputChars,
        answer: () => ({ id: tap.meta.id, model: tap.meta.model, finishReasons: tap.finishReasons }),
      };
      if (cut) translator.truncate = (usage) => cut.frames(usage);
      return translator;
    },
  };
}

function readError(data: string): ErrorInfo {
  try {
    const j = JSON.parse(data);
    const e = j.error ?? j.response?.error ?? {};
    return { type: String(e.type ?? e.code ?? 'api_error'), message: String(e.message ?? 'upstream error'), code: e.code ?? undefined };
  } catch {
    return { type: 'api_error', message: 'upstream error' };
  }
}
