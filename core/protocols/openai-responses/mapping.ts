/** OpenAI Responses vocabulary shared by its codec and stream code (docs/conversion.md). */
import type { Citation, FinishReason, IRReasoning, IRResponse, IRTool, Part, ToolCallPart, WebSearchPart } from '../ir.js';
import { callItemId, messageItemId, reasoningItemId, responseId, searchItemId } from './ids.js';

type Obj = Record<string, any>;

/**
 * The flat name of a namespaced tool for protocols without namespaces: Codex's own flattening
 * (openai/codex `codex-rs/protocol/src/tool_name.rs`, `ToolName::canonical_flat_name`), so a
 * model sees the name Codex itself would give it.
 */
export function flatToolName(namespace: string, name: string): string {
  return `${namespace.replace(/_+$/, '')}__${name.replace(/^_+/, '')}`;
}

/** A provider-side tool type, with dated and preview variants of web search folded into one. */
export function builtinType(type: string): string {
  return /^web_search(_preview)?(_\d{4}_\d{2}_\d{2})?$/.test(type) ? 'web_search' : type;
}

/** The client's tools by the name the upstream knows them by (only those that map back specially). */
export function toolsByName(tools: readonly IRTool[] | undefined): Map<string, IRTool> {
  const m = new Map<string, IRTool>();
  for (const t of tools ?? []) if (t.namespace || t.custom) m.set(t.name, t);
  return m;
}

/** The input of a custom tool call: the `input` string of its arguments (the raw text otherwise). */
export function customInput(args: string): string {
  try {
    const v = JSON.parse(args);
    if (v && typeof v === 'object' && typeof v.input === 'string') return v.input;
  } catch {
    /* not JSON: the text itself */
  }
  return args;
}

/**
 * A tool call as the Responses item the client expects: a `function_call` (with its `namespace`
 * and local name for a flattened namespace tool) or a `custom_tool_call`.
 */
export function callItem(p: Pick<ToolCallPart, 'id' | 'name' | 'arguments'>, id: string, status: string, tool: IRTool | undefined): Obj {
  if (tool?.custom) return { id, type: 'custom_tool_call', status, call_id: p.id, name: p.name, input: customInput(p.arguments) };
  const item: Obj = { id, type: 'function_call', status, arguments: p.arguments, call_id: p.id, name: p.name };
  if (tool?.namespace) {
    item.name = tool.namespace.localName;
    item.namespace = tool.namespace.name;
  }
  return item;
}

/** A provider-side web search as a `web_search_call` item (its sources included). */
export function searchItem(p: Pick<WebSearchPart, 'query' | 'sources' | 'error'>, id: string): Obj {
  return {
    id,
    type: 'web_search_call',
    status: p.error ? 'failed' : 'completed',
    action: { type: 'search', query: p.query, sources: p.sources.map((s) => ({ type: 'url', url: s.url })) },
  };
}

/** Citations of a text part as `url_citation` annotations spanning it (one per distinct url). */
export function annotations(citations: readonly Citation[] | undefined, text: string): Obj[] {
  const out: Obj[] = [];
  const seen = new Set<string>();
  for (const c of citations ?? []) {
    if (seen.has(c.url)) continue;
    seen.add(c.url);
    out.push({ type: 'url_citation', start_index: 0, end_index: text.length, url: c.url, title: c.title ?? '' });
  }
  return out;
}

export const EFFORTS: Record<string, NonNullable<IRReasoning['effort']>> = {
  minimal: 'minimal',
  low: 'low',
  medium: 'medium',
  high: 'high',
  xhigh: 'high',
};

/** A response's status (and incomplete reason) → IR finish. */
export function finishToIR(status: unknown, incomplete: unknown, hadCall: boolean): FinishReason {
  if (status === 'incomplete') {
    const reason = incomplete && typeof incomplete === 'object' ? (incomplete as Obj).reason : undefined;
    return reason === 'content_filter' ? 'refusal' : 'max_tokens';
  }
  return hadCall ? 'tool_use' : 'end_turn';
}

/** IR finish → status and incomplete_details. */
export function statusFromIR(r: FinishReason): { status: 'completed' | 'incomplete'; incomplete_details: Obj | null } {
  switch (r) {
    case 'max_tokens':
    case 'context_window':
      return { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } };
    case 'refusal':
      return { status: 'incomplete', incomplete_details: { reason: 'content_filter' } };
    default:
      return { status: 'completed', incomplete_details: null };
  }
}

/** The fields every Response object carries, around its status, output and usage. */
export function responseObject(requestId: string, model: string, created: number, extra: Obj): Obj {
  return {
    id: responseId(requestId),
    object: 'response',
    created_at: created,
    status: 'in_progress',
    error: null,
    incomplete_details: null,
    instructions: null,
    max_output_tokens: null,
    model,
    output: [],
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    temperature: null,
    text: { format: { type: 'text' } },
    tool_choice: 'auto',
    tools: [],
    top_p: null,
    truncation: 'disabled',
    usage: null,
    metadata: {},
    ...extra,
  };
}

/** IR response content → Responses output items (consecutive text parts share one message item). */
export function outputItems(content: IRResponse['content'] | Part[], requestId: string, tools?: readonly IRTool[]): Obj[] {
  const out: Obj[] = [];
  const byName = toolsByName(tools);
  let msg: Obj | undefined;
  for (const p of content) {
    if (p.type === 'text') {
      if (!msg) {
        msg = { id: messageItemId(requestId, out.length), type: 'message', status: 'completed', role: 'assistant', content: [] };
        out.push(msg);
      }
      msg.content.push({ type: 'output_text', text: p.text, annotations: annotations(p.citations, p.text) });
      continue;
    }
    msg = undefined;
    if (p.type === 'thinking') {
      const item: Obj = {
        id: p.itemId ?? reasoningItemId(requestId, out.length),
        type: 'reasoning',
        summary: p.text ? [{ type: 'summary_text', text: p.text }] : [],
      };
      if (p.signature) item.encrypted_content = p.signature;
      out.push(item);
    } else if (p.type === 'redacted_thinking') {
      out.push({ id: reasoningItemId(requestId, out.length, true), type: 'reasoning', summary: [], encrypted_content: p.data });
    } else if (p.type === 'tool_call') {
      out.push(callItem(p, p.itemId ?? callItemId(requestId, out.length), 'completed', byName.get(p.name)));
    } else if (p.type === 'web_search') {
      out.push(searchItem(p, searchItemId(requestId, out.length)));
    }
  }
  return out;
}
