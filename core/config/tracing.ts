/**
 * The `tracing:` section of gateway.yaml (OpenTelemetry traces, opt-in): its schema, included in
 * the config schema (core/config/schema.ts), and its resolution into `TracingConfig`, called by the
 * loader. Kept apart so the section reads as one piece; docs/operations.md ("Traces") says what the
 * spans carry.
 */
import { DURATION_PATTERN, parseDuration } from '../units.js';
import type { TracingConfig } from './types.js';

export const tracingSchema = {
  type: 'object',
  additionalProperties: false,
  description:
    'OpenTelemetry traces, exported over OTLP/HTTP: one server span per request with a child span per upstream attempt (docs/operations.md, "Traces"). Without this section (or with enabled: false) the OpenTelemetry SDK is not loaded. Read at start',
  properties: {
    enabled: {
      type: 'boolean',
      default: true,
      description: 'Whether traces are exported (the section present is enough; false keeps the settings and turns tracing off)',
    },
    endpoint: {
      title: 'URL',
      type: 'string',
      pattern: '^https?://',
      description:
        'Where spans are sent, e.g. http://collector:4318/v1/traces; a URL without a path gets /v1/traces. Unset: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, else http://localhost:4318/v1/traces',
    },
    protocol: {
      enum: ['http/protobuf', 'http/json'],
      default: 'http/protobuf',
      description: 'The OTLP encoding: protobuf (what collectors expect by default) or JSON',
    },
    headers: {
      type: 'object',
      additionalProperties: { type: 'string' },
      default: {},
      description:
        "Headers sent with every export (e.g. a collector's authorization), over those of OTEL_EXPORTER_OTLP_TRACES_HEADERS / OTEL_EXPORTER_OTLP_HEADERS",
    },
    service_name: {
      type: 'string',
      minLength: 1,
      description: 'The service.name resource attribute (default: OTEL_SERVICE_NAME, else llm-gateway)',
    },
    sample_ratio: {
      type: 'number',
      minimum: 0,
      maximum: 1,
      default: 1,
      description:
        "Share of traces recorded when the client sent no traceparent (0 to 1); a client's traceparent decides for its own requests (its sampled flag is followed)",
    },
    resource_attributes: {
      type: 'object',
      additionalProperties: { type: 'string' },
      default: {},
      description: 'Extra resource attributes on every span (e.g. deployment.environment.name), over those of OTEL_RESOURCE_ATTRIBUTES',
    },
    timeout: {
      title: 'duration',
      type: 'string',
      pattern: DURATION_PATTERN,
      description:
        'Longest wait for one export (default: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT / OTEL_EXPORTER_OTLP_TIMEOUT, else 10s); at shutdown the gateway waits at most this (and a second) for the last spans',
    },
  },
} as const;

/** The section, resolved; undefined when tracing is off. */
export function resolveTracing(raw: any, fail: (segs: readonly (string | number)[], message: string) => void): TracingConfig | undefined {
  if (raw === undefined || raw === null || raw.enabled === false) return undefined;
  let endpoint: string | undefined;
  if (typeof raw.endpoint === 'string') {
    try {
      const u = new URL(raw.endpoint);
      if (u.pathname === '/') u.pathname = '/v1/traces';
      endpoint = u.href;
    } catch {
      fail(['tracing', 'endpoint'], `'${raw.endpoint}' is not a URL (e.g. http://collector:4318/v1/traces)`);
    }
  }
  const timeoutMs = typeof raw.timeout === 'string' ? parseDuration(raw.timeout) : undefined;
  if (timeoutMs !== undefined && timeoutMs <= 0) fail(['tracing', 'timeout'], 'timeout must be more than 0');
  return {
    endpoint,
    protocol: raw.protocol ?? 'http/protobuf',
    headers: { ...(raw.headers ?? {}) },
    serviceName: raw.service_name,
    sampleRatio: raw.sample_ratio ?? 1,
    resourceAttributes: { ...(raw.resource_attributes ?? {}) },
    timeoutMs,
  };
}
