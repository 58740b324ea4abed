/**
 * OpenAI Chat Completions streams ⇄ IR events.
 *
 * Decoder: the first chunk gives `start`; `reasoning_content` (or `reasoning`) opens a thinking
 * block, `content`/`refusal` a text block, each new `tool_calls[].index` a tool_call block (kept
 * open until the finish: Chat never says when one call is done); `thinking_blocks` entries give
 * signatures and redacted thinking; `finish_reason` closes everything and gives the finish; the
 * `choices: []` chunk gives usage; `[DONE]` (or a clean EOF) after the finish ends; `{"error":…}`
 * is the upstream's error.
 *
 * Encoder (what `ChatCompletionStream` needs, ANALYSIS §0.6): a first `role` chunk, content /
 * reasoning_content / tool_calls deltas with tool indices counted 0,1,2… over tool blocks only,
 * `type: "function"` on each call's first delta, a `delta: {}` finish chunk, then always a
 * `choices: []` usage chunk and `data: [DONE]`. A thinking block's signature is delivered once,
 * when the block stops, as `thinking_blocks: [{type:"thinking", thinking:<full text>, signature}]`.
 */
import { formatEvent, formatJsonEvent, type SseBlock } from '../../sse.js';
import type { Usage } from '../../money.js';
import type { IRStreamEvent } from '../ir.js';
import type { EncodeOptions, ErrorInfo, StreamDecoder, StreamEncoder } from '../types.js';
import { fromChatUsage, mergeUsage, toChatUsage } from '../usage.js';
import { chatWire } from './wire.js';
import { completionId, finishFromIR, finishToIR, thinkingBlock } from './mapping.js';

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

// ---- decoder ---------------------------------------------------------------------------------

interface Flow {
  index: number;
  kind: 'text' | 'thinking';
  /** Thinking text arrived through reasoning_content: thinking_blocks text would repeat it. */
  viaReasoning: boolean;
}

export class ChatStreamDecoder implements StreamDecoder {
  private started = false;
  private finished = false;
  private done = false;
  private next = 0;
  private id = '';
  private flow: Flow | undefined;
  /** Chat tool index → IR block index. */
  private readonly tools = new Map<number, number>();
  /** Call id → the key used for it, for servers that omit `tool_calls[].index`. */
  private readonly toolIds = new Map<string, number>();
  private readonly openTools = new Set<number>();

  push(b: SseBlock): IRStreamEvent[] {
    if (this.done || b.data === undefined) return [];
    if (b.data.startsWith('[DONE]')) {
      this.done = true;
      return this.finished ? [{ type: 'end' }] : [];
    }
    let j: Obj;
    try {
      const v = JSON.parse(b.data);
      if (!isObj(v)) return [];
      j = v;
    } catch {
      return [];
    }
    if (b.event === 'error' || (j.error !== undefined && j.error !== null)) {
      const e = isObj(j.error) ? j.error : j;
      this.done = true;
      const code = e.code === undefined || e.code === null ? undefined : String(e.code);
      return [
        {
          type: 'error',
          error: { type: String(e.type ?? code ?? 'api_error'), message: String(e.message ?? 'upstream error'), ...(code ? { code } : {}) },
        },
      ];
    }
    const out: IRStreamEvent[] = [];
    if (!this.started) {
      this.started = true;
      this.id = String(j.id ?? '');
      out.push({ type: 'start', id: this.id, model: String(j.model ?? '') });
    }
    if (Array.isArray(j.choices)) {
      for (const c of j.choices) if (isObj(c) && (c.index ?? 0) === 0) this.choice(c, out);
    }
    if (isObj(j.usage)) {
      const u = fromChatUsage(j.usage);
      const rt = j.usage.completion_tokens_details?.reasoning_tokens;
      if (u) out.push({ type: 'usage', usage: u, ...(typeof rt === 'number' ? { reasoningTokens: rt } : {}) });
    }
    return out;
  }

  end(): IRStreamEvent[] {
    if (this.done) return [];
    this.done = true;
    // A clean EOF after the finish is complete; before it nothing is closed (a half-streamed tool
    // call must not look finished) and the core sends the client an error instead.
    return this.finished ? [{ type: 'end' }] : [];
  }

  private choice(c: Obj, out: IRStreamEvent[]): void {
    if (this.finished) return;
    const d = isObj(c.delta) ? c.delta : {};
    const reasoning = typeof d.reasoning_content === 'string' ? d.reasoning_content : typeof d.reasoning === 'string' ? d.reasoning : '';
    if (reasoning) {
      const f = this.openFlow('thinking', out);
      f.viaReasoning = true;
      out.push({ type: 'delta', index: f.index, delta: { type: 'thinking', text: reasoning } });
    }
    if (Array.isArray(d.thinking_blocks)) {
      for (const tb of d.thinking_blocks) {
        if (!isObj(tb)) continue;
        if (tb.type === 'thinking') {
          const f = this.openFlow('thinking', out);
          if (!f.viaReasoning && typeof tb.thinking === 'string' && tb.thinking)
            out.push({ type: 'delta', index: f.index, delta: { type: 'thinking', text: tb.thinking } });
          if (typeof tb.signature === 'string' && tb.signature) {
            out.push({ type: 'delta', index: f.index, delta: { type: 'signature', signature: tb.signature } });
            // A signature ends its block: the next reasoning is another block with its own
            // signature, never appended to this one (a joined signature fails the next turn).
            this.closeFlow(out);
          }
        } else if (tb.type === 'redacted_thinking' && typeof tb.data === 'string') {
          this.closeFlow(out);
          this.closeTools(out);
          const index = this.next++;
          out.push({ type: 'block_start', index, block: { type: 'redacted_thinking', data: tb.data } }, { type: 'block_stop', index });
        }
      }
    }
    const text = (typeof d.content === 'string' ? d.content : '') + (typeof d.refusal === 'string' ? d.refusal : '');
    if (text) {
      const f = this.openFlow('text', out);
      out.push({ type: 'delta', index: f.index, delta: { type: 'text', text } });
    }
    if (Array.isArray(d.tool_calls)) {
      d.tool_calls.forEach((tc: unknown, pos: number) => {
        if (!isObj(tc)) return;
        let k: number;
        if (typeof tc.index === 'number') k = tc.index;
        else if (typeof tc.id === 'string' && tc.id) {
          // Some OpenAI-compatible servers omit `index`: a new call id is a new call...
          k = this.toolIds.get(tc.id) ?? this.tools.size;
          this.toolIds.set(tc.id, k);
        } else k = this.tools.size > 0 ? this.tools.size - 1 : pos; // ...and a bare fragment continues the latest
        const fn = isObj(tc.function) ? tc.function : {};
        let index = this.tools.get(k);
        if (index === undefined) {
          this.closeFlow(out);
          index = this.next++;
          this.tools.set(k, index);
          this.openTools.add(index);
          const id = typeof tc.id === 'string' && tc.id ? tc.id : `call_${this.id}_${k}`;
          out.push({ type: 'block_start', index, block: { type: 'tool_call', id, name: String(fn.name ?? '') } });
        }
        if (typeof fn.arguments === 'string' && fn.arguments && this.openTools.has(index)) {
          out.push({ type: 'delta', index, delta: { type: 'tool_args', json: fn.arguments } });
        }
      });
    }
    if (typeof c.finish_reason === 'string' && c.finish_reason) {
      out.push(...this.closeAll());
      this.finished = true;
      let reason = finishToIR(c.finish_reason);
      if (reason === 'end_turn' && this.tools.size > 0) reason = 'tool_use';
      out.push({ type: 'finish', reason, stopSequence: null, raw: c.finish_reason });
    }
  }

  private openFlow(kind: Flow['kind'], out: IRStreamEvent[]): Flow {
    if (this.flow && this.flow.kind === kind) return this.flow;
    this.closeFlow(out);
    this.closeTools(out);
    const index = this.next++;
    this.flow = { index, kind, viaReasoning: false };
    out.push({ type: 'block_start', index, block: { type: kind } });
    return this.flow;
  }

  private closeFlow(out: IRStreamEvent[]): void {
    if (!this.flow) return;
    out.push({ type: 'block_stop', index: this.flow.index });
    this.flow = undefined;
  }

  private closeTools(out: IRStreamEvent[]): void {
    for (const index of this.openTools) out.push({ type: 'block_stop', index });
    this.openTools.clear();
  }

  private closeAll(): IRStreamEvent[] {
    const out: IRStreamEvent[] = [];
    this.closeFlow(out);
    this.closeTools(out);
    return out;
  }
}

// ---- encoder ---------------------------------------------------------------------------------

interface ThinkingState {
  text: string;
  signature: string;
  itemId?: string;
}

export class ChatStreamEncoder implements StreamEncoder {
  private readonly id: string;
  private readonly created = Math.floor(Date.now() / 1000);
  private started = false;
  private finished = false;
  private closed = false;
  private nextTool = 0;
  private readonly toolIndex = new Map<number, number>();
  /** Tool blocks (IR index) that have not streamed a byte of arguments yet. */
  private readonly toolsWithoutArgs = new Set<number>();
  private readonly thinking = new Map<number, ThinkingState>();
  private usage: Usage | undefined;
  private reasoningTokens: number | undefined;

  /** Every chunk's frame up to its delta: the same for the whole stream, so serialised once. */
  private readonly head: string;

  constructor(private readonly opts: EncodeOptions) {
    this.id = completionId(opts.requestId);
    this.head = `data: ${JSON.stringify({ id: this.id, object: 'chat.completion.chunk', created: this.created, model: opts.model }).slice(0, -1)},"choices":[{"index":0,"delta":`;
  }

  fail(err: ErrorInfo): string {
    this.closed = true;
    return chatWire.streamError(err);
  }

  /** The frame `formatJsonEvent` would write for this chunk object (JSON text has no raw newline). */
  private chunk(delta: Obj | string, finish: string | null = null): string {
    return `${this.head}${typeof delta === 'string' ? delta : JSON.stringify(delta)},"logprobs":null,"finish_reason":${finish === null ? 'null' : JSON.stringify(finish)}}]}\n\n`;
  }

  private ensureStart(): string {
    if (this.started) return '';
    this.started = true;
    return this.chunk({ role: 'assistant', content: '' });
  }

  /**
   * A tool call that streamed no arguments still ends with "{}" (never ""): clients JSON.parse
   * them. For one block (`irIndex`) at its stop, or for every such call still open.
   */
  private emptyArgs(irIndex?: number): string {
    let out = '';
    for (const i of irIndex === undefined ? [...this.toolsWithoutArgs] : [irIndex]) {
      if (!this.toolsWithoutArgs.delete(i)) continue;
      out += this.chunk({ tool_calls: [{ index: this.toolIndex.get(i)!, function: { arguments: '{}' } }] });
    }
    return out;
  }

  push(ev: IRStreamEvent): string {
    if (this.closed) return '';
    switch (ev.type) {
      case 'start':
        if (ev.usage) this.usage = mergeUsage(this.usage, ev.usage);
        return this.ensureStart();
      case 'block_start': {
        const out = this.ensureStart();
        const b = ev.block;
        if (b.type === 'tool_call') {
          const k = this.nextTool++;
          this.toolIndex.set(ev.index, k);
          this.toolsWithoutArgs.add(ev.index);
          return out + this.chunk({ tool_calls: [{ index: k, id: b.id, type: 'function', function: { name: b.name, arguments: '' } }] });
        }
        if (b.type === 'thinking') this.thinking.set(ev.index, { text: '', signature: '', ...(b.itemId ? { itemId: b.itemId } : {}) });
        if (b.type === 'redacted_thinking') return out + this.chunk({ thinking_blocks: [{ type: 'redacted_thinking', data: b.data }] });
        return out;
      }
      case 'delta': {
        const d = ev.delta;
        switch (d.type) {
          case 'text':
            return d.text ? this.ensureStart() + this.chunk(`{"content":${JSON.stringify(d.text)}}`) : '';
          case 'thinking': {
            const st = this.thinking.get(ev.index);
            if (st) st.text += d.text;
            return d.text ? this.ensureStart() + this.chunk({ reasoning_content: d.text }) : '';
          }
          case 'signature': {
            const st = this.thinking.get(ev.index);
            if (st) st.signature += d.signature;
            return '';
          }
          case 'tool_args': {
            const k = this.toolIndex.get(ev.index);
            if (k === undefined || !d.json) return '';
            this.toolsWithoutArgs.delete(ev.index);
            return this.chunk({ tool_calls: [{ index: k, function: { arguments: d.json } }] });
          }
        }
        return '';
      }
      case 'block_stop': {
        if (this.toolIndex.has(ev.index)) return this.emptyArgs(ev.index);
        const st = this.thinking.get(ev.index);
        if (!st) return '';
        this.thinking.delete(ev.index);
        const block = thinkingBlock({
          type: 'thinking',
          text: st.text,
          ...(st.signature ? { signature: st.signature } : {}),
          ...(st.itemId ? { itemId: st.itemId } : {}),
        });
        return block ? this.chunk({ thinking_blocks: [block] }) : '';
      }
      case 'usage':
        this.usage = mergeUsage(this.usage, ev.usage);
        if (ev.reasoningTokens !== undefined) this.reasoningTokens = ev.reasoningTokens;
        return '';
      case 'finish':
        if (this.finished) return '';
        this.finished = true;
        return this.ensureStart() + this.emptyArgs() + this.chunk({}, finishFromIR(ev.reason));
      case 'end': {
        let out = this.ensureStart() + this.emptyArgs();
        if (!this.finished) {
          this.finished = true;
          out += this.chunk({}, 'stop');
        }
        this.closed = true;
        out += formatJsonEvent({
          id: this.id,
          object: 'chat.completion.chunk',
          created: this.created,
          model: this.opts.model,
          choices: [],
          usage: toChatUsage(this.usage ?? { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, this.reasoningTokens),
        });
        return out + formatEvent('[DONE]');
      }
      case 'error':
        this.closed = true;
        return chatWire.streamError(ev.error);
    }
  }
}
