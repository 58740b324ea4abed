/**
 * Mock directives: per-request failure and shape controls for the mock upstream.
 *
 * Two sources, merged in this order (later wins):
 *   1. the request's `model` after a `#`: `demo-chat#status=503,retry_after=2` (separators: `,` `;` `&` or spaces)
 *   2. the raw request body text: `[[mock: key=value key2=value2 flag]]` anywhere (several allowed; later ones win)
 * Keys are case-insensitive and `-` equals `_`. A key without `=` is a flag (`true`). Unknown keys are ignored.
 * The full list is in docs/mock.md.
 */

export interface Directives {
  /** Respond with this HTTP status and the protocol's real error body. */
  status?: number;
  /** `retry-after` header value (seconds) for 429 / 503 / 529. */
  retryAfter?: string;
  /** Milliseconds before the response headers. */
  delay?: number;
  /** Milliseconds between stream frames. */
  chunkDelay?: number;
  /** Streaming: write n frames then destroy the socket; non-streaming: write n bytes of the body then destroy. */
  cutAfter?: number;
  /** Accept the request and never answer. */
  hang?: boolean;
  /** Streaming: write n frames then go silent (socket left open). */
  hangAfter?: number;
  /** Streaming: after n frames send the protocol's in-stream error event and end. */
  streamError?: number;
  /** Chat stream: no usage chunk even when `stream_options.include_usage` is true. */
  noUsage?: boolean;
  /** Chat stream: omit `data: [DONE]`. */
  noDone?: boolean;
  /** Ignore the request's output limit (a dishonest upstream): the reply is never cut to it. */
  ignoreMaxTokens?: boolean;
  /** Reply length in words. */
  words?: number;
  /** Usage overrides. */
  inputTokens?: number;
  outputTokens?: number;
  cacheRead?: number;
  cacheWrite?: number;
  reasoningTokens?: number;
  /** Serve this file (relative to fixturesDir) verbatim. */
  replay?: string;
  /** true: answer with tool calls when the request has tools; false: never. Unset: automatic (docs/mock.md). */
  tools?: boolean;
  /** Number of parallel tool calls (to the first N tools, cycling). */
  toolCalls?: number;
  /** The tool the (first) call goes to, when the request offers it. */
  call?: string;
  /** The call's arguments (JSON text; the directive carries it base64url-encoded). */
  args?: string;
  /** Run a provider-side web search first (when the request offers the server tool); a string is the query. */
  webSearch?: boolean | string;
  /** true/number: produce a thinking / reasoning part (number = its length in words); false: never. */
  thinking?: boolean | number;
  /** Error `type` override for `status=` and `stream_error=`. */
  errorType?: string;
  /** Error `code` override (OpenAI bodies; Anthropic `details.error_code`). */
  errorCode?: string;
  /** `x-should-retry` header on error responses. */
  shouldRetry?: boolean;
  /** Fixed `created` / `created_at` unix seconds (default: now). */
  created?: number;
  /** Every key/value as written (after normalisation), unknown keys included. */
  raw: Record<string, string>;
}

const BODY_RE = /\[\[mock:([^\]]*)\]\]/gi;

/** Removes every `[[mock: …]]` directive from a text. */
export function stripDirectives(text: string): string {
  return text.replace(BODY_RE, ' ');
}

/** Splits `model#a=1,b` into the model name and its directive text. */
export function splitModel(model: string): { name: string; directives: string } {
  const i = model.indexOf('#');
  return i === -1 ? { name: model, directives: '' } : { name: model.slice(0, i), directives: model.slice(i + 1) };
}

function tokens(text: string, into: Record<string, string>): void {
  for (const tok of text.split(/[\s,;&]+/)) {
    if (!tok) continue;
    const eq = tok.indexOf('=');
    const key = (eq === -1 ? tok : tok.slice(0, eq)).trim().toLowerCase().replace(/-/g, '_');
    if (!key) continue;
    into[key] = eq === -1 ? 'true' : tok.slice(eq + 1).trim();
  }
}

function int(v: string | undefined): number | undefined {
  if (v === undefined || !/^\d{1,15}$/.test(v)) return undefined;
  return Number(v);
}

function bool(v: string | undefined): boolean | undefined {
  if (v === undefined) return undefined;
  const s = v.toLowerCase();
  if (s === 'true' || s === '1' || s === 'yes' || s === 'on') return true;
  if (s === 'false' || s === '0' || s === 'no' || s === 'off') return false;
  return undefined;
}

/** Parses directives from the model suffix and the raw body (body wins). */
export function parseDirectives(model: string | undefined, body: string): Directives {
  const raw: Record<string, string> = {};
  if (model) tokens(splitModel(model).directives, raw);
  for (const m of body.matchAll(BODY_RE)) tokens(m[1].replace(/\\\//g, '/'), raw);
  return fromRaw(raw);
}

export function fromRaw(raw: Record<string, string>): Directives {
  const d: Directives = { raw };
  d.status = int(raw.status);
  if (d.status !== undefined && (d.status < 100 || d.status > 599)) d.status = undefined;
  if (raw.retry_after !== undefined && raw.retry_after !== 'true') d.retryAfter = raw.retry_after;
  d.delay = int(raw.delay);
  d.chunkDelay = int(raw.chunk_delay);
  d.cutAfter = int(raw.cut_after);
  d.hang = bool(raw.hang) === true ? true : undefined;
  d.hangAfter = int(raw.hang_after);
  d.streamError = raw.stream_error === 'true' ? 0 : int(raw.stream_error);
  d.noUsage = bool(raw.no_usage) === true ? true : undefined;
  d.noDone = bool(raw.no_done) === true ? true : undefined;
  d.ignoreMaxTokens = bool(raw.ignore_max_tokens) === true ? true : undefined;
  d.words = int(raw.words);
  d.inputTokens = int(raw.input_tokens);
  d.outputTokens = int(raw.output_tokens);
  d.cacheRead = int(raw.cache_read);
  d.cacheWrite = int(raw.cache_write);
  d.reasoningTokens = int(raw.reasoning_tokens);
  if (raw.replay !== undefined && raw.replay !== 'true') d.replay = raw.replay;
  if (raw.tools !== undefined) d.tools = bool(raw.tools);
  if (bool(raw.no_tools) === true) d.tools = false;
  d.toolCalls = int(raw.tool_calls);
  if (d.toolCalls !== undefined) {
    if (d.toolCalls === 0) d.tools = false;
    else if (d.tools === undefined) d.tools = true;
  }
  if (raw.call !== undefined && raw.call !== 'true') d.call = raw.call;
  if (raw.args !== undefined && raw.args !== 'true') {
    try {
      const text = Buffer.from(raw.args, 'base64url').toString('utf8');
      const v = JSON.parse(text);
      if (v && typeof v === 'object' && !Array.isArray(v)) d.args = JSON.stringify(v);
    } catch {
      /* not base64url JSON: ignored */
    }
  }
  if (raw.web_search !== undefined) {
    const b = bool(raw.web_search);
    d.webSearch = b !== undefined ? b : raw.web_search.replace(/\+/g, ' ');
  }
  if (raw.thinking !== undefined) {
    const n = int(raw.thinking);
    d.thinking = n !== undefined ? (n === 0 ? false : n) : bool(raw.thinking);
  }
  if (bool(raw.no_thinking) === true) d.thinking = false;
  if (raw.error_type !== undefined && raw.error_type !== 'true') d.errorType = raw.error_type;
  if (raw.error_code !== undefined && raw.error_code !== 'true') d.errorCode = raw.error_code;
  d.shouldRetry = bool(raw.should_retry);
  d.created = int(raw.created);
  return d;
}
