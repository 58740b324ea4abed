/**
 * The session key of a request: what ties the turns of one conversation together, so they go to
 * the same upstream account and its prompt cache hits. Taken from what clients send, first found:
 *
 *   1. `x-claude-code-session-id` header (Claude Code)
 *   2. `session-id` header (Codex CLI)
 *   3. `prompt_cache_key` in the body (Codex, OpenAI clients that set it)
 *   4. `metadata.user_id` in the body (Claude Code, Messages clients)
 *   5. a hash of the conversation's opening: the system prompt / instructions and the first user
 *      turn, which later turns repeat unchanged (the whole history would change every turn; no
 *      content at all would bind every conversation of a client together)
 *
 * The key is only ever used inside the API key's own namespace (see core/pool/index.ts), so two
 * clients sending the same id or the same conversation are never bound together.
 */
import { createHash } from 'node:crypto';
import type { ProtocolName } from '../config/types.js';

const MAX_ID = 256;

/** Reads a header the way the context does (first value). */
export type HeaderReader = (name: string) => string | undefined;

export function sessionKey(protocol: ProtocolName | undefined, header: HeaderReader, json: Record<string, unknown>): string | undefined {
  const cc = header('x-claude-code-session-id');
  if (cc) return 'cc:' + clip(cc);
  const sid = header('session-id');
  if (sid) return 'sid:' + clip(sid);
  if (typeof json.prompt_cache_key === 'string' && json.prompt_cache_key) return 'pck:' + clip(json.prompt_cache_key);
  const meta = json.metadata;
  if (meta && typeof meta === 'object' && typeof (meta as Record<string, unknown>).user_id === 'string') {
    const uid = (meta as Record<string, unknown>).user_id as string;
    if (uid) return 'uid:' + clip(uid);
  }
  const opening = conversationOpening(protocol, json);
  if (opening === undefined) return undefined;
  return 'h:' + createHash('sha256').update(opening).digest('base64url').slice(0, 27);
}

/** Long ids are hashed so a binding stays small. */
function clip(id: string): string {
  return id.length <= MAX_ID ? id : createHash('sha256').update(id).digest('base64url');
}

/**
 * The part of a conversation every later turn repeats: system prompt plus the messages up to and
 * including the first user message, reduced to roles and text (clients move `cache_control`
 * markers and similar attributes from turn to turn). Undefined when there is no user turn.
 */
export function conversationOpening(protocol: ProtocolName | undefined, json: Record<string, unknown>): string | undefined {
  if (protocol === 'openai-responses') {
    const input = json.input;
    if (typeof input === 'string') return JSON.stringify([text(json.instructions), input]);
    if (!Array.isArray(input)) return undefined;
    const head = upToFirstUser(input);
    return head ? JSON.stringify([text(json.instructions), head]) : undefined;
  }
  const messages = json.messages;
  if (!Array.isArray(messages)) return undefined;
  const head = upToFirstUser(messages);
  if (!head) return undefined;
  // Messages keeps the system prompt apart; Chat has it among the messages.
  return JSON.stringify([protocol === 'anthropic-messages' ? text(json.system) : '', head]);
}

function upToFirstUser(items: unknown[]): string[][] | undefined {
  const out: string[][] = [];
  for (const m of items) {
    if (!m || typeof m !== 'object') continue;
    const r = m as Record<string, unknown>;
    out.push([scalarText(r.role ?? r.type), text(r.content)]);
    if (r.role === 'user') return out;
  }
  return undefined;
}

/** Text of a string or of content parts (other parts by their type). */
function text(v: unknown): string {
  if (typeof v === 'string') return v;
  if (!Array.isArray(v)) return '';
  let out = '';
  for (const p of v) {
    if (typeof p === 'string') out += p;
    else if (p && typeof p === 'object') {
      const part = p as Record<string, unknown>;
      out += typeof part.text === 'string' ? part.text : `[${scalarText(part.type)}]`;
    }
    out += '\n';
  }
  return out;
}

/** A JSON scalar as text ('' for anything else: a session key is built from what clients send). */
function scalarText(v: unknown): string {
  return typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean' ? String(v) : '';
}
