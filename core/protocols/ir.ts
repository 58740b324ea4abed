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

export type ImageSource =
  | { kind: 'url'; url: string }
  | { kind: 'base64'; mediaType: string; data: string };

export interface TextPart {
  type: 'text';
  text: string;
  /** Anthropic `cache_control`, kept so Messages→Messages-ish hops don't lose caching hints. */
  cacheControl?: unknown;
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

export type Part = TextPart | ImagePart | ToolCallPart | ToolResultPart | ThinkingPart | RedactedThinkingPart;

/**
 * `tool` messages carry only tool_result parts (one message may hold several: parallel calls);
 * `system` messages only text. Codecs hoist or split them as their protocol needs.
 */
export interface IRMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  parts: Part[];
}

export interface IRTool {
  name: string;
  description?: string;
  /** JSON Schema of the arguments (`{type:"object",properties:{}}` when the client gave none). */
  parameters: Record<string, unknown>;
  strict?: boolean;
}

export type IRToolChoice =
  | { type: 'auto' }
  | { type: 'none' }
  | { type: 'required' }
  | { type: 'tool'; name: string };

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
export type FinishReason =
  | 'end_turn'
  | 'max_tokens'
  | 'stop_sequence'
  | 'tool_use'
  | 'refusal'
  | 'pause_turn'
  | 'context_window';

export interface IRResponse {
  id: string;
  model: string;
  content: Array<TextPart | ToolCallPart | ThinkingPart | RedactedThinkingPart>;
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
  | { type: 'tool_call'; id: string; name: string; itemId?: string };

export type BlockDelta =
  | { type: 'text'; text: string }
  | { type: 'thinking'; text: string }
  | { type: 'signature'; signature: string }
  | { type: 'tool_args'; json: string };

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
  | { type: 'finish'; reason: FinishReason; stopSequence?: string | null }
  | { type: 'error'; error: { type: string; message: string; code?: string } }
  | { type: 'end' };
