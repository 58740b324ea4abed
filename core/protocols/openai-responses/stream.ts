/**
 * OpenAI Responses streams ⇄ IR events.
 *
 * Decoder: output items and their content parts become IR blocks, numbered densely by the decoder
 * (whatever `output_index` says); reasoning summary/text deltas are thinking, the item's final
 * `encrypted_content` its signature; `*.done` events that carry more text than the deltas did
 * supply the missing tail; `response.completed` / `response.incomplete` give usage, finish and end;
 * `error` / `response.failed` are the upstream's error. Items the IR lacks (built-in tool calls,
 * custom tool calls) are skipped.
 *
 * Encoder (what `ResponseStream` needs, ANALYSIS §0.7, §3.2): `response.created` →
 * `response.in_progress` → per item `output_item.added` … `output_item.done` with dense
 * `output_index` and one item at a time → `response.completed` (or `response.incomplete` for
 * max_tokens / refusal) with the full response and usage; `event:` line and `sequence_number` on
 * every frame; no `[DONE]`.
 */
import { formatJsonEvent, type SseBlock } from '../../sse.js';
import type { Usage } from '../../money.js';
import type { Citation, FinishReason, IRStreamEvent, IRTool } from '../ir.js';
import type { EncodeOptions, ErrorInfo, StreamDecoder, StreamEncoder } from '../types.js';
import { fromResponsesUsage, mergeUsage, toResponsesUsage } from '../usage.js';
import { BlockSerializer } from '../anthropic-messages/serialize.js';
import { callItemId, messageItemId, reasoningItemId, responseId, searchItemId } from './ids.js';
import { annotations, callItem, customInput, finishToIR, responseObject, searchItem, statusFromIR, toolsByName } from './mapping.js';
import { responsesWire } from './wire.js';
import { responsesFinish } from '../answer.js';

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

// ---- decoder ---------------------------------------------------------------------------------

interface TextState {
  index: number;
  text: string;
  open: boolean;
}
type ItemState =
  | { kind: 'message'; parts: Map<number, TextState> }
  | { kind: 'reasoning'; index: number; text: string; part: string; encrypted?: string; open: boolean }
  | { kind: 'call'; index: number; args: string; open: boolean }
  | { kind: 'skip' };

export class ResponsesStreamDecoder implements StreamDecoder {
  private readonly items = new Map<number, ItemState>();
  private next = 0;
  private started = false;
  private done = false;
  private hadCall = false;

  push(b: SseBlock): IRStreamEvent[] {
    if (this.done || b.data === undefined || b.data.startsWith('[DONE]')) return [];
    let j: Obj;
    try {
      const v = JSON.parse(b.data);
      if (!isObj(v)) return [];
      j = v;
    } catch {
      return [];
    }
    const type = typeof j.type === 'string' ? j.type : b.event;
    const out: IRStreamEvent[] = [];
    const oi = Number(j.output_index);
    switch (type) {
      case 'response.created': {
        if (this.started) return [];
        this.started = true;
        const r = isObj(j.response) ? j.response : {};
        out.push({ type: 'start', id: String(r.id ?? ''), model: String(r.model ?? '') });
        return out;
      }
      case 'response.output_item.added':
        this.itemAdded(oi, isObj(j.item) ? j.item : {}, out);
        return out;
      case 'response.content_part.added': {
        const part = isObj(j.part) ? j.part : {};
        if (part.type === 'output_text' || part.type === 'refusal') {
          const t = this.textPart(oi, Number(j.content_index), out);
          const initial = part.type === 'refusal' ? part.refusal : part.text;
          if (t && typeof initial === 'string' && initial) this.text(t, initial, out);
        } else if (part.type === 'reasoning_text') {
          const st = this.items.get(oi);
          if (st?.kind === 'reasoning') this.newPart(st, out);
        }
        return out;
      }
      case 'response.output_text.delta':
      case 'response.refusal.delta': {
        const t = this.textPart(oi, Number(j.content_index), out);
        if (t && typeof j.delta === 'string' && j.delta) this.text(t, j.delta, out);
        return out;
      }
      case 'response.output_text.done':
      case 'response.refusal.done': {
        const t = this.textPart(oi, Number(j.content_index), out);
        const full = type === 'response.refusal.done' ? j.refusal : j.text;
        if (t) this.tail(t.text, full, (s) => this.text(t, s, out));
        return out;
      }
      case 'response.content_part.done': {
        const st = this.items.get(oi);
        if (st?.kind !== 'message') return out;
        const t = st.parts.get(Number(j.content_index));
        if (!t || !t.open) return out;
        const part = isObj(j.part) ? j.part : {};
        this.tail(t.text, part.type === 'refusal' ? part.refusal : part.text, (s) => this.text(t, s, out));
        t.open = false;
        out.push({ type: 'block_stop', index: t.index });
        return out;
      }
      case 'response.reasoning_summary_part.added': {
        const st = this.items.get(oi);
        if (st?.kind === 'reasoning') this.newPart(st, out);
        return out;
      }
      case 'response.reasoning_summary_text.delta':
      case 'response.reasoning_text.delta': {
        const st = this.items.get(oi);
        if (st?.kind === 'reasoning' && st.open && typeof j.delta === 'string') this.thinking(st, j.delta, out);
        return out;
      }
      case 'response.reasoning_summary_text.done':
      case 'response.reasoning_text.done': {
        const st = this.items.get(oi);
        if (st?.kind === 'reasoning' && st.open) this.tail(st.part, j.text, (s) => this.thinking(st, s, out));
        return out;
      }
      case 'response.function_call_arguments.delta': {
        if (typeof j.delta === 'string' && j.delta) this.args(oi, j.delta, out);
        return out;
      }
      case 'response.function_call_arguments.done': {
        const st = this.items.get(oi);
        if (st?.kind === 'call') this.tail(st.args, j.arguments, (s) => this.args(oi, s, out));
        return out;
      }
      case 'response.output_item.done': {
        this.itemDone(oi, isObj(j.item) ? j.item : {}, out);
        return out;
      }
      case 'response.completed':
      case 'response.incomplete': {
        const r = isObj(j.response) ? j.response : {};
        if (Array.isArray(r.output) && r.output.some((o: unknown) => isObj(o) && o.type === 'function_call')) this.hadCall = true;
        out.push(...this.closeAll());
        const u = fromResponsesUsage(r.usage);
        if (u) {
          const rt = r.usage?.output_tokens_details?.reasoning_tokens;
          out.push({ type: 'usage', usage: u, ...(typeof rt === 'number' ? { reasoningTokens: rt } : {}) });
        }
        out.push({
          type: 'finish',
          reason: finishToIR(r.status ?? (type === 'response.incomplete' ? 'incomplete' : 'completed'), r.incomplete_details, this.hadCall),
          stopSequence: null,
          raw: responsesFinish(r, type === 'response.incomplete' ? 'incomplete' : 'completed'),
        });
        out.push({ type: 'end' });
        this.done = true;
        return out;
      }
      case 'response.failed': {
        const r = isObj(j.response) ? j.response : {};
        const e = isObj(r.error) ? r.error : {};
        this.done = true;
        return [
          {
            type: 'error',
            error: {
              type: String(e.type ?? e.code ?? 'api_error'),
              message: String(e.message ?? 'upstream error'),
              ...(e.code ? { code: String(e.code) } : {}),
            },
          },
        ];
      }
      case 'error': {
        // Real streams nest the error; the spec's flat form puts code and message on the event.
        const e = isObj(j.error) ? j.error : { code: j.code, message: j.message };
        this.done = true;
        const code = e.code === undefined || e.code === null ? undefined : String(e.code);
        return [
          {
            type: 'error',
            error: {
              type: String(e.type ?? code ?? 'api_error'),
              message: String(e.message ?? 'upstream error'),
              ...(code ? { code } : {}),
            },
          },
        ];
      }
      default:
        return [];
    }
  }

  end(): IRStreamEvent[] {
    if (this.done) return [];
    this.done = true;
    // No response.completed: the stream was cut short. Nothing is closed (an output_item.done for
    // a half-streamed call would let an agent run it); the core sends the client an error instead.
    return [];
  }

  /** The text block for (item, content part), opened on first sight. */
  private textPart(oi: number, ci: number, out: IRStreamEvent[]): TextState | undefined {
    let st = this.items.get(oi);
    if (!st) {
      for (const other of this.items.values()) this.closeItem(other, out);
      st = { kind: 'message', parts: new Map() };
      this.items.set(oi, st);
    }
    if (st.kind !== 'message') return undefined;
    let t = st.parts.get(ci);
    if (!t) {
      this.closeItem(st, out); // text blocks never overlap: a new part ends the previous one
      t = { index: this.next++, text: '', open: true };
      st.parts.set(ci, t);
      out.push({ type: 'block_start', index: t.index, block: { type: 'text' } });
    }
    return t.open ? t : undefined;
  }

  private text(t: TextState, s: string, out: IRStreamEvent[]): void {
    t.text += s;
    out.push({ type: 'delta', index: t.index, delta: { type: 'text', text: s } });
  }

  private newPart(st: Extract<ItemState, { kind: 'reasoning' }>, out: IRStreamEvent[]): void {
    // Several summary parts are joined with a blank line, as in non-stream responses.
    if (st.text) this.thinking(st, '\n\n', out);
    st.part = '';
  }

  private thinking(st: Extract<ItemState, { kind: 'reasoning' }>, s: string, out: IRStreamEvent[]): void {
    if (!s) return;
    st.text += s;
    st.part += s;
    out.push({ type: 'delta', index: st.index, delta: { type: 'thinking', text: s } });
  }

  private args(oi: number, s: string, out: IRStreamEvent[]): void {
    const st = this.items.get(oi);
    if (st?.kind !== 'call' || !st.open) return;
    st.args += s;
    out.push({ type: 'delta', index: st.index, delta: { type: 'tool_args', json: s } });
  }

  /** A `.done` event's full text extends what the deltas gave (a trimmed capture): emit the rest. */
  private tail(have: string, full: unknown, emit: (s: string) => void): void {
    if (typeof full === 'string' && full.length > have.length && full.startsWith(have)) emit(full.slice(have.length));
  }

  private itemAdded(oi: number, item: Obj, out: IRStreamEvent[]): void {
    // Items stream one after another: a new one means the previous ones are complete.
    for (const st of this.items.values()) this.closeItem(st, out);
    if (item.type === 'message') {
      this.items.set(oi, { kind: 'message', parts: new Map() });
    } else if (item.type === 'reasoning') {
      const index = this.next++;
      const st: ItemState = { kind: 'reasoning', index, text: '', part: '', open: true };
      if (typeof item.encrypted_content === 'string' && item.encrypted_content) st.encrypted = item.encrypted_content;
      this.items.set(oi, st);
      out.push({ type: 'block_start', index, block: { type: 'thinking', ...(typeof item.id === 'string' ? { itemId: item.id } : {}) } });
    } else if (item.type === 'function_call') {
      const index = this.next++;
      this.hadCall = true;
      this.items.set(oi, { kind: 'call', index, args: '', open: true });
      out.push({
        type: 'block_start',
        index,
        block: {
          type: 'tool_call',
          id: String(item.call_id ?? item.id ?? ''),
          name: String(item.name ?? ''),
          ...(typeof item.id === 'string' ? { itemId: item.id } : {}),
        },
      });
      if (typeof item.arguments === 'string' && item.arguments) this.args(oi, item.arguments, out);
    } else {
      this.items.set(oi, { kind: 'skip' });
    }
  }

  private itemDone(oi: number, item: Obj, out: IRStreamEvent[]): void {
    // An item never announced: its done event carries all of it.
    if (!this.items.has(oi)) this.itemAdded(oi, { ...item, arguments: '', summary: [], content: [] }, out);
    const st = this.items.get(oi);
    if (!st || st.kind === 'skip') return;
    if (st.kind === 'message') {
      const content = Array.isArray(item.content) ? item.content : [];
      content.forEach((c: unknown, ci: number) => {
        if (!isObj(c) || (c.type !== 'output_text' && c.type !== 'refusal')) return;
        const full = c.type === 'refusal' ? c.refusal : c.text;
        const known = st.parts.get(ci);
        if (known && !known.open) return;
        const t = this.textPart(oi, ci, out);
        if (t) this.tail(t.text, full, (s) => this.text(t, s, out));
      });
      this.closeItem(st, out);
      return;
    }
    if (!st.open) return;
    if (st.kind === 'reasoning') {
      if (!st.text) {
        const summary = Array.isArray(item.summary)
          ? item.summary.map((s: unknown) => (isObj(s) && typeof s.text === 'string' ? s.text : '')).filter(Boolean)
          : [];
        if (summary.length > 0) this.thinking(st, summary.join('\n\n'), out);
      }
      // The item's final encrypted_content wins over the one announced when it was added.
      if (typeof item.encrypted_content === 'string' && item.encrypted_content) st.encrypted = item.encrypted_content;
    } else {
      this.tail(st.args, item.arguments, (s) => this.args(oi, s, out));
    }
    this.closeItem(st, out);
  }

  /** Closes an item's open blocks; a reasoning item gets its signature (encrypted_content) first. */
  private closeItem(st: ItemState, out: IRStreamEvent[]): void {
    if (st.kind === 'skip') return;
    if (st.kind === 'message') {
      for (const t of st.parts.values()) {
        if (!t.open) continue;
        t.open = false;
        out.push({ type: 'block_stop', index: t.index });
      }
      return;
    }
    if (!st.open) return;
    st.open = false;
    if (st.kind === 'reasoning' && st.encrypted)
      out.push({ type: 'delta', index: st.index, delta: { type: 'signature', signature: st.encrypted } });
    out.push({ type: 'block_stop', index: st.index });
  }

  private closeAll(): IRStreamEvent[] {
    const out: IRStreamEvent[] = [];
    for (const st of this.items.values()) this.closeItem(st, out);
    return out;
  }
}

// ---- encoder ---------------------------------------------------------------------------------

type OutState =
  | { kind: 'text'; contentIndex: number; text: string; citations: Citation[] }
  | { kind: 'reasoning'; outIndex: number; id: string; text: string; signature: string; partOpen: boolean }
  | { kind: 'redacted'; outIndex: number; item: Obj }
  | { kind: 'call'; outIndex: number; id: string; callId: string; name: string; args: string; tool?: IRTool }
  | { kind: 'done' };

interface OpenMessage {
  outIndex: number;
  id: string;
  content: Obj[];
}

export class ResponsesStreamEncoder implements StreamEncoder {
  private readonly serializer = new BlockSerializer();
  private readonly created = Math.floor(Date.now() / 1000);
  private readonly blocks = new Map<number, OutState>();
  private readonly output: Obj[] = [];
  private message: OpenMessage | undefined;
  private seq = 0;
  private started = false;
  private closed = false;
  private usage: Usage | undefined;
  private reasoningTokens: number | undefined;
  private finish: FinishReason | undefined;
  private readonly tools: Map<string, IRTool>;

  constructor(private readonly opts: EncodeOptions) {
    this.tools = toolsByName(opts.tools);
  }

  push(ev: IRStreamEvent): string {
    if (this.closed) return '';
    let out = '';
    for (const e of this.serializer.push(ev)) out += this.one(e);
    return out;
  }

  fail(err: ErrorInfo): string {
    this.closed = true;
    return responsesWire.streamError(err, {
      id: responseId(this.opts.requestId),
      model: this.opts.model,
      created: this.created,
      ...(this.seq > 0 ? { sequence: this.seq - 1 } : {}),
    });
  }

  private frame(type: string, payload: Obj): string {
    return formatJsonEvent({ type, sequence_number: this.seq++, ...payload }, type);
  }

  private response(extra: Obj): Obj {
    return responseObject(this.opts.requestId, this.opts.model, this.created, extra);
  }

  private ensureStart(): string {
    if (this.started) return '';
    this.started = true;
    const r = this.response({});
    return this.frame('response.created', { response: r }) + this.frame('response.in_progress', { response: r });
  }

  private closeMessage(): string {
    const m = this.message;
    if (!m) return '';
    this.message = undefined;
    const item = { id: m.id, type: 'message', status: 'completed', role: 'assistant', content: m.content };
    this.output[m.outIndex] = item;
    return this.frame('response.output_item.done', { output_index: m.outIndex, item });
  }

  private one(e: IRStreamEvent): string {
    switch (e.type) {
      case 'start':
        if (e.usage) this.usage = mergeUsage(this.usage, e.usage);
        return this.ensureStart();
      case 'block_start': {
        let out = this.ensureStart();
        const b = e.block;
        if (b.type === 'text') {
          if (!this.message) {
            const outIndex = this.output.length;
            this.output.push(undefined as unknown as Obj);
            this.message = { outIndex, id: messageItemId(this.opts.requestId, outIndex), content: [] };
            out += this.frame('response.output_item.added', {
              output_index: outIndex,
              item: { id: this.message.id, type: 'message', status: 'in_progress', role: 'assistant', content: [] },
            });
          }
          const m = this.message;
          const contentIndex = m.content.length;
          m.content.push({ type: 'output_text', text: '', annotations: [] });
          this.blocks.set(e.index, { kind: 'text', contentIndex, text: '', citations: [] });
          out += this.frame('response.content_part.added', {
            item_id: m.id,
            output_index: m.outIndex,
            content_index: contentIndex,
            part: { type: 'output_text', text: '', annotations: [] },
          });
          return out;
        }
        out += this.closeMessage();
        const outIndex = this.output.length;
        this.output.push(undefined as unknown as Obj);
        if (b.type === 'thinking') {
          const id = b.itemId ?? reasoningItemId(this.opts.requestId, outIndex);
          this.blocks.set(e.index, { kind: 'reasoning', outIndex, id, text: '', signature: '', partOpen: false });
          return out + this.frame('response.output_item.added', { output_index: outIndex, item: { id, type: 'reasoning', summary: [] } });
        }
        if (b.type === 'redacted_thinking') {
          const item = {
            id: reasoningItemId(this.opts.requestId, outIndex, true),
            type: 'reasoning',
            summary: [],
            encrypted_content: b.data,
          };
          this.blocks.set(e.index, { kind: 'redacted', outIndex, item });
          return out + this.frame('response.output_item.added', { output_index: outIndex, item });
        }
        if (b.type === 'web_search') {
          // A search the provider already finished: its whole item lifecycle at once.
          const item = searchItem(b, searchItemId(this.opts.requestId, outIndex));
          const ids = { item_id: item.id, output_index: outIndex };
          this.output[outIndex] = item;
          this.blocks.set(e.index, { kind: 'done' });
          return (
            out +
            this.frame('response.output_item.added', { output_index: outIndex, item: { ...item, status: 'in_progress' } }) +
            this.frame('response.web_search_call.in_progress', ids) +
            this.frame('response.web_search_call.searching', ids) +
            this.frame('response.web_search_call.completed', ids) +
            this.frame('response.output_item.done', { output_index: outIndex, item })
          );
        }
        const id = b.itemId ?? callItemId(this.opts.requestId, outIndex);
        const tool = this.tools.get(b.name);
        this.blocks.set(e.index, { kind: 'call', outIndex, id, callId: b.id, name: b.name, args: '', ...(tool ? { tool } : {}) });
        return (
          out +
          this.frame('response.output_item.added', {
            output_index: outIndex,
            item: callItem({ id: b.id, name: b.name, arguments: '' }, id, 'in_progress', tool),
          })
        );
      }
      case 'delta': {
        const st = this.blocks.get(e.index);
        const d = e.delta;
        if (!st) return '';
        if (st.kind === 'text' && d.type === 'text' && d.text && this.message) {
          st.text += d.text;
          return this.frame('response.output_text.delta', {
            item_id: this.message.id,
            output_index: this.message.outIndex,
            content_index: st.contentIndex,
            delta: d.text,
            logprobs: [],
          });
        }
        if (st.kind === 'reasoning') {
          if (d.type === 'signature') {
            st.signature += d.signature;
            return '';
          }
          if (d.type !== 'thinking' || !d.text) return '';
          let out = '';
          const ids = { item_id: st.id, output_index: st.outIndex, summary_index: 0 };
          if (!st.partOpen) {
            st.partOpen = true;
            out += this.frame('response.reasoning_summary_part.added', { ...ids, part: { type: 'summary_text', text: '' } });
          }
          st.text += d.text;
          return out + this.frame('response.reasoning_summary_text.delta', { ...ids, delta: d.text });
        }
        if (st.kind === 'text' && d.type === 'citation') {
          st.citations.push(d.citation);
          return '';
        }
        if (st.kind === 'call' && d.type === 'tool_args' && d.json) {
          st.args += d.json;
          // A custom tool's input is the `input` field of the arguments: sent whole at the stop.
          if (st.tool?.custom) return '';
          return this.frame('response.function_call_arguments.delta', { item_id: st.id, output_index: st.outIndex, delta: d.json });
        }
        return '';
      }
      case 'block_stop': {
        const st = this.blocks.get(e.index);
        if (!st) return '';
        this.blocks.delete(e.index);
        return this.stop(st);
      }
      case 'usage':
        this.usage = mergeUsage(this.usage, e.usage);
        if (e.reasoningTokens !== undefined) this.reasoningTokens = e.reasoningTokens;
        return '';
      case 'finish':
        this.finish = e.reason;
        return '';
      case 'end': {
        let out = this.ensureStart();
        for (const st of this.blocks.values()) out += this.stop(st);
        this.blocks.clear();
        out += this.closeMessage();
        this.closed = true;
        const { status, incomplete_details } = statusFromIR(this.finish ?? 'end_turn');
        const response = this.response({
          status,
          incomplete_details,
          output: this.output.filter(Boolean),
          usage: toResponsesUsage(this.usage ?? { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, this.reasoningTokens),
        });
        this.opts.onOutputItems?.(response.output);
        return out + this.frame(status === 'completed' ? 'response.completed' : 'response.incomplete', { response });
      }
      case 'error': {
        const out = this.fail(e.error);
        return out;
      }
    }
  }

  private stop(st: OutState): string {
    switch (st.kind) {
      case 'text': {
        const m = this.message;
        if (!m) return '';
        const notes = annotations(st.citations, st.text);
        const part = { type: 'output_text', text: st.text, annotations: notes };
        m.content[st.contentIndex] = part;
        const ids = { item_id: m.id, output_index: m.outIndex, content_index: st.contentIndex };
        let out = '';
        notes.forEach((annotation, annotation_index) => {
          out += this.frame('response.output_text.annotation.added', { ...ids, annotation_index, annotation });
        });
        return (
          out +
          this.frame('response.output_text.done', { ...ids, text: st.text, logprobs: [] }) +
          this.frame('response.content_part.done', { ...ids, part })
        );
      }
      case 'done':
        return '';
      case 'reasoning': {
        let out = '';
        const ids = { item_id: st.id, output_index: st.outIndex, summary_index: 0 };
        if (st.partOpen) {
          out += this.frame('response.reasoning_summary_text.done', { ...ids, text: st.text });
          out += this.frame('response.reasoning_summary_part.done', { ...ids, part: { type: 'summary_text', text: st.text } });
        }
        const item: Obj = { id: st.id, type: 'reasoning', summary: st.text ? [{ type: 'summary_text', text: st.text }] : [] };
        if (st.signature) item.encrypted_content = st.signature;
        this.output[st.outIndex] = item;
        return out + this.frame('response.output_item.done', { output_index: st.outIndex, item });
      }
      case 'redacted':
        this.output[st.outIndex] = st.item;
        return this.frame('response.output_item.done', { output_index: st.outIndex, item: st.item });
      case 'call': {
        const args = st.args || '{}';
        const item = callItem({ id: st.callId, name: st.name, arguments: args }, st.id, 'completed', st.tool);
        this.output[st.outIndex] = item;
        const ids = { item_id: st.id, output_index: st.outIndex };
        if (st.tool?.custom) {
          const input = customInput(args);
          return (
            (input ? this.frame('response.custom_tool_call_input.delta', { ...ids, delta: input }) : '') +
            this.frame('response.custom_tool_call_input.done', { ...ids, input }) +
            this.frame('response.output_item.done', { output_index: st.outIndex, item })
          );
        }
        return (
          this.frame('response.function_call_arguments.done', { ...ids, arguments: args }) +
          this.frame('response.output_item.done', { output_index: st.outIndex, item })
        );
      }
    }
  }
}
