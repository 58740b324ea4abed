/**
 * The intermediate form all protocol conversion goes through (a hub: N codecs, not N² converters).
 *
 * It is deliberately Anthropic-shaped — content blocks with dense indices — because that is the
 * richest of the three: Chat's `tool_calls[i].index` and Responses' `output_index` both map onto
 * block indices, and thinking blocks keep their signature. Opaque provider tokens (thinking
 * `signature`, redacted thinking `data`, Responses `encrypted_content`) are carried byte-exact and
 * never invented: a token minted by one provider only goes back to the client that received it.
 *
 * Usage is always the four disjoint buckets of `money.ts` (input excludes cached tokens).
 */
import type { Usage } from '../money.js';

export type ImageSource = { kind: 'url'; url: string } | { kind: 'base64'; mediaType: string; data: string };

export interface TextPart {
  type: 'text';
  text: string;
  /** Anthropic `cache_control`, kept so Messages→Messages-ish hops don't lose caching hints. */
  cacheControl?: unknown;
  /** Sources a server-side web search found for this text (responses only). */
  citations?: Citation[];
}

/** A web page a text cites (Anthropic `web_search_result_location`, Responses `url_citation`). */
export interface Citation {
  url: string;
  title?: string;
  citedText?: string;
}

/**
 * A web search the provider ran itself (Anthropic `server_tool_use` + `web_search_tool_result`,
 * Responses `web_search_call`): the query and what it found. Responses only; never sent upstream.
 */
export interface WebSearchPart {
  type: 'web_search';
  /** The upstream's id of the search (`srvtoolu_…`). */
  id: string;
  query: string;
  sources: Array<{ url: string; title?: string }>;
  /** The search failed (Anthropic `web_search_tool_result_error`): its error code. */
  error?: string;
}

export interface ImagePart {
  type: 'image';
  source: ImageSource;
  /** OpenAI `detail` (low/high/auto). */
  detail?: string;
}

export interface ToolCallPart {
  type: 'tool_call';
  /** The id the tool result refers to (`toolu_…`, `call_…`); copied verbatim across protocols. */
  id: string;
  name: string;
  /** Arguments as JSON text; never "" (normalised to "{}"). */
  arguments: string;
  /** Responses function_call item id (`fc_…`) when it differs from the call id. */
  itemId?: string;
}

export interface ToolResultPart {
  type: 'tool_result';
  callId: string;
  content: string | Array<TextPart | ImagePart>;
  isError?: boolean;
}

export interface ThinkingPart {
  type: 'thinking';
  text: string;
  /** Anthropic signature, or a Responses reasoning item's `encrypted_content`; opaque, byte-exact. */
  signature?: string;
  /** Responses reasoning item id (`rs_…`). */
  itemId?: string;
}

export interface RedactedThinkingPart {
  type: 'redacted_thinking';
  data: string;
}

export type Part = TextPart | ImagePart | ToolCallPart | ToolResultPart | ThinkingPart | RedactedThinkingPart | WebSearchPart;

/**
 * `tool` messages carry only tool_result parts (one message may hold several: parallel calls);
 * `system` messages only text. Codecs hoist or split them as their protocol needs.
 */
export interface IRMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  parts: Part[];
}

export interface IRTool {
  /** The name the upstream sees (for a namespaced tool, the flat `namespace__name`). */
  name: string;
  description?: string;
  /** JSON Schema of the arguments (`{type:"object",properties:{}}` when the client gave none). */
  parameters: Record<string, unknown>;
  strict?: boolean;
  /**
   * A function of a Responses `namespace` tool: the client knows it as `localName` inside
   * `namespace`; other protocols have no namespaces and see the flat `name`. Calls map back.
   */
  namespace?: { name: string; localName: string };
  /**
   * A Responses `custom` (freeform) tool: other protocols see a function taking `{input: string}`;
   * calls map back to `custom_tool_call` items carrying that input.
   */
  custom?: boolean;
}

/**
 * A provider-side tool the client asked for (Responses `web_search`, `file_search`, …) with its
 * options as sent. The hub keeps it only when the upstream's codec can express it (its
 * `builtinTools`); the group's `builtin_tools` policy decides what happens to the others.
 */
export interface IRBuiltinTool {
  /** Normalised type (`web_search` for every `web_search*` variant). */
  type: string;
  options: Record<string, unknown>;
  /** Where the client sent it (`tools[3]`), for error messages. */
  where?: string;
}

export type IRToolChoice = { type: 'auto' } | { type: 'none' } | { type: 'required' } | { type: 'tool'; name: string };

export interface IRReasoning {
  effort?: 'minimal' | 'low' | 'medium' | 'high';
  budgetTokens?: number;
  /** Responses `reasoning.summary`. */
  summary?: string;
}

export interface IRRequest {
  model: string;
  /** System and developer instructions, in order. */
  system: TextPart[];
  messages: IRMessage[];
  tools?: IRTool[];
  builtinTools?: IRBuiltinTool[];
  toolChoice?: IRToolChoice;
  parallelToolCalls?: boolean;
  maxTokens?: number;
  temperature?: number;
  topP?: number;
  topK?: number;
  stop?: string[];
  stream: boolean;
  reasoning?: IRReasoning;
}

/** Why generation stopped; Anthropic's vocabulary, which every protocol maps onto. */
export type FinishReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' | 'refusal' | 'pause_turn' | 'context_window';

export interface IRResponse {
  id: string;
  model: string;
  content: Array<TextPart | ToolCallPart | ThinkingPart | RedactedThinkingPart | WebSearchPart>;
  finishReason: FinishReason;
  stopSequence?: string | null;
  usage: Usage;
  /** Reasoning tokens, a subset of `usage.output` (informational). */
  reasoningTokens?: number;
}

export type BlockStart =
  | { type: 'text' }
  | { type: 'thinking'; itemId?: string }
  | { type: 'redacted_thinking'; data: string }
  | { type: 'tool_call'; id: string; name: string; itemId?: string }
  /** A finished provider-side web search: started and stopped at once, no deltas. */
  | { type: 'web_search'; id: string; query: string; sources: Array<{ url: string; title?: string }>; error?: string };

export type BlockDelta =
  | { type: 'text'; text: string }
  | { type: 'thinking'; text: string }
  | { type: 'signature'; signature: string }
  | { type: 'tool_args'; json: string }
  /** A source the text block cites (arrives before or among its text deltas). */
  | { type: 'citation'; citation: Citation };

/**
 * A decoded stream, protocol-neutral. Decoders emit, in order: one `start`; per block
 * `block_start` → `delta`* → `block_stop`, block indices dense from 0 in start order (a block's
 * deltas come after its start and before its stop; text and thinking blocks never overlap another
 * block, but tool_call blocks may overlap each other, as Chat's parallel calls can);
 * `usage` whenever totals are known (cumulative: a later one overwrites the fields it carries);
 * one `finish`; then `end` once the upstream's stream is complete (its terminal event, or a clean
 * EOF after `finish`), or `error` when the upstream reported one. A stream cut short yields neither:
 * the core then sends the client its protocol's error event.
 */
export type IRStreamEvent =
  | { type: 'start'; id: string; model: string; usage?: Partial<Usage> }
  | { type: 'block_start'; index: number; block: BlockStart }
  | { type: 'delta'; index: number; delta: BlockDelta }
  | { type: 'block_stop'; index: number }
  | { type: 'usage'; usage: Partial<Usage>; reasoningTokens?: number }
  /** `raw`: the upstream's own word for the reason (`stop`, `end_turn`, `max_output_tokens`…), for traces. */
  | { type: 'finish'; reason: FinishReason; stopSequence?: string | null; raw?: string }
  | { type: 'error'; error: { type: string; message: string; code?: string } }
  | { type: 'end' };
