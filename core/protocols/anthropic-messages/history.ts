/**
 * Session-state checks for Messages requests (409 `malformed_session_state`, `x-should-retry:
 * false`): a history the provider will refuse however often it is retried. Clients that hit these
 * (agent CLIs resuming a broken session) must fix their transcript, not retry.
 *
 * Rules (docs/conversion.md "409"):
 *  1. a `tool_result` must answer a `tool_use` of the immediately preceding assistant turn
 *     (consecutive same-role messages count as one turn, as Anthropic combines them);
 *  2. `tool_use` ids are unique across the conversation;
 *  3. a `thinking` block carries a non-empty `signature`;
 *  4. a `redacted_thinking` block carries non-empty `data`.
 * Lenient by design: block types it does not know, string contents and malformed shapes are left
 * to the upstream (passthrough forwards them unchanged); only these four rules are enforced here.
 */
import { GatewayError } from '../../errors.js';

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

const fail = (message: string) => new GatewayError('MALFORMED_SESSION', { message });

export function validateHistory(body: Record<string, unknown>): void {
  const messages = body.messages;
  if (!Array.isArray(messages)) return;
  const seen = new Set<string>();
  /** tool_use ids of the current run of assistant messages (one turn). */
  let lastAssistant: Set<string> | undefined;
  let prevRole: string | undefined;
  messages.forEach((m: unknown, i: number) => {
    if (!isObj(m) || (m.role !== 'user' && m.role !== 'assistant')) return;
    const blocks: unknown[] = Array.isArray(m.content) ? m.content : [];
    if (m.role === 'assistant') {
      if (prevRole !== 'assistant') lastAssistant = new Set();
      blocks.forEach((b, j) => {
        if (!isObj(b)) return;
        const where = `messages[${i}].content[${j}]`;
        switch (b.type) {
          case 'tool_use': {
            if (typeof b.id !== 'string') return;
            if (seen.has(b.id)) throw fail(`${where}: tool_use id '${b.id}' is used more than once in the conversation`);
            seen.add(b.id);
            lastAssistant!.add(b.id);
            return;
          }
          case 'thinking':
            if (typeof b.signature !== 'string' || b.signature.length === 0) {
              throw fail(`${where}: thinking block has no signature; replay thinking blocks exactly as they were received`);
            }
            return;
          case 'redacted_thinking':
            if (typeof b.data !== 'string' || b.data.length === 0) {
              throw fail(`${where}: redacted_thinking block has no data; replay it exactly as it was received`);
            }
            return;
          default:
            return;
        }
      });
      prevRole = 'assistant';
      return;
    }
    // A user message: its tool results answer the assistant turn right before this user turn.
    // (Consecutive user messages form one turn: they share the same preceding assistant turn.)
    const answerable = lastAssistant;
    blocks.forEach((b, j) => {
      if (!isObj(b) || b.type !== 'tool_result') return;
      const id = b.tool_use_id;
      if (typeof id !== 'string' || !answerable || !answerable.has(id)) {
        throw fail(`messages[${i}].content[${j}]: tool_result for '${String(id)}' answers no tool_use of the preceding assistant turn`);
      }
    });
    prevRole = 'user';
  });
}
