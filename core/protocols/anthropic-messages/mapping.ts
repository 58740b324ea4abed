/** Anthropic Messages vocabulary shared by its codec and stream code (docs/conversion.md). */
import type { FinishReason, IRReasoning } from '../ir.js';

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
