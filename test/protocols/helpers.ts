/**
 * Shared bits for the protocol-conversion tests (not a test file itself): transcripts, decoding
 * through `SseParser`, conversion through the codecs, and what each official SDK helper shows a
 * user ("Seen": text, tool calls, thinking, finish, usage in the four buckets).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { createRequire } from 'node:module';
import { SseParser, type SseBlock, type SseBytesBlock } from '../../core/sse.js';
import { codecFor } from '../../core/protocols/index.js';
import type { ProtocolName } from '../../core/config/types.js';
import type { IRStreamEvent } from '../../core/protocols/ir.js';
import type { ProtocolCodec } from '../../core/protocols/types.js';
import type { Usage } from '../../core/money.js';
import { fromAnthropicUsage, fromChatUsage, fromResponsesUsage } from '../../core/protocols/usage.js';

// The Anthropic SDK's own partial-JSON parser: tool input cut short (max_tokens) compares like
// `MessageStream` shows it. Loaded by require: a deep ESM import of it breaks under tap's first-run
// (TypeScript-plugin) loader on a fresh install.
const { partialParse } = createRequire(import.meta.url)('@anthropic-ai/sdk/_vendor/partial-json-parser/parser.js') as {
  partialParse: (s: string) => unknown;
};

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const CONFORMANCE = path.resolve(ROOT, 'test/fixtures/conformance');

export const PROTOCOLS: ProtocolName[] = ['anthropic-messages', 'openai-chat', 'openai-responses'];
export const DIRS: Record<ProtocolName, string> = {
  'anthropic-messages': 'anthropic',
  'openai-chat': 'openai-chat',
  'openai-responses': 'openai-responses',
};

export const OPTS = { model: 'test-model', requestId: 'req-1' };

export function codec(p: ProtocolName): ProtocolCodec {
  const c = codecFor(p);
  if (!c) throw new Error(`no codec for ${p}`);
  return c;
}

export function transcripts(p: ProtocolName): Array<{ name: string; file: string; bytes: Buffer }> {
  const dir = path.join(CONFORMANCE, 'sse', DIRS[p]);
  return readdirSync(dir)
    .filter((f) => f.endsWith('.sse'))
    .sort()
    .map((name) => {
      const file = path.join(dir, name);
      return { name, file, bytes: readFileSync(file) };
    });
}

export function readJson(rel: string): any {
  return JSON.parse(readFileSync(path.join(CONFORMANCE, rel), 'utf8'));
}

/** The JSON body of a `curl … -d '…'` example. */
export function curlBody(rel: string): any {
  const text = readFileSync(path.join(CONFORMANCE, rel), 'utf8');
  const start = text.indexOf("-d '");
  return JSON.parse(text.slice(start + 4, text.lastIndexOf("'")));
}

/** Feeds `chunks` through SseParser's byte mode and the protocol's decoder, as the core does. */
export function decodeChunks(p: ProtocolName, chunks: Array<Uint8Array | string>): IRStreamEvent[] {
  const parser = new SseParser();
  const dec = codec(p).createStreamDecoder();
  const out: IRStreamEvent[] = [];
  const feed = (blocks: SseBlock[]) => {
    for (const b of blocks) out.push(...dec.push(b));
  };
  for (const c of chunks) feed(parser.feedBytes(typeof c === 'string' ? Buffer.from(c) : c));
  feed(parser.endBytes(true));
  out.push(...dec.end());
  return out;
}

export function decode(p: ProtocolName, text: string | Uint8Array): IRStreamEvent[] {
  return decodeChunks(p, [text]);
}

export function encode(p: ProtocolName, events: IRStreamEvent[], opts = OPTS): string {
  const enc = codec(p).createStreamEncoder(opts);
  let out = '';
  for (const ev of events) out += enc.push(ev);
  return out;
}

/**
 * A stream translator's output for one block or its end as text. A converting translator writes
 * text; a passthrough one hands back views of the upstream's bytes, which are text too.
 */
export function text(piece: string | Buffer | SseBytesBlock): string {
  if (typeof piece === 'string') return piece;
  if (Buffer.isBuffer(piece)) return piece.toString('utf8');
  return piece.buf.toString('utf8', piece.start, piece.end);
}

export function convert(from: ProtocolName, to: ProtocolName, text: string | Uint8Array): string {
  return encode(to, decode(from, text));
}

// ---- what users see ----------------------------------------------------------------------------

export type FinishClass = 'stop' | 'length' | 'tool' | 'refusal';

export interface Seen {
  text: string;
  tools: Array<{ id: string; name: string; args: unknown }>;
  /** All thinking text, concatenated in order. */
  thinking: string;
  /** Signatures / encrypted_content in order, byte-exact. */
  signatures: string[];
  finish: FinishClass;
  usage: Usage;
}

const ZERO: Usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };

/** A usage's four billed buckets (reasoning tokens are a detail within `output`, not a bucket). */
export function buckets(u: Usage | undefined): Usage | undefined {
  return u && { input: u.input, output: u.output, cacheRead: u.cacheRead, cacheWrite: u.cacheWrite };
}

export function parseArgs(s: unknown): unknown {
  if (typeof s !== 'string' || s.trim() === '') return {};
  try {
    return JSON.parse(s);
  } catch {
    return partialParse(s);
  }
}

const fetchOf = (text: string) => async () => new Response(text, { status: 200, headers: { 'content-type': 'text/event-stream' } });

export async function anthropicSees(text: string): Promise<{ seen: Seen; message: any }> {
  const client = new Anthropic({ apiKey: 'test', baseURL: 'http://sdk.test', maxRetries: 0, fetch: fetchOf(text) });
  const message: any = await client.messages
    .stream({ model: 'm', max_tokens: 1024, messages: [{ role: 'user', content: 'hi' }] })
    .finalMessage();
  const blocks: any[] = message.content;
  const finish: FinishClass =
    message.stop_reason === 'max_tokens' || message.stop_reason === 'model_context_window_exceeded'
      ? 'length'
      : message.stop_reason === 'tool_use'
        ? 'tool'
        : message.stop_reason === 'refusal'
          ? 'refusal'
          : 'stop';
  const seen: Seen = {
    text: blocks
      .filter((b) => b.type === 'text')
      .map((b) => b.text)
      .join(''),
    tools: blocks.filter((b) => b.type === 'tool_use').map((b) => ({ id: b.id, name: b.name, args: b.input })),
    thinking: blocks
      .filter((b) => b.type === 'thinking')
      .map((b) => b.thinking)
      .join(''),
    signatures: blocks.filter((b) => b.type === 'thinking' || b.type === 'redacted_thinking').map((b) => b.signature ?? b.data),
    finish,
    usage: buckets(fromAnthropicUsage(message.usage)) ?? ZERO,
  };
  return { seen, message };
}

export async function chatSees(text: string): Promise<{ seen: Seen; completion: any; chunks: any[] }> {
  const client = new OpenAI({ apiKey: 'test', baseURL: 'http://sdk.test', maxRetries: 0, fetch: fetchOf(text) });
  const chunks: any[] = [];
  const s = client.chat.completions.stream({
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    stream_options: { include_usage: true },
  });
  s.on('chunk', (c) => chunks.push(c));
  const completion: any = await s.finalChatCompletion();
  const msg = completion.choices[0].message;
  const fr = completion.choices[0].finish_reason;
  let reasoning = '';
  for (const c of chunks)
    for (const ch of c.choices ?? []) if (typeof ch.delta?.reasoning_content === 'string') reasoning += ch.delta.reasoning_content;
  const blocks: any[] = [];
  for (const c of chunks)
    for (const ch of c.choices ?? []) if (Array.isArray(ch.delta?.thinking_blocks)) blocks.push(...ch.delta.thinking_blocks);
  const seen: Seen = {
    text: (msg.content ?? '') + (msg.refusal ?? ''),
    // Chat clients JSON.parse arguments: "" is a defect here, not an empty object (ANALYSIS §5.6).
    tools: (msg.tool_calls ?? []).map((c: any) => ({
      id: c.id,
      name: c.function.name,
      args: c.function.arguments === '' ? '<empty arguments>' : parseArgs(c.function.arguments),
    })),
    thinking: reasoning,
    signatures: blocks.map((b) => b.signature ?? b.data),
    finish:
      fr === 'length' ? 'length' : fr === 'tool_calls' || fr === 'function_call' ? 'tool' : fr === 'content_filter' ? 'refusal' : 'stop',
    usage: buckets(fromChatUsage(completion.usage)) ?? ZERO,
  };
  return { seen, completion, chunks };
}

export function responseSeen(r: any): Seen {
  const output: any[] = r.output ?? [];
  const calls = output.filter((o) => o.type === 'function_call');
  const reason = r.incomplete_details?.reason;
  const finish: FinishClass =
    r.status === 'incomplete' ? (reason === 'content_filter' ? 'refusal' : 'length') : calls.length > 0 ? 'tool' : 'stop';
  const thinkingOf = (o: any) => {
    const summary = (o.summary ?? []).map((s: any) => s.text).filter(Boolean);
    if (summary.length > 0) return summary.join('\n\n');
    return (o.content ?? [])
      .map((c: any) => c.text)
      .filter(Boolean)
      .join('\n\n');
  };
  return {
    text: output
      .filter((o) => o.type === 'message')
      .flatMap((o) => o.content)
      .map((c: any) => (c.type === 'output_text' ? c.text : (c.refusal ?? '')))
      .join(''),
    tools: calls.map((c) => ({ id: c.call_id, name: c.name, args: parseArgs(c.arguments) })),
    thinking: output
      .filter((o) => o.type === 'reasoning')
      .map(thinkingOf)
      .join(''),
    signatures: output.filter((o) => o.type === 'reasoning' && o.encrypted_content).map((o) => o.encrypted_content),
    finish,
    usage: buckets(fromResponsesUsage(r.usage)) ?? ZERO,
  };
}

export async function responsesSees(text: string): Promise<{ seen: Seen; response: any }> {
  const client = new OpenAI({ apiKey: 'test', baseURL: 'http://sdk.test', maxRetries: 0, fetch: fetchOf(text) });
  const response: any = await client.responses.stream({ model: 'm', input: 'hi' }).finalResponse();
  return { seen: responseSeen(response), response };
}

export async function sees(p: ProtocolName, text: string): Promise<Seen> {
  switch (p) {
    case 'anthropic-messages':
      return (await anthropicSees(text)).seen;
    case 'openai-chat':
      return (await chatSees(text)).seen;
    case 'openai-responses':
      return (await responsesSees(text)).seen;
  }
}

/** JSON payloads of an SSE text's data frames (without `[DONE]`), with their event names. */
export function frames(text: string): Array<{ event?: string; data: any }> {
  const p = new SseParser();
  return [...p.feed(text), ...p.end(true)]
    .filter((b) => b.data !== undefined && b.data !== '[DONE]')
    .map((b) => ({ event: b.event, data: JSON.parse(b.data as string) }));
}

// ---- invariants ---------------------------------------------------------------------------------

/** Problems with an IR event sequence against the stream contract in ir.ts ([] when none). */
export function irProblems(events: IRStreamEvent[]): string[] {
  const problems: string[] = [];
  const open = new Map<number, string>();
  let next = 0;
  let finishes = 0;
  let terminal = false;
  events.forEach((e, i) => {
    if (terminal) problems.push(`#${i} ${e.type} after the terminal event`);
    if (i === 0 && e.type !== 'start' && e.type !== 'error') problems.push(`first event is ${e.type}`);
    switch (e.type) {
      case 'start':
        if (i !== 0) problems.push(`#${i} start not first`);
        break;
      case 'block_start': {
        if (e.index !== next) problems.push(`#${i} block index ${e.index}, expected ${next}`);
        next = e.index + 1;
        const exclusive = e.block.type !== 'tool_call';
        if (open.size > 0 && (exclusive || [...open.values()].some((k) => k !== 'tool_call')))
          problems.push(`#${i} ${e.block.type} block overlaps another`);
        open.set(e.index, e.block.type);
        break;
      }
      case 'delta':
        if (!open.has(e.index)) problems.push(`#${i} delta for block ${e.index} which is not open`);
        break;
      case 'block_stop':
        if (!open.delete(e.index)) problems.push(`#${i} stop for block ${e.index} which is not open`);
        break;
      case 'finish':
        finishes++;
        if (open.size > 0) problems.push(`#${i} finish with open blocks`);
        break;
      case 'end':
        if (finishes !== 1) problems.push(`end after ${finishes} finish events`);
        terminal = true;
        break;
      case 'error':
        terminal = true;
        break;
      default:
        break;
    }
  });
  return problems;
}

/** Problems with encoded client SSE against what each protocol's SDK accumulator requires. */
export function wireProblems(p: ProtocolName, text: string): string[] {
  const problems: string[] = [];
  const parser = new SseParser();
  const blocks = [...parser.feed(text), ...parser.end(true)].filter((b) => b.data !== undefined);
  const errored = blocks.some((b) => b.event === 'error');
  if (p === 'openai-chat') {
    const chunks = blocks.filter((b) => b.data !== '[DONE]');
    for (const b of chunks) if (b.event !== undefined && b.event !== 'error') problems.push(`named event ${b.event}`);
    const data = chunks.filter((b) => b.event !== 'error').map((b) => JSON.parse(b.data!));
    if (data.length > 0 && data[0].choices?.[0]?.delta?.role !== 'assistant') problems.push('first chunk has no role');
    const seenIdx: number[] = [];
    let finishes = 0;
    for (const c of data) {
      for (const ch of c.choices ?? []) {
        if (ch.finish_reason) finishes++;
        for (const tc of ch.delta?.tool_calls ?? []) {
          if (!seenIdx.includes(tc.index)) {
            if (tc.index !== seenIdx.length) problems.push(`tool index ${tc.index}, expected ${seenIdx.length}`);
            if (tc.type !== 'function' || !tc.id || typeof tc.function?.name !== 'string')
              problems.push(`first delta of tool ${tc.index} incomplete`);
            seenIdx.push(tc.index);
          }
        }
      }
    }
    if (!errored) {
      if (finishes !== 1) problems.push(`${finishes} finish reasons`);
      const last = data[data.length - 1];
      if (!last || !Array.isArray(last.choices) || last.choices.length !== 0 || !last.usage) problems.push('no final usage chunk');
      if (!text.endsWith('data: [DONE]\n\n')) problems.push('no [DONE]');
    }
    return problems;
  }
  for (const b of blocks) {
    if (b.data === '[DONE]') {
      problems.push('[DONE] frame');
      continue;
    }
    const d = JSON.parse(b.data!);
    if (b.event === undefined) problems.push(`unnamed frame ${String(d.type)}`);
    else if (d.type !== b.event) problems.push(`event ${b.event} carries type ${String(d.type)}`);
  }
  const data = blocks.filter((b) => b.data !== '[DONE]').map((b) => JSON.parse(b.data!));
  if (p === 'anthropic-messages') {
    let open: { index: number; type: string } | undefined;
    let next = 0;
    data.forEach((d, i) => {
      if (i === 0 && d.type !== 'message_start' && d.type !== 'error') problems.push(`first frame ${d.type}`);
      if (d.type === 'message_start' && (typeof d.message?.usage !== 'object' || d.message.usage === null))
        problems.push('message_start without usage');
      if (d.type === 'content_block_start') {
        if (open) problems.push(`block ${d.index} starts while ${open.index} is open`);
        if (d.index !== next) problems.push(`block index ${d.index}, expected ${next}`);
        next++;
        open = { index: d.index, type: d.content_block.type };
      }
      if (d.type === 'content_block_delta') {
        if (!open || open.index !== d.index) problems.push(`delta for block ${d.index} which is not open`);
        else if (d.delta.type === 'text_delta' && open.type !== 'text') problems.push(`text_delta into a ${open.type} block`);
        if ((d.delta.type === 'text_delta' && !d.delta.text) || (d.delta.type === 'thinking_delta' && !d.delta.thinking))
          problems.push('empty delta');
      }
      if (d.type === 'content_block_stop') {
        if (!open || open.index !== d.index) problems.push(`stop for block ${d.index} which is not open`);
        open = undefined;
      }
      if (d.type === 'message_delta' && (typeof d.usage !== 'object' || typeof d.usage.output_tokens !== 'number'))
        problems.push('message_delta without usage');
    });
    if (!errored && data[data.length - 1]?.type !== 'message_stop') problems.push('does not end with message_stop');
    return problems;
  }
  // openai-responses
  let open: number | undefined;
  let next = 0;
  data.forEach((d, i) => {
    if (d.sequence_number !== i && !(errored && d.type !== undefined && i >= data.length - 2))
      problems.push(`sequence_number ${d.sequence_number} at ${i}`);
    if (i === 0 && d.type !== 'response.created' && d.type !== 'error') problems.push(`first frame ${d.type}`);
    if (i === 1 && d.type !== 'response.in_progress' && !errored) problems.push(`second frame ${d.type}`);
    if (d.type === 'response.output_item.added') {
      if (open !== undefined) problems.push(`item ${d.output_index} added while ${open} is open`);
      if (d.output_index !== next) problems.push(`output_index ${d.output_index}, expected ${next}`);
      next++;
      open = d.output_index;
    } else if (d.type === 'response.output_item.done') {
      if (open !== d.output_index) problems.push(`done for item ${d.output_index} which is not open`);
      open = undefined;
    } else if (typeof d.output_index === 'number' && d.output_index !== open)
      problems.push(`${d.type} for item ${d.output_index} which is not open`);
  });
  const last = data[data.length - 1];
  if (!errored && last?.type !== 'response.completed' && last?.type !== 'response.incomplete')
    problems.push(`ends with ${String(last?.type)}`);
  if (!errored && (!last?.response?.usage || last.response.output.length !== next))
    problems.push('terminal response lacks usage or output');
  if (errored && last?.type !== 'response.failed') problems.push('error not followed by response.failed');
  return problems;
}
