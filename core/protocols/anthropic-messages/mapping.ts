/** Anthropic Messages vocabulary shared by its codec and stream code (docs/conversion.md). */
import type { Citation, FinishReason, IRReasoning, WebSearchPart } from '../ir.js';

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

export const DEFAULT_MAX_TOKENS = 4096;
/** Anthropic's smallest thinking budget. */
export const MIN_BUDGET = 1024;

/** reasoning effort → thinking budget (docs/conversion.md "Reasoning"). */
export const EFFORT_BUDGET: Record<NonNullable<IRReasoning['effort']>, number> = {
  minimal: 1024,
  low: 2048,
  medium: 8192,
  high: 16384,
};

/** thinking budget → reasoning effort; the inverse of EFFORT_BUDGET by ranges (minimal is never produced). */
export function effortForBudget(budget: number): 'low' | 'medium' | 'high' {
  if (budget >= EFFORT_BUDGET.high) return 'high';
  if (budget >= EFFORT_BUDGET.medium) return 'medium';
  return 'low';
}

const STOP_TO_IR: Record<string, FinishReason> = {
  end_turn: 'end_turn',
  max_tokens: 'max_tokens',
  stop_sequence: 'stop_sequence',
  tool_use: 'tool_use',
  refusal: 'refusal',
  pause_turn: 'pause_turn',
  model_context_window_exceeded: 'context_window',
};

export function stopReasonToIR(r: unknown): FinishReason {
  return (typeof r === 'string' && STOP_TO_IR[r]) || 'end_turn';
}

export function stopReasonFromIR(r: FinishReason): string {
  return r === 'context_window' ? 'model_context_window_exceeded' : r;
}

export function messageId(requestId: string): string {
  return `msg_${requestId.replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

/** Citations of a text block that name a web page. */
export function citationsOf(v: unknown): Citation[] {
  if (!Array.isArray(v)) return [];
  const out: Citation[] = [];
  for (const c of v) {
    const cite = citationOf(c);
    if (cite) out.push(cite);
  }
  return out;
}

export function citationOf(c: unknown): Citation | undefined {
  if (!isObj(c) || typeof c.url !== 'string') return undefined;
  return {
    url: c.url,
    ...(typeof c.title === 'string' ? { title: c.title } : {}),
    ...(typeof c.cited_text === 'string' ? { citedText: c.cited_text } : {}),
  };
}

/** A `web_search_tool_result` block as the IR search (the query comes from its server_tool_use). */
export function searchResult(b: Obj, queries: ReadonlyMap<string, string>): WebSearchPart {
  const id = String(b.tool_use_id ?? '');
  const part: WebSearchPart = { type: 'web_search', id, query: queries.get(id) ?? '', sources: [] };
  if (Array.isArray(b.content)) {
    for (const r of b.content) {
      if (isObj(r) && typeof r.url === 'string')
        part.sources.push({ url: r.url, ...(typeof r.title === 'string' ? { title: r.title } : {}) });
    }
  } else if (isObj(b.content)) part.error = String(b.content.error_code ?? 'unavailable');
  return part;
}

/** The query of a web_search `server_tool_use` input. */
export function searchQuery(input: unknown): string {
  return isObj(input) && typeof input.query === 'string' ? input.query : '';
}
