/**
 * Tracing on the OpenTelemetry SDK: the only module that imports `@opentelemetry/*`, loaded by
 * core/telemetry/index.ts only when `tracing:` turns it on.
 *
 * The gateway keeps its own TracerProvider and registers nothing globally (no global tracer,
 * propagator, context manager or diag logger): spans are parented through explicit contexts, so
 * an embedder's own OpenTelemetry setup is neither used nor disturbed. Spans go out in batches
 * (BatchSpanProcessor) over OTLP/HTTP; a failed export is a rate-limited warning in the log.
 *
 * One server span per routed request (kind SERVER, `<method> <route path>`), continuing the
 * client's W3C `traceparent`; one child per upstream attempt (kind CLIENT, `chat <upstream model>`),
 * whose context goes upstream as `traceparent`. Attribute names: OpenTelemetry's HTTP and GenAI
 * semantic conventions, and the gateway's own under `gateway.` (docs/operations.md, "Traces").
 * The GenAI attributes are on the attempts only, the inference calls they describe: a backend that
 * sums `gen_ai.usage.*` over a trace counts each call once. The server span carries the request as
 * the access line tells it (key, user, group, billed tokens, cost) under `gateway.`.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
  type Tracer,
} from '@opentelemetry/api';
import { ExportResultCode, W3CTraceContextPropagator, type ExportResult } from '@opentelemetry/core';
import { defaultResource, envDetector, detectResources, resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type ReadableSpan,
  type SpanExporter,
} from '@opentelemetry/sdk-trace';
import type { TracingConfig } from '../config/types.js';
import type { RequestContext } from '../context.js';
import type { GatewayError } from '../errors.js';
import type { Logger } from '../log.js';
import type { AnswerMeta } from '../protocols/types.js';
import type { Attempt, Outcome } from '../types.js';
import { VERSION } from '../version.js';
import type { AttemptTrace, RequestTrace } from './types.js';

/** The export timeout when neither the config nor the environment sets one (the exporters' own default). */
const DEFAULT_TIMEOUT_MS = 10_000;
/** At most one export-failure warning per this long (the others are counted into the next). */
const WARN_EVERY_MS = 60_000;

const propagator = new W3CTraceContextPropagator();

/** Reads the client's trace headers as Node received them (ctx.headerValues: no header map built). */
const fromRequest: TextMapGetter<RequestContext> = {
  keys: () => ['traceparent', 'tracestate'],
  get(ctx, key) {
    const v = ctx.headerValues(key);
    return v.length === 0 ? undefined : v.length === 1 ? v[0] : v;
  },
};

const intoHeaders: TextMapSetter<Record<string, string>> = {
  set(headers, key, value) {
    headers[key] = value;
  },
};

/** The process's tracing (core/telemetry/index.ts `Tracing`). */
export async function createTracing(config: Readonly<TracingConfig>, log: Logger): Promise<OtelTracing> {
  const options = {
    url: config.endpoint,
    headers: Object.keys(config.headers).length > 0 ? { ...config.headers } : undefined,
    timeoutMillis: config.timeoutMs,
  };
  const inner: SpanExporter =
    config.protocol === 'http/json'
      ? new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter(options)
      : new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter(options);
  // service.name: the config's, else OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES', else ours.
  const resource = defaultResource()
    .merge(resourceFromAttributes({ 'service.name': 'llm-gateway', 'service.version': VERSION }))
    .merge(detectResources({ detectors: [envDetector] }))
    .merge(
      resourceFromAttributes({
        ...config.resourceAttributes,
        ...(config.serviceName ? { 'service.name': config.serviceName } : {}),
      }),
    );
  const timeoutMs = config.timeoutMs ?? envTimeoutMs() ?? DEFAULT_TIMEOUT_MS;
  const provider = new TracerProvider({
    resource,
    sampler: new ParentBasedSampler({
      root: config.sampleRatio >= 1 ? new AlwaysOnSampler() : new TraceIdRatioBasedSampler(config.sampleRatio),
    }),
    spanProcessors: [
      new BatchSpanProcessor({
        exporter: new WarningExporter(inner, log, config.endpoint ?? 'the OTEL_EXPORTER_OTLP_* endpoint'),
        exportTimeoutMillis: timeoutMs,
      }),
    ],
  });
  return new OtelTracing(provider, provider.getTracer('llm-gateway', VERSION), timeoutMs);
}

/** The export timeout the exporters read from the environment when the config sets none. */
function envTimeoutMs(): number | undefined {
  for (const name of ['OTEL_EXPORTER_OTLP_TRACES_TIMEOUT', 'OTEL_EXPORTER_OTLP_TIMEOUT']) {
    const v = Number(process.env[name]);
    if (Number.isFinite(v) && v > 0) return v;
  }
  return undefined;
}

export class OtelTracing {
  private readonly servers = new Map<string, Attributes>();

  constructor(
    private readonly provider: TracerProvider,
    readonly tracer: Tracer,
    private readonly timeoutMs: number,
  ) {}

  request(ctx: RequestContext): RequestTrace {
    return new OtelRequestTrace(this, ctx);
  }

  /** server.address and server.port of a base URL (parsed once per URL: they come from the config). */
  serverOf(baseUrl: string): Attributes {
    let a = this.servers.get(baseUrl);
    if (!a) {
      try {
        const u = new URL(baseUrl);
        a = { 'server.address': u.hostname, 'server.port': Number(u.port) || (u.protocol === 'https:' ? 443 : 80) };
      } catch {
        a = {}; // a base URL the transport will refuse: the attempt's span says why when it ends
      }
      if (this.servers.size < 1024) this.servers.set(baseUrl, a);
    }
    return a;
  }

  async shutdown(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    // Bounded: a collector that is away must not hold the gateway's exit longer than one export.
    await Promise.race([
      this.provider.shutdown().catch(() => undefined),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, this.timeoutMs + 1_000))),
    ]);
    clearTimeout(timer);
  }
}

class OtelRequestTrace implements RequestTrace {
  private readonly span: Span;
  /** The server span's context: the attempts' parent. */
  private readonly context: Context;
  /** The answering attempt's meta, once known. */
  private answer: AnswerMeta | undefined;

  constructor(
    private readonly tracing: OtelTracing,
    readonly ctx: RequestContext,
  ) {
    const parent = propagator.extract(ROOT_CONTEXT, ctx, fromRequest);
    const route = ctx.route;
    const method = ctx.req.method ?? 'GET';
    const url = ctx.req.url ?? '/';
    const q = url.indexOf('?');
    const attributes: Attributes = {
      'http.request.method': method,
      'http.route': route.path,
      'url.path': q === -1 ? url : url.slice(0, q),
      'url.scheme': 'http',
      'gateway.request_id': ctx.id,
      'gateway.route': route.name,
    };
    const ua = ctx.req.headers['user-agent'];
    if (ua) attributes['user_agent.original'] = ua;
    this.span = tracing.tracer.startSpan(`${method} ${route.path}`, { kind: SpanKind.SERVER, attributes }, parent);
    this.context = trace.setSpan(parent, this.span);
  }

  attempt(attempt: Attempt, baseUrl: string): AttemptTrace {
    const ctx = this.ctx;
    const attributes: Attributes = {
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': attempt.provider.kind,
      'gen_ai.system': attempt.provider.kind,
      'gen_ai.request.model': attempt.model.upstream,
      'gateway.attempt': attempt.index,
      'gateway.provider': attempt.provider.name,
      'gateway.model': attempt.model.id,
      'gateway.upstream_protocol': attempt.upstreamProtocol,
      ...this.tracing.serverOf(baseUrl),
    };
    if (attempt.account) attributes['gateway.account'] = attempt.account.id;
    if (ctx.parsed) attributes['gen_ai.request.stream'] = ctx.parsed.stream;
    if (ctx.requested && ctx.requested.model.id !== attempt.model.id) attributes['gateway.fallback'] = true;
    const span = this.tracing.tracer.startSpan(`chat ${attempt.model.upstream}`, { kind: SpanKind.CLIENT, attributes }, this.context);
    // The upstream continues this attempt's trace (the client's tracestate travels with it).
    propagator.inject(trace.setSpan(this.context, span), attempt.headers, intoHeaders);
    return new OtelAttemptTrace(this, span, attempt);
  }

  answered(_attempt: Attempt, meta: AnswerMeta | undefined): void {
    this.answer = meta;
  }

  /** The answering attempt's meta (for its span). */
  get answerMeta(): AnswerMeta | undefined {
    return this.answer;
  }

  end(outcome: Outcome, error: GatewayError | undefined): void {
    const { span, ctx } = this;
    if (span.isRecording()) {
      const a: Attributes = { 'http.response.status_code': outcome.status, 'gateway.attempts': ctx.attempts.length };
      if (ctx.clientIp) a['client.address'] = ctx.clientIp;
      if (ctx.key) {
        a['gateway.key'] = ctx.key.name;
        a['gateway.user'] = ctx.key.user;
      }
      if (ctx.group) a['gateway.group'] = ctx.group.name;
      if (ctx.parsed) {
        a['gateway.requested_model'] = ctx.parsed.model;
        a['gateway.stream'] = ctx.parsed.stream;
      }
      const answered = ctx.answeredModel;
      if (answered) {
        const by = ctx.attempts.findLast((x) => x.model === answered) ?? ctx.attempts[ctx.attempts.length - 1];
        a['gateway.model'] = answered.id;
        if (by) {
          a['gateway.provider'] = by.provider.name;
          if (by.account) a['gateway.account'] = by.account.id;
        }
      }
      const u = ctx.usage;
      if (u) {
        // Billed, in the gateway's four buckets (input without the cached tokens), as the access line.
        a['gateway.tokens.input'] = u.input;
        a['gateway.tokens.output'] = u.output;
        a['gateway.tokens.cache_read'] = u.cacheRead;
        a['gateway.tokens.cache_write'] = u.cacheWrite;
        a['gateway.usage_estimated'] = ctx.usageEstimated;
        a['gateway.stream_cut'] = ctx.streamCut;
      }
      if (ctx.ttftMs !== undefined) a['gateway.ttft_ms'] = ctx.ttftMs;
      if (ctx.billed) {
        a['gateway.cost_micro_usd'] = ctx.billed.actual;
        a['gateway.list_cost_micro_usd'] = ctx.billed.cost;
      }
      if (outcome.clientAborted) a['gateway.client_aborted'] = true;
      if (error) a['error.type'] = error.code;
      span.setAttributes(a);
      // HTTP server spans: a 4xx is the client's; a 5xx, or a failure after the answer began, is ours.
      if (error && (outcome.status >= 500 || (outcome.status < 400 && !outcome.clientAborted))) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: error.message });
      }
    }
    span.end();
  }
}

class OtelAttemptTrace implements AttemptTrace {
  private thrown: unknown;

  constructor(
    private readonly request: OtelRequestTrace,
    private readonly span: Span,
    private readonly attempt: Attempt,
  ) {}

  threw(error: unknown): void {
    this.thrown = error;
  }

  end(answered: boolean): void {
    const { span, attempt } = this;
    if (span.isRecording()) {
      const a: Attributes = {};
      if (attempt.status !== undefined) a['http.response.status_code'] = attempt.status;
      if (attempt.failure) a['gateway.failure'] = attempt.failure;
      if (attempt.retry) a['gateway.retry'] = true;
      if (answered) {
        responseAttributes(a, this.request.answerMeta, attempt.model.upstream);
        usageAttributes(a, this.request.ctx);
      }
      const err = attempt.error ?? (this.thrown as (Error & { code?: unknown }) | undefined);
      if (err && (err as GatewayError).status === 499) a['gateway.client_aborted'] = true;
      else if (err) {
        a['error.type'] = typeof err.code === 'string' ? err.code : (err.constructor?.name ?? 'Error');
        span.setStatus({ code: SpanStatusCode.ERROR, message: err.message });
      }
      span.setAttributes(a);
    }
    span.end();
  }
}

/** gen_ai.response.*: what the upstream said (its model when it named none: the model asked for). */
function responseAttributes(a: Attributes, meta: AnswerMeta | undefined, upstreamModel: string): void {
  a['gen_ai.response.model'] = meta?.model ?? upstreamModel;
  if (meta?.id) a['gen_ai.response.id'] = meta.id;
  if (meta?.finishReasons?.length) a['gen_ai.response.finish_reasons'] = meta.finishReasons;
}

/**
 * gen_ai.usage.*: the answering attempt's usage (the request's). GenAI's input_tokens include the
 * cached ones, which the gateway counts apart (cache_read and cache_creation give them separately).
 */
function usageAttributes(a: Attributes, ctx: RequestContext): void {
  const u = ctx.usage;
  if (!u) return;
  a['gen_ai.usage.input_tokens'] = u.input + u.cacheRead + u.cacheWrite;
  a['gen_ai.usage.output_tokens'] = u.output;
  a['gen_ai.usage.cache_read.input_tokens'] = u.cacheRead;
  a['gen_ai.usage.cache_creation.input_tokens'] = u.cacheWrite;
  a['gateway.usage_estimated'] = ctx.usageEstimated;
  a['gateway.stream_cut'] = ctx.streamCut;
}

/**
 * The OTLP exporter, with its failures in the gateway's log: the first at once, then at most one
 * warning a minute counting what failed meanwhile (a collector that is down must not flood the log).
 */
class WarningExporter implements SpanExporter {
  private lastWarn = 0;
  private failedExports = 0;
  private lostSpans = 0;

  constructor(
    private readonly inner: SpanExporter,
    private readonly log: Logger,
    private readonly endpoint: string,
  ) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.inner.export(spans, (result) => {
      if (result.code !== ExportResultCode.SUCCESS) this.failed(spans.length, result.error);
      done(result);
    });
  }

  private failed(spans: number, error: Error | undefined): void {
    this.failedExports++;
    this.lostSpans += spans;
    const now = Date.now();
    if (now - this.lastWarn < WARN_EVERY_MS) return;
    this.lastWarn = now;
    this.log.warn('trace export failed: spans were dropped', {
      endpoint: this.endpoint,
      failedExports: this.failedExports,
      droppedSpans: this.lostSpans,
      error: error?.message,
    });
    this.failedExports = 0;
    this.lostSpans = 0;
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}
