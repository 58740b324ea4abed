/**
 * What each protocol provides to the core, and the per-request `Conversion` the attempt loop uses.
 *
 * Same protocol on both sides (passthrough): the client's bytes go up with only `model` changed
 * (and `models` removed); upstream bytes come back unchanged, inspected by a `StreamTap` that reads
 * only what it must (usage, the terminal event). Different protocols: the request is decoded to the
 * IR and encoded for the upstream; responses and streams go back the same way.
 */
import type { Usage } from '../money.js';
import type { SseBlock, SseBytesBlock } from '../sse.js';
import type { ProtocolName } from '../config/types.js';
import type { IRRequest, IRResponse, IRStreamEvent, IRTool } from './ir.js';
import type { LargeBody } from '../json/parse.js';
import type { OutgoingBody } from '../json/text.js';

export interface ErrorInfo {
  type: string;
  message: string;
  code?: string;
}

/** Upstream SSE blocks → IR events, for one response. */
export interface StreamDecoder {
  push(block: SseBlock): IRStreamEvent[];
  /** Upstream ended (cleanly or not): events that close what is open. */
  end(): IRStreamEvent[];
}

/** IR events → client SSE text, for one response. */
export interface StreamEncoder {
  push(ev: IRStreamEvent): string;
  /** Frames for a failure after commit (the protocol's in-stream error). */
  fail(err: ErrorInfo): string;
}

export interface EncodeOptions {
  /** The model name to put in the encoded body or response. */
  model: string;
  /** Request id, for ids the encoder must invent. */
  requestId: string;
  /** encodeRequest: the output cap to send when the client gave none and the protocol needs one. */
  defaultMaxTokens?: number;
  /**
   * Responses to the client (set by the hub): the client's own tools as decoded, so calls to a
   * flattened namespace tool or a custom tool map back to the items the client expects.
   */
  tools?: readonly IRTool[];
  /** Stream encoders: input tokens estimated from the request, for a start event that must report some. */
  inputEstimate?: number;
  /**
   * Responses to a Responses client: called once with the output items of the response (the
   * converter keeps them so later `item_reference`s can be answered).
   */
  onOutputItems?: (items: ReadonlyArray<Record<string, unknown>>) => void;
  /**
   * Passthrough streams the core may cut at the reservation: what the length-stop frames need
   * from the request (Chat's `n` and `include_usage`). Without it a passthrough stream has no `truncate`.
   */
  cut?: { choices: number; includeUsage: boolean };
}

/** Meta a stream carries that error frames may need (Responses' failed event names the response). */
export interface StreamMeta {
  id?: string;
  model?: string;
  created?: number;
  /** Last `sequence_number` seen or written (Responses). */
  sequence?: number;
}

/**
 * What an upstream answer said about itself, in the upstream's own words (core/protocols/answer.ts):
 * traces report it. Finish reasons are the protocol's own (`stop`, `end_turn`, `max_output_tokens`…).
 */
export interface AnswerMeta {
  id?: string;
  model?: string;
  finishReasons?: string[];
}

/** What every protocol provides for passthrough: validation, usage reading, taps, error frames. */
export interface ProtocolWire {
  readonly name: ProtocolName;
  /**
   * Protocol-specific request rules beyond the core's (model, stream, models); throws GatewayError.
   * `history: false` skips the conversation-history checks (count_tokens may not answer 409).
   */
  validate(body: Record<string, unknown>, opts?: { history?: boolean }): void;
  /** Usage of a non-stream response body in this protocol (four buckets). */
  usageOf(body: Record<string, unknown>): Usage | undefined;
  /** Passthrough inspector for a stream in this protocol. */
  createTap(): StreamTap;
  /** In-stream error frames in this protocol (after commit). */
  streamError(err: ErrorInfo, meta?: StreamMeta): string;
}

/** The full codec: the wire plus conversion to and from the IR. */
export interface ProtocolCodec extends ProtocolWire {
  /** Provider-side tool types (`IRBuiltinTool.type`) its `encodeRequest` can express. */
  readonly builtinTools?: ReadonlySet<string>;
  /** Client request → IR. Throws GatewayError (400) for shapes it cannot read. */
  decodeRequest(body: Record<string, unknown>): IRRequest;
  /** IR → upstream request body. */
  encodeRequest(req: IRRequest, opts: EncodeOptions): Record<string, unknown>;
  decodeResponse(body: Record<string, unknown>): IRResponse;
  encodeResponse(res: IRResponse, opts: EncodeOptions): Record<string, unknown>;
  createStreamDecoder(): StreamDecoder;
  createStreamEncoder(opts: EncodeOptions): StreamEncoder;
}

/**
 * Watches a passthrough stream; decodes only events that can carry usage or end the stream, and
 * reads the others' bytes in place (core/protocols/scan.ts).
 */
export interface StreamTap {
  /** Inspects a block; false means "do not forward it now" (`closing()` accounts for it). */
  observe(block: SseBytesBlock): boolean;
  /** Best usage known so far (cumulative totals). */
  readonly usage: Usage | undefined;
  /** The protocol's terminal event was seen (message_stop, response.completed, finish + [DONE]…). */
  readonly complete: boolean;
  /** The upstream sent its own in-stream error. */
  readonly errored: boolean;
  /** Content has begun (a text, tool or thinking event), past the stream's preamble. */
  readonly started: boolean;
  /** Characters of generated text seen, for estimates when usage never arrives. */
  readonly outputChars: number;
  /** What the stream said about itself (id, model, sequence), for error frames. */
  readonly meta: StreamMeta;
  /** The finish reasons seen, in the protocol's own words (from events the tap parses anyway). */
  readonly finishReasons: string[] | undefined;
  /** Client bytes to append at a clean, complete upstream end (e.g. a missing `data: [DONE]`). */
  closing(estimate: () => Usage): string | Buffer;
}

export interface RequestInput {
  /** The client's body as received. */
  text: string;
  json: Record<string, unknown>;
  stream: boolean;
  /** The model name the upstream knows. */
  upstreamModel: string;
  requestId: string;
  /** The model's configured output cap (for protocols that require max_tokens). */
  defaultMaxTokens?: number;
  /** Converted requests: what to do with provider-side tools the upstream cannot run (default `map`). */
  builtinTools?: BuiltinToolsPolicy;
  /** Converted requests: told the types of the provider-side tools that were dropped (never for none). */
  onDroppedTools?: (types: string[]) => void;
}

/**
 * A group's `builtin_tools` setting, for provider-side tools (Responses `web_search`,
 * `file_search`, …) on a request converted for an upstream of another protocol:
 *  - `map`    send the target's equivalent where it has one (web_search → Anthropic's web search), drop the rest
 *  - `drop`   drop them all (no provider-side tool runs, nor costs, behind the gateway's back)
 *  - `reject` send the equivalent where there is one, answer 400 for the rest
 * A dropped tool is named in the `x-gateway-dropped-tools` response header.
 */
export type BuiltinToolsPolicy = 'map' | 'drop' | 'reject';

/** Translates one attempt's response for the client. */
export interface ResponseTranslator {
  /**
   * One complete upstream block in (from the byte-mode parser); client output out: text ('' when
   * nothing is due yet), or the block itself, meaning "forward its bytes as they came" (passthrough).
   */
  block(b: SseBytesBlock): string | SseBytesBlock;
  /** Upstream ended. `complete: false` means it stopped before its terminal event. */
  end(): { text: string; complete: boolean };
  /** After a complete end: closing output the client still needs (a usage chunk, `[DONE]`). */
  closing(estimate: () => Usage): string | Buffer;
  /** Client frames reporting a failure after commit. */
  fail(err: ErrorInfo): string;
  /** The upstream's own error event, if one passed through (the stream is then over). */
  readonly upstreamError: ErrorInfo | undefined;
  /**
   * Content has begun. Until then the core holds the preamble (message_start, response.created,
   * Chat's role chunk) back, so a failure right after it is still a real HTTP error that fallback
   * can retry.
   */
  readonly started: boolean;
  usage(): Usage | undefined;
  outputChars(): number;
  /**
   * Ends the stream now as the client protocol's length stop, reporting `usage` (the core cuts a
   * stream whose output passes its reservation). A passthrough stream has it only when opened with
   * `EncodeOptions.cut` (it then watches what its closing frames need, core/stream-cut.ts).
   */
  truncate?(usage: Usage): string;
  /** What the answer said about itself so far (id, model, finish reasons), for traces; read once at its end. */
  answer?(): AnswerMeta;
}

export interface Conversion {
  readonly client: ProtocolName;
  readonly upstream: ProtocolName;
  readonly passthrough: boolean;
  /** The body to send upstream. */
  requestBody(input: RequestInput): string;
  /**
   * The same for a large body (over the large-body size, core/json): its upstream body as parts,
   * built from the body's pieces and parse without reading its text whole, completed by the
   * caller's `step()` calls a turn at a time. Without it, `requestBody` gets the whole text.
   */
  requestParts?(input: RequestInput, large: LargeBody): OutgoingBody;
  /**
   * A non-stream upstream body (JSON text) → the client's body and its usage, and the upstream body
   * as parsed (`upstream`, when the translation parsed it: what traces read the answer's meta from;
   * absent, they parse the upstream text).
   */
  response(upstreamText: string, opts: EncodeOptions): { body: string; usage: Usage | undefined; upstream?: unknown };
  stream(opts: EncodeOptions): ResponseTranslator;
}
