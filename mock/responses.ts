/** OpenAI Responses wire (`POST /v1/responses`, `POST /v1/responses/input_tokens`). */
import { formatJsonEvent } from '../core/sse.js';
import { countInputTokens, encryptedOf, makeId, num, textOf, textsOf, type Extracted, type Plan, type ToolDef } from './content.js';
import type { StreamErrorCtx } from './chat.js';

export function validateResponses(body: Record<string, any>): string | undefined {
  if (typeof body.model !== 'string' || body.model === '') return "Missing required parameter: 'model'.";
  if (body.input !== undefined && typeof body.input !== 'string' && !Array.isArray(body.input)) {
    return "Invalid type for 'input': expected one of a string or an array of input items.";
  }
  return undefined;
}

function isUserItem(it: any): boolean {
  return !!it && typeof it === 'object' && (it.type === 'message' || it.type === undefined) && it.role === 'user';
}

export function extractResponses(body: Record<string, any>): Extracted {
  const texts: string[] = [];
  textsOf(body.instructions, texts);
  let lastUserText = '';
  let lastIsUser = false;
  if (typeof body.input === 'string') {
    texts.push(body.input);
    lastUserText = body.input;
    lastIsUser = true;
  } else if (Array.isArray(body.input)) {
    for (const it of body.input) {
      textsOf(it, texts);
      if (isUserItem(it)) lastUserText = textOf(it.content);
    }
    lastIsUser = isUserItem(body.input[body.input.length - 1]);
  }
  const tools: ToolDef[] = [];
  if (Array.isArray(body.tools)) {
    for (const t of body.tools)
      if (t && t.type === 'function' && typeof t.name === 'string') tools.push({ name: t.name, schema: t.parameters });
  }
  let toolChoice = 'auto';
  const tc = body.tool_choice;
  if (tc === 'none' || tc === 'required' || tc === 'auto') toolChoice = tc;
  else if (tc && typeof tc === 'object' && tc.type === 'function' && typeof tc.name === 'string') toolChoice = tc.name;
  const summary = body.reasoning?.summary;
  const webSearch =
    Array.isArray(body.tools) && body.tools.some((t: any) => typeof t?.type === 'string' && t.type.startsWith('web_search'));
  return {
    webSearch,
    texts,
    lastUserText,
    lastIsUser,
    tools,
    toolChoice,
    parallel: body.parallel_tool_calls !== false,
    maxTokens: num(body.max_output_tokens),
    thinkingRequested: typeof summary === 'string' && summary !== 'none',
  };
}

export function inputTokensBody(body: Record<string, any>, inputOverride: number | undefined): Record<string, unknown> {
  return { object: 'response.input_tokens', input_tokens: inputOverride ?? countInputTokens(extractResponses(body).texts) };
}

export function responsesUsage(plan: Plan): Record<string, unknown> {
  const u = plan.usage;
  const input = u.input + u.cacheRead + u.cacheWrite;
  const details: Record<string, number> = { cached_tokens: u.cacheRead };
  if (u.cacheWrite > 0) details.cache_write_tokens = u.cacheWrite;
  return {
    input_tokens: input,
    input_tokens_details: details,
    output_tokens: u.output,
    output_tokens_details: { reasoning_tokens: u.reasoning },
    total_tokens: input + u.output,
  };
}

function responseId(ctx: { seed: string }): string {
  return makeId(ctx.seed, 'resp', 'resp_', 48);
}

/** The response object around `output`, echoing the request's settings like the real API. */
function envelope(ctx: StreamErrorCtx, status: string, output: unknown[], usage: unknown): Record<string, any> {
  const b = ctx.body;
  return {
    id: responseId(ctx),
    object: 'response',
    created_at: ctx.created,
    status,
    background: false,
    error: null,
    incomplete_details: null,
    instructions: b.instructions ?? null,
    max_output_tokens: b.max_output_tokens ?? null,
    max_tool_calls: b.max_tool_calls ?? null,
    model: ctx.model,
    output,
    parallel_tool_calls: b.parallel_tool_calls ?? true,
    previous_response_id: b.previous_response_id ?? null,
    reasoning: { effort: b.reasoning?.effort ?? null, summary: b.reasoning?.summary ?? null },
    service_tier: status === 'in_progress' ? 'auto' : 'default',
    store: b.store ?? true,
    temperature: b.temperature ?? 1,
    text: b.text ?? { format: { type: 'text' } },
    tool_choice: b.tool_choice ?? 'auto',
    tools: Array.isArray(b.tools) ? b.tools : [],
    top_p: b.top_p ?? 1,
    truncation: b.truncation ?? 'disabled',
    usage,
    user: b.user ?? null,
    metadata: b.metadata ?? {},
  };
}

interface Items {
  reasoning?: Record<string, any>;
  search?: Record<string, any>;
  message?: Record<string, any>;
  calls: Record<string, any>[];
}

function items(plan: Plan): Items {
  const out: Items = { calls: [] };
  if (plan.thinking) {
    out.reasoning = {
      id: makeId(plan.seed, 'rs', 'rs_', 48),
      type: 'reasoning',
      encrypted_content: encryptedOf(plan.thinking.text),
      summary: [{ type: 'summary_text', text: plan.thinking.text }],
    };
  }
  const s = plan.search;
  if (s) {
    out.search = {
      id: s.id,
      type: 'web_search_call',
      status: 'completed',
      action: { type: 'search', query: s.query, sources: s.results.map((r) => ({ type: 'url', url: r.url })) },
    };
  }
  if (plan.toolCalls.length === 0) {
    const r = s?.results[0];
    const annotations = r ? [{ type: 'url_citation', start_index: 0, end_index: plan.text.length, url: r.url, title: r.title }] : [];
    out.message = {
      id: makeId(plan.seed, 'msg', 'msg_', 48),
      type: 'message',
      status: plan.truncated ? 'incomplete' : 'completed',
      content: [{ type: 'output_text', annotations, logprobs: [], text: plan.text }],
      role: 'assistant',
    };
  }
  for (const c of plan.toolCalls) {
    out.calls.push({ id: c.itemId, type: 'function_call', status: 'completed', arguments: c.arguments, call_id: c.id, name: c.name });
  }
  return out;
}

function finalOutput(it: Items): Record<string, any>[] {
  const out: Record<string, any>[] = [];
  if (it.reasoning) out.push(it.reasoning);
  if (it.search) out.push(it.search);
  if (it.message) out.push(it.message);
  out.push(...it.calls);
  return out;
}

function finished(plan: Plan, output: unknown[]): Record<string, any> {
  const r = envelope(plan, plan.truncated ? 'incomplete' : 'completed', output, responsesUsage(plan));
  if (plan.truncated) r.incomplete_details = { reason: 'max_output_tokens' };
  else r.completed_at = plan.created;
  return r;
}

export function renderResponse(plan: Plan): Record<string, unknown> {
  return finished(plan, finalOutput(items(plan)));
}

export function responseFrames(plan: Plan): string[] {
  const frames: string[] = [];
  let seq = 0;
  const ev = (type: string, data: Record<string, unknown>) => frames.push(formatJsonEvent({ type, sequence_number: seq++, ...data }, type));
  ev('response.created', { response: envelope(plan, 'in_progress', [], null) });
  ev('response.in_progress', { response: envelope(plan, 'in_progress', [], null) });
  const it = items(plan);
  let oi = 0;
  if (it.reasoning && plan.thinking) {
    const r = it.reasoning;
    const text = plan.thinking.text;
    ev('response.output_item.added', {
      output_index: oi,
      item: { id: r.id, type: 'reasoning', encrypted_content: r.encrypted_content, summary: [] },
    });
    ev('response.reasoning_summary_part.added', {
      item_id: r.id,
      output_index: oi,
      summary_index: 0,
      part: { type: 'summary_text', text: '' },
    });
    for (const t of plan.thinking.chunks)
      ev('response.reasoning_summary_text.delta', { item_id: r.id, output_index: oi, summary_index: 0, delta: t });
    ev('response.reasoning_summary_text.done', { item_id: r.id, output_index: oi, summary_index: 0, text });
    ev('response.reasoning_summary_part.done', { item_id: r.id, output_index: oi, summary_index: 0, part: { type: 'summary_text', text } });
    ev('response.output_item.done', { output_index: oi, item: r });
    oi++;
  }
  if (it.search) {
    const s = it.search;
    const ids = { item_id: s.id, output_index: oi };
    ev('response.output_item.added', {
      output_index: oi,
      item: { ...s, status: 'in_progress', action: { type: 'search', query: s.action.query } },
    });
    ev('response.web_search_call.in_progress', ids);
    ev('response.web_search_call.searching', ids);
    ev('response.web_search_call.completed', ids);
    ev('response.output_item.done', { output_index: oi, item: s });
    oi++;
  }
  if (it.message) {
    const m = it.message;
    ev('response.output_item.added', {
      output_index: oi,
      item: { id: m.id, type: 'message', status: 'in_progress', content: [], role: 'assistant' },
    });
    ev('response.content_part.added', {
      item_id: m.id,
      output_index: oi,
      content_index: 0,
      part: { type: 'output_text', annotations: [], logprobs: [], text: '' },
    });
    for (const t of plan.textChunks)
      ev('response.output_text.delta', { item_id: m.id, output_index: oi, content_index: 0, delta: t, logprobs: [] });
    m.content[0].annotations.forEach((annotation: unknown, annotation_index: number) => {
      ev('response.output_text.annotation.added', { item_id: m.id, output_index: oi, content_index: 0, annotation_index, annotation });
    });
    ev('response.output_text.done', { item_id: m.id, output_index: oi, content_index: 0, text: plan.text, logprobs: [] });
    ev('response.content_part.done', { item_id: m.id, output_index: oi, content_index: 0, part: m.content[0] });
    ev('response.output_item.done', { output_index: oi, item: m });
    oi++;
  }
  for (let i = 0; i < it.calls.length; i++) {
    const c = it.calls[i];
    ev('response.output_item.added', { output_index: oi, item: { ...c, status: 'in_progress', arguments: '' } });
    for (const f of plan.toolCalls[i].fragments)
      ev('response.function_call_arguments.delta', { item_id: c.id, output_index: oi, delta: f });
    ev('response.function_call_arguments.done', { item_id: c.id, output_index: oi, arguments: c.arguments });
    ev('response.output_item.done', { output_index: oi, item: c });
    oi++;
  }
  const final = finished(plan, finalOutput(it));
  ev(plan.truncated ? 'response.incomplete' : 'response.completed', { response: final });
  return frames;
}

/**
 * `event: error` `{"type":"error","sequence_number":n,"error":{type,code,message,param}}`, then
 * `event: response.failed` with `response.status:"failed"` (as recorded).
 */
export function responsesStreamError(ctx: StreamErrorCtx, sequence: number): string[] {
  const d = ctx.directives;
  const type = d.errorType ?? 'server_error';
  const code = d.errorCode ?? 'server_error';
  const message = 'The server had an error while processing your request. Sorry about that!';
  const failed = envelope(ctx, 'failed', [], null);
  failed.error = { code, message };
  return [
    formatJsonEvent({ type: 'error', sequence_number: sequence, error: { type, code, message, param: null } }, 'error'),
    formatJsonEvent({ type: 'response.failed', sequence_number: sequence + 1, response: failed }, 'response.failed'),
  ];
}
