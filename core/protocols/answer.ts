/**
 * What an upstream answer says about itself (`AnswerMeta`: its id, the model that answered, why it
 * stopped), in the upstream's own words: traces report it (core/telemetry). Read from what the
 * protocol code already parsed: the whole JSON answer (`answerOf`), or a stream's terminal events
 * (the taps and decoders call `responsesFinish` and keep what they saw).
 */
import type { ProtocolName } from '../config/types.js';
import type { AnswerMeta } from './types.js';

type Obj = Record<string, any>;

const str = (v: unknown): string | undefined => (typeof v === 'string' && v ? v : undefined);

/**
 * A Responses answer's finish reason: the incomplete reason (`max_output_tokens`,
 * `content_filter`) when it is incomplete, else its status (`completed`, `failed`).
 */
export function responsesFinish(response: Obj | undefined, fallback: string): string {
  const status = str(response?.status) ?? fallback;
  return status === 'incomplete' ? (str(response?.incomplete_details?.reason) ?? status) : status;
}

/** The meta of a non-stream upstream answer in `protocol` (its parsed JSON body). */
export function answerOf(protocol: ProtocolName, body: unknown): AnswerMeta | undefined {
  if (!body || typeof body !== 'object') return undefined;
  const b = body as Obj;
  let finishReasons: string[] | undefined;
  if (protocol === 'openai-chat') {
    if (Array.isArray(b.choices)) {
      for (const c of b.choices) {
        const r = str(c?.finish_reason);
        if (r) (finishReasons ??= []).push(r);
      }
    }
  } else if (protocol === 'anthropic-messages') {
    const r = str(b.stop_reason);
    if (r) finishReasons = [r];
  } else if (b.status !== undefined) finishReasons = [responsesFinish(b, 'completed')];
  return { id: str(b.id), model: str(b.model), finishReasons };
}
