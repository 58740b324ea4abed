/**
 * Live reload: a valid edit swaps in atomically (requests in flight finish on the old config), an
 * invalid one is rejected and the old config keeps serving; file change, reload() and SIGHUP.
 */
import t from 'tap';
import { writeFileSync, readFileSync } from 'node:fs';
import YAML from 'yaml';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway, writeConfig } from '../helpers/gateway.js';
import { startGatewayProcess } from '../helpers/process.js';
import { ConfigError } from '../../core/config/load.js';
import { sleep, until } from '../helpers/upstream.js';

const NEW_KEY = 'sk-' + '77'.repeat(32);

t.test('reload(): valid config swaps in, invalid config is rejected and the old one keeps serving', async (t) => {
  const cfg = baseConfig();
  const g = await startGateway(cfg);
  t.teardown(() => g.close());
  t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(NEW_KEY), json: chatBody() })).status, 401);

  cfg.keys.push({ key: NEW_KEY, name: 'new', user: 'alice', group: 'chat' });
  writeFileSync(g.file, YAML.stringify(cfg));
  t.equal(await g.gw.reload(), undefined, 'accepted');
  t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(NEW_KEY), json: chatBody() })).status, 200, 'new key works');

  writeFileSync(g.file, YAML.stringify({ ...cfg, groups: { ...cfg.groups, chat: { kind: 'nonsense' } } }));
  const err = await g.gw.reload();
  t.ok(err instanceof ConfigError, 'rejected with the errors');
  t.match(err!.issues[0], { path: 'groups.chat.kind' });
  t.equal(
    (await call(g.url + '/v1/chat/completions', { headers: bearer(NEW_KEY), json: chatBody() })).status,
    200,
    'old config still serving',
  );
});

t.test('a request in flight finishes on the config it started with', async (t) => {
  const cfg = baseConfig();
  const g = await startGateway(cfg);
  t.teardown(() => g.close());
  const slow = fetch(g.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ stream: true, messages: [{ role: 'user', content: '[[mock: chunk_delay=60 words=10]]' }] })),
  }).then((r) => r.text());
  await sleep(100);
  cfg.groups.chat.models = ['free-model'];
  writeFileSync(g.file, YAML.stringify(cfg));
  t.equal(await g.gw.reload(), undefined);
  const text = await slow;
  t.match(text, /\[DONE\]/, 'the stream completed');
  t.notMatch(text, /event: error/);
  const after = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() });
  t.equal(after.status, 503, 'new requests see the new config');
});

t.test('the file watcher reloads on change', async (t) => {
  const cfg = baseConfig();
  const g = await startGateway(cfg, { watch: true });
  t.teardown(() => g.close());
  cfg.keys.push({ key: NEW_KEY, name: 'new', user: 'alice', group: 'chat' });
  writeFileSync(g.file, YAML.stringify(cfg));
  t.ok(
    await until(
      async () => (await call(g.url + '/v1/chat/completions', { headers: bearer(NEW_KEY), json: chatBody() })).status === 200,
      60_000,
    ),
    'picked up',
  );
  writeFileSync(g.file, 'version: 1\nnot: [valid');
  await sleep(500);
  t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(NEW_KEY), json: chatBody() })).status, 200, 'broken file ignored');
});

t.test('SIGHUP reloads the CLI process; the listening address is logged', async (t) => {
  // Waits on the process's own log lines (listening, reloaded, exit), each with a generous bound:
  // on a loaded machine a start takes seconds, and nothing here may depend on it being quick.
  const cfg = baseConfig();
  const file = writeConfig(cfg);
  const gp = await startGatewayProcess(file, { env: { GATEWAY_WATCH_CONFIG: '0' } });
  t.teardown(() => gp.stop());
  t.match(gp.url, /^http:\/\/127\.0\.0\.1:\d+$/, 'listening address logged');
  cfg.keys.push({ key: NEW_KEY, name: 'new', user: 'alice', group: 'chat' });
  writeFileSync(file, YAML.stringify(cfg));
  await sleep(300);
  t.equal(
    (await call(gp.url + '/v1/chat/completions', { headers: bearer(NEW_KEY), json: chatBody() })).status,
    401,
    'not watched: no reload yet',
  );
  t.notOk(
    gp.logs.some((l) => l.msg === 'config reloaded'),
    'and none logged',
  );
  gp.proc.kill('SIGHUP');
  await gp.waitForLog((l) => l.msg === 'config reloaded', 120_000);
  t.equal((await call(gp.url + '/v1/chat/completions', { headers: bearer(NEW_KEY), json: chatBody() })).status, 200, 'reloaded on SIGHUP');
  gp.proc.kill('SIGTERM');
  const { code } = await gp.exited;
  t.equal(code, 0, 'clean shutdown on SIGTERM');
  t.ok(readFileSync(file, 'utf8').length > 0);
});

t.test('shutdown drains: a stream in flight completes, new requests are refused', async (t) => {
  const g = await startGateway(baseConfig());
  const slow = fetch(g.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ stream: true, messages: [{ role: 'user', content: '[[mock: chunk_delay=40 words=12]]' }] })),
  }).then((r) => r.text());
  await sleep(120);
  const closing = g.close();
  await sleep(20);
  const refused = await fetch(g.url + '/v1/models', { headers: bearer(KEYS.chat) }).then(
    () => false,
    () => true,
  );
  t.ok(refused, 'no new connections while draining');
  const text = await slow;
  t.match(text, /\[DONE\]/, 'the stream in flight finished');
  t.notMatch(text, /event: error/);
  await closing;
});
