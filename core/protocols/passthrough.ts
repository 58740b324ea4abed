/**
 * Same protocol on both sides: the client's bytes go up with only `model` rewritten (`models`
 * removed; Chat streams also get `stream_options.include_usage: true`, since usage is always
 * requested), and the upstream's bytes come back unchanged — complete SSE blocks only, so an
 * error frame appended after a failure never lands inside a half-written event. A stream's blocks
 * are forwarded as the bytes they came in (never decoded and re-encoded); the tap reads them in place.
 */
import type { ProtocolName } from '../config/types.js';
import { NOT_JSON, parsed, rootMemberObject, usageObjectAt } from '../json/scan.js';
import type { Usage } from '../money.js';
import type { SseBytesBlock } from '../sse.js';
import { PassthroughCut } from '../stream-cut.js';
import type {
  AnswerMeta,
  Conversion,
  EncodeOptions,
  ErrorInfo,
  ProtocolWire,
  RequestInput,
  ResponseTranslator,
  StreamTap,
} from './types.js';
import { spliceJson, spliceLarge, type SpliceOps } from './splice.js';
import type { OutgoingBody } from '../json/text.js';
import type { LargeBody } from '../json/parse.js';
import { wireFor } from './index.js';

/** `needle` occurs in `s`, and only once. */
function once(s: string, needle: string): boolean {
  const i = s.indexOf(needle);
  return i >= 0 && s.indexOf(needle, i + needle.length) < 0;
}

/** The member a Chat stream's body gets when it does not ask for usage at all (what the splice adds). */
const ASK_USAGE = ',"stream_options":{"include_usage":true}';

/**
 * What the edits do to the body, when that can be told without scanning its members: nothing
 * (`'same'`: the client named the upstream's model, sent no `models`, and a Chat stream already
 * asks for its usage), or only add `stream_options` after the last member (`'ask-usage'`: a Chat
 * stream without any). Decided by searching the text (native speed) instead of scanning its
 * members, and only for a body whose keys cannot hide: with a `\u` escape anywhere a key may be
 * spelled another way, and a member written twice may be the one an upstream reads (the first,
 * for some parsers), so those bodies are spliced (`'splice'`), every duplicate rewritten. Outside
 * strings a quote is a key's or a value's, inside one it is escaped: so one `"model"` in a body
 * whose `model` is a string is that member, and no `"stream_options"` means no such member.
 */
function edits(input: RequestInput, chatStream: boolean): 'same' | 'ask-usage' | 'splice' {
  const { text, json } = input;
  if (json.model !== input.upstreamModel || text.includes('\\u') || text.includes('"models"') || !once(text, '"model"')) return 'splice';
  if (!chatStream) return 'same';
  const so = json.stream_options as { include_usage?: unknown } | undefined;
  if (so === undefined) return text.includes('"stream_options"') ? 'splice' : 'ask-usage';
  return so !== null &&
    typeof so === 'object' &&
    so.include_usage === true &&
    once(text, '"stream_options"') &&
    once(text, '"include_usage"')
    ? 'same'
    : 'splice';
}

/**
 * The body with `ASK_USAGE` after its last member: the text up to the end of the last value (the
 * root's closing brace is the text's last, and only whitespace stands between it and that value).
 */
function askUsage(text: string): string {
  let end = text.lastIndexOf('}');
  for (;;) {
    const c = text.charCodeAt(end - 1);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    end--;
  }
  return text.slice(0, end) + ASK_USAGE + text.slice(end);
}

export function passthrough(protocol: ProtocolName): Conversion {
  const wire = wireFor(protocol);
  const ops = (input: RequestInput): SpliceOps => {
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
      switch (edits(input, protocol === 'openai-chat' && input.stream)) {
        case 'same':
          return input.text;
        case 'ask-usage':
          return askUsage(input.text);
        default:
          return spliceJson(input.text, ops(input));
      }
    },
    requestParts(input: RequestInput, large: LargeBody): OutgoingBody {
      return spliceLarge(large, ops(input));
    },
    response(text: string) {
      // The usage member alone, when it is among the body's last members (core/json/scan.ts says
      // why); the body is not parsed then, so a trace parses it itself (upstream/json.ts).
      const open = usageObjectAt(text);
      const member = open < 0 ? undefined : rootMemberObject(text, open);
      const read = member === undefined ? NOT_JSON : parsed(member);
      if (read !== NOT_JSON) return { body: text, usage: wire.usageOf({ usage: read }) };
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
      return new PassthroughTranslator(protocol, wire, opts);
    },
  };
}

/**
 * A passthrough stream's translator: forwards each block as it came while its tap reads it. A
 * class, not an object literal with getters, which V8 builds on a slow path (4 µs per streaming
 * request in the gateway's profile).
 */
class PassthroughTranslator implements ResponseTranslator {
  upstreamError: ErrorInfo | undefined = undefined;
  readonly truncate: ((usage: Usage) => string) | undefined;
  private readonly tap: StreamTap;
  private readonly cut: PassthroughCut | undefined;

  constructor(
    private readonly protocol: ProtocolName,
    private readonly wire: ProtocolWire,
    opts: EncodeOptions,
  ) {
    const tap = (this.tap = wire.createTap());
    const cut = (this.cut = opts.cut ? new PassthroughCut(protocol, opts.cut, () => tap.meta) : undefined);
    this.truncate = cut ? (usage) => cut.frames(usage) : undefined;
  }

  block(b: SseBytesBlock): string | SseBytesBlock {
    this.cut?.observe(b);
    const tap = this.tap;
    const forward = tap.observe(b);
    if (tap.errored && !this.upstreamError && b.data !== undefined) {
      this.upstreamError = readError(b.data);
      // OpenAI sends its Chat in-stream error as a bare `data:` frame; clients of the gateway
      // get the named `event: error` frame wire-notes fix (the other protocols' upstream
      // error frames are already named and pass unchanged).
      if (this.protocol === 'openai-chat' && b.event === undefined) return this.wire.streamError(this.upstreamError, tap.meta);
    }
    return forward ? b : '';
  }
  end(): { text: string; complete: boolean } {
    return { text: '', complete: this.tap.complete };
  }
  closing(estimate: () => Usage): string | Buffer {
    return this.tap.closing(estimate);
  }
  fail(err: ErrorInfo): string {
    return this.wire.streamError(err, this.tap.meta);
  }
  get started(): boolean {
    return this.tap.started;
  }
  usage(): Usage | undefined {
    return this.tap.usage;
  }
  outputChars(): number {
    return this.tap.outputChars;
  }
  answer(): AnswerMeta {
    const tap = this.tap;
    return { id: tap.meta.id, model: tap.meta.model, finishReasons: tap.finishReasons };
  }
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
