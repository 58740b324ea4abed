/**
 * Anthropic Messages on the wire. Every frame is `event: <type>` + `data:`; usage arrives in
 * `message_start.message.usage` and (cumulative) in `message_delta.usage`; `message_stop` ends.
 */
import { GatewayError } from '../../errors.js';
import { formatJsonEvent, type SseBytesBlock } from '../../sse.js';
import type { ErrorInfo, ProtocolWire } from '../types.js';
import { BaseTap } from '../tap.js';
import { fromAnthropicUsage, fromAnthropicUsagePartial, mergeUsage, textKeys, textLength } from '../usage.js';
import { validateHistory } from './history.js';

const TEXT_KEYS = textKeys(['text', 'partial_json', 'thinking']);

class MessagesTap extends BaseTap {
  observe(b: SseBytesBlock): boolean {
    this.inspect(b);
    return true;
  }

  private inspect(b: SseBytesBlock): void {
    if (b.dataBuf === undefined) return;
    switch (b.event) {
      case 'content_block_start':
        this.started = true;
        return;
      case 'content_block_delta':
        this.started = true;
        this.outputChars += textLength(b.data!, TEXT_KEYS);
        return;
      case 'message_start':
        try {
          const m = JSON.parse(b.data!).message ?? {};
          this.m = { id: m.id, model: m.model };
          const u = fromAnthropicUsagePartial(m.usage);
          if (u) this.usage = mergeUsage(this.usage, u);
        } catch {
          /* ignore */
        }
        return;
      case 'message_delta':
        try {
          const j = JSON.parse(b.data!);
          const u = fromAnthropicUsagePartial(j.usage);
          if (u) this.usage = mergeUsage(this.usage, u);
          if (typeof j.delta?.stop_reason === 'string') this.finishReasons = [j.delta.stop_reason];
        } catch {
          /* ignore */
        }
        return;
      case 'message_stop':
        this.complete = true;
        this.started = true;
        return;
      case 'error':
        this.errored = true;
        return;
      default:
        return;
    }
  }
}

export const messagesWire: ProtocolWire = {
  name: 'anthropic-messages',
  validate(body, opts) {
    if (!Array.isArray(body.messages)) {
      throw new GatewayError('INVALID_REQUEST', { message: "'messages' is required and must be an array" });
    }
    // count_tokens may not answer 409 (spec §4): its histories are the upstream's to judge.
    if (opts?.history !== false) validateHistory(body);
  },
  usageOf(body) {
    return fromAnthropicUsage(body.usage);
  },
  createTap() {
    return new MessagesTap();
  },
  streamError(err: ErrorInfo) {
    // The Anthropic SDK drops frames without an `event:` line: the error must be named.
    return formatJsonEvent({ type: 'error', error: { type: err.type, message: err.message } }, 'error');
  },
};
