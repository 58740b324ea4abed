/**
 * Anthropic Messages streams ⇄ IR events.
 *
 * Decoder: block types the IR lacks (server_tool_use, web_search_tool_result, …) are skipped and
 * the remaining blocks re-indexed densely; citations are ignored; `message_delta` gives usage and
 * the finish; `message_stop` ends; `event: error` is the upstream's error.
 *
 * Encoder (what `MessageStream` needs, ANALYSIS §0.2–0.4): every frame named; `message_start`
 * always carries usage (zeros where unknown); dense indices from its own counter; one block open
 * at a time (BlockSerializer); finish and usage held until `end`, then `message_delta` (stop
 * reason, full cumulative usage) and `message_stop`. Thinking is buffered until its block stops and
 * sent only with a signature Anthropic minted — unsigned thinking could not be replayed (the
 * gateway answers such history with 409, Anthropic with 400), so the client never receives it.
 */
import { formatJsonEvent, type SseBlock } from '../../sse.js';
import type { Usage } from '../../money.js';
import type { BlockStart, FinishReason, IRStreamEvent } from '../ir.js';
import type { EncodeOptions, ErrorInfo, StreamDecoder, StreamEncoder } from '../types.js';
import { fromAnthropicUsagePartial, mergeUsage, toAnthropicUsage } from '../usage.js';
import { isOpenAIReasoning } from '../openai-responses/ids.js';
import { BlockSerializer } from './serialize.js';
import { messagesWire } from './wire.js';
import { citationOf, citationsOf, messageId, searchQuery, searchResult, stopReasonFromIR, stopReasonToIR } from './mapping.js';

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

// ---- decoder ---------------------------------------------------------------------------------

/** `{"type":"content_block_delta","index":N,"delta":{"type":"text_delta","text":"…"}}` exactly: the index and the text's JSON string. */
const TEXT_DELTA = /^\{"type":"content_block_delta","index":(\d{1,9}),"delta":\{"type":"text_delta","text":("(?:[^"\\]|\\.)*")\}\}$/;

export class MessagesStreamDecoder implements StreamDecoder {
  /** Upstream block index → IR index; null for skipped block types. */
  private readonly index = new Map<number, number | null>();
  private readonly open = new Set<number>();
  /** web_search server_tool_use blocks in flight (upstream index → id and input so far), and their queries by id. */
  private readonly searching = new Map<number, { id: string; json: string }>();
  private readonly queries = new Map<string, string>();
  private next = 0;
  private started = false;
  private finished = false;
  private done = false;

  push(b: SseBlock): IRStreamEvent[] {
    if (this.done || b.data === undefined || b.event === 'ping') return [];
    if (b.event === 'content_block_delta') {
      // Most of a stream: a text delta in Anthropic's exact shape is read without building its objects.
      const m = TEXT_DELTA.exec(b.data);
      let text: string | undefined;
      try {
        if (m) text = JSON.parse(m[2]) as string;
      } catch {
        /* not valid JSON: the general path below decides */
      }
      if (m && text !== undefined) {
        const index = this.index.get(Number(m[1]));
        if (index === undefined || index === null || !this.open.has(index)) return [];
        return text ? [{ type: 'delta', index, delta: { type: 'text', text } }] : [];
      }
    }
    let j: Obj;
    try {
      const v = JSON.parse(b.data);
      if (!isObj(v)) return [];
      j = v;
    } catch {
      return [];
    }
    const type = b.event ?? j.type;
    const out: IRStreamEvent[] = [];
    switch (type) {
      case 'message_start': {
        if (this.started) return [];
        this.started = true;
        const m = isObj(j.message) ? j.message : {};
        const usage = fromAnthropicUsagePartial(m.usage);
        out.push({ type: 'start', id: String(m.id ?? ''), model: String(m.model ?? ''), ...(usage ? { usage } : {}) });
        return out;
      }
      case 'content_block_start': {
        const cb = isObj(j.content_block) ? j.content_block : {};
        const up = Number(j.index);
        let block: BlockStart | undefined;
        switch (cb.type) {
          case 'text':
            block = { type: 'text' };
            break;
          case 'thinking':
            block = { type: 'thinking' };
            break;
          case 'redacted_thinking':
            block = { type: 'redacted_thinking', data: String(cb.data ?? '') };
            break;
          case 'tool_use':
            block = { type: 'tool_call', id: String(cb.id ?? ''), name: String(cb.name ?? '') };
            break;
          default:
            break;
        }
        if (cb.type === 'server_tool_use' && cb.name === 'web_search') {
          const input = isObj(cb.input) && Object.keys(cb.input).length > 0 ? JSON.stringify(cb.input) : '';
          this.searching.set(up, { id: String(cb.id ?? ''), json: input });
        }
        if (cb.type === 'web_search_tool_result') {
          // The search is over: one IR block carries its query and what it found.
          this.index.set(up, null);
          const index = this.next++;
          const r = searchResult(cb, this.queries);
          return [
            {
              type: 'block_start',
              index,
              block: { type: 'web_search', id: r.id, query: r.query, sources: r.sources, ...(r.error ? { error: r.error } : {}) },
            },
            { type: 'block_stop', index },
          ];
        }
        if (!block) {
          this.index.set(up, null);
          return [];
        }
        const index = this.next++;
        this.index.set(up, index);
        this.open.add(index);
        out.push({ type: 'block_start', index, block });
        if (cb.type === 'text')
          for (const citation of citationsOf(cb.citations)) out.push({ type: 'delta', index, delta: { type: 'citation', citation } });
        if (cb.type === 'text' && typeof cb.text === 'string' && cb.text)
          out.push({ type: 'delta', index, delta: { type: 'text', text: cb.text } });
        if (cb.type === 'thinking') {
          if (typeof cb.thinking === 'string' && cb.thinking)
            out.push({ type: 'delta', index, delta: { type: 'thinking', text: cb.thinking } });
          if (typeof cb.signature === 'string' && cb.signature)
            out.push({ type: 'delta', index, delta: { type: 'signature', signature: cb.signature } });
        }
        if (cb.type === 'tool_use' && isObj(cb.input) && Object.keys(cb.input).length > 0) {
          out.push({ type: 'delta', index, delta: { type: 'tool_args', json: JSON.stringify(cb.input) } });
        }
        return out;
      }
      case 'content_block_delta': {
        const d = isObj(j.delta) ? j.delta : {};
        const search = this.searching.get(Number(j.index));
        if (search && d.type === 'input_json_delta' && typeof d.partial_json === 'string') search.json += d.partial_json;
        const index = this.index.get(Number(j.index));
        if (index === undefined || index === null || !this.open.has(index)) return [];
        switch (d.type) {
          case 'text_delta':
            if (typeof d.text === 'string' && d.text) out.push({ type: 'delta', index, delta: { type: 'text', text: d.text } });
            break;
          case 'thinking_delta':
            if (typeof d.thinking === 'string' && d.thinking)
              out.push({ type: 'delta', index, delta: { type: 'thinking', text: d.thinking } });
            break;
          case 'signature_delta':
            if (typeof d.signature === 'string' && d.signature)
              out.push({ type: 'delta', index, delta: { type: 'signature', signature: d.signature } });
            break;
          case 'input_json_delta':
            if (typeof d.partial_json === 'string' && d.partial_json)
              out.push({ type: 'delta', index, delta: { type: 'tool_args', json: d.partial_json } });
            break;
          case 'citations_delta': {
            const citation = citationOf(d.citation);
            if (citation) out.push({ type: 'delta', index, delta: { type: 'citation', citation } });
            break;
          }
          default:
            break; // anything newer
        }
        return out;
      }
      case 'content_block_stop': {
        const search = this.searching.get(Number(j.index));
        if (search) {
          this.searching.delete(Number(j.index));
          let input: unknown;
          try {
            input = JSON.parse(search.json || '{}');
          } catch {
            /* no query */
          }
          this.queries.set(search.id, searchQuery(input));
        }
        const index = this.index.get(Number(j.index));
        if (index === undefined || index === null || !this.open.has(index)) return [];
        this.open.delete(index);
        return [{ type: 'block_stop', index }];
      }
      case 'message_delta': {
        const u = fromAnthropicUsagePartial(j.usage);
        if (u) {
          const thinking = j.usage?.output_tokens_details?.thinking_tokens;
          out.push({ type: 'usage', usage: u, ...(typeof thinking === 'number' ? { reasoningTokens: thinking } : {}) });
        }
        if (!this.finished) {
          this.finished = true;
          out.push(...this.closeAll());
          const d = isObj(j.delta) ? j.delta : {};
          out.push({
            type: 'finish',
            reason: stopReasonToIR(d.stop_reason),
            stopSequence: typeof d.stop_sequence === 'string' ? d.stop_sequence : null,
            raw: typeof d.stop_reason === 'string' ? d.stop_reason : undefined,
          });
        }
        return out;
      }
      case 'message_stop':
        out.push(...this.closeAll());
        if (!this.finished) {
          this.finished = true;
          out.push({ type: 'finish', reason: 'end_turn', stopSequence: null });
        }
        this.done = true;
        out.push({ type: 'end' });
        return out;
      case 'error': {
        const e = isObj(j.error) ? j.error : {};
        this.done = true;
        return [{ type: 'error', error: { type: String(e.type ?? 'api_error'), message: String(e.message ?? 'upstream error') } }];
      }
      default:
        return [];
    }
  }

  end(): IRStreamEvent[] {
    if (this.done) return [];
    this.done = true;
    // Everything but the terminator arrived: a clean EOF after the finish is a complete stream.
    // Cut short before it, nothing is closed: a half-streamed tool call must not look finished
    // (agents run tools when their block stops); the core sends the client an error instead.
    return this.finished ? [{ type: 'end' }] : [];
  }

  private closeAll(): IRStreamEvent[] {
    const out: IRStreamEvent[] = [];
    for (const index of this.open) out.push({ type: 'block_stop', index });
    this.open.clear();
    return out;
  }
}

// ---- encoder ---------------------------------------------------------------------------------

type OutBlock = { kind: 'live'; index: number } | { kind: 'drop' } | { kind: 'thinking'; text: string; signature: string };

const ZERO: Usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };

function frame(value: Obj): string {
  return formatJsonEvent(value, value.type);
}

export class MessagesStreamEncoder implements StreamEncoder {
  private readonly serializer = new BlockSerializer();
  private readonly blocks = new Map<number, OutBlock>();
  private next = 0;
  private started = false;
  private closed = false;
  private usage: Usage = { ...ZERO };
  private finish: { reason: FinishReason; stopSequence: string | null } | undefined;

  constructor(private readonly opts: EncodeOptions) {}

  push(ev: IRStreamEvent): string {
    if (this.closed) return '';
    let out = '';
    for (const e of this.serializer.push(ev)) out += this.one(e);
    return out;
  }

  fail(err: ErrorInfo): string {
    this.closed = true;
    return messagesWire.streamError(err);
  }

  private ensureStart(usage?: Partial<Usage>): string {
    if (this.started) return '';
    this.started = true;
    if (usage) this.usage = mergeUsage(this.usage, usage);
    // Clients such as LangChain's ChatAnthropic read input usage from message_start only: when
    // the upstream has not said (Chat and Responses report usage at the end), the gateway's
    // estimate of the request stands in; the upstream's figure overwrites it in message_delta.
    if (!usage?.input && this.opts.inputEstimate) this.usage.input = this.opts.inputEstimate;
    return frame({
      type: 'message_start',
      message: {
        id: messageId(this.opts.requestId),
        type: 'message',
        role: 'assistant',
        model: this.opts.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: toAnthropicUsage(this.usage),
      },
    });
  }

  private one(e: IRStreamEvent): string {
    switch (e.type) {
      case 'start':
        return this.ensureStart(e.usage);
      case 'block_start': {
        let out = this.ensureStart();
        const b = e.block;
        if (b.type === 'thinking') {
          this.blocks.set(e.index, isOpenAIReasoning(b) ? { kind: 'drop' } : { kind: 'thinking', text: '', signature: '' });
          return out;
        }
        if (b.type === 'web_search') {
          // Only a converted Responses client asks for provider-side search; nothing to show here.
          this.blocks.set(e.index, { kind: 'drop' });
          return out;
        }
        const index = this.next++;
        this.blocks.set(e.index, { kind: 'live', index });
        const content_block =
          b.type === 'text'
            ? { type: 'text', text: '' }
            : b.type === 'redacted_thinking'
              ? { type: 'redacted_thinking', data: b.data }
              : { type: 'tool_use', id: b.id, name: b.name, input: {} };
        out += frame({ type: 'content_block_start', index, content_block });
        return out;
      }
      case 'delta': {
        const st = this.blocks.get(e.index);
        if (!st || st.kind === 'drop') return '';
        const d = e.delta;
        if (st.kind === 'thinking') {
          if (d.type === 'thinking') st.text += d.text;
          else if (d.type === 'signature') st.signature += d.signature;
          return '';
        }
        if (d.type === 'text' && d.text)
          return frame({ type: 'content_block_delta', index: st.index, delta: { type: 'text_delta', text: d.text } });
        if (d.type === 'tool_args' && d.json)
          return frame({ type: 'content_block_delta', index: st.index, delta: { type: 'input_json_delta', partial_json: d.json } });
        return '';
      }
      case 'block_stop': {
        const st = this.blocks.get(e.index);
        this.blocks.delete(e.index);
        if (!st || st.kind === 'drop') return '';
        if (st.kind === 'live') return frame({ type: 'content_block_stop', index: st.index });
        if (!st.signature) return '';
        const index = this.next++;
        let out = frame({ type: 'content_block_start', index, content_block: { type: 'thinking', thinking: '', signature: '' } });
        if (st.text) out += frame({ type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: st.text } });
        out += frame({ type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: st.signature } });
        out += frame({ type: 'content_block_stop', index });
        return out;
      }
      case 'usage':
        this.usage = mergeUsage(this.usage, e.usage);
        return '';
      case 'finish':
        this.finish = { reason: e.reason, stopSequence: e.stopSequence ?? null };
        return '';
      case 'end': {
        let out = this.ensureStart();
        for (const st of this.blocks.values()) if (st.kind === 'live') out += frame({ type: 'content_block_stop', index: st.index });
        this.blocks.clear();
        this.closed = true;
        out += frame({
          type: 'message_delta',
          delta: { stop_reason: stopReasonFromIR(this.finish?.reason ?? 'end_turn'), stop_sequence: this.finish?.stopSequence ?? null },
          usage: toAnthropicUsage(this.usage),
        });
        out += frame({ type: 'message_stop' });
        return out;
      }
      case 'error':
        this.closed = true;
        return messagesWire.streamError(e.error);
    }
  }
}
