/** OpenAI Chat Completions vocabulary shared by its codec and stream code (docs/conversion.md). */
import type { FinishReason, ImageSource, RedactedThinkingPart, ThinkingPart } from '../ir.js';
import { hasAnthropicSignature } from '../openai-responses/ids.js';
import { concatLong, headOf, sliceLong } from '../../json/text.js';

export function finishToIR(r: unknown): FinishReason {
  switch (r) {
    case 'length':
      return 'max_tokens';
    case 'tool_calls':
    case 'function_call':
      return 'tool_use';
    case 'content_filter':
      return 'refusal';
    default:
      return 'end_turn';
  }
}

export function finishFromIR(r: FinishReason): string {
  switch (r) {
    case 'max_tokens':
    case 'context_window':
      return 'length';
    case 'tool_use':
      return 'tool_calls';
    case 'refusal':
      return 'content_filter';
    default:
      return 'stop';
  }
}

export function completionId(requestId: string): string {
  return `chatcmpl-${requestId.replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

/** A base64 data URL up to its first comma (media type and parameters cannot hold one). */
const DATA_URL_HEAD = /^data:([^;,]+)((?:;[^;,]*)*);base64,$/;

/**
 * An `image_url.url` (http(s) or a base64 data URL) → IR image source; undefined for other data
 * URLs. Only the URL's head is read: the payload of a large body's image is taken as it is, not
 * scanned (core/json/text.ts).
 */
export function sourceFromUrl(url: string): ImageSource | undefined {
  const head = headOf(url, 1024);
  if (!head.startsWith('data:')) return { kind: 'url', url };
  const comma = head.length < url.length && head.indexOf(',') < 0 ? url.indexOf(',') : head.indexOf(',');
  const m = comma < 0 ? null : DATA_URL_HEAD.exec((comma < head.length ? head : url).slice(0, comma + 1));
  return m ? { kind: 'base64', mediaType: m[1], data: sliceLong(url, comma + 1) } : undefined;
}

export function urlFromSource(s: ImageSource): string {
  return s.kind === 'url' ? s.url : concatLong(`data:${s.mediaType};base64,`, s.data);
}

/** `thinking_blocks` entries a Chat client may replay: Anthropic-signed thinking, redacted thinking. */
export function thinkingBlock(p: ThinkingPart | RedactedThinkingPart): Record<string, unknown> | undefined {
  if (p.type === 'redacted_thinking') return { type: 'redacted_thinking', data: p.data };
  return hasAnthropicSignature(p) ? { type: 'thinking', thinking: p.text, signature: p.signature } : undefined;
}
