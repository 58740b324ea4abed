/**
 * Anthropic Messages ⇄ IR. The IR is Anthropic-shaped, so most of this is renaming; the work is in
 * what Anthropic requires and the others do not: `max_tokens`, strictly alternating turns with
 * tool_result blocks first in the user turn, signed thinking replayed byte-exact, `temperature`
 * in [0, 1], no whitespace-only stop sequences. Every mapping choice is in docs/conversion.md.
 */
import { GatewayError } from '../../errors.js';
import type {
  ImagePart,
  ImageSource,
  IRBuiltinTool,
  IRMessage,
  IRReasoning,
  IRRequest,
  IRResponse,
  IRTool,
  IRToolChoice,
  Part,
  TextPart,
  ToolResultPart,
} from '../ir.js';
import type { EncodeOptions, ProtocolCodec } from '../types.js';
import { fromAnthropicUsage, toAnthropicUsage } from '../usage.js';
import { hasAnthropicSignature } from '../openai-responses/ids.js';
import { messagesWire } from './wire.js';
import { MessagesStreamDecoder, MessagesStreamEncoder } from './stream.js';
import {
  DEFAULT_MAX_TOKENS,
  EFFORT_BUDGET,
  MIN_BUDGET,
  citationsOf,
  effortForBudget,
  messageId,
  searchQuery,
  searchResult,
  stopReasonFromIR,
  stopReasonToIR,
} from './mapping.js';

// ---- small helpers ---------------------------------------------------------------------------

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const bad = (message: string) => new GatewayError('INVALID_REQUEST', { message });
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

function textPart(b: Obj): TextPart {
  const p: TextPart = { type: 'text', text: b.text };
  if (b.cache_control !== undefined && b.cache_control !== null) p.cacheControl = b.cache_control;
  return p;
}

function imageFromSource(src: unknown, where: string): ImagePart {
  if (isObj(src) && src.type === 'base64' && typeof src.data === 'string' && typeof src.media_type === 'string') {
    return { type: 'image', source: { kind: 'base64', mediaType: src.media_type, data: src.data } };
  }
  if (isObj(src) && src.type === 'url' && typeof src.url === 'string') {
    return { type: 'image', source: { kind: 'url', url: src.url } };
  }
  throw bad(`${where}: only base64 and url image sources can be converted to another protocol`);
}

function imageSource(s: ImageSource): Obj {
  return s.kind === 'url' ? { type: 'url', url: s.url } : { type: 'base64', media_type: s.mediaType, data: s.data };
}

// ---- requests --------------------------------------------------------------------------------

function decodeRequest(body: Obj): IRRequest {
  const system: TextPart[] = [];
  const sys = body.system;
  if (typeof sys === 'string') {
    if (sys.length > 0) system.push({ type: 'text', text: sys });
  } else if (Array.isArray(sys)) {
    sys.forEach((b, i) => {
      if (!isObj(b) || b.type !== 'text' || typeof b.text !== 'string') throw bad(`system[${i}] must be a text block`);
      system.push(textPart(b));
    });
  } else if (sys !== undefined && sys !== null) {
    throw bad("'system' must be a string or an array of text blocks");
  }

  const messages: IRMessage[] = [];
  (body.messages as unknown[]).forEach((m, i) => {
    if (!isObj(m)) throw bad(`messages[${i}] must be an object`);
    const blocks: unknown[] =
      typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : Array.isArray(m.content) ? m.content : [];
    if (!Array.isArray(m.content) && typeof m.content !== 'string') throw bad(`messages[${i}].content must be a string or an array`);
    const where = (j: number) => `messages[${i}].content[${j}]`;
    if (m.role === 'system') {
      blocks.forEach((b, j) => {
        if (!isObj(b) || b.type !== 'text' || typeof b.text !== 'string') throw bad(`${where(j)}: system messages hold text blocks only`);
        system.push(textPart(b));
      });
      return;
    }
    if (m.role === 'user') {
      const results: ToolResultPart[] = [];
      const rest: Part[] = [];
      blocks.forEach((b, j) => {
        if (!isObj(b)) throw bad(`${where(j)} must be an object`);
        switch (b.type) {
          case 'text':
            if (typeof b.text !== 'string') throw bad(`${where(j)}.text must be a string`);
            rest.push(textPart(b));
            break;
          case 'image':
            rest.push(imageFromSource(b.source, where(j)));
            break;
          case 'tool_result':
            results.push(decodeToolResult(b, where(j)));
            break;
          default:
            throw bad(`${where(j)}: '${String(b.type)}' blocks cannot be converted to another protocol`);
        }
      });
      // A user turn's tool results answer the previous assistant turn: they go first (docs: tool results).
      if (results.length > 0) messages.push({ role: 'tool', parts: results });
      if (rest.length > 0) messages.push({ role: 'user', parts: rest });
      return;
    }
    if (m.role === 'assistant') {
      const parts: Part[] = [];
      blocks.forEach((b, j) => {
        if (!isObj(b)) throw bad(`${where(j)} must be an object`);
        switch (b.type) {
          case 'text':
            if (typeof b.text !== 'string') throw bad(`${where(j)}.text must be a string`);
            parts.push(textPart(b));
            break;
          case 'thinking':
            parts.push({
              type: 'thinking',
              text: typeof b.thinking === 'string' ? b.thinking : '',
              ...(typeof b.signature === 'string' ? { signature: b.signature } : {}),
            });
            break;
          case 'redacted_thinking':
            parts.push({ type: 'redacted_thinking', data: String(b.data ?? '') });
            break;
          case 'tool_use':
            if (typeof b.id !== 'string' || typeof b.name !== 'string') throw bad(`${where(j)}: tool_use needs an id and a name`);
            parts.push({ type: 'tool_call', id: b.id, name: b.name, arguments: JSON.stringify(isObj(b.input) ? b.input : {}) });
            break;
          case 'server_tool_use':
          case 'web_search_tool_result':
          case 'web_fetch_tool_result':
          case 'code_execution_tool_result':
          case 'bash_code_execution_tool_result':
          case 'text_editor_code_execution_tool_result':
            // A provider-side tool that already ran (its findings are in the text that followed):
            // another protocol cannot replay it, and needs not.
            break;
          default:
            throw bad(`${where(j)}: '${String(b.type)}' blocks cannot be converted to another protocol`);
        }
      });
      messages.push({ role: 'assistant', parts });
      return;
    }
    throw bad(`messages[${i}].role must be 'user', 'assistant' or 'system'`);
  });

  const ir: IRRequest = { model: String(body.model ?? ''), system, messages, stream: body.stream === true };
  if (Array.isArray(body.tools)) {
    const tools: IRTool[] = [];
    const builtin: IRBuiltinTool[] = [];
    body.tools.forEach((t: unknown, i: number) => {
      if (!isObj(t)) throw bad(`tools[${i}] must be an object`);
      if (t.type !== undefined && t.type !== null && t.type !== 'custom') {
        // A server tool (web_search_20250305, bash_…, code_execution_…): the group's builtin_tools decides.
        builtin.push({ type: serverToolType(String(t.type)), options: t, where: `tools[${i}]` });
      } else tools.push(decodeTool(t, i));
    });
    ir.tools = tools;
    if (builtin.length > 0) ir.builtinTools = builtin;
  }
  const tc = body.tool_choice;
  if (isObj(tc)) {
    switch (tc.type) {
      case 'auto':
        ir.toolChoice = { type: 'auto' };
        break;
      case 'any':
        ir.toolChoice = { type: 'required' };
        break;
      case 'none':
        ir.toolChoice = { type: 'none' };
        break;
      case 'tool':
        if (typeof tc.name !== 'string') throw bad("tool_choice of type 'tool' needs a name");
        ir.toolChoice = { type: 'tool', name: tc.name };
        break;
      default:
        throw bad(`tool_choice type '${String(tc.type)}' cannot be converted`);
    }
    if (tc.disable_parallel_tool_use === true) ir.parallelToolCalls = false;
  }
  const maxTokens = num(body.max_tokens);
  if (maxTokens !== undefined) ir.maxTokens = maxTokens;
  const temperature = num(body.temperature);
  if (temperature !== undefined) ir.temperature = temperature;
  const topP = num(body.top_p);
  if (topP !== undefined) ir.topP = topP;
  const topK = num(body.top_k);
  if (topK !== undefined) ir.topK = topK;
  if (Array.isArray(body.stop_sequences)) ir.stop = body.stop_sequences.filter((s: unknown): s is string => typeof s === 'string');
  const reasoning = decodeThinking(body);
  if (reasoning) ir.reasoning = reasoning;
  return ir;
}

function decodeToolResult(b: Obj, where: string): ToolResultPart {
  if (typeof b.tool_use_id !== 'string') throw bad(`${where}: tool_result needs a tool_use_id`);
  let content: ToolResultPart['content'];
  if (typeof b.content === 'string') content = b.content;
  else if (b.content === undefined || b.content === null) content = '';
  else if (Array.isArray(b.content)) {
    content = b.content.map((c: unknown, k: number) => {
      if (isObj(c) && c.type === 'text' && typeof c.text === 'string') return textPart(c);
      if (isObj(c) && c.type === 'image') return imageFromSource(c.source, `${where}.content[${k}]`);
      throw bad(`${where}.content[${k}]: '${String(isObj(c) ? c.type : typeof c)}' blocks in tool results cannot be converted`);
    });
  } else throw bad(`${where}.content must be a string or an array`);
  const part: ToolResultPart = { type: 'tool_result', callId: b.tool_use_id, content };
  if (b.is_error === true) part.isError = true;
  return part;
}

/** `web_search_20250305` → `web_search`: a server tool's type without its version date. */
function serverToolType(type: string): string {
  return type.replace(/_\d{8}$/, '');
}

function decodeTool(t: Obj, i: number): IRTool {
  if (typeof t.name !== 'string' || t.name.length === 0) throw bad(`tools[${i}].name is required`);
  const tool: IRTool = { name: t.name, parameters: isObj(t.input_schema) ? t.input_schema : { type: 'object', properties: {} } };
  if (typeof t.description === 'string') tool.description = t.description;
  if (typeof t.strict === 'boolean') tool.strict = t.strict;
  return tool;
}

const ADAPTIVE_EFFORT: Record<string, NonNullable<IRReasoning['effort']>> = {
  low: 'low',
  medium: 'medium',
  high: 'high',
  xhigh: 'high',
  max: 'high',
};

function decodeThinking(body: Obj): IRReasoning | undefined {
  const th = body.thinking;
  const effort =
    isObj(body.output_config) && typeof body.output_config.effort === 'string' ? ADAPTIVE_EFFORT[body.output_config.effort] : undefined;
  if (isObj(th) && th.type === 'enabled') {
    const budget = num(th.budget_tokens) ?? MIN_BUDGET;
    return { budgetTokens: budget, effort: effort ?? effortForBudget(budget) };
  }
  if (isObj(th) && th.type === 'disabled') return undefined;
  if (effort) return { effort };
  return undefined;
}

function argumentsObject(id: string, name: string, args: string): Obj {
  let v: unknown;
  try {
    v = JSON.parse(args === '' ? '{}' : args);
  } catch {
    throw bad(`tool call '${id}' (${name}): arguments are not valid JSON`);
  }
  if (!isObj(v)) throw bad(`tool call '${id}' (${name}): arguments must be a JSON object`);
  return v;
}

function toolResultBlock(p: ToolResultPart): Obj {
  const b: Obj = { type: 'tool_result', tool_use_id: p.callId };
  if (typeof p.content === 'string') b.content = p.content;
  else {
    b.content = p.content
      .filter((c) => c.type !== 'text' || c.text.length > 0)
      .map((c) => (c.type === 'text' ? textBlock(c) : { type: 'image', source: imageSource(c.source) }));
  }
  if (p.isError) b.is_error = true;
  return b;
}

function textBlock(p: TextPart): Obj {
  const b: Obj = { type: 'text', text: p.text };
  if (p.cacheControl !== undefined) b.cache_control = p.cacheControl;
  return b;
}

interface Turn {
  role: 'user' | 'assistant';
  content: Obj[];
}

/** IR messages → strictly alternating Anthropic turns (tool results first in their user turn). */
function encodeMessages(messages: IRMessage[]): Turn[] {
  const turns: Turn[] = [];
  for (const m of messages) {
    let role: Turn['role'];
    const content: Obj[] = [];
    if (m.role === 'system') continue; // decoders hoist system text into IRRequest.system
    if (m.role === 'assistant') {
      role = 'assistant';
      for (const p of m.parts) {
        switch (p.type) {
          case 'text':
            if (p.text.length > 0) content.push(textBlock(p));
            break;
          case 'thinking':
            // Only a signature Anthropic minted can go back to Anthropic; unsigned thinking is dropped.
            if (hasAnthropicSignature(p)) content.push({ type: 'thinking', thinking: p.text, signature: p.signature });
            break;
          case 'redacted_thinking':
            if (p.data.length > 0) content.push({ type: 'redacted_thinking', data: p.data });
            break;
          case 'tool_call':
            content.push({ type: 'tool_use', id: p.id, name: p.name, input: argumentsObject(p.id, p.name, p.arguments) });
            break;
          case 'image':
            content.push({ type: 'image', source: imageSource(p.source) });
            break;
          default:
            break;
        }
      }
    } else {
      role = 'user';
      for (const p of m.parts) {
        switch (p.type) {
          case 'text':
            if (p.text.length > 0) content.push(textBlock(p));
            break;
          case 'image':
            content.push({ type: 'image', source: imageSource(p.source) });
            break;
          case 'tool_result':
            content.push(toolResultBlock(p));
            break;
          default:
            break;
        }
      }
    }
    if (content.length === 0) continue;
    const last = turns[turns.length - 1];
    if (last && last.role === role) last.content.push(...content);
    else turns.push({ role, content });
  }
  for (const t of turns) {
    if (t.role !== 'user') continue;
    // Anthropic wants a user turn's tool_result blocks before anything else (stable order).
    const results = t.content.filter((b) => b.type === 'tool_result');
    if (results.length > 0 && results.length < t.content.length) {
      t.content = [...results, ...t.content.filter((b) => b.type !== 'tool_result')];
    }
  }
  return turns;
}

function encodeToolChoice(tc: IRToolChoice | undefined, parallel: boolean | undefined): Obj | undefined {
  const disable = parallel === false ? { disable_parallel_tool_use: true } : {};
  if (!tc) return parallel === false ? { type: 'auto', ...disable } : undefined;
  switch (tc.type) {
    case 'auto':
      return { type: 'auto', ...disable };
    case 'none':
      return { type: 'none' };
    case 'required':
      return { type: 'any', ...disable };
    case 'tool':
      return { type: 'tool', name: tc.name, ...disable };
  }
}

function encodeRequest(req: IRRequest, opts: EncodeOptions): Obj {
  const messages = encodeMessages(req.messages);
  const maxTokens = Math.max(1, Math.floor(req.maxTokens ?? opts.defaultMaxTokens ?? DEFAULT_MAX_TOKENS));
  const out: Obj = { model: opts.model, max_tokens: maxTokens, messages };
  if (req.system.length === 1 && req.system[0].cacheControl === undefined) out.system = req.system[0].text;
  else if (req.system.length > 0) out.system = req.system.filter((p) => p.text.length > 0).map(textBlock);

  const hasTools = (Array.isArray(req.tools) && req.tools.length > 0) || (req.builtinTools?.length ?? 0) > 0;
  if (hasTools) {
    out.tools = (req.tools ?? []).map((t) => {
      const tool: Obj = { name: t.name };
      if (t.description !== undefined) tool.description = t.description;
      tool.input_schema = t.parameters;
      // `strict` is not forwarded: models without structured tool use reject it.
      return tool;
    });
    for (const b of req.builtinTools ?? []) if (b.type === 'web_search') out.tools.push(webSearchTool(b.options));
    const tc = encodeToolChoice(req.toolChoice, req.parallelToolCalls);
    if (tc) out.tool_choice = tc;
  }
  if (req.stop && req.stop.length > 0) {
    const stops = req.stop.filter((s) => s.trim().length > 0);
    if (stops.length > 0) out.stop_sequences = stops;
  }

  const thinking = thinkingFor(req, maxTokens, messages);
  if (thinking) {
    // Anthropic rejects temperature/top_k and a low top_p while thinking: they are left out.
    out.thinking = thinking;
  } else {
    if (req.temperature !== undefined) out.temperature = Math.min(1, Math.max(0, req.temperature));
    if (req.topP !== undefined) out.top_p = req.topP;
    if (req.topK !== undefined) out.top_k = req.topK;
  }
  if (req.stream) out.stream = true;
  return out;
}

/**
 * A Responses `web_search` tool as Anthropic's server-side web search: allowed domains (scheme
 * dropped: Anthropic wants bare domains) and the approximate user location carry over; OpenAI's
 * `search_context_size` and `external_web_access` have no equivalent.
 */
function webSearchTool(o: Obj): Obj {
  const tool: Obj = { type: 'web_search_20250305', name: 'web_search' };
  const domains = isObj(o.filters) && Array.isArray(o.filters.allowed_domains) ? o.filters.allowed_domains : undefined;
  if (domains && domains.length > 0) {
    tool.allowed_domains = domains
      .filter((d: unknown): d is string => typeof d === 'string')
      .map((d: string) => d.replace(/^https?:\/\//, '').replace(/\/$/, ''));
  }
  const loc = o.user_location;
  if (isObj(loc)) {
    const l: Obj = { type: 'approximate' };
    for (const k of ['city', 'region', 'country', 'timezone']) if (typeof loc[k] === 'string' && loc[k]) l[k] = loc[k];
    if (Object.keys(l).length > 1) tool.user_location = l;
  }
  return tool;
}

/**
 * The `thinking` to send, or undefined when it cannot be: budget from effort (EFFORT_BUDGET), kept
 * below max_tokens with room for the answer; no thinking when tool use is forced (Anthropic rejects
 * that combination) or when the turn continues a tool loop whose assistant turn carries no signed
 * thinking (Anthropic requires that turn to start with its thinking block).
 */
function thinkingFor(req: IRRequest, maxTokens: number, turns: Turn[]): Obj | undefined {
  const r = req.reasoning;
  if (!r || (r.effort === undefined && r.budgetTokens === undefined)) return undefined;
  if (req.toolChoice?.type === 'required' || req.toolChoice?.type === 'tool') return undefined;
  let budget = r.budgetTokens ?? EFFORT_BUDGET[r.effort ?? 'medium'];
  if (budget >= maxTokens) budget = maxTokens - MIN_BUDGET;
  if (budget < MIN_BUDGET) return undefined;
  const last = turns[turns.length - 1];
  if (last && last.role === 'user' && last.content.some((b) => b.type === 'tool_result')) {
    const prev = turns[turns.length - 2];
    const first = prev?.role === 'assistant' ? prev.content[0] : undefined;
    if (!first || (first.type !== 'thinking' && first.type !== 'redacted_thinking')) return undefined;
  }
  return { type: 'enabled', budget_tokens: Math.floor(budget) };
}

// ---- responses -------------------------------------------------------------------------------

function decodeResponse(body: Obj): IRResponse {
  const content: IRResponse['content'] = [];
  const queries = new Map<string, string>();
  for (const b of Array.isArray(body.content) ? body.content : []) {
    if (!isObj(b)) continue;
    switch (b.type) {
      case 'text':
        if (typeof b.text === 'string') {
          const citations = citationsOf(b.citations);
          content.push({ type: 'text', text: b.text, ...(citations.length > 0 ? { citations } : {}) });
        }
        break;
      case 'server_tool_use':
        if (b.name === 'web_search' && typeof b.id === 'string') queries.set(b.id, searchQuery(b.input));
        break;
      case 'web_search_tool_result':
        content.push(searchResult(b, queries));
        break;
      case 'thinking':
        content.push({
          type: 'thinking',
          text: String(b.thinking ?? ''),
          ...(typeof b.signature === 'string' && b.signature ? { signature: b.signature } : {}),
        });
        break;
      case 'redacted_thinking':
        content.push({ type: 'redacted_thinking', data: String(b.data ?? '') });
        break;
      case 'tool_use':
        content.push({
          type: 'tool_call',
          id: String(b.id ?? ''),
          name: String(b.name ?? ''),
          arguments: JSON.stringify(isObj(b.input) ? b.input : {}),
        });
        break;
      default:
        break; // server tools, their results and other blocks the IR lacks
    }
  }
  const res: IRResponse = {
    id: String(body.id ?? ''),
    model: String(body.model ?? ''),
    content,
    finishReason: stopReasonToIR(body.stop_reason),
    stopSequence: typeof body.stop_sequence === 'string' ? body.stop_sequence : null,
    usage: fromAnthropicUsage(body.usage) ?? { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
  };
  return res;
}

/** Tool-call arguments for a response: an object, `{}` when the upstream's text is not one. */
function responseInput(args: string): Obj {
  try {
    const v = JSON.parse(args === '' ? '{}' : args);
    return isObj(v) ? v : {};
  } catch {
    return {};
  }
}

function encodeResponse(res: IRResponse, opts: EncodeOptions): Obj {
  const content: Obj[] = [];
  for (const p of res.content) {
    switch (p.type) {
      case 'text':
        if (p.text.length > 0) content.push({ type: 'text', text: p.text });
        break;
      case 'thinking':
        if (hasAnthropicSignature(p)) content.push({ type: 'thinking', thinking: p.text, signature: p.signature });
        break;
      case 'redacted_thinking':
        content.push({ type: 'redacted_thinking', data: p.data });
        break;
      case 'tool_call':
        content.push({ type: 'tool_use', id: p.id, name: p.name, input: responseInput(p.arguments) });
        break;
    }
  }
  return {
    id: messageId(opts.requestId),
    type: 'message',
    role: 'assistant',
    model: opts.model,
    content,
    stop_reason: stopReasonFromIR(res.finishReason),
    stop_sequence: res.stopSequence ?? null,
    usage: toAnthropicUsage(res.usage),
  };
}

export const messagesCodec: ProtocolCodec = {
  ...messagesWire,
  builtinTools: new Set(['web_search']),
  decodeRequest,
  encodeRequest,
  decodeResponse,
  encodeResponse,
  createStreamDecoder: () => new MessagesStreamDecoder(),
  createStreamEncoder: (opts: EncodeOptions) => new MessagesStreamEncoder(opts),
};
