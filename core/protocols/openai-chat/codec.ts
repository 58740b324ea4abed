/**
 * OpenAI Chat Completions ⇄ IR. System/developer messages are hoisted into the IR's system list;
 * consecutive `tool` messages become one IR tool message (parallel calls); assistant thinking
 * rides in LiteLLM's non-standard `reasoning_content` / `thinking_blocks` fields both ways.
 * Every mapping choice is in docs/conversion.md.
 */
import { GatewayError } from '../../errors.js';
import type {
  ImagePart,
  IRMessage,
  IRReasoning,
  IRRequest,
  IRResponse,
  IRTool,
  IRToolChoice,
  Part,
  TextPart,
  ThinkingPart,
  RedactedThinkingPart,
  ToolResultPart,
} from '../ir.js';
import type { EncodeOptions, ProtocolCodec } from '../types.js';
import { fromChatUsage, toChatUsage } from '../usage.js';
import { chatWire } from './wire.js';
import { completionId, finishFromIR, finishToIR, sourceFromUrl, thinkingBlock, urlFromSource } from './mapping.js';
import { ChatStreamDecoder, ChatStreamEncoder } from './stream.js';

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const bad = (message: string) => new GatewayError('INVALID_REQUEST', { message });
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

const EFFORTS: Record<string, NonNullable<IRReasoning['effort']>> = {
  minimal: 'minimal',
  low: 'low',
  medium: 'medium',
  high: 'high',
  xhigh: 'high',
};

/** Arguments as the IR keeps them: JSON text, never "". */
export function normaliseArguments(v: unknown): string {
  if (typeof v === 'string') return v.trim() === '' ? '{}' : v;
  if (isObj(v)) return JSON.stringify(v);
  return '{}';
}

// ---- requests --------------------------------------------------------------------------------

function imagePart(p: Obj, where: string): ImagePart {
  const iu = p.image_url;
  const url = typeof iu === 'string' ? iu : isObj(iu) && typeof iu.url === 'string' ? iu.url : undefined;
  const source = url === undefined ? undefined : sourceFromUrl(url);
  if (!source) throw bad(`${where}: image_url must be an http(s) URL or a base64 data URL`);
  const part: ImagePart = { type: 'image', source };
  if (isObj(iu) && typeof iu.detail === 'string') part.detail = iu.detail;
  return part;
}

/** Text of a system/developer/tool message: a string or text parts, concatenated. */
function plainText(content: unknown, where: string): string {
  if (typeof content === 'string') return content;
  if (content === null || content === undefined) return '';
  if (!Array.isArray(content)) throw bad(`${where}.content must be a string or an array`);
  return content
    .map((p, j) => {
      if (isObj(p) && (p.type === 'text' || p.type === 'input_text') && typeof p.text === 'string') return p.text;
      throw bad(`${where}.content[${j}]: only text parts are allowed here`);
    })
    .join('');
}

function userParts(content: unknown, where: string): Part[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  if (content === null || content === undefined) return [];
  if (!Array.isArray(content)) throw bad(`${where}.content must be a string or an array`);
  return content.map((p, j): Part => {
    const w = `${where}.content[${j}]`;
    if (!isObj(p)) throw bad(`${w} must be an object`);
    if (p.type === 'text' && typeof p.text === 'string') return { type: 'text', text: p.text };
    if (p.type === 'image_url') return imagePart(p, w);
    throw bad(`${w}: '${String(p.type)}' content parts cannot be converted to another protocol`);
  });
}

function thinkingFromBlocks(blocks: unknown[]): Array<ThinkingPart | RedactedThinkingPart> {
  const out: Array<ThinkingPart | RedactedThinkingPart> = [];
  for (const b of blocks) {
    if (!isObj(b)) continue;
    if (b.type === 'thinking') {
      const p: ThinkingPart = { type: 'thinking', text: typeof b.thinking === 'string' ? b.thinking : '' };
      if (typeof b.signature === 'string' && b.signature) p.signature = b.signature;
      out.push(p);
    } else if (b.type === 'redacted_thinking' && typeof b.data === 'string') {
      out.push({ type: 'redacted_thinking', data: b.data });
    }
  }
  return out;
}

function assistantParts(m: Obj, where: string): Part[] {
  const parts: Part[] = [];
  if (Array.isArray(m.thinking_blocks) && m.thinking_blocks.length > 0) parts.push(...thinkingFromBlocks(m.thinking_blocks));
  else if (typeof m.reasoning_content === 'string' && m.reasoning_content) parts.push({ type: 'thinking', text: m.reasoning_content });
  let text = '';
  if (typeof m.content === 'string') text = m.content;
  else if (Array.isArray(m.content)) {
    text = m.content
      .map((p: unknown, j: number) => {
        if (isObj(p) && p.type === 'text' && typeof p.text === 'string') return p.text;
        if (isObj(p) && p.type === 'refusal' && typeof p.refusal === 'string') return p.refusal;
        throw bad(`${where}.content[${j}]: assistant content must be text or refusal parts`);
      })
      .join('');
  } else if (m.content !== null && m.content !== undefined) throw bad(`${where}.content must be a string, an array or null`);
  if (!text && typeof m.refusal === 'string') text = m.refusal;
  if (text) parts.push({ type: 'text', text });
  if (m.function_call !== undefined && m.function_call !== null) {
    throw bad(`${where}: legacy 'function_call' cannot be converted; use 'tool_calls'`);
  }
  if (Array.isArray(m.tool_calls)) {
    m.tool_calls.forEach((tc: unknown, j: number) => {
      const w = `${where}.tool_calls[${j}]`;
      if (!isObj(tc) || (tc.type !== undefined && tc.type !== 'function')) throw bad(`${w}: only function tool calls can be converted`);
      if (typeof tc.id !== 'string' || !tc.id) throw bad(`${w}.id is required`);
      if (!isObj(tc.function) || typeof tc.function.name !== 'string') throw bad(`${w}.function.name is required`);
      parts.push({ type: 'tool_call', id: tc.id, name: tc.function.name, arguments: normaliseArguments(tc.function.arguments) });
    });
  }
  return parts;
}

function toolResult(m: Obj, where: string): ToolResultPart {
  if (typeof m.tool_call_id !== 'string' || !m.tool_call_id) throw bad(`${where}.tool_call_id is required`);
  let content: ToolResultPart['content'];
  if (Array.isArray(m.content)) {
    content = m.content.map((p: unknown, j: number): TextPart | ImagePart => {
      const w = `${where}.content[${j}]`;
      if (isObj(p) && p.type === 'text' && typeof p.text === 'string') return { type: 'text', text: p.text };
      if (isObj(p) && p.type === 'image_url') return imagePart(p, w);
      throw bad(`${w}: tool message content must be text parts`);
    });
  } else content = plainText(m.content, where);
  return { type: 'tool_result', callId: m.tool_call_id, content };
}

function decodeTools(body: Obj): IRTool[] | undefined {
  const out: IRTool[] = [];
  if (Array.isArray(body.tools)) {
    body.tools.forEach((t: unknown, i: number) => {
      if (!isObj(t)) throw bad(`tools[${i}] must be an object`);
      if (t.type !== 'function' || !isObj(t.function)) {
        throw bad(`tools[${i}]: '${String(t.type)}' tools cannot be used with a model of another protocol; only function tools convert`);
      }
      out.push(irTool(t.function, `tools[${i}].function`));
    });
  } else if (Array.isArray(body.functions)) {
    body.functions.forEach((f: unknown, i: number) => out.push(irTool(f, `functions[${i}]`)));
  } else return undefined;
  return out;
}

function irTool(f: unknown, where: string): IRTool {
  if (!isObj(f) || typeof f.name !== 'string' || !f.name) throw bad(`${where}.name is required`);
  const tool: IRTool = { name: f.name, parameters: isObj(f.parameters) ? f.parameters : { type: 'object', properties: {} } };
  if (typeof f.description === 'string') tool.description = f.description;
  if (typeof f.strict === 'boolean') tool.strict = f.strict;
  return tool;
}

function decodeToolChoice(tc: unknown, legacy: unknown): IRToolChoice | undefined {
  const v = tc ?? legacy;
  if (v === undefined || v === null) return undefined;
  if (v === 'auto' || v === 'none') return { type: v };
  if (v === 'required') return { type: 'required' };
  if (isObj(v) && v.type === 'function' && isObj(v.function) && typeof v.function.name === 'string')
    return { type: 'tool', name: v.function.name };
  if (isObj(v) && v.type === undefined && typeof v.name === 'string') return { type: 'tool', name: v.name }; // legacy function_call
  throw bad(`tool_choice ${JSON.stringify(v)} cannot be converted`);
}

function decodeRequest(body: Obj): IRRequest {
  const system: TextPart[] = [];
  const messages: IRMessage[] = [];
  (body.messages as unknown[]).forEach((m, i) => {
    const where = `messages[${i}]`;
    if (!isObj(m)) throw bad(`${where} must be an object`);
    switch (m.role) {
      case 'system':
      case 'developer': {
        const text = plainText(m.content, where);
        if (text) system.push({ type: 'text', text });
        break;
      }
      case 'user':
        messages.push({ role: 'user', parts: userParts(m.content, where) });
        break;
      case 'assistant':
        messages.push({ role: 'assistant', parts: assistantParts(m, where) });
        break;
      case 'tool': {
        const part = toolResult(m, where);
        const last = messages[messages.length - 1];
        if (last && last.role === 'tool') last.parts.push(part);
        else messages.push({ role: 'tool', parts: [part] });
        break;
      }
      case 'function':
        throw bad(`${where}: legacy 'function' messages cannot be converted; use 'tool' messages`);
      default:
        throw bad(`${where}.role '${String(m.role)}' is not supported`);
    }
  });

  const ir: IRRequest = { model: String(body.model ?? ''), system, messages, stream: body.stream === true };
  const tools = decodeTools(body);
  if (tools) ir.tools = tools;
  const tc = decodeToolChoice(body.tool_choice, body.function_call);
  if (tc) ir.toolChoice = tc;
  if (typeof body.parallel_tool_calls === 'boolean') ir.parallelToolCalls = body.parallel_tool_calls;
  const max = num(body.max_completion_tokens) ?? num(body.max_tokens);
  if (max !== undefined) ir.maxTokens = max;
  const temperature = num(body.temperature);
  if (temperature !== undefined) ir.temperature = temperature;
  const topP = num(body.top_p);
  if (topP !== undefined) ir.topP = topP;
  if (typeof body.stop === 'string') ir.stop = [body.stop];
  else if (Array.isArray(body.stop)) ir.stop = body.stop.filter((s: unknown): s is string => typeof s === 'string');
  if (typeof body.reasoning_effort === 'string' && EFFORTS[body.reasoning_effort])
    ir.reasoning = { effort: EFFORTS[body.reasoning_effort] };
  return ir;
}

function contentParts(parts: Array<TextPart | ImagePart>): Obj[] {
  return parts.map((p) =>
    p.type === 'text'
      ? { type: 'text', text: p.text }
      : { type: 'image_url', image_url: { url: urlFromSource(p.source), ...(p.detail ? { detail: p.detail } : {}) } },
  );
}

function encodeMessages(req: IRRequest): Obj[] {
  const out: Obj[] = [];
  for (const p of req.system) if (p.text) out.push({ role: 'system', content: p.text });
  for (const m of req.messages) {
    switch (m.role) {
      case 'system': {
        for (const p of m.parts) if (p.type === 'text' && p.text) out.push({ role: 'system', content: p.text });
        break;
      }
      case 'user': {
        const parts = m.parts.filter((p): p is TextPart | ImagePart => p.type === 'text' || p.type === 'image');
        if (parts.length === 0) break;
        out.push({ role: 'user', content: parts.length === 1 && parts[0].type === 'text' ? parts[0].text : contentParts(parts) });
        break;
      }
      case 'assistant': {
        // Thinking is dropped: Chat upstreams have no way to take it back.
        const text = m.parts
          .filter((p): p is TextPart => p.type === 'text')
          .map((p) => p.text)
          .join('');
        const calls = m.parts
          .filter((p) => p.type === 'tool_call')
          .map(
            (p) =>
              p.type === 'tool_call' && {
                id: p.id,
                type: 'function',
                function: { name: p.name, arguments: p.arguments },
              },
          );
        if (!text && calls.length === 0) break;
        const msg: Obj = { role: 'assistant', content: text || null };
        if (calls.length > 0) msg.tool_calls = calls;
        out.push(msg);
        break;
      }
      case 'tool': {
        const images: ImagePart[] = [];
        for (const p of m.parts) {
          if (p.type !== 'tool_result') continue;
          let content: string | Obj[];
          if (typeof p.content === 'string') content = p.content;
          else {
            const texts = p.content.filter((c): c is TextPart => c.type === 'text');
            images.push(...p.content.filter((c): c is ImagePart => c.type === 'image'));
            content = texts.length === 1 ? texts[0].text : texts.map((t) => ({ type: 'text', text: t.text }));
            if (texts.length === 0) content = '';
          }
          out.push({ role: 'tool', tool_call_id: p.callId, content });
        }
        // Chat tool messages carry text only: images a tool returned follow as a user message.
        if (images.length > 0) out.push({ role: 'user', content: contentParts(images) });
        break;
      }
    }
  }
  return out;
}

function encodeToolChoice(tc: IRToolChoice): unknown {
  return tc.type === 'tool' ? { type: 'function', function: { name: tc.name } } : tc.type;
}

function encodeRequest(req: IRRequest, opts: EncodeOptions): Obj {
  const out: Obj = { model: opts.model, messages: encodeMessages(req) };
  if (req.tools && req.tools.length > 0) {
    out.tools = req.tools.map((t) => ({
      type: 'function',
      function: {
        name: t.name,
        ...(t.description !== undefined ? { description: t.description } : {}),
        parameters: t.parameters,
        ...(t.strict !== undefined ? { strict: t.strict } : {}),
      },
    }));
    if (req.toolChoice) out.tool_choice = encodeToolChoice(req.toolChoice);
    if (req.parallelToolCalls !== undefined) out.parallel_tool_calls = req.parallelToolCalls;
  }
  if (req.maxTokens !== undefined) out.max_completion_tokens = req.maxTokens;
  if (req.temperature !== undefined) out.temperature = req.temperature;
  if (req.topP !== undefined) out.top_p = req.topP;
  if (req.stop && req.stop.length > 0) out.stop = req.stop;
  if (req.reasoning?.effort) out.reasoning_effort = req.reasoning.effort;
  if (req.stream) {
    out.stream = true;
    out.stream_options = { include_usage: true };
  }
  return out;
}

// ---- responses -------------------------------------------------------------------------------

function decodeResponse(body: Obj): IRResponse {
  const choice = Array.isArray(body.choices) && isObj(body.choices[0]) ? body.choices[0] : {};
  const msg = isObj(choice.message) ? choice.message : {};
  const content: IRResponse['content'] = [];
  if (Array.isArray(msg.thinking_blocks) && msg.thinking_blocks.length > 0) content.push(...thinkingFromBlocks(msg.thinking_blocks));
  else {
    const r = typeof msg.reasoning_content === 'string' ? msg.reasoning_content : typeof msg.reasoning === 'string' ? msg.reasoning : '';
    if (r) content.push({ type: 'thinking', text: r });
  }
  let text = '';
  if (typeof msg.content === 'string') text = msg.content;
  else if (Array.isArray(msg.content))
    text = msg.content.map((p: unknown) => (isObj(p) && typeof p.text === 'string' ? p.text : '')).join('');
  if (!text && typeof msg.refusal === 'string') text = msg.refusal;
  if (text) content.push({ type: 'text', text });
  if (Array.isArray(msg.tool_calls)) {
    msg.tool_calls.forEach((tc: unknown, j: number) => {
      if (!isObj(tc) || !isObj(tc.function)) return;
      content.push({
        type: 'tool_call',
        id: typeof tc.id === 'string' && tc.id ? tc.id : `call_${j}`,
        name: String(tc.function.name ?? ''),
        arguments: normaliseArguments(tc.function.arguments),
      });
    });
  }
  let finishReason = finishToIR(choice.finish_reason);
  // Some compatible servers say "stop" after tool calls; a client must still run them.
  if (finishReason === 'end_turn' && content.some((p) => p.type === 'tool_call')) finishReason = 'tool_use';
  const res: IRResponse = {
    id: String(body.id ?? ''),
    model: String(body.model ?? ''),
    content,
    finishReason,
    stopSequence: null,
    usage: fromChatUsage(body.usage) ?? { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
  };
  const rt = body.usage?.completion_tokens_details?.reasoning_tokens;
  if (typeof rt === 'number') res.reasoningTokens = rt;
  return res;
}

function encodeResponse(res: IRResponse, opts: EncodeOptions): Obj {
  const text = res.content
    .filter((p): p is TextPart => p.type === 'text')
    .map((p) => p.text)
    .join('');
  const thinking = res.content.filter(
    (p): p is ThinkingPart | RedactedThinkingPart => p.type === 'thinking' || p.type === 'redacted_thinking',
  );
  const calls = res.content.flatMap((p) =>
    p.type === 'tool_call' ? [{ id: p.id, type: 'function', function: { name: p.name, arguments: p.arguments } }] : [],
  );
  const message: Obj = { role: 'assistant', content: text || null, refusal: null };
  if (calls.length > 0) message.tool_calls = calls;
  const reasoning = thinking
    .filter((p): p is ThinkingPart => p.type === 'thinking')
    .map((p) => p.text)
    .filter(Boolean)
    .join('\n\n');
  if (reasoning) message.reasoning_content = reasoning;
  const blocks = thinking.map(thinkingBlock).filter((b): b is Obj => b !== undefined);
  if (blocks.length > 0) message.thinking_blocks = blocks;
  return {
    id: completionId(opts.requestId),
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: opts.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishFromIR(res.finishReason) }],
    usage: toChatUsage(res.usage, res.reasoningTokens),
  };
}

export const chatCodec: ProtocolCodec = {
  ...chatWire,
  decodeRequest,
  encodeRequest,
  decodeResponse,
  encodeResponse,
  createStreamDecoder: () => new ChatStreamDecoder(),
  createStreamEncoder: (opts: EncodeOptions) => new ChatStreamEncoder(opts),
};
