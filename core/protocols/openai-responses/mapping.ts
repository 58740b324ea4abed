/** OpenAI Responses vocabulary shared by its codec and stream code (docs/conversion.md). */
import type { FinishReason, IRReasoning, IRResponse, Part } from '../ir.js';
import { callItemId, messageItemId, reasoningItemId, responseId } from './ids.js';

type Obj = Record<string, any>;

export const EFFORTS: Record<string, NonNullable<IRReasoning['effort']>> = {
  minimal: 'minimal', low: 'low', medium: 'medium', high: 'high', xhigh: 'high',
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
export function outputItems(content: IRResponse['content'] | Part[], requestId: string): Obj[] {
  const out: Obj[] = [];
  let msg: Obj | undefined;
  for (const p of content) {
    if (p.type === 'text') {
      if (!msg) {
        msg = { id: messageItemId(requestId, out.length), type: 'message', status: 'completed', role: 'assistant', content: [] };
        out.push(msg);
      }
      msg.content.push({ type: 'output_text', text: p.text, annotations: [] });
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
      out.push({
        id: p.itemId ?? callItemId(requestId, out.length),
        type: 'function_call',
        status: 'completed',
        arguments: p.arguments,
        call_id: p.id,
        name: p.name,
      });
    }
  }
  return out;
}
