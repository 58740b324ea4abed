/**
 * OpenTelemetry traces (opt-in, `tracing:`): `loadTracing` loads the implementation (otel.ts, the
 * only module that imports `@opentelemetry/*`) when the config turns tracing on, and nothing
 * otherwise. The server starts a request's trace (`ctx.trace`) from the `Tracing` it got, and shuts
 * it down last (the spans still pending are exported then). What the spans carry:
 * docs/operations.md, "Traces".
 */
import type { TracingConfig } from '../config/types.js';
import type { RequestContext } from '../context.js';
import type { Logger } from '../log.js';
import type { RequestTrace } from './types.js';

export type { RequestTrace, AttemptTrace } from './types.js';

export interface Tracing {
  /** Starts a routed request's server span (continuing the client's `traceparent`, if any). */
  request(ctx: RequestContext): RequestTrace;
  /** Exports the spans still pending and stops; waits at most the export timeout. */
  shutdown(): Promise<void>;
}

/** The process's tracing, or undefined when the config has none (no OpenTelemetry module is loaded then). */
export async function loadTracing(config: Readonly<TracingConfig> | undefined, log: Logger): Promise<Tracing | undefined> {
  if (!config) return undefined;
  const { createTracing } = await import('./otel.js');
  return createTracing(config, log);
}
