/** Anthropic Messages wire (`POST /v1/messages`, `POST /v1/messages/count_tokens`). */
import { formatJsonEvent } from '../core/sse.js';
import { countInputTokens, makeId, num, textOf, textsOf, type Extracted, type Plan, type ToolDef } from './content.js';
import type { StreamErrorCtx } from './chat.js';

export function validateMessages(body: Record<string, any>, countTokens: boolean): string | undefined {
  if (typeof body.model !== 'string' || body.model === '') return 'model: Field required';
  if (!Array.isArray(body.messages)) return 'messages: Field required';
  if (!countTokens) {
    if (body.max_tokens === undefined) return 'max_tokens: Field required';
    if (!Number.isInteger(body.max_tokens) || body.max_tokens < 1) return 'max_tokens: Input should be greater than or equal to 1';
  }
  return undefined;
}

function isToolResultTurn(m: any): boolean {
  return Array.isArray(m?.content) && m.content.some((b: any) => b && b.type === 'tool_result');
}

export function extractMessages(body: Record<string, any>): Extracted {
  const texts: string[] = [];
  textsOf(body.system, texts);
  let lastUserText = '';
  const msgs: any[] = body.messages;
  for (const m of msgs) {
    if (!m || typeof m !== 'object') continue;
    textsOf(m.content, texts);
    if (m.role === 'user' && !isToolResultTurn(m)) lastUserText = textOf(m.content);
  }
  const last = msgs[msgs.length - 1];
  const tools: ToolDef[] = [];
  if (Array.isArray(body.tools)) {
    for (const t of body.tools) {
      // Client tools have no type or type "custom"; server tools (web_search_…) are not called by the mock.
      if (t && typeof t.name === 'string' && (t.type === undefined || t.type === 'custom'))
        tools.push({ name: t.name, schema: t.input_schema });
    }
  }
  const webSearch =
    Array.isArray(body.tools) && body.tools.some((t: any) => typeof t?.type === 'string' && t.type.startsWith('web_search_'));
  let toolChoice = 'auto';
  const tc = body.tool_choice;
  if (tc && typeof tc === 'object') {
    if (tc.type === 'none') toolChoice = 'none';
    else if (tc.type === 'any') toolChoice = 'required';
    else if (tc.type === 'tool' && typeof tc.name === 'string') toolChoice = tc.name;
  }
  const thinkingType = body.thinking?.type;
  return {
    texts,
    lastUserText,
    lastIsUser: last?.role === 'user' && !isToolResultTurn(last),
    tools,
    toolChoice,
    parallel: !(tc && typeof tc === 'object' && tc.disable_parallel_tool_use === true),
    maxTokens: num(body.max_tokens),
    thinkingRequested: thinkingType === 'enabled' || thinkingType === 'adaptive',
    webSearch,
  };
}

/** `{"input_tokens": N}` for count_tokens. */
export function countTokensBody(body: Record<string, any>, inputOverride: number | undefined): Record<string, unknown> {
  return { input_tokens: inputOverride ?? countInputTokens(extractMessages(body).texts) };
}

function stopReason(plan: Plan): string {
  return plan.toolCalls.length > 0 ? 'tool_use' : plan.truncated ? 'max_tokens' : 'end_turn';
}

function messageId(plan: { seed: string }): string {
  return makeId(plan.seed, 'msg', 'msg_01', 22);
}

function startUsage(plan: Plan): Record<string, unknown> {
  const u = plan.usage;
  return {
    input_tokens: u.input,
    cache_creation_input_tokens: u.cacheWrite,
    cache_read_input_tokens: u.cacheRead,
    cache_creation: { ephemeral_5m_input_tokens: u.cacheWrite, ephemeral_1h_input_tokens: 0 },
    output_tokens: Math.min(1, u.output),
    service_tier: 'standard',
  };
}

/** The search's two blocks, as Anthropic sends them (results carry opaque encrypted content). */
function searchBlocks(plan: Plan): { use: Record<string, unknown>; result: Record<string, unknown> } | undefined {
  const s = plan.search;
  if (!s) return undefined;
  return {
    use: { type: 'server_tool_use', id: s.id, name: 'web_search', input: { query: s.query } },
    result: {
      type: 'web_search_tool_result',
      tool_use_id: s.id,
      content: s.results.map((r) => ({
        type: 'web_search_result',
        url: r.url,
        title: r.title,
        encrypted_content: makeId(plan.seed, r.url, 'Eq', 32),
        page_age: null,
      })),
    },
  };
}

/** The citation the reply text carries when a search ran (its first result). */
function citation(plan: Plan): Record<string, unknown> | undefined {
  const r = plan.search?.results[0];
  return r
    ? {
        type: 'web_search_result_location',
        url: r.url,
        title: r.title,
        encrypted_index: makeId(plan.seed, 'cite', 'Eo', 24),
        cited_text: plan.text.slice(0, 40),
      }
    : undefined;
}

function usageExtra(plan: Plan): Record<string, unknown> {
  return plan.search ? { server_tool_use: { web_search_requests: 1 } } : {};
}

function contentBlocks(plan: Plan): Record<string, unknown>[] {
  const blocks: Record<string, unknown>[] = [];
  if (plan.thinking) blocks.push({ type: 'thinking', thinking: plan.thinking.text, signature: plan.thinking.signature });
  const search = searchBlocks(plan);
  if (search) blocks.push(search.use, search.result);
  const cite = citation(plan);
  if (plan.toolCalls.length === 0) blocks.push({ type: 'text', text: plan.text, ...(cite ? { citations: [cite] } : {}) });
  for (const c of plan.toolCalls) blocks.push({ type: 'tool_use', id: c.id, name: c.name, input: JSON.parse(c.arguments) });
  return blocks;
}

export function renderMessage(plan: Plan): Record<string, unknown> {
  const u = plan.usage;
  return {
    id: messageId(plan),
    type: 'message',
    role: 'assistant',
    model: plan.model,
    content: contentBlocks(plan),
    stop_reason: stopReason(plan),
    stop_sequence: null,
    usage: { ...startUsage(plan), output_tokens: u.output, ...usageExtra(plan) },
  };
}

export function messageFrames(plan: Plan): string[] {
  const frames: string[] = [];
  const ev = (type: string, data: Record<string, unknown>) => frames.push(formatJsonEvent({ type, ...data }, type));
  ev('message_start', {
    message: {
      id: messageId(plan),
      type: 'message',
      role: 'assistant',
      model: plan.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: startUsage(plan),
    },
  });
  let index = 0;
  let pinged = false;
  const ping = () => {
    if (!pinged) {
      pinged = true;
      ev('ping', {});
    }
  };
  if (plan.thinking) {
    ev('content_block_start', { index, content_block: { type: 'thinking', thinking: '', signature: '' } });
    ping();
    for (const t of plan.thinking.chunks) ev('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: t } });
    ev('content_block_delta', { index, delta: { type: 'signature_delta', signature: plan.thinking.signature } });
    ev('content_block_stop', { index });
    index++;
  }
  const search = searchBlocks(plan);
  if (search) {
    ev('content_block_start', { index, content_block: { ...search.use, input: {} } });
    ping();
    ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(search.use.input) } });
    ev('content_block_stop', { index });
    index++;
    ev('content_block_start', { index, content_block: search.result });
    ev('content_block_stop', { index });
    index++;
  }
  if (plan.toolCalls.length === 0) {
    const cite = citation(plan);
    ev('content_block_start', { index, content_block: { type: 'text', text: '', ...(cite ? { citations: [] } : {}) } });
    ping();
    if (cite) ev('content_block_delta', { index, delta: { type: 'citations_delta', citation: cite } });
    for (const t of plan.textChunks) ev('content_block_delta', { index, delta: { type: 'text_delta', text: t } });
    ev('content_block_stop', { index });
    index++;
  }
  for (const c of plan.toolCalls) {
    ev('content_block_start', { index, content_block: { type: 'tool_use', id: c.id, name: c.name, input: {} } });
    ping();
    ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: '' } });
    for (const f of c.fragments) ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: f } });
    ev('content_block_stop', { index });
    index++;
  }
  const u = plan.usage;
  ev('message_delta', {
    delta: { stop_reason: stopReason(plan), stop_sequence: null },
    usage: {
      input_tokens: u.input,
      cache_creation_input_tokens: u.cacheWrite,
      cache_read_input_tokens: u.cacheRead,
      output_tokens: u.output,
      ...usageExtra(plan),
    },
  });
  ev('message_stop', {});
  return frames;
}

/** `event: error` + `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, then the stream ends. */
export function messagesStreamError(ctx: StreamErrorCtx): string[] {
  const type = ctx.directives.errorType ?? 'overloaded_error';
  const message = type === 'overloaded_error' ? 'Overloaded' : type === 'rate_limit_error' ? 'Rate limited' : 'Internal server error';
  return [formatJsonEvent({ type: 'error', error: { type, message } }, 'error')];
}
