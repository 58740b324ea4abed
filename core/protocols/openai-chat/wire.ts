/**
 * OpenAI Chat Completions on the wire: what passthrough needs (validation, usage, the stream tap,
 * in-stream errors). Chat streams have no `event:` lines; usage arrives in a final `choices: []`
 * chunk (the gateway always asks for it) and `data: [DONE]` ends the stream.
 */
import { GatewayError } from '../../errors.js';
import { formatEvent, formatJsonEvent, type SseBytesBlock } from '../../sse.js';
import type { Usage } from '../../money.js';
import type { ErrorInfo, ProtocolWire } from '../types.js';
import { BaseTap } from '../tap.js';
import { fromChatUsage, toChatUsage } from '../usage.js';
import { KeyScan, startsWith, startsWithKey } from '../scan.js';

const ERROR = Buffer.from('error');
const DONE = Buffer.from('[DONE]');
/** One pass over each chunk: usage, the finish, tool calls, and the generated text (first of content, arguments, reasoning_content, refusal). */
const SCAN = new KeyScan({ usage: '{', finish_reason: '"', tool_calls: '[{', content: 'text', arguments: 'text', reasoning_content: 'text', refusal: 'text' });

class ChatTap extends BaseTap {
  /** The upstream's own `[DONE]` block, held back so a missing usage chunk can go before it. */
  private doneBytes: Buffer | undefined;
  private finished = false;

  observe(b: SseBytesBlock): boolean {
    if (this.doneBytes !== undefined) return false; // nothing after [DONE] reaches the client
    const buf = b.dataBuf;
    if (buf === undefined) return true;
    const s = b.dataStart;
    const e = b.dataEnd;
    if (startsWith(buf, s, e, DONE)) {
      this.doneBytes = b.bytes;
      this.complete = this.finished;
      return false;
    }
    if (this.m.id === undefined) {
      try {
        const j = JSON.parse(b.data!);
        this.m = { id: j.id, model: j.model, created: j.created };
      } catch { /* not JSON: ignored like the SDKs would fail on it later */ }
    }
    if (startsWithKey(buf, s, e, ERROR) || b.event === 'error') {
      this.errored = true;
      return true;
    }
    const found = SCAN.run(buf, s, e).found;
    if (found[0] === 1) {
      try {
        const u = fromChatUsage(JSON.parse(b.data!).usage);
        if (u) this.usage = u;
      } catch { /* ignore */ }
    }
    if (found[1] === 1) {
      this.finished = true;
      this.complete = true;
      this.started = true;
    }
    const chars = SCAN.firstText(3, 4, 5, 6);
    this.outputChars += chars;
    if (chars > 0 || found[2] === 1) this.started = true;
    return true;
  }

  override closing(estimate: () => Usage): string | Buffer {
    let out = '';
    if (!this.usage) {
      // The upstream ignored include_usage: the client still gets its usage chunk (estimated).
      this.usage = estimate();
      out += formatJsonEvent({
        id: this.m.id ?? 'chatcmpl-gateway',
        object: 'chat.completion.chunk',
        created: this.m.created ?? Math.floor(Date.now() / 1000),
        model: this.m.model ?? '',
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
