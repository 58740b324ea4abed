/**
 * Item ids the gateway mints for Responses clients, and what they say about provenance.
 *
 * A Responses reasoning item carries an opaque `encrypted_content` that only the provider that
 * minted it can verify. When the upstream is Anthropic, the gateway turns a thinking block into a
 * reasoning item whose `encrypted_content` is the Anthropic *signature*; the item id is then minted
 * by the gateway with a recognisable prefix, so that when the client replays the item we know the
 * token is Anthropic's (send it back to Anthropic, never to OpenAI), and — for `rs_gwr_` — that the
 * item is an Anthropic `redacted_thinking` block whose `data` rides in `encrypted_content`.
 * Ids are derived from the request id so logs correlate; they are never signatures.
 */

const safe = (requestId: string): string => requestId.replace(/[^A-Za-z0-9_-]/g, '_');

export const GW_REASONING = 'rs_gw_';
export const GW_REDACTED = 'rs_gwr_';
export const GW_CALL_ITEM = 'fc_gw_';

export function reasoningItemId(requestId: string, n: number, redacted = false): string {
  return `${redacted ? GW_REDACTED : GW_REASONING}${safe(requestId)}_${n}`;
}

export function callItemId(requestId: string, n: number): string {
  return `${GW_CALL_ITEM}${safe(requestId)}_${n}`;
}

export function searchItemId(requestId: string, n: number): string {
  return `ws_gw_${safe(requestId)}_${n}`;
}

export function messageItemId(requestId: string, n: number): string {
  return `msg_${safe(requestId)}_${n}`;
}

export function responseId(requestId: string): string {
  return `resp_${safe(requestId)}`;
}

/** A reasoning item id the gateway minted (its encrypted_content is not OpenAI's). */
export function isGatewayItemId(id: string | undefined): boolean {
  return id !== undefined && (id.startsWith(GW_REASONING) || id.startsWith(GW_REDACTED) || id.startsWith(GW_CALL_ITEM));
}

/**
 * The thinking signature was minted by Anthropic (or an Anthropic-fronting upstream): it has one,
 * and it did not come from an OpenAI reasoning item (whose ids are not the gateway's).
 */
export function hasAnthropicSignature(p: { signature?: string; itemId?: string }): boolean {
  return typeof p.signature === 'string' && p.signature.length > 0 && (p.itemId === undefined || isGatewayItemId(p.itemId));
}

/** The thinking came from an OpenAI reasoning item (its id is OpenAI's, not the gateway's). */
export function isOpenAIReasoning(p: { itemId?: string }): boolean {
  return p.itemId !== undefined && !isGatewayItemId(p.itemId);
}
