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
import { type Price, type Usage, PPM } from './money.js';
import { formatEvent, formatJsonEvent, type SseBlock } from './sse.js';
import type { StreamMeta } from './protocols/types.js';

const INDEX = /"index"\s*:\s*(\d+)/;

/**
 * The output a stream may generate before its charge passes the reservation, in characters of
 * streamed text (the cut's estimate is 4 characters a token, rounded up).
 *
 * The charge is `priceUsage(usage, price, rate).actual`: input as reported (else estimated) and
 * output estimated from the streamed text. Pricing it at every event (BigInt arithmetic) was most
 * of the cut's cost; the charge grows with output alone, so the largest output within the
 * reservation is solved for once, and again only when the reported usage changes (usually once or
 * twice a stream). Per event the core then compares two integers.
 */
export class OutputCap {
  /** The reported usage the limit was computed for (`null`: none computed yet). */
  private basis: Usage | undefined | null = null;
  private maxChars = 0;

  constructor(
    private readonly price: Price,
    private readonly ratePpm: number,
    private readonly reserve: number,
    private readonly inputEstimate: number,
  ) {}

  /** Whether `chars` of streamed text, with the `reported` usage so far, cost more than the reservation. */
  over(reported: Usage | undefined, chars: number): boolean {
    if (reported !== this.basis) {
      this.basis = reported;
      const tokens = maxOutputTokens(
        {
          input: reported?.input ?? this.inputEstimate,
          cacheRead: reported?.cacheRead ?? 0,
          cacheWrite: reported?.cacheWrite ?? 0,
          output: 0,
        },
        this.price,
        this.ratePpm,
        this.reserve,
      );
      this.maxChars = tokens * 4; // ceil(chars / 4) <= tokens  <=>  chars <= 4 * tokens; -1 → -4: always over
    }
    return chars > this.maxChars;
  }
}

const D = 1_000_000n * BigInt(PPM);
/** Beyond this many tokens (4 characters each, still exact as a number) the cap is no cap. */
const HUGE = BigInt(Math.floor(Number.MAX_SAFE_INTEGER / 8));

/**
 * The largest output token count whose charge with `fixed`'s other buckets stays within
 * `reserve`: -1 when even no output fits, Infinity when output costs nothing. Exactly the
 * boundary of `priceUsage(…).actual <= reserve` (half-up rounding of exact / 10^12).
 */
export function maxOutputTokens(fixed: Usage, price: Price, ratePpm: number, reserve: number): number {
  const rate = BigInt(ratePpm);
  // actual <= reserve  <=>  floor((exact * rate + D/2) / D) <= reserve  <=>  exact * rate <= limit
  const limit = BigInt(reserve + 1) * D - D / 2n - 1n;
  const base =
    (BigInt(fixed.input) * BigInt(price.input) +
      BigInt(fixed.cacheRead) * BigInt(price.cacheRead) +
      BigInt(fixed.cacheWrite) * BigInt(price.cacheWrite)) *
    rate;
  const room = limit - base;
  if (room < 0n) return -1;
  const perToken = BigInt(price.output) * rate;
  if (perToken <= 0n) return Infinity;
  const max = room / perToken;
  return max > HUGE ? Infinity : Number(max);
}

export class PassthroughCut {
  /** Messages: content blocks started and not stopped. */
  private readonly openBlocks = new Set<number>();
  /** Responses: the `response.created` response object, items by output index. */
  private response: Record<string, unknown> | undefined;
  private readonly items = new Map<number, Record<string, unknown>>();

  /** `meta`: what the stream's tap read (Chat's id, model and created; Responses' last sequence number). */
  constructor(
    private readonly protocol: ProtocolName,
    private readonly opts: { choices: number; includeUsage: boolean },
    private readonly meta: () => StreamMeta,
  ) {}

  /** Sees each block; only the few events the closing frames depend on are read. */
  observe(b: SseBlock): void {
    switch (this.protocol) {
      case 'anthropic-messages':
        if (b.event === 'content_block_start' || b.event === 'content_block_stop') {
          const m = b.data === undefined ? null : INDEX.exec(b.data);
          if (m) {
            if (b.event === 'content_block_start') this.openBlocks.add(Number(m[1]));
            else this.openBlocks.delete(Number(m[1]));
          }
        }
        return;
      case 'openai-responses':
        if (b.event === 'response.created' || b.event === 'response.output_item.added' || b.event === 'response.output_item.done') {
          try {
            const j = JSON.parse(b.data!);
            if (b.event === 'response.created') this.response = j.response;
            else if (typeof j.output_index === 'number' && j.item) this.items.set(j.output_index, j.item);
          } catch {
            /* not JSON */
          }
        }
        return;
      default:
        return;
    }
  }

  /** The client frames that end the stream as a length stop, with the usage billed. */
  frames(usage: Usage): string {
    const total = usage.input + usage.cacheRead + usage.cacheWrite + usage.output;
    switch (this.protocol) {
      case 'openai-chat': {
        const meta = this.meta();
        const base = {
          id: meta.id ?? 'chatcmpl-gateway',
          object: 'chat.completion.chunk',
          created: meta.created ?? Math.floor(Date.now() / 1000),
          model: meta.model ?? '',
        };
        let out = formatJsonEvent({
          ...base,
          choices: Array.from({ length: this.opts.choices }, (_, index) => ({ index, delta: {}, finish_reason: 'length', logprobs: null })),
        });
        if (this.opts.includeUsage) {
          out += formatJsonEvent({
            ...base,
            choices: [],
            usage: {
              prompt_tokens: usage.input + usage.cacheRead + usage.cacheWrite,
              completion_tokens: usage.output,
              total_tokens: total,
              prompt_tokens_details: { cached_tokens: usage.cacheRead },
            },
          });
        }
        return out + formatEvent('[DONE]');
      }
      case 'anthropic-messages': {
        let out = '';
        for (const index of [...this.openBlocks].sort((a, b) => a - b))
          out += formatJsonEvent({ type: 'content_block_stop', index }, 'content_block_stop');
        out += formatJsonEvent(
          {
            type: 'message_delta',
            delta: { stop_reason: 'max_tokens', stop_sequence: null },
            usage: {
              input_tokens: usage.input,
              output_tokens: usage.output,
              cache_read_input_tokens: usage.cacheRead,
              cache_creation_input_tokens: usage.cacheWrite,
            },
          },
          'message_delta',
        );
        return out + formatJsonEvent({ type: 'message_stop' }, 'message_stop');
      }
      case 'openai-responses': {
        const output = [...this.items.entries()]
          .sort((a, b) => a[0] - b[0])
          .map(([, item]) => (item.status === 'in_progress' ? { ...item, status: 'incomplete' } : item));
        return formatJsonEvent(
          {
            type: 'response.incomplete',
            sequence_number: (this.meta().sequence ?? 0) + 1,
            response: {
              ...(this.response ?? { id: 'resp_gateway', object: 'response', created_at: Math.floor(Date.now() / 1000), model: '' }),
              status: 'incomplete',
              incomplete_details: { reason: 'max_output_tokens' },
              output,
              usage: {
                input_tokens: usage.input + usage.cacheRead + usage.cacheWrite,
                output_tokens: usage.output,
                total_tokens: total,
                input_tokens_details: { cached_tokens: usage.cacheRead },
                output_tokens_details: { reasoning_tokens: 0 },
              },
            },
          },
          'response.incomplete',
        );
      }
      default:
        return '';
    }
  }
}
