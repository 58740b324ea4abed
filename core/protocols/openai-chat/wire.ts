/**
 * OpenAI Chat Completions on the wire: what passthrough needs (validation, usage, the stream tap,
 * in-stream errors). Chat streams have no `event:` lines; usage arrives in a final `choices: []`
 * chunk (the gateway always asks for it) and `data: [DONE]` ends the stream.
 */
import { GatewayError } from '../../errors.js';
import { formatEvent, formatJsonEvent, type SseBytesBlock } from '../../sse.js';
import type { Usage } from '../../money.js';
import type { ErrorInfo, ProtocolWire, StreamMeta } from '../types.js';
import { NOT_JSON, parsed, rootMemberObject, usageObjectAt } from '../../json/scan.js';
import { BaseTap } from '../tap.js';
import { fromChatUsage, textKeys, textLength, toChatUsage } from '../usage.js';

const FINISH = /"finish_reason"\s*:\s*"([^"\\]*)"/;
const ERROR_FIRST = /^\s*\{\s*"error"\s*:/;
const TOOL_CALLS = /"tool_calls"\s*:\s*\[\s*\{/;
const HAS_ID = /"id"\s*:/;
const TEXT_KEYS = textKeys(['content', 'arguments', 'reasoning_content', 'refusal']);

class ChatTap extends BaseTap {
  /** The upstream's own `[DONE]` block (its bytes), held back so a missing usage chunk can go before it. */
  private doneBytes: Buffer | undefined;
  private finished = false;
  /**
   * The first chunk that names an id, parsed for the stream's meta (id, model, created) only when
   * the meta is read: a usage chunk the gateway must make up, an error frame, a trace. Parsing it
   * as it passed cost 9 µs per streaming request in the gateway's profile, for nothing usually.
   */
  private metaData: string | undefined;

  override get meta(): StreamMeta {
    const data = this.metaData;
    if (data !== undefined) {
      this.metaData = undefined;
      try {
        const j = JSON.parse(data);
        this.m = { id: j.id, model: j.model, created: j.created };
      } catch {
        /* not JSON: no meta */
      }
    }
    return this.m;
  }

  observe(b: SseBytesBlock): boolean {
    if (this.doneBytes !== undefined) return false; // nothing after [DONE] reaches the client
    const data = b.data;
    if (data === undefined) return true;
    if (data.startsWith('[DONE]')) {
      this.doneBytes = b.bytes;
      this.complete = this.finished;
      return false;
    }
    if (this.m.id === undefined && this.metaData === undefined && HAS_ID.test(data)) this.metaData = data;
    if (ERROR_FIRST.test(data) || b.event === 'error') {
      this.errored = true;
      return true;
    }
    const usage = usageObjectAt(data);
    if (usage >= 0) this.readUsage(data, usage);
    const finish = FINISH.exec(data);
    if (finish) {
      (this.finishReasons ??= []).push(finish[1]);
      this.finished = true;
      this.complete = true;
      this.started = true;
    }
    const chars = textLength(data, TEXT_KEYS);
    this.outputChars += chars;
    if (chars > 0 || TOOL_CALLS.test(data)) this.started = true;
    return true;
  }

  /**
   * The usage of a chunk whose `"usage": {` opens at `open`. When that object is among the chunk's
   * last members (OpenAI's usage chunk, and every compatible server's seen) it alone is parsed
   * (core/json/scan.ts says why); otherwise the whole chunk is, for the root's own usage member.
   * Unlike the whole parse, the first way does not check that the rest of the chunk is JSON.
   */
  private readUsage(data: string, open: number): void {
    const member = rootMemberObject(data, open);
    let usage = member === undefined ? NOT_JSON : parsed(member);
    if (usage === NOT_JSON) {
      const whole = parsed(data);
      if (whole === NOT_JSON) return; // no usage read: it is estimated
      usage = (whole as { usage?: unknown } | null)?.usage;
    }
    const u = fromChatUsage(usage);
    if (u) this.usage = u;
  }

  override closing(estimate: () => Usage): string | Buffer {
    let out = '';
    if (!this.usage) {
      const m = this.meta;
      // The upstream ignored include_usage: the client still gets its usage chunk (estimated).
      this.usage = estimate();
      out += formatJsonEvent({
        id: m.id ?? 'chatcmpl-gateway',
        object: 'chat.completion.chunk',
        created: m.created ?? Math.floor(Date.now() / 1000),
        model: m.model ?? '',
        choices: [],
        usage: toChatUsage(this.usage),
      });
    }
    if (this.doneBytes === undefined) return out + formatEvent('[DONE]');
    return out ? Buffer.concat([Buffer.from(out), this.doneBytes]) : this.doneBytes;
  }
}

export const chatWire: ProtocolWire = {
  name: 'openai-chat',
  validate(body) {
    if (!Array.isArray(body.messages)) {
      throw new GatewayError('INVALID_REQUEST', { message: "'messages' is required and must be an array" });
    }
  },
  usageOf(body) {
    return fromChatUsage(body.usage);
  },
  createTap() {
    return new ChatTap();
  },
  streamError(err: ErrorInfo) {
    // wire-notes: `event: error` + {"error":{type,code,message}}; both openai majors throw APIError on it.
    return formatJsonEvent({ error: { type: err.type, code: err.code ?? err.type, message: err.message, param: null } }, 'error');
  },
};
