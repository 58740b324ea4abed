/**
 * The plugin contract, through a third-party plugin loaded from a path: phases in order, onEvent
 * on streams, short-circuit by GatewayError rendered in the client's protocol, onFinally always
 * (with the outcome), close() when its config is retired.
 */
import t from 'tap';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import YAML from 'yaml';
import { baseConfig, bearer, call, chatBody, KEYS, messagesBody, ROOT, tmpDir } from '../helpers/gateway.js';
import { sseText } from '../helpers/raw.js';

const errorsUrl = pathToFileURL(path.join(ROOT, 'dist/core/errors.js')).href;
const plugin = `
import { GatewayError } from '${errorsUrl}';
const log = (globalThis.__pluginLog ??= []);
export default {
  name: 'policy',
  schema: { type: 'object', additionalProperties: false, required: ['word'], properties: { word: { type: 'string' } } },
  requires: ['auth'],
  create(options) {
    log.push('create');
    return {
      onRequest(ctx) { log.push('onRequest:' + ctx.key.id); ctx.res.setHeader('x-policy', 'checked'); },
      async onAccess(ctx) {
        const body = await ctx.body();
        log.push('onAccess');
        if (body.text.includes(options.word)) throw new GatewayError('CONTENT_POLICY', { message: 'blocked: ' + options.word });
      },
      onAttempt(ctx, attempt) { log.push('onAttempt:' + attempt.model.id); },
      onResponse(ctx, attempt) { log.push('onResponse:' + attempt.status); },
      onEvent(ctx, frame) { log.push('onEvent'); },
      onFinally(ctx, outcome) { log.push('onFinally:' + outcome.status + ':' + (outcome.error ? outcome.error.code : 'ok')); },
      close() { log.push('close'); },
    };
  },
};
`;

t.test('a plugin from a path runs through every phase', async (t) => {
  const dir = tmpDir();
  writeFileSync(path.join(dir, 'policy.mjs'), plugin);
  const cfg = baseConfig();
  cfg.plugins.policy = { use: './policy.mjs', with: { word: 'forbidden-phrase' } };
  cfg.chains['model-call'].splice(2, 0, 'policy');
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, YAML.stringify(cfg));
  const { Gateway } = await import('../../core/server.js');
  const { builtinPlugins } = await import('../../plugins/index.js');
  const { silentLogger } = await import('../../core/log.js');
  const gw = await Gateway.start({
    configFile: file,
    registry: builtinPlugins,
    mockUpstream: (await import('../../mock/server.js')).startMockServer,
    log: silentLogger,
    watch: false,
  });
  t.teardown(() => gw.close());
  const log: string[] = (globalThis as any).__pluginLog;
  t.same(log, ['create']);

  log.length = 0;
  const ok = await call(gw.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() });
  t.equal(ok.status, 200);
  t.equal(ok.headers.get('x-policy'), 'checked');
  t.same(log, ['onRequest:chat', 'onAccess', 'onAttempt:chat-model', 'onResponse:200', 'onFinally:200:ok'], 'phases in order');

  log.length = 0;
  const blocked = await call(gw.url + '/v1/messages', {
    headers: bearer(KEYS.messages),
    json: messagesBody({ messages: [{ role: 'user', content: 'say forbidden-phrase' }] }),
  });
  t.equal(blocked.status, 403);
  t.same(
    blocked.json,
    { type: 'error', error: { type: 'content_policy_violation', message: 'blocked: forbidden-phrase' } },
    'rendered in the client protocol',
  );
  t.same(log, ['onRequest:messages', 'onAccess', 'onFinally:403:content_policy_violation'], 'no upstream, onFinally still runs');
  t.equal(gw.mocks.get('mock')!.requests.filter((r) => r.body.includes('forbidden-phrase')).length, 0, 'the upstream never saw it');

  log.length = 0;
  const s = await sseText(gw.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ stream: true })),
  });
  t.match(s.text, /\[DONE\]/);
  t.ok(log.filter((l) => l === 'onEvent').length >= 3, 'onEvent for stream events');

  log.length = 0;
  const auth = await call(gw.url + '/v1/chat/completions', { headers: bearer('sk-' + '0'.repeat(64)), json: chatBody() });
  t.equal(auth.status, 401);
  t.same(log, [], 'a request stopped before the plugin was reached does not run its onFinally');

  cfg.plugins.policy.with.word = 'other';
  writeFileSync(file, YAML.stringify(cfg));
  t.equal(await gw.reload(), undefined);
  await new Promise((r) => setTimeout(r, 50));
  t.ok(log.includes('close'), 'the retired instance is closed');
  t.ok(log.includes('create'), 'a new instance is created with the new options');
});

t.test(
  'ctx.setResponseHeader: from the hooks before the response, on answers and errors alike; refused after it, and for the gateway own headers',
  async (t) => {
    const dir = tmpDir();
    writeFileSync(
      path.join(dir, 'headers.mjs'),
      `
const tried = (globalThis.__headerLog ??= []);
const attempt = (ctx, where, name, value) => {
  try { ctx.setResponseHeader(name, value); tried.push(where + ': set'); } catch (e) { tried.push(where + ': ' + e.message); }
};
export default {
  name: 'headers',
  schema: { type: 'object' },
  create() {
    return {
      onRequest(ctx) { ctx.setResponseHeader('X-From-Request', 'r'); },
      async onAccess(ctx) {
        ctx.setResponseHeader('x-from-access', ['a1', 'a2']);
        attempt(ctx, 'transfer-encoding', 'transfer-encoding', 'chunked');
        attempt(ctx, 'connection', 'Connection', 'close');
        attempt(ctx, 'x-request-id', 'x-request-id', 'mine');
        attempt(ctx, 'line break', 'x-split', 'a\\r\\nx-injected: 1');
        attempt(ctx, 'bad name', 'bad name', 'x');
        if ((await ctx.body()).text.includes('refuse-me')) throw new (await import('${errorsUrl}')).GatewayError('CONTENT_POLICY');
      },
      onAttempt(ctx) { ctx.setResponseHeader('x-from-attempt', 1); },
      onResponse(ctx, a) { ctx.setResponseHeader('x-from-response', String(a.status)); },
      onEvent(ctx) { attempt(ctx, 'onEvent', 'x-event', '1'); },
      onFinally(ctx) { attempt(ctx, 'onFinally', 'x-late', '1'); },
    };
  },
};
`,
    );
    const cfg = baseConfig();
    cfg.models['broken-model'] = { provider: 'mock', upstream: 'broken#status=503', price: { input: 1, output: 2 } };
    cfg.groups.chat.models.push('broken-model');
    cfg.plugins.headers = { use: './headers.mjs' };
    cfg.chains['model-call'].splice(1, 0, 'headers');
    const file = path.join(dir, 'gateway.yaml');
    writeFileSync(file, YAML.stringify(cfg));
    const { Gateway } = await import('../../core/server.js');
    const { builtinPlugins } = await import('../../plugins/index.js');
    const { silentLogger } = await import('../../core/log.js');
    const gw = await Gateway.start({
      configFile: file,
      registry: builtinPlugins,
      mockUpstream: (await import('../../mock/server.js')).startMockServer,
      log: silentLogger,
      watch: false,
    });
    t.teardown(() => gw.close());
    const tried: string[] = ((globalThis as any).__headerLog ??= []);
    const mine = (h: Headers) =>
      Object.fromEntries(['x-from-request', 'x-from-access', 'x-from-attempt', 'x-from-response', 'x-late'].map((n) => [n, h.get(n)]));

    const ok = await call(gw.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() });
    t.equal(ok.status, 200);
    t.same(mine(ok.headers), {
      'x-from-request': 'r',
      'x-from-access': 'a1, a2',
      'x-from-attempt': '1',
      'x-from-response': '200',
      'x-late': null,
    });
    t.match(ok.headers.get('x-request-id'), /^req_/, "the gateway's request id stands");
    t.equal(ok.headers.get('x-injected'), null, 'no header injected');
    t.same(tried.splice(0), [
      "transfer-encoding: setResponseHeader: 'transfer-encoding' is the gateway's to set (hop-by-hop, framing or the request id)",
      "connection: setResponseHeader: 'connection' is the gateway's to set (hop-by-hop, framing or the request id)",
      "x-request-id: setResponseHeader: 'x-request-id' is the gateway's to set (hop-by-hop, framing or the request id)",
      "line break: setResponseHeader: the value of 'x-split' has a line break or NUL",
      "bad name: setResponseHeader: 'bad name' is not a header name",
      "onFinally: setResponseHeader('x-late'): the response has started; set headers in onRequest, onAccess, onAttempt or onResponse",
    ]);

    const refused = await call(gw.url + '/v1/chat/completions', {
      headers: bearer(KEYS.chat),
      json: chatBody({ messages: [{ role: 'user', content: 'refuse-me' }] }),
    });
    t.equal(refused.status, 403, "the plugin's own refusal");
    t.same(mine(refused.headers), {
      'x-from-request': 'r',
      'x-from-access': 'a1, a2',
      'x-from-attempt': null,
      'x-from-response': null,
      'x-late': null,
    });

    const failed = await call(gw.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody({ model: 'broken-model' }) });
    t.equal(failed.status, 502, 'an upstream failure');
    t.same(mine(failed.headers), {
      'x-from-request': 'r',
      'x-from-access': 'a1, a2',
      'x-from-attempt': '1',
      'x-from-response': '503',
      'x-late': null,
    });

    tried.length = 0;
    const res = await fetch(gw.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
      // Words 25 ms apart: the later frames arrive long after the response started.
      body: JSON.stringify(chatBody({ stream: true, messages: [{ role: 'user', content: '[[mock: words=20 chunk_delay=25]] hi' }] })),
    });
    t.match(await res.text(), /\[DONE\]/);
    t.same(
      mine(res.headers),
      { 'x-from-request': 'r', 'x-from-access': 'a1, a2', 'x-from-attempt': '1', 'x-from-response': '200', 'x-late': null },
      'a stream',
    );
    // A stream's first frames may be translated before the response starts; the later ones are not.
    t.ok(
      tried.includes(
        "onEvent: setResponseHeader('x-event'): the response has started; set headers in onRequest, onAccess, onAttempt or onResponse",
      ),
      'onEvent, once the stream is under way: refused',
    );
  },
);
