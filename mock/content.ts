/**
 * Deterministic content for the mock upstream: reply text, thinking text, tool-call arguments,
 * ids and usage. Every protocol module builds a `Plan` from its request and renders it.
 */
import { createHash } from 'node:crypto';
import { stripDirectives, type Directives } from './directives.js';

export type Protocol = 'chat' | 'messages' | 'responses';

/** A tool the request offers, reduced to what the mock needs. */
export interface ToolDef {
  name: string;
  schema: unknown;
}

/** What a protocol module extracts from its request. */
export interface Extracted {
  /** Every prompt text (system/instructions, message text, tool results, earlier tool-call arguments). */
  texts: string[];
  /** Text of the last user turn ('' when none). */
  lastUserText: string;
  /** The last turn is a user message (not a tool result). */
  lastIsUser: boolean;
  tools: ToolDef[];
  /** 'auto' | 'none' | 'required' | a tool name. */
  toolChoice: string;
  /** false when the request disables parallel tool calls. */
  parallel: boolean;
  /** The request's output limit, when it sets one. */
  maxTokens?: number;
  /** The request itself asks for thinking / reasoning output. */
  thinkingRequested: boolean;
  /** The request offers the provider's own web search tool (Messages `web_search_…`, Responses `web_search…`). */
  webSearch?: boolean;
}

/** A provider-side web search the reply runs before answering (`web_search` directive). */
export interface SearchPlan {
  /** `srvtoolu_…` (Messages) / `ws_…` (Responses). */
  id: string;
  query: string;
  results: Array<{ url: string; title: string }>;
}

export interface ToolCallPlan {
  /** `call_…` (Chat, Responses call_id) / `toolu_…` (Messages). */
  id: string;
  /** Responses item id `fc_…`. */
  itemId: string;
  name: string;
  arguments: string;
  fragments: string[];
}

export interface UsagePlan {
  /** Uncached input tokens (Anthropic `input_tokens`). */
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  reasoning: number;
}

export interface Plan {
  protocol: Protocol;
  model: string;
  stream: boolean;
  created: number;
  /** Hex digest unique to this request; ids derive from it. */
  seed: string;
  /** Reply text and its stream chunks (one word per chunk, spaces leading). */
  text: string;
  textChunks: string[];
  thinking?: { text: string; chunks: string[]; signature: string };
  toolCalls: ToolCallPlan[];
  /** A web search run before the text (its first result is cited by the text). */
  search?: SearchPlan;
  /** The reply was cut by the request's output limit. */
  truncated: boolean;
  usage: UsagePlan;
  directives: Directives;
  body: Record<string, any>;
}

export const FILLER =
  'lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua'.split(' ');
const ECHO_WORDS = 8;

/** Whitespace-separated words, directives removed. */
export function words(text: string): string[] {
  return stripDirectives(text)
    .split(/\s+/)
    .filter((w) => w.length > 0);
}

/** The input-token function: number of words in every prompt text, directives excluded (at least 1). */
export function countInputTokens(texts: string[]): number {
  let n = 0;
  for (const t of texts) n += words(t).length;
  return Math.max(1, n);
}

/** `n` words: `base` followed by FILLER cycled, cut to n. */
export function sized(base: string[], n: number | undefined): string[] {
  if (n === undefined) return base;
  const out = base.slice(0, n);
  for (let i = 0; out.length < n; i++) out.push(FILLER[i % FILLER.length]);
  return out;
}

export function chunksOf(ws: string[]): string[] {
  return ws.map((w, i) => (i === 0 ? w : ` ${w}`));
}

export function echoOf(lastUserText: string): string[] {
  return words(lastUserText).slice(0, ECHO_WORDS);
}

/** Default reply: `This is a mock reply. You said: <first 8 words of the last user text>` */
export function replyWords(lastUserText: string, n: number | undefined): string[] {
  const echo = echoOf(lastUserText);
  const base = ['This', 'is', 'a', 'mock', 'reply.'];
  if (echo.length > 0) base.push('You', 'said:', ...echo);
  return sized(base, n);
}

/** Thinking: `Thinking about the request: <echo, with a final period>. A short deterministic answer will do.` */
export function thinkingWords(lastUserText: string, n: number | undefined): string[] {
  const echo = echoOf(lastUserText);
  if (echo.length > 0 && !/[.!?]$/.test(echo[echo.length - 1])) echo[echo.length - 1] += '.';
  const base = ['Thinking', 'about', 'the', 'request:', ...echo, 'A', 'short', 'deterministic', 'answer', 'will', 'do.'];
  return sized(base, n);
}

export function sha256(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** A deterministic id: prefix + hex digest of (seed, label), `len` hex characters. */
export function makeId(seed: string, label: string, prefix: string, len = 24): string {
  let hex = '';
  for (let i = 0; hex.length < len; i++) hex += sha256(`${seed}:${label}:${i}`).toString('hex');
  return prefix + hex.slice(0, len);
}

/** Deterministic Anthropic-like thinking signature (base64). */
export function signatureOf(text: string): string {
  return Buffer.concat([sha256(`sig1:${text}`), sha256(`sig2:${text}`), sha256(`sig3:${text}`)]).toString('base64');
}

/** Deterministic Responses `encrypted_content` (Fernet-looking base64url). */
export function encryptedOf(text: string): string {
  return 'gAAAAAB' + Buffer.concat([sha256(`enc1:${text}`), sha256(`enc2:${text}`), sha256(`enc3:${text}`)]).toString('base64url');
}

/** A value for a JSON schema: enum/const/default first, then by type. */
export function sample(schema: any, depth = 0): unknown {
  if (!schema || typeof schema !== 'object' || depth > 5) return 'mock';
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  if ('default' in schema) return schema.default;
  for (const k of ['anyOf', 'oneOf', 'allOf']) {
    if (Array.isArray(schema[k]) && schema[k].length > 0) {
      const pick = schema[k].find((s: any) => s && s.type !== 'null') ?? schema[k][0];
      return sample(pick, depth + 1);
    }
  }
  let type = schema.type;
  if (Array.isArray(type)) type = type.find((t: string) => t !== 'null') ?? type[0];
  if (type === undefined && schema.properties) type = 'object';
  switch (type) {
    case 'object':
      return sampleObject(schema, depth);
    case 'array':
      return [];
    case 'integer':
    case 'number':
      return 1;
    case 'boolean':
      return true;
    case 'null':
      return null;
    default:
      return 'mock';
  }
}

function sampleObject(schema: any, depth: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const props = schema && typeof schema.properties === 'object' && schema.properties ? schema.properties : {};
  for (const [k, v] of Object.entries(props)) out[k] = sample(v, depth + 1);
  return out;
}

/** Tool-call arguments: an object with every declared property sampled (`{}` without a schema). */
export function argumentsFor(schema: unknown): string {
  return JSON.stringify(schema && typeof schema === 'object' ? sampleObject(schema, 0) : {});
}

/** Argument stream fragments: pieces of at most 6 characters. */
export function fragmentsOf(args: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i += 6) out.push(args.slice(i, i + 6));
  return out.length > 0 ? out : ['{}'];
}

/** Text pieces of a content value in any of the three protocols (strings, parts, blocks, items). */
export function textsOf(content: unknown, into: string[]): void {
  if (typeof content === 'string') {
    into.push(content);
    return;
  }
  if (Array.isArray(content)) {
    for (const part of content) textsOf(part, into);
    return;
  }
  if (!content || typeof content !== 'object') return;
  const p = content as Record<string, any>;
  if (typeof p.text === 'string') into.push(p.text);
  if (typeof p.thinking === 'string') into.push(p.thinking);
  if (typeof p.refusal === 'string') into.push(p.refusal);
  if (p.type === 'tool_use' && p.input !== undefined) into.push(JSON.stringify(p.input));
  if (p.type === 'tool_result' && p.content !== undefined) textsOf(p.content, into);
  if (p.type === 'function_call' && typeof p.arguments === 'string') into.push(p.arguments);
  if (p.type === 'function_call_output') textsOf(p.output, into);
  if ((p.type === 'message' || (p.type === undefined && typeof p.role === 'string')) && p.content !== undefined) textsOf(p.content, into);
  if (p.type === 'reasoning' && Array.isArray(p.summary)) textsOf(p.summary, into);
}

export function textOf(content: unknown): string {
  const t: string[] = [];
  textsOf(content, t);
  return t.join(' ');
}

/** Builds the reply plan shared by the protocol renderers. */
export function buildPlan(protocol: Protocol, model: string, body: Record<string, any>, ex: Extracted, d: Directives, seed: string): Plan {
  const stream = body.stream === true;
  // Tool calls: forced by the `tools` directive, automatic when the request offers tools and the
  // last turn is the user's (or tool_choice requires a call); never with tool_choice none.
  const toolChoiceForces = ex.toolChoice !== 'auto' && ex.toolChoice !== 'none';
  const wantTools =
    ex.tools.length > 0 && (d.tools === true || (d.tools === undefined && ex.toolChoice !== 'none' && (ex.lastIsUser || toolChoiceForces)));
  const toolCalls: ToolCallPlan[] = [];
  if (wantTools) {
    let n = Math.max(1, d.toolCalls ?? 1);
    if (!ex.parallel && d.toolCalls === undefined) n = 1;
    let order = ex.tools;
    const first = toolChoiceForces && ex.toolChoice !== 'required' ? ex.toolChoice : d.call;
    if (first !== undefined) {
      const named = ex.tools.find((t) => t.name === first);
      if (named) order = [named, ...ex.tools.filter((t) => t !== named)];
    }
    for (let i = 0; i < n; i++) {
      const tool = order[i % order.length];
      const args = i === 0 && d.args !== undefined && tool.name === d.call ? d.args : argumentsFor(tool.schema);
      toolCalls.push({
        id: makeId(seed, `call${i}`, protocol === 'messages' ? 'toolu_' : 'call_'),
        itemId: makeId(seed, `fc${i}`, 'fc_', 48),
        name: tool.name,
        arguments: args,
        fragments: fragmentsOf(args),
      });
    }
  }
  const wantThinking = d.thinking === undefined ? ex.thinkingRequested : d.thinking !== false;
  let thinking: Plan['thinking'];
  if (wantThinking) {
    const tw = thinkingWords(ex.lastUserText, typeof d.thinking === 'number' ? d.thinking : undefined);
    const text = tw.join(' ');
    thinking = { text, chunks: chunksOf(tw), signature: signatureOf(text) };
  }
  let search: SearchPlan | undefined;
  if (d.webSearch !== undefined && d.webSearch !== false && ex.webSearch && toolCalls.length === 0) {
    const query = typeof d.webSearch === 'string' ? d.webSearch : echoOf(ex.lastUserText).join(' ') || 'mock search';
    const slug =
      query
        .toLowerCase()
        .replace(/[^a-z0-9]+/g, '-')
        .replace(/^-|-$/g, '') || 'q';
    search = {
      id: makeId(seed, 'search', protocol === 'messages' ? 'srvtoolu_' : 'ws_', 24),
      query,
      results: [1, 2].map((n) => ({ url: `https://example.com/${slug}/${n}`, title: `Result ${n} for ${query}` })),
    };
  }
  let rw = toolCalls.length > 0 ? [] : replyWords(ex.lastUserText, d.words);
  let truncated = false;
  if (ex.maxTokens !== undefined && ex.maxTokens >= 0 && rw.length > ex.maxTokens && !d.ignoreMaxTokens) {
    rw = rw.slice(0, ex.maxTokens);
    truncated = true;
  }
  const thinkingCount = thinking ? thinking.chunks.length : 0;
  let argCount = 0;
  for (const c of toolCalls) argCount += c.fragments.length;
  const output = d.outputTokens ?? rw.length + thinkingCount + argCount;
  const usage: UsagePlan = {
    input: d.inputTokens ?? countInputTokens(ex.texts),
    output,
    cacheRead: d.cacheRead ?? 0,
    cacheWrite: d.cacheWrite ?? 0,
    reasoning: Math.min(output, d.reasoningTokens ?? thinkingCount),
  };
  return {
    protocol,
    model,
    stream,
    created: d.created ?? Math.floor(Date.now() / 1000),
    seed,
    text: rw.join(' '),
    textChunks: chunksOf(rw),
    thinking,
    toolCalls,
    ...(search ? { search } : {}),
    truncated,
    usage,
    directives: d,
    body,
  };
}

export function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}
