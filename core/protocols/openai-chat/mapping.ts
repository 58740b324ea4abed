/** OpenAI Chat Completions vocabulary shared by its codec and stream code (docs/conversion.md). */
import type { FinishReason, ImageSource, RedactedThinkingPart, ThinkingPart } from '../ir.js';
import { hasAnthropicSignature } from '../openai-responses/ids.js';

export function finishToIR(r: unknown): FinishReason {
  switch (r) {
    case 'length': return 'max_tokens';
    case 'tool_calls':
    case 'function_call': return 'tool_use';
    case 'content_filter': return 'refusal';
    default: return 'end_turn';
  }
}

export function finishFromIR(r: FinishReason): string {
  switch (r) {
    case 'max_tokens':
    case 'context_window': return 'length';
    case 'tool_use': return 'tool_calls';
    case 'refusal': return 'content_filter';
    default: return 'stop';
  }
}

export function completionId(requestId: string): string {
  return `chatcmpl-${requestId.replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

const DATA_URL = /^data:([^;,]+)((?:;[^;,]*)*);base64,(.*)$/s;

/** An `image_url.url` (http(s) or a base64 data URL) → IR image source; undefined for other data URLs. */
export function sourceFromUrl(url: string): ImageSource | undefined {
  if (!url.startsWith('data:')) return { kind: 'url', url };
  const m = DATA_URL.exec(url);
  return m ? { kind: 'base64', mediaType: m[1], data: m[3] } : undefined;
}

export function urlFromSource(s: ImageSource): string {
  return s.kind === 'url' ? s.url : `data:${s.mediaType};base64,${s.data}`;
}

/** `thinking_blocks` entries a Chat client may replay: Anthropic-signed thinking, redacted thinking. */
export function thinkingBlock(p: ThinkingPart | RedactedThinkingPart): Record<string, unknown> | undefined {
  if (p.type === 'redacted_thinking') return { type: 'redacted_thinking', data: p.data };
  return hasAnthropicSignature(p) ? { type: 'thinking', thinking: p.text, signature: p.signature } : undefined;
}

