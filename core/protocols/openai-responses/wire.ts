/**
 * OpenAI Responses on the wire. Frames carry `event:` lines and a `sequence_number`; usage is in
 * `response.completed` / `response.incomplete`; there is no `[DONE]`. An in-stream failure is an
 * `error` event followed by `response.failed` (wire-notes).
 */
import { GatewayError } from '../../errors.js';
import { formatJsonEvent, type SseBytesBlock } from '../../sse.js';
import type { ErrorInfo, ProtocolWire, StreamMeta } from '../types.js';
import { BaseTap } from '../tap.js';
import { fromResponsesUsage, textKeys, textLength } from '../usage.js';
import { responsesFinish } from '../answer.js';

/**
 * Frames without an `event:` line (some servers, the SDK's own fixtures) name their type only in
 * the data, where nested objects have `type`s too: read the top-level one.
 */
function topLevelType(data: string): string | undefined {
  try {
    const j = JSON.parse(data);
    return typeof j?.type === 'string' ? j.type : undefined;
  } catch {
    return undefined;
  }
}
const SEQ = /"sequence_number"\s*:\s*(\d+)/;
const DELTA = textKeys(['delta']);

class ResponsesTap extends BaseTap {
  observe(b: SseBytesBlock): boolean {
    this.inspect(b);
    return true;
  }

  private inspect(b: SseBytesBlock): void {
    const data = b.data;
    if (data === undefined || data.startsWith('[DONE]')) return;
    const type = b.event ?? topLevelType(data);
    const seq = SEQ.exec(data);
    if (seq) this.m.sequence = Number(seq[1]);
    switch (type) {
      case 'response.output_text.delta':
      case 'response.function_call_arguments.delta':
      case 'response.reasoning_summary_text.delta':
      case 'response.reasoning_text.delta':
      case 'response.refusal.delta':
        this.started = true;
        this.outputChars += textLength(data, DELTA);
        return;
      case 'response.output_item.added':
        this.started = true;
        return;
      case 'response.created':
        try {
          const r = JSON.parse(data).response ?? {};
          this.m = { ...this.m, id: r.id, model: r.model, created: r.created_at };
        } catch {
          /* ignore */
        }
        return;
      case 'response.completed':
      case 'response.incomplete':
        try {
          const r = JSON.parse(data).response;
          const u = fromResponsesUsage(r?.usage);
          if (u) this.usage = u;
          this.finishReasons = [responsesFinish(r, type === 'response.incomplete' ? 'incomplete' : 'completed')];
        } catch {
          /* ignore */
        }
        this.complete = true;
        this.started = true;
        return;
      case 'response.failed':
      case 'error':
        this.errored = true;
        return;
      default:
        return;
    }
  }
}

export const responsesWire: ProtocolWire = {
  name: 'openai-responses',
  validate(body) {
    if (body.previous_response_id !== undefined && body.previous_response_id !== null) {
      throw new GatewayError('INVALID_REQUEST', {
        message: "'previous_response_id' is not supported over HTTP: send the full conversation in 'input'",
      });
    }
    if (body.input !== undefined && typeof body.input !== 'string' && !Array.isArray(body.input)) {
      throw new GatewayError('INVALID_REQUEST', { message: "'input' must be a string or an array" });
    }
  },
  usageOf(body) {
    return fromResponsesUsage(body.usage);
  },
  createTap() {
    return new ResponsesTap();
  },
  streamError(err: ErrorInfo, meta: StreamMeta = {}) {
    const seq = (meta.sequence ?? 0) + 1;
    const error = { type: err.type, code: err.code ?? err.type, message: err.message, param: null };
    return (
      formatJsonEvent({ type: 'error', sequence_number: seq, error }, 'error') +
      formatJsonEvent(
        {
          type: 'response.failed',
          sequence_number: seq + 1,
          response: {
            id: meta.id ?? 'resp_gateway',
            object: 'response',
            created_at: meta.created ?? Math.floor(Date.now() / 1000),
            status: 'failed',
            model: meta.model ?? '',
            output: [],
            error: { code: err.code ?? err.type, message: err.message },
            incomplete_details: null,
            usage: null,
          },
        },
        'response.failed',
      )
    );
  },
};
