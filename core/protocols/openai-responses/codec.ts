/**
 * OpenAI Responses ⇄ IR. `instructions` and system/developer items → IR system; consecutive
 * assistant-side items (message, reasoning, function_call) → one IR assistant message; consecutive
 * `function_call_output` items → one IR tool message. Reasoning items keep their id and
 * `encrypted_content` (as the thinking signature) byte-exact. Every mapping choice is in
 * docs/conversion.md.
 */
import { GatewayError } from '../../errors.js';
import type {
  ImagePart,
  IRBuiltinTool,
  IRMessage,
  IRRequest,
  IRResponse,
  IRTool,
  IRToolChoice,
  Part,
  TextPart,
  ToolResultPart,
} from '../ir.js';
import type { EncodeOptions, ProtocolCodec } from '../types.js';
import { fromResponsesUsage, toResponsesUsage } from '../usage.js';
import { sourceFromUrl, urlFromSource } from '../openai-chat/mapping.js';
import { GW_REDACTED, isGatewayItemId, isOpenAIReasoning } from './ids.js';
import { EFFORTS, builtinType, finishToIR, flatToolName, outputItems, responseObject, statusFromIR } from './mapping.js';
import { responsesWire } from './wire.js';
import { ResponsesStreamDecoder, ResponsesStreamEncoder } from './stream.js';

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const bad = (message: string) => new GatewayError('INVALID_REQUEST', { message });
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/** Arguments as the IR keeps them: JSON text, never "". */
function args(v: unknown): string {
  if (typeof v === 'string') return v.trim() === '' ? '{}' : v;
  return isObj(v) ? JSON.stringify(v) : '{}';
}

// ---- requests --------------------------------------------------------------------------------

function imagePart(p: Obj, where: string): ImagePart {
  const url = typeof p.image_url === 'string' ? p.image_url : undefined;
  const source = url === undefined ? undefined : sourceFromUrl(url);
  if (!source) throw bad(`${where}: only input_image with an http(s) or base64 data URL can be converted (not file_id)`);
  const part: ImagePart = { type: 'image', source };
  if (typeof p.detail === 'string') part.detail = p.detail;
  return part;
}

function contentParts(content: unknown, where: string): Array<TextPart | ImagePart> {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  if (!Array.isArray(content)) throw bad(`${where}.content must be a string or an array`);
  return content.map((p, j): TextPart | ImagePart => {
    const w = `${where}.content[${j}]`;
    if (!isObj(p)) throw bad(`${w} must be an object`);
    switch (p.type) {
      case 'input_text':
      case 'output_text':
      case 'text':
        if (typeof p.text !== 'string') throw bad(`${w}.text must be a string`);
        return { type: 'text', text: p.text };
      case 'refusal':
        return { type: 'text', text: String(p.refusal ?? '') };
      case 'input_image':
        return imagePart(p, w);
      default:
        throw bad(`${w}: '${String(p.type)}' content cannot be converted to another protocol`);
    }
  });
}

function reasoningText(item: Obj): string {
  const summary = Array.isArray(item.summary)
    ? item.summary.map((s: unknown) => (isObj(s) && typeof s.text === 'string' ? s.text : '')).filter(Boolean)
    : [];
  if (summary.length > 0) return summary.join('\n\n');
  const content = Array.isArray(item.content)
    ? item.content.map((s: unknown) => (isObj(s) && typeof s.text === 'string' ? s.text : '')).filter(Boolean)
    : [];
  return content.join('\n\n');
}

/** A reasoning item → IR thinking (or the redacted_thinking a gateway-minted `rs_gwr_` item carries). */
export function reasoningPart(item: Obj): Part {
  const id = typeof item.id === 'string' ? item.id : undefined;
  const enc = typeof item.encrypted_content === 'string' && item.encrypted_content ? item.encrypted_content : undefined;
  if (id && id.startsWith(GW_REDACTED) && enc) return { type: 'redacted_thinking', data: enc };
  return { type: 'thinking', text: reasoningText(item), ...(enc ? { signature: enc } : {}), ...(id ? { itemId: id } : {}) };
}

function decodeInput(input: unknown, system: TextPart[]): IRMessage[] {
  const messages: IRMessage[] = [];
  if (typeof input === 'string') return [{ role: 'user', parts: [{ type: 'text', text: input }] }];
  if (input === undefined || input === null) return messages;
  const assistant = (): IRMessage => {
    const last = messages[messages.length - 1];
    if (last && last.role === 'assistant') return last;
    const m: IRMessage = { role: 'assistant', parts: [] };
    messages.push(m);
    return m;
  };
  (input as unknown[]).forEach((item, i) => {
    const where = `input[${i}]`;
    if (!isObj(item)) throw bad(`${where} must be an object`);
    const type = item.type ?? (item.role !== undefined ? 'message' : undefined);
    switch (type) {
      case 'message': {
        const parts = contentParts(item.content, where);
        if (item.role === 'system' || item.role === 'developer') {
          const text = parts
            .map((p) => {
              if (p.type !== 'text') throw bad(`${where}: ${String(item.role)} messages hold text only`);
              return p.text;
            })
            .join('');
          if (text) system.push({ type: 'text', text });
        } else if (item.role === 'user') {
          messages.push({ role: 'user', parts });
        } else if (item.role === 'assistant') {
          assistant().parts.push(...parts.filter((p) => p.type !== 'text' || p.text.length > 0));
        } else throw bad(`${where}.role '${String(item.role)}' is not supported`);
        break;
      }
      case 'reasoning':
        assistant().parts.push(reasoningPart(item));
        break;
      case 'function_call': {
        if (typeof item.call_id !== 'string' || typeof item.name !== 'string') throw bad(`${where}: function_call needs call_id and name`);
        const name = typeof item.namespace === 'string' && item.namespace ? flatToolName(item.namespace, item.name) : item.name;
        assistant().parts.push({
          type: 'tool_call',
          id: item.call_id,
          name,
          arguments: args(item.arguments),
          ...(typeof item.id === 'string' ? { itemId: item.id } : {}),
        });
        break;
      }
      case 'custom_tool_call': {
        if (typeof item.call_id !== 'string' || typeof item.name !== 'string')
          throw bad(`${where}: custom_tool_call needs call_id and name`);
        assistant().parts.push({
          type: 'tool_call',
          id: item.call_id,
          name: item.name,
          arguments: JSON.stringify({ input: typeof item.input === 'string' ? item.input : '' }),
          ...(typeof item.id === 'string' ? { itemId: item.id } : {}),
        });
        break;
      }
      case 'web_search_call':
        // A search the provider already ran (its findings are in the text that followed): the
        // target cannot replay it, and needs not.
        break;
      case 'function_call_output':
      case 'custom_tool_call_output': {
        if (typeof item.call_id !== 'string') throw bad(`${where}: ${String(type)} needs call_id`);
        const part: ToolResultPart = {
          type: 'tool_result',
          callId: item.call_id,
          content:
            typeof item.output === 'string' ? item.output : Array.isArray(item.output) ? contentParts(item.output, `${where}.output`) : '',
        };
        const last = messages[messages.length - 1];
        if (last && last.role === 'tool') last.parts.push(part);
        else messages.push({ role: 'tool', parts: [part] });
        break;
      }
      case 'item_reference':
        // The converter resolves references to items this gateway produced for the same key;
        // what is left names an item it does not hold (never produced here, or expired).
        throw bad(
          `${where}: item_reference '${String(item.id)}' is not an item this gateway can recall for this key (unknown or expired); send the item itself`,
        );
      default:
        throw bad(`${where}: '${String(type)}' items cannot be converted to another protocol`);
    }
  });
  return messages;
}

function functionTool(t: Obj, where: string): IRTool {
  if (typeof t.name !== 'string' || !t.name) throw bad(`${where}.name is required`);
  const tool: IRTool = { name: t.name, parameters: isObj(t.parameters) ? t.parameters : { type: 'object', properties: {} } };
  if (typeof t.description === 'string') tool.description = t.description;
  if (typeof t.strict === 'boolean') tool.strict = t.strict;
  return tool;
}

/**
 * A custom (freeform) tool as a function of one string argument; its format (a grammar, when
 * given) goes into the description, the only place the target's model can read it.
 */
function customTool(t: Obj, where: string): IRTool {
  if (typeof t.name !== 'string' || !t.name) throw bad(`${where}.name is required`);
  let description = typeof t.description === 'string' ? t.description : '';
  const f = isObj(t.format) ? t.format : undefined;
  if (f && f.type === 'grammar' && typeof f.definition === 'string') {
    description += `${description ? '\n\n' : ''}The input must follow this ${typeof f.syntax === 'string' ? f.syntax : ''} grammar:\n${f.definition}`;
  }
  return {
    name: t.name,
    ...(description ? { description } : {}),
    parameters: {
      type: 'object',
      properties: { input: { type: 'string', description: 'The raw input of the tool, as free-form text' } },
      required: ['input'],
      additionalProperties: false,
    },
    custom: true,
  };
}

/** Function, namespace (flattened) and custom tools → IR tools; every other type is provider-side. */
function decodeTools(tools: unknown): { tools: IRTool[]; builtin: IRBuiltinTool[] } {
  const out: IRTool[] = [];
  const builtin: IRBuiltinTool[] = [];
  if (!Array.isArray(tools)) return { tools: out, builtin };
  tools.forEach((t, i) => {
    const where = `tools[${i}]`;
    if (!isObj(t)) throw bad(`${where} must be an object`);
    switch (t.type) {
      case 'function':
        out.push(functionTool(t, where));
        break;
      case 'namespace': {
        if (typeof t.name !== 'string' || !t.name) throw bad(`${where}.name is required`);
        const inner = Array.isArray(t.tools) ? t.tools : [];
        inner.forEach((f: unknown, j: number) => {
          const w = `${where}.tools[${j}]`;
          if (!isObj(f) || f.type !== 'function') throw bad(`${w}: namespaces hold function tools only`);
          const tool = functionTool(f, w);
          out.push({ ...tool, name: flatToolName(t.name, tool.name), namespace: { name: t.name, localName: tool.name } });
        });
        break;
      }
      case 'custom':
        out.push(customTool(t, where));
        break;
      default:
        builtin.push({ type: builtinType(String(t.type)), options: t, where });
    }
  });
  return { tools: out, builtin };
}

function decodeToolChoice(v: unknown): IRToolChoice | undefined {
  if (v === undefined || v === null) return undefined;
  if (v === 'auto' || v === 'none' || v === 'required') return { type: v };
  if (isObj(v) && (v.type === 'function' || v.type === 'custom') && typeof v.name === 'string') {
    return { type: 'tool', name: typeof v.namespace === 'string' && v.namespace ? flatToolName(v.namespace, v.name) : v.name };
  }
  throw bad(`tool_choice ${JSON.stringify(v)} cannot be converted to another protocol`);
}

function decodeRequest(body: Obj): IRRequest {
  const system: TextPart[] = [];
  if (typeof body.instructions === 'string' && body.instructions) system.push({ type: 'text', text: body.instructions });
  const messages = decodeInput(body.input, system);
  const ir: IRRequest = { model: String(body.model ?? ''), system, messages, stream: body.stream === true };
  const { tools, builtin } = decodeTools(body.tools);
  if (tools.length > 0) ir.tools = tools;
  if (builtin.length > 0) ir.builtinTools = builtin;
  const tc = decodeToolChoice(body.tool_choice);
  if (tc) ir.toolChoice = tc;
  if (typeof body.parallel_tool_calls === 'boolean') ir.parallelToolCalls = body.parallel_tool_calls;
  const max = num(body.max_output_tokens);
  if (max !== undefined) ir.maxTokens = max;
  const temperature = num(body.temperature);
  if (temperature !== undefined) ir.temperature = temperature;
  const topP = num(body.top_p);
  if (topP !== undefined) ir.topP = topP;
  if (isObj(body.reasoning)) {
    const effort = typeof body.reasoning.effort === 'string' ? EFFORTS[body.reasoning.effort] : undefined;
    const summary = typeof body.reasoning.summary === 'string' ? body.reasoning.summary : undefined;
    if (effort || summary) ir.reasoning = { ...(effort ? { effort } : {}), ...(summary ? { summary } : {}) };
  }
  return ir;
}

function inputContent(parts: Array<TextPart | ImagePart>): Obj[] {
  return parts.map((p) =>
    p.type === 'text'
      ? { type: 'input_text', text: p.text }
      : { type: 'input_image', image_url: urlFromSource(p.source), detail: p.detail ?? 'auto' },
  );
}

function encodeInput(messages: IRMessage[]): Obj[] {
  const input: Obj[] = [];
  for (const m of messages) {
    if (m.role === 'user') {
      const parts = m.parts.filter((p): p is TextPart | ImagePart => p.type === 'image' || (p.type === 'text' && p.text.length > 0));
      if (parts.length > 0) input.push({ type: 'message', role: 'user', content: inputContent(parts) });
    } else if (m.role === 'assistant') {
      let text: string[] = [];
      const flush = () => {
        if (text.length === 0) return;
        input.push({ type: 'message', role: 'assistant', content: text.map((t) => ({ type: 'output_text', text: t, annotations: [] })) });
        text = [];
      };
      for (const p of m.parts) {
        if (p.type === 'text') {
          if (p.text) text.push(p.text);
        } else if (p.type === 'thinking') {
          // Only OpenAI's own reasoning items (its id, its encrypted_content) can go back to OpenAI.
          if (isOpenAIReasoning(p) && p.signature) {
            flush();
            input.push({
              type: 'reasoning',
              id: p.itemId,
              summary: p.text ? [{ type: 'summary_text', text: p.text }] : [],
              encrypted_content: p.signature,
            });
          }
        } else if (p.type === 'tool_call') {
          flush();
          input.push({
            type: 'function_call',
            call_id: p.id,
            name: p.name,
            arguments: p.arguments,
            ...(p.itemId && !isGatewayItemId(p.itemId) ? { id: p.itemId } : {}),
          });
        }
      }
      flush();
    } else if (m.role === 'tool') {
      for (const p of m.parts) {
        if (p.type !== 'tool_result') continue;
        input.push({
          type: 'function_call_output',
          call_id: p.callId,
          output: typeof p.content === 'string' ? p.content : inputContent(p.content),
        });
      }
    }
  }
  return input;
}

function encodeRequest(req: IRRequest, opts: EncodeOptions): Obj {
  const out: Obj = { model: opts.model, input: encodeInput(req.messages) };
  const instructions = req.system
    .map((p) => p.text)
    .filter(Boolean)
    .join('\n\n');
  if (instructions) out.instructions = instructions;
  if (req.maxTokens !== undefined) out.max_output_tokens = req.maxTokens;
  if (req.temperature !== undefined) out.temperature = req.temperature;
  if (req.topP !== undefined) out.top_p = req.topP;
  if (req.tools && req.tools.length > 0) {
    out.tools = req.tools.map((t) => ({
      type: 'function',
      name: t.name,
      ...(t.description !== undefined ? { description: t.description } : {}),
      parameters: t.parameters,
      strict: t.strict ?? false,
    }));
    if (req.toolChoice)
      out.tool_choice = req.toolChoice.type === 'tool' ? { type: 'function', name: req.toolChoice.name } : req.toolChoice.type;
    if (req.parallelToolCalls !== undefined) out.parallel_tool_calls = req.parallelToolCalls;
  }
  if (req.reasoning && (req.reasoning.effort || req.reasoning.summary)) {
    out.reasoning = {
      ...(req.reasoning.effort ? { effort: req.reasoning.effort } : {}),
      ...(req.reasoning.summary ? { summary: req.reasoning.summary } : {}),
    };
  }
  if (req.stream) out.stream = true;
  return out;
}

// ---- responses -------------------------------------------------------------------------------

function decodeResponse(body: Obj): IRResponse {
  const content: IRResponse['content'] = [];
  let hadCall = false;
  for (const item of Array.isArray(body.output) ? body.output : []) {
    if (!isObj(item)) continue;
    switch (item.type) {
      case 'message':
        for (const c of Array.isArray(item.content) ? item.content : []) {
          if (isObj(c) && c.type === 'output_text' && typeof c.text === 'string' && c.text) content.push({ type: 'text', text: c.text });
          if (isObj(c) && c.type === 'refusal' && typeof c.refusal === 'string' && c.refusal)
            content.push({ type: 'text', text: c.refusal });
        }
        break;
      case 'reasoning': {
        const p = reasoningPart(item);
        if (p.type === 'thinking' || p.type === 'redacted_thinking') content.push(p);
        break;
      }
      case 'function_call':
        hadCall = true;
        content.push({
          type: 'tool_call',
          id: String(item.call_id ?? item.id ?? ''),
          name: String(item.name ?? ''),
          arguments: args(item.arguments),
          ...(typeof item.id === 'string' ? { itemId: item.id } : {}),
        });
        break;
      default:
        break; // built-in tool calls and other items the IR lacks
    }
  }
  const res: IRResponse = {
    id: String(body.id ?? ''),
    model: String(body.model ?? ''),
    content,
    finishReason: finishToIR(body.status, body.incomplete_details, hadCall),
    stopSequence: null,
    usage: fromResponsesUsage(body.usage) ?? { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
  };
  const rt = body.usage?.output_tokens_details?.reasoning_tokens;
  if (typeof rt === 'number') res.reasoningTokens = rt;
  return res;
}

function encodeResponse(res: IRResponse, opts: EncodeOptions): Obj {
  const { status, incomplete_details } = statusFromIR(res.finishReason);
  return responseObject(opts.requestId, opts.model, Math.floor(Date.now() / 1000), {
    status,
    incomplete_details,
    output: outputItems(res.content, opts.requestId, opts.tools),
    usage: toResponsesUsage(res.usage, res.reasoningTokens),
  });
}

function encodeResponseAndReport(res: IRResponse, opts: EncodeOptions): Obj {
  const body = encodeResponse(res, opts);
  opts.onOutputItems?.(body.output);
  return body;
}

export const responsesCodec: ProtocolCodec = {
  ...responsesWire,
  decodeRequest,
  encodeRequest,
  decodeResponse,
  encodeResponse: encodeResponseAndReport,
  createStreamDecoder: () => new ResponsesStreamDecoder(),
  createStreamEncoder: (opts: EncodeOptions) => new ResponsesStreamEncoder(opts),
};
