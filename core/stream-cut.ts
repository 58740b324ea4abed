/**
 * Ending a passthrough stream early as its protocol's length stop (docs/limits.md "Streams are held
 * to their reservation"): when an upstream keeps generating past what the request's reservation
 * covers, the core stops reading it and closes the client's stream as if the model had hit its
 * output limit — Chat `finish_reason: "length"`, Messages `stop_reason: "max_tokens"`, Responses
 * `response.incomplete` with `incomplete_details.reason: "max_output_tokens"`.
 *
 * A converted stream ends through its encoder (`ResponseTranslator.truncate`); a passthrough one
 * has no encoder, so this tracker watches the few upstream events the closing frames depend on
 * (ids, open Messages blocks, Responses output items) without parsing the hot delta events.
 */
import type { ProtocolName } from './config/types.js';
import type { Usage } from './money.js';
import { formatEvent, formatJsonEvent, type SseBlock } from './sse.js';

const INDEX = /"index"\s*:\s*(\d+)/;
const SEQ = /"sequence_number"\s*:\s*(\d+)/;

export class PassthroughCut {
  private meta: { id?: string; model?: string; created?: number } | undefined;
  /** Messages: content blocks started and not stopped. */
  private readonly openBlocks = new Set<number>();
  /** Responses: the `response.created` response object, items by output index, last sequence number. */
  private response: Record<string, unknown> | undefined;
  private readonly items = new Map<number, Record<string, unknown>>();
  private sequence = 0;

  constructor(private readonly protocol: ProtocolName, private readonly opts: { choices: number; includeUsage: boolean }) {}

  observe(b: SseBlock): void {
    const data = b.data;
    if (data === undefined) return;
    switch (this.protocol) {
      case 'openai-chat':
        if (!this.meta && data.startsWith('{')) {
          try {
            const j = JSON.parse(data);
            this.meta = { id: j.id, model: j.model, created: j.created };
          } catch { /* not JSON */ }
        }
        return;
      case 'anthropic-messages':
        if (b.event === 'content_block_start' || b.event === 'content_block_stop') {
          const m = INDEX.exec(data);
          if (m) {
            if (b.event === 'content_block_start') this.openBlocks.add(Number(m[1]));
            else this.openBlocks.delete(Number(m[1]));
          }
        }
        return;
      case 'openai-responses': {
        const seq = SEQ.exec(data.slice(-64)) ?? SEQ.exec(data);
        if (seq) this.sequence = Number(seq[1]);
        if (b.event === 'response.created' || b.event === 'response.output_item.added' || b.event === 'response.output_item.done') {
          try {
            const j = JSON.parse(data);
            if (b.event === 'response.created') this.response = j.response;
            else if (typeof j.output_index === 'number' && j.item) this.items.set(j.output_index, j.item);
          } catch { /* not JSON */ }
        }
      }
    }
  }

  /** The client frames that end the stream as a length stop, with the usage billed. */
  frames(usage: Usage): string {
    const total = usage.input + usage.cacheRead + usage.cacheWrite + usage.output;
    switch (this.protocol) {
      case 'openai-chat': {
        const base = {
          id: this.meta?.id ?? 'chatcmpl-gateway', object: 'chat.completion.chunk',
          created: this.meta?.created ?? Math.floor(Date.now() / 1000), model: this.meta?.model ?? '',
        };
        let out = formatJsonEvent({
          ...base, choices: Array.from({ length: this.opts.choices }, (_, index) => ({ index, delta: {}, finish_reason: 'length', logprobs: null })),
        });
        if (this.opts.includeUsage) {
          out += formatJsonEvent({
            ...base, choices: [],
            usage: {
              prompt_tokens: usage.input + usage.cacheRead + usage.cacheWrite, completion_tokens: usage.output, total_tokens: total,
              prompt_tokens_details: { cached_tokens: usage.cacheRead },
            },
          });
        }
        return out + formatEvent('[DONE]');
      }
      case 'anthropic-messages': {
        let out = '';
        for (const index of [...this.openBlocks].sort((a, b) => a - b)) out += formatJsonEvent({ type: 'content_block_stop', index }, 'content_block_stop');
        out += formatJsonEvent({
          type: 'message_delta', delta: { stop_reason: 'max_tokens', stop_sequence: null },
          usage: { input_tokens: usage.input, output_tokens: usage.output, cache_read_input_tokens: usage.cacheRead, cache_creation_input_tokens: usage.cacheWrite },
        }, 'message_delta');
        return out + formatJsonEvent({ type: 'message_stop' }, 'message_stop');
      }
      case 'openai-responses': {
        const output = [...this.items.entries()].sort((a, b) => a[0] - b[0])
          .map(([, item]) => (item.status === 'in_progress' ? { ...item, status: 'incomplete' } : item));
        return formatJsonEvent({
          type: 'response.incomplete',
          sequence_number: this.sequence + 1,
          response: {
            ...(this.response ?? { id: 'resp_gateway', object: 'response', created_at: Math.floor(Date.now() / 1000), model: '' }),
            status: 'incomplete',
            incomplete_details: { reason: 'max_output_tokens' },
            output,
            usage: {
              input_tokens: usage.input + usage.cacheRead + usage.cacheWrite, output_tokens: usage.output, total_tokens: total,
              input_tokens_details: { cached_tokens: usage.cacheRead }, output_tokens_details: { reasoning_tokens: 0 },
            },
          },
        }, 'response.incomplete');
      }
      default:
        return '';
    }
  }
}
