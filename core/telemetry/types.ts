/**
 * The contract between the request path and tracing (core/telemetry): what the server, the attempt
 * loop and the two deliveries call on a request's trace, `ctx.trace`. Types only, importing no
 * OpenTelemetry package: when tracing is off `ctx.trace` is undefined, every call site is one
 * `?.`, and nothing of OpenTelemetry is loaded (core/telemetry/index.ts).
 */
import type { GatewayError } from '../errors.js';
import type { AnswerMeta } from '../protocols/types.js';
import type { Attempt, Outcome } from '../types.js';

/** One request's trace: its server span, and the attempts' spans under it. */
export interface RequestTrace {
  /**
   * Starts the span of an attempt about to be made (a child of the request's span) and puts its
   * `traceparent` (and the client's `tracestate`) into `attempt.headers`, before the onAttempt hooks.
   * `baseUrl` is where it goes (the span's server.address).
   */
  attempt(attempt: Attempt, baseUrl: string): AttemptTrace;
  /** What the answering attempt's upstream said about its answer (json.ts, stream.ts). */
  answered(attempt: Attempt, meta: AnswerMeta | undefined): void;
  /** Ends the request's span once its outcome is final (after onFinally: the charge is known). */
  end(outcome: Outcome, error: GatewayError | undefined): void;
}

export interface AttemptTrace {
  /** The attempt threw (a hook's error, a body that cannot be converted): the span says why. */
  threw(error: unknown): void;
  /** Ends the attempt's span; `answered`: this attempt answered the client. */
  end(answered: boolean): void;
}
