/**
 * Tracing off costs nothing: with `tracing.enabled: false` (or no `tracing:` section) no
 * OpenTelemetry module is loaded, nothing is exported, and a client's traceparent is not passed
 * upstream. Its own file: the process must not have loaded OpenTelemetry for another test first.
 * The last test turns tracing on in the same process, showing that the check sees the modules.
 */
import t from 'tap';
import { createRequire } from 'node:module';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway } from '../helpers/gateway.js';
import { startOtlpReceiver } from '../helpers/otlp-receiver.js';

/**
 * The OpenTelemetry SDK's modules loaded in this process (its packages are CommonJS: every module
 * of theirs loaded is in require's cache). `@opentelemetry/api` is not counted: prom-client loads
 * it for its exemplars whatever the gateway does (the API alone, which records nothing).
 */
const otelModules = () =>
  Object.keys(createRequire(import.meta.url).cache).filter((f) => f.includes('/@opentelemetry/') && !f.includes('/@opentelemetry/api/'));

t.test('enabled: false loads no OpenTelemetry module and forwards no traceparent', async (t) => {
  const rx = await startOtlpReceiver();
  t.teardown(() => rx.close());
  const cfg = baseConfig();
  cfg.tracing = { enabled: false, endpoint: rx.url };
  const g = await startGateway(cfg);
  const before = g.gw.mocks.get('mock')!.requests.length;
  const r = await call(g.url + '/v1/chat/completions', {
    headers: { ...bearer(KEYS.chat), traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    json: chatBody(),
  });
  t.equal(r.status, 200);
  const up = g.gw.mocks.get('mock')!.requests.slice(before);
  await g.close();
  t.equal(up.length, 1);
  t.equal(up[0].headers.traceparent, undefined, "the client's traceparent is not passed upstream");
  t.same(otelModules(), [], 'no module of the OpenTelemetry SDK loaded');
  t.equal(rx.exports.length, 0, 'nothing exported');
});

t.test('turned on in the same process, the modules are there (the check above can see them)', async (t) => {
  const rx = await startOtlpReceiver();
  t.teardown(() => rx.close());
  const cfg = baseConfig();
  cfg.tracing = { endpoint: rx.url };
  const g = await startGateway(cfg);
  t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() })).status, 200);
  await g.close();
  t.ok(otelModules().length > 0, `${otelModules().length} modules of the SDK loaded`);
  t.ok(rx.spans.length >= 2, 'and spans were exported');
});
