/**
 * OpenTelemetry traces (`tracing:`), read back from a real OTLP/HTTP receiver the test starts
 * (test/helpers/otlp-receiver.ts decodes what went over the wire): one server span per request,
 * a child per upstream attempt (fallback and account failover included), GenAI and gateway
 * attributes, the client's traceparent continued and the attempt's passed upstream (the mock
 * records the headers it received), streams, errors, a cut stream, sampling, both encodings,
 * export failures in the log, and the spans still pending exported at shutdown.
 */
import t from 'tap';
import { baseConfig, bearer, call, chatBody, KEYS, messagesBody, responsesBody, startGateway, writeConfig } from '../helpers/gateway.js';
import { sseText } from '../helpers/raw.js';
import { SPAN_KIND, startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { createLogger } from '../../core/log.js';
import { ConfigError, loadConfigFile } from '../../core/config/load.js';
import { builtinPlugins } from '../../plugins/index.js';
import type { TapTest } from '../helpers/gateway.js';

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const PARENT_ID = 'b7ad6b7169203331';

/** A gateway exporting to a fresh receiver; both closed at the end of the test. */
async function traced(
  t: TapTest,
  opts: { tracing?: Record<string, unknown>; patch?: (cfg: Record<string, any>) => void; lines?: string[] } = {},
) {
  const rx = await startOtlpReceiver();
  const cfg = baseConfig();
  cfg.tracing = { endpoint: rx.url, ...opts.tracing };
  opts.patch?.(cfg);
  const g = await startGateway(cfg, opts.lines ? { log: createLogger('info', (l) => opts.lines!.push(l)) } : {});
  t.teardown(async () => {
    await g.close();
    await rx.close();
  });
  const mocks = new Map(g.gw.mocks); // still readable once the gateway closed them
  return { g, rx, mock: (p = 'mock') => mocks.get(p)! };
}

/** A request's server span and its children (the attempts, in order), once all have arrived. */
async function trace(rx: OtlpReceiver, requestId: string, attempts: number) {
  const find = (spans: ReceivedSpan[]) =>
    spans.find((s) => s.kind === SPAN_KIND.server && s.attributes['gateway.request_id'] === requestId);
  const children = (spans: ReceivedSpan[], server: ReceivedSpan) =>
    spans
      .filter((s) => s.parentSpanId === server.spanId)
      .sort((a, b) => Number(a.attributes['gateway.attempt']) - Number(b.attributes['gateway.attempt']));
  const spans = await rx.waitFor((all) => {
    const s = find(all);
    return !!s && children(all, s).length >= attempts;
  });
  const server = find(spans)!;
  return { server, attempts: children(spans, server) };
}

/** Headers the mock received for its requests since `since` (the count of requests before). */
const received = (mock: { requests: { headers: Record<string, unknown> }[] }, since: number) =>
  mock.requests.slice(since).map((r) => r.headers);

t.test(
  "spans are exported while the gateway runs: the client's trace continued, one child per attempt, the upstream continuing it",
  async (t) => {
    const { g, rx, mock } = await traced(t);
    const before = mock().requests.length;
    const r = await call(g.url + '/v1/chat/completions', {
      headers: {
        ...bearer(KEYS.chat),
        traceparent: `00-${TRACE_ID}-${PARENT_ID}-01`,
        tracestate: 'vendor=abc',
        'user-agent': 'trace-test/1',
      },
      json: chatBody(),
    });
    t.equal(r.status, 200);
    const requestId = r.headers.get('x-request-id')!;
    // Not closed: the batch goes out on its own schedule.
    const { server, attempts } = await trace(rx, requestId, 1);

    t.equal(server.name, 'POST /v1/chat/completions');
    t.equal(server.traceId, TRACE_ID, "the client's trace id is kept");
    t.equal(server.parentSpanId, PARENT_ID, "the server span's parent is the client's span");
    t.equal(attempts.length, 1);
    const [attempt] = attempts;
    t.equal(attempt.kind, SPAN_KIND.client);
    t.equal(attempt.name, 'chat chat-model');
    t.equal(attempt.traceId, TRACE_ID);

    const up = received(mock(), before);
    t.equal(up.length, 1);
    t.equal(up[0].traceparent, `00-${TRACE_ID}-${attempt.spanId}-01`, "the upstream received the attempt span's traceparent");
    t.equal(up[0].tracestate, 'vendor=abc', "and the client's tracestate");

    const usage = r.json.usage;
    t.match(server.attributes, {
      'http.request.method': 'POST',
      'http.route': '/v1/chat/completions',
      'url.path': '/v1/chat/completions',
      'http.response.status_code': 200,
      'user_agent.original': 'trace-test/1',
      'client.address': '127.0.0.1',
      'gateway.requested_model': 'chat-model',
      'gateway.stream': false,
      // Billed, in the gateway's buckets: Chat's prompt_tokens less the cached ones (none here).
      'gateway.tokens.input': usage.prompt_tokens,
      'gateway.tokens.output': usage.completion_tokens,
      'gateway.tokens.cache_read': 0,
      'gateway.tokens.cache_write': 0,
      'gateway.request_id': requestId,
      'gateway.route': 'openai-chat',
      'gateway.key': 'chat',
      'gateway.user': 'alice',
      'gateway.group': 'chat',
      'gateway.model': 'chat-model',
      'gateway.provider': 'mock',
      'gateway.account': 'mock/default',
      'gateway.attempts': 1,
      // chat-model: $1 input, $2 output per million tokens = 1 and 2 µ$ a token.
      'gateway.cost_micro_usd': usage.prompt_tokens + 2 * usage.completion_tokens,
      'gateway.usage_estimated': false,
      'gateway.stream_cut': false,
    });
    t.same(
      Object.keys(server.attributes).filter((k) => k.startsWith('gen_ai.')),
      [],
      'GenAI attributes only on the inference call (the attempt): a backend summing usage over the trace counts it once',
    );
    t.notOk('error.type' in server.attributes);
    t.equal(server.status.code, 0, 'status unset: no error');
    t.match(attempt.attributes, {
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'mock',
      'gen_ai.system': 'mock',
      'gen_ai.request.model': 'chat-model',
      'gen_ai.request.stream': false,
      'gen_ai.response.model': r.json.model,
      'gen_ai.response.id': r.json.id,
      'gen_ai.response.finish_reasons': [r.json.choices[0].finish_reason],
      'gen_ai.usage.input_tokens': usage.prompt_tokens,
      'gen_ai.usage.output_tokens': usage.completion_tokens,
      'gen_ai.usage.cache_read.input_tokens': 0,
      'gen_ai.usage.cache_creation.input_tokens': 0,
      'gateway.usage_estimated': false,
      'gateway.stream_cut': false,
      'http.response.status_code': 200,
      'server.address': '127.0.0.1',
      'gateway.attempt': 0,
      'gateway.account': 'mock/default',
      'gateway.model': 'chat-model',
    });
    t.ok(attempt.startNs >= server.startNs && attempt.endNs <= server.endNs, "the attempt lies within the request's span");
    t.equal(server.resource['service.name'], 'llm-gateway');
    t.equal(server.scope.name, 'llm-gateway');
    t.match(rx.exports[0].contentType, /^application\/x-protobuf/, 'protobuf by default');
  },
);

t.test('without a client traceparent the request starts its trace; JSON encoding, headers and resource from the config', async (t) => {
  const { g, rx, mock } = await traced(t, {
    tracing: {
      protocol: 'http/json',
      headers: { authorization: 'Bearer collector-token' },
      service_name: 'edge-gateway',
      resource_attributes: { 'deployment.environment.name': 'test' },
    },
  });
  const before = mock().requests.length;
  const r = await call(g.url + '/v1/responses', { headers: bearer(KEYS.responses), json: responsesBody() });
  t.equal(r.status, 200);
  await g.close(); // the spans still pending are exported at shutdown
  const { server, attempts } = await trace(rx, r.headers.get('x-request-id')!, 1);
  t.equal(server.parentSpanId, '', 'a root span');
  t.match(server.traceId, /^[0-9a-f]{32}$/);
  t.not(server.traceId, '0'.repeat(32));
  const up = received(mock(), before);
  t.equal(up[0].traceparent, `00-${server.traceId}-${attempts[0].spanId}-01`, 'the upstream continues the trace the gateway started');
  t.equal(up[0].tracestate, undefined);
  t.match(rx.exports[0].contentType, /^application\/json/);
  t.equal(rx.exports[0].headers.authorization, 'Bearer collector-token', "the config's export headers");
  t.equal(server.resource['service.name'], 'edge-gateway');
  t.equal(server.resource['deployment.environment.name'], 'test');
  t.match(server.attributes, { 'http.route': '/v1/responses', 'gateway.requested_model': 'gpt-model', 'gateway.key': 'responses' });
  t.match(attempts[0].attributes, {
    'gen_ai.request.model': 'gpt-model',
    'gen_ai.response.finish_reasons': ['completed'],
    'gen_ai.response.id': r.json.id,
  });
});

t.test('fallback and account failover: one attempt span each, each traceparent naming its own', async (t) => {
  const { g, rx, mock } = await traced(t, {
    patch(cfg) {
      cfg.models['fail-503'] = { provider: 'mock', upstream: 'fail-503#status=503', price: { input: 1, output: 2 } };
      cfg.groups.chat.models.push('fail-503');
      cfg.providers.pool = {
        kind: 'mock',
        accounts: [
          { name: 'first', api_key: 'key-pool-first', priority: 0 },
          { name: 'second', api_key: 'key-pool-second', priority: 1 },
        ],
      };
      cfg.models['pool-model'] = { provider: 'pool', price: { input: 1, output: 2 } };
      cfg.groups.chat.models.push('pool-model');
    },
  });
  // The requested model fails (503), the fallback list's first model answers.
  const before = mock().requests.length;
  const r = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: chatBody({ model: 'fail-503', models: ['chat-model'] }),
  });
  t.equal(r.status, 200);
  // The first account fails (429), the second answers.
  const beforePool = mock('pool').requests.length;
  mock('pool').script('key-pool-first', { next: ['status=429'] });
  const p = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody({ model: 'pool-model' }) });
  t.equal(p.status, 200);
  await g.close();

  const fb = await trace(rx, r.headers.get('x-request-id')!, 2);
  t.equal(fb.attempts.length, 2, 'two attempts under the request');
  const [failed, answered] = fb.attempts;
  t.match(failed.attributes, {
    'gen_ai.request.model': 'fail-503#status=503',
    'http.response.status_code': 503,
    'gateway.model': 'fail-503',
    'gateway.failure': 'status',
    'error.type': 'upstream_error',
  });
  t.equal(failed.status.code, 2, 'the failed attempt is an error');
  t.notOk('gen_ai.usage.output_tokens' in failed.attributes, 'no usage on the attempt that did not answer');
  t.match(answered.attributes, { 'gateway.model': 'chat-model', 'gateway.fallback': true, 'http.response.status_code': 200 });
  t.equal(answered.status.code, 0);
  t.match(fb.server.attributes, {
    'gateway.attempts': 2,
    'gateway.model': 'chat-model',
    'gateway.requested_model': 'fail-503',
    'http.response.status_code': 200,
  });
  t.equal(fb.server.status.code, 0, 'the request succeeded');
  const up = received(mock(), before);
  t.same(
    up.map((h) => h.traceparent),
    fb.attempts.map((a) => `00-${a.traceId}-${a.spanId}-01`),
    'each upstream request carried its own attempt span',
  );

  const fo = await trace(rx, p.headers.get('x-request-id')!, 2);
  t.same(
    fo.attempts.map((a) => [a.attributes['gateway.account'], a.attributes['http.response.status_code']]),
    [
      ['pool/first', 429],
      ['pool/second', 200],
    ],
    'an attempt per account',
  );
  t.equal(fo.attempts[0].attributes['error.type'], 'rate_limit_error', "the provider's 429, in the gateway's error code");
  t.same(
    received(mock('pool'), beforePool).map((h) => h.traceparent),
    fo.attempts.map((a) => `00-${a.traceId}-${a.spanId}-01`),
  );
  t.equal(fo.server.attributes['gateway.account'], 'pool/second', 'the request names the account that answered');
});

t.test('streams: usage, finish reasons and time to first chunk, passthrough and converted', async (t) => {
  const { g, rx } = await traced(t, {
    patch(cfg) {
      cfg.providers.msgonly = { kind: 'mock', protocols: ['anthropic-messages'] };
      cfg.models['claude-converted'] = { provider: 'msgonly', upstream: 'claude-up', price: { input: 1, output: 2 } };
      cfg.groups.conv = { kind: 'chat', models: ['claude-converted'] };
      cfg.keys.push({ key: `sk-${'c0'.repeat(32)}`, name: 'conv', user: 'alice', group: 'conv' });
    },
  });
  const msg = await sseText(`${g.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': KEYS.messages, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify(messagesBody({ stream: true })),
  });
  t.equal(msg.status, 200);
  const conv = await sseText(`${g.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...bearer(`sk-${'c0'.repeat(32)}`), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ model: 'claude-converted', stream: true, max_tokens: 3 })),
  });
  t.equal(conv.status, 200);
  await g.close();

  const m = await trace(rx, msg.headers.get('x-request-id')!, 1);
  const delta = JSON.parse(/event: message_delta\ndata: (.*)\n/.exec(msg.text)![1]);
  const start = JSON.parse(/event: message_start\ndata: (.*)\n/.exec(msg.text)![1]);
  t.match(m.attempts[0].attributes, {
    'gen_ai.request.stream': true,
    'gen_ai.response.model': start.message.model,
    'gen_ai.response.id': start.message.id,
    'gen_ai.response.finish_reasons': ['end_turn'],
    'gen_ai.usage.output_tokens': delta.usage.output_tokens,
    'gateway.usage_estimated': false,
  });
  t.match(m.server.attributes, {
    'gateway.stream': true,
    'gateway.tokens.output': delta.usage.output_tokens,
    'gateway.usage_estimated': false,
  });
  t.type(m.server.attributes['gateway.ttft_ms'], 'number');

  const c = await trace(rx, conv.headers.get('x-request-id')!, 1);
  t.match(c.attempts[0].attributes, {
    'gen_ai.request.model': 'claude-up',
    'gateway.upstream_protocol': 'anthropic-messages',
    // The upstream's own word (Messages), not the client's (Chat's `length`).
    'gen_ai.response.finish_reasons': ['max_tokens'],
    'gen_ai.response.model': 'claude-up',
  });
  t.match(conv.text, /"finish_reason":"length"/, 'the client got its own protocol');
});

t.test(
  'errors: a 4xx is the client’s, a 5xx and a failed attempt are errors; a request refused before any attempt has no child',
  async (t) => {
    const { g, rx } = await traced(t, {
      patch(cfg) {
        cfg.models['bad-400'] = { provider: 'mock', upstream: 'bad-400#status=400', price: { input: 1, output: 2 } };
        cfg.models['fail-500'] = { provider: 'mock', upstream: 'fail-500#status=500', price: { input: 1, output: 2 } };
        cfg.groups.chat.models.push('bad-400', 'fail-500');
      },
    });
    const bad = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody({ model: 'bad-400' }) });
    t.equal(bad.status, 400);
    const down = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody({ model: 'fail-500' }) });
    t.equal(down.status, 502);
    const unknown = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody({ model: 'no-such-model' }) });
    const nokey = await call(g.url + '/v1/chat/completions', { headers: bearer(`sk-${'ee'.repeat(32)}`), json: chatBody() });
    t.equal(nokey.status, 401);
    await g.close();

    const b = await trace(rx, bad.headers.get('x-request-id')!, 1);
    t.match(b.server.attributes, { 'http.response.status_code': 400, 'error.type': bad.json.error.code ?? bad.json.error.type });
    t.equal(b.server.status.code, 0, "a 4xx is not the server's error");
    t.equal(b.attempts[0].status.code, 2, 'the attempt failed');
    t.equal(b.attempts[0].attributes['http.response.status_code'], 400);

    const d = await trace(rx, down.headers.get('x-request-id')!, 1);
    t.match(d.server.attributes, { 'http.response.status_code': 502, 'error.type': 'upstream_error' });
    t.equal(d.server.status.code, 2, 'a 5xx is an error');
    t.match(d.server.status.message, /status 500/);
    t.equal(d.attempts[0].attributes['http.response.status_code'], 500);

    const u = await trace(rx, unknown.headers.get('x-request-id')!, 0);
    t.equal(u.attempts.length, 0, 'no attempt was made');
    t.match(u.server.attributes, {
      'http.response.status_code': unknown.status,
      'gateway.requested_model': 'no-such-model',
      'error.type': unknown.json.error.code,
    });

    const k = await trace(rx, nokey.headers.get('x-request-id')!, 0);
    t.match(k.server.attributes, { 'http.response.status_code': 401, 'error.type': nokey.json.error.code });
    t.notOk('gateway.key' in k.server.attributes, 'no key: no key name');
  },
);

t.test('a stream cut at its reservation says so (and that its usage is estimated)', async (t) => {
  const { g, rx } = await traced(t, {
    patch(cfg) {
      cfg.models.pricey = { provider: 'mock', price: { input: 100, output: 1000 } };
      cfg.groups.chat.models.push('pricey');
    },
  });
  const r = await sseText(`${g.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(
      chatBody({
        model: 'pricey',
        stream: true,
        max_tokens: 20,
        messages: [{ role: 'user', content: 'go on [[mock: words=400 chunk_delay=1 ignore_max_tokens]]' }],
      }),
    ),
  });
  t.match(r.text, /"finish_reason":"length"/);
  await g.close();
  const { server, attempts } = await trace(rx, r.headers.get('x-request-id')!, 1);
  t.match(server.attributes, { 'gateway.stream_cut': true, 'gateway.usage_estimated': true, 'http.response.status_code': 200 });
  t.ok(Number(server.attributes['gateway.cost_micro_usd']) > 0, 'billed what was generated');
  t.equal(attempts[0].attributes['gateway.stream_cut'], true);
});

t.test(
  "sampling: sample_ratio 0 records no root trace, yet the upstream still gets a traceparent; a client's sampled trace is recorded",
  async (t) => {
    const { g, rx, mock } = await traced(t, { tracing: { sample_ratio: 0 } });
    const before = mock().requests.length;
    const dropped = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() });
    t.equal(dropped.status, 200);
    const kept = await call(g.url + '/v1/chat/completions', {
      headers: { ...bearer(KEYS.chat), traceparent: `00-${TRACE_ID}-${PARENT_ID}-01` },
      json: chatBody(),
    });
    await g.close();
    const up = received(mock(), before);
    t.match(up[0].traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/, 'not sampled: flags 00');
    t.match(up[1].traceparent, new RegExp(`^00-${TRACE_ID}-[0-9a-f]{16}-01$`));
    await trace(rx, kept.headers.get('x-request-id')!, 1);
    t.notOk(
      rx.spans.some((s) => s.attributes['gateway.request_id'] === dropped.headers.get('x-request-id')),
      'the unsampled request was not exported',
    );
    t.equal(rx.spans.length, 2, "only the client's sampled trace: its request and its attempt");
  },
);

t.test('a collector that refuses exports: a warning in the log, not one per export', async (t) => {
  const lines: string[] = [];
  const { g, rx } = await traced(t, { lines });
  rx.status = 500;
  for (let i = 0; i < 3; i++) {
    t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() })).status, 200);
  }
  await g.close();
  const warnings = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'trace export failed: spans were dropped');
  t.equal(warnings.length, 1, 'one warning');
  t.match(warnings[0], { level: 'warn', endpoint: rx.url, droppedSpans: Number, failedExports: 1 });
  t.equal(rx.spans.length, 0);
});

t.test('a reload that changes tracing says it takes effect on restart', async (t) => {
  const lines: string[] = [];
  const { g, rx } = await traced(t, { lines });
  const cfg = baseConfig();
  cfg.tracing = { endpoint: rx.url, sample_ratio: 0.5 };
  writeConfig(cfg, (await import('node:path')).dirname(g.file));
  t.equal(await g.gw.reload(), undefined, 'the reload is accepted');
  t.ok(lines.some((l) => JSON.parse(l).msg === 'tracing settings changed: they take effect on restart'));
});

t.test('config: what tracing accepts, and its errors', async (t) => {
  const load = async (tracing: unknown) => {
    const cfg = baseConfig();
    cfg.tracing = tracing;
    return loadConfigFile(writeConfig(cfg), { registry: builtinPlugins, env: {} });
  };
  t.equal(
    (await load({ endpoint: 'http://collector:4318' })).config.tracing?.endpoint,
    'http://collector:4318/v1/traces',
    'no path: /v1/traces',
  );
  t.equal(
    (await load({ endpoint: 'http://collector:4318/custom/traces' })).config.tracing?.endpoint,
    'http://collector:4318/custom/traces',
  );
  t.equal((await load({ enabled: false, endpoint: 'http://collector:4318' })).config.tracing, undefined, 'enabled: false is off');
  t.equal((await load(undefined)).config.tracing, undefined, 'no section: off');
  t.match((await load({})).config.tracing, { protocol: 'http/protobuf', sampleRatio: 1, endpoint: undefined, timeoutMs: undefined });
  const bad = await load({ endpoint: 'collector:4318', sample_ratio: 2, protocol: 'grpc' }).catch((e: unknown) => e);
  t.type(bad, ConfigError);
  const paths = (bad as ConfigError).issues.map((i) => i.path).sort();
  t.same(paths, ['tracing.endpoint', 'tracing.protocol', 'tracing.sample_ratio']);
});
