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
