import t from 'tap';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import YAML from 'yaml';
import { ConfigError, loadConfigFile, loadConfigText, sha256Hex } from '../../core/config/load.js';
import { builtinPlugins } from '../../plugins/index.js';
import { schemaText } from '../../scripts/write-schema.js';
import { ROOT, baseConfig, tmpDir, writeConfig, KEYS } from '../helpers/gateway.js';

const registry = builtinPlugins;
const load = (text: string, env: NodeJS.ProcessEnv = {}) => loadConfigText(text, path.join(tmpDir(), 'gateway.yaml'), { registry, env });

async function issues(text: string, env: NodeJS.ProcessEnv = {}) {
  try {
    await load(text, env);
  } catch (e) {
    if (e instanceof ConfigError) return e.issues;
    throw e;
  }
  return [];
}

t.test('the shipped gateway.yaml is valid', async (t) => {
  const { config, warnings } = await loadConfigFile(path.join(ROOT, 'gateway.yaml'), { registry, env: {} });
  t.same(warnings, []);
  t.equal(config.server.port, 8080, '${GATEWAY_PORT:-8080} becomes a number');
  t.equal(config.keys.length, 3);
  t.ok(config.keysByDigest.get(sha256Hex('sk-deadbeef00000000000000000000000000000000000000000000000000000001')));
  t.equal(config.users.demo.balance, 100_000_000, 'USD kept as integer micro-USD');
  t.equal(config.models['demo-gpt'].price.cacheRead, 25_000, 'USD/Mtok kept as micro-USD per Mtok');
  t.equal(config.models['demo-gpt'].price.cacheWrite, 250_000, 'an unset cache price is the input price, never free by omission');
  t.equal(config.models['demo-free'].price.cacheRead, 0, 'a free model stays free');
});

t.test('gateway.schema.json is in step with the code', async (t) => {
  t.equal(readFileSync(path.join(ROOT, 'gateway.schema.json'), 'utf8'), schemaText(), 'run `npm run schema`');
});

t.test('every error is reported with its path and line', async (t) => {
  const text = `version: 1
server:
  port: 8080
  colour: blue
  upstream_timeout: soon
providers:
  p: { kind: mock }
  q: { kind: smoke }
models:
  m: { provider: p, price: { input: 1, output: 2 } }
  n: { provider: nowhere, price: { input: 1, output: 2 } }
groups:
  g: { kind: chat, models: [m, ghost] }
keys:
  - { key: not-a-key, user: u, group: g }
  - { key: ${KEYS.chat}, user: u, group: missing }
plugins:
  auth: { use: auth }
  quota: { use: quota }
  fb: { use: fallback, with: { max_attempts: 9 } }
  odd: { use: no-such-plugin }
chains:
  c: [quota, auth, fb, nobody]
routes:
  - { path: /v1/chat/completions, protocol: openai-chat, chain: c }
  - { path: /v1/x, protocol: openai-chat, chain: undefined-chain }
`;
  let found = await issues(text);
  // one run lists every problem: schema errors and cross-reference errors together
  t.ok(
    found.some((i) => i.path === 'groups.g.models[1]' && /model 'ghost' is not defined/.test(i.message)),
    'cross-references checked despite schema errors',
  );
  t.ok(
    found.some((i) => i.path === 'routes[1].chain'),
    'routes checked too',
  );
  t.equal(new Set(found.map((i) => i.path)).size, found.length, 'one issue per path');
  t.ok(
    found.some((i) => i.path === 'server.colour' && i.line === 4 && /unknown setting/.test(i.message)),
    'unknown setting, line 4',
  );
  t.ok(
    found.some((i) => i.path === 'server.upstream_timeout' && i.line === 5),
    'bad duration, line 5',
  );
  t.ok(
    found.some((i) => i.path === 'providers.q.kind' && i.line === 8 && /mock/.test(i.message)),
    'bad enum, line 8',
  );

  found = await issues(text.replace('  colour: blue\n', '  \n').replace('soon', '30s').replace('smoke', 'mock'));
  const byPath = (p: string) => found.find((i) => i.path === p);
  t.match(byPath('models.n.provider'), { line: 11, message: /provider 'nowhere' is not defined/ });
  t.match(byPath('groups.g.models[1]'), { line: 13, message: /model 'ghost' is not defined/ });
  t.match(byPath('keys[0].key'), { line: 15, message: /sk- followed by 64 hex/ });
  t.match(byPath('keys[1].group'), { line: 16, message: /group 'missing' is not defined/ });
  t.match(byPath('plugins.fb.with.max_attempts'), { line: 20, message: /<= 5/ });
  t.match(byPath('plugins.odd.use'), { line: 21, message: /unknown plugin 'no-such-plugin'/ });
  t.match(byPath('chains.c[0]'), { line: 23, message: /\(quota\): requires 'auth' earlier/ });
  t.match(byPath('chains.c[3]'), { message: /'nobody' is not declared/ });
  t.match(byPath('routes[1].chain'), { line: 26, message: /chain 'undefined-chain' is not defined/ });
  t.ok(found.length >= 9, `all listed (${found.length})`);
});

t.test('${VAR} interpolation', async (t) => {
  const cfg = baseConfig();
  cfg.server.port = '${PORT:-0}';
  cfg.server.host = '${HOST}';
  cfg.providers.real = { kind: 'openai', api_key: '${OPENAI_KEY:-}', base_url: 'http://${UP_HOST:-127.0.0.1}:9/v1' };
  cfg.server.admin_token = '$${NOT_A_VAR}';
  const text = YAML.stringify(cfg);
  const { config } = await load(text, { HOST: '127.0.0.2', PORT: '9090' });
  t.equal(config.server.port, 9090);
  t.equal(config.server.host, '127.0.0.2');
  t.equal(config.providers.real.apiKey, '');
  t.equal(config.providers.real.baseUrl, 'http://127.0.0.1:9/v1');
  t.equal(config.server.adminToken, '${NOT_A_VAR}', '$${…} is a literal');
  const missing = await issues(text, {});
  t.match(missing, [{ path: 'server.host', message: /environment variable HOST is not set/ }]);
});

t.test('the loaded config is frozen', async (t) => {
  const { config } = await load(YAML.stringify(baseConfig()));
  t.ok(Object.isFrozen(config));
  t.ok(Object.isFrozen(config.models['chat-model'].price));
  t.ok(Object.isFrozen(config.keys[0]));
  t.throws(() => {
    (config.users.alice as any).balance = 1;
  });
  t.throws(() => (config.keysByDigest as Map<string, unknown>).set('x', {}), /frozen/, 'the key index cannot be added to');
  t.throws(() => (config.keysByDigest as Map<string, unknown>).delete([...config.keysByDigest.keys()][0]), /frozen/);
  t.ok(config.keysByDigest.size > 0);
});

t.test('keys: digests only, formats, duplicates, custom keys, key_sha256', async (t) => {
  const cfg = baseConfig();
  cfg.keys.push({ key_sha256: sha256Hex('another-custom-key-123'), user: 'alice', group: 'chat' });
  const { config } = await load(YAML.stringify(cfg));
  const k = config.keysByDigest.get(sha256Hex('another-custom-key-123'))!;
  t.equal(k.id, `key-${k.digest.slice(0, 12)}`);
  t.notOk(JSON.stringify(config.keys).includes(KEYS.chat), 'the plain key is not kept');
  const dup = baseConfig();
  dup.keys.push({ key: KEYS.chat, user: 'alice', group: 'chat', name: 'again' });
  t.match(await issues(YAML.stringify(dup)), [{ path: 'keys[6]', message: /declared twice/ }]);
  const short = baseConfig();
  short.keys.push({ key: 'short_key', user: 'alice' });
  t.match(await issues(YAML.stringify(short)), [{ path: 'keys[6].key' }]);
});

t.test('a missing user is a warning (runtime USER_NOT_FOUND), not an error', async (t) => {
  const cfg = baseConfig();
  cfg.keys.push({ key: 'ghost-user-key-0000000', user: 'ghost', group: 'chat' });
  const { warnings } = await load(YAML.stringify(cfg));
  t.match(warnings, [{ path: 'keys[6].user', message: /USER_NOT_FOUND/ }]);
});

t.test('third-party plugin modules load through the same contract', async (t) => {
  const dir = tmpDir();
  writeFileSync(
    path.join(dir, 'tagger.mjs'),
    `export default {
    name: 'tagger', schema: { type: 'object', properties: { tag: { type: 'string' } }, required: ['tag'], additionalProperties: false },
    create(options) { return { onRequest(ctx) { ctx.res.setHeader('x-tag', options.tag); } }; },
  };\n`,
  );
  writeFileSync(path.join(dir, 'broken.mjs'), 'export default { name: 1 };\n');
  const cfg = baseConfig();
  cfg.plugins.tagger = { use: './tagger.mjs', with: { tag: 'hello' } };
  const file = writeConfig(cfg, dir);
  const { plugins } = await loadConfigFile(file, { registry });
  t.equal(plugins.get('tagger')!.definition.name, 'tagger');
  cfg.plugins.tagger.with = {};
  cfg.plugins.bad = { use: './broken.mjs' };
  cfg.plugins.gone = { use: './nope.mjs' };
  writeConfig(cfg, dir);
  try {
    await loadConfigFile(file, { registry });
    t.fail('should not load');
  } catch (e) {
    const list = (e as ConfigError).issues;
    t.match(
      list.find((i) => i.path === 'plugins.tagger.with'),
      { message: /tag/ },
    );
    t.match(
      list.find((i) => i.path === 'plugins.bad.use'),
      { message: /not a plugin definition/ },
    );
    t.match(
      list.find((i) => i.path === 'plugins.gone.use'),
      { message: /cannot load plugin module/ },
    );
  }
});

t.test('gateway check: exit 0 for a valid file, 1 with every error listed', async (t) => {
  const bin = path.join(ROOT, 'bin/gateway.js');
  const ok = spawnSync(process.execPath, [bin, 'check', path.join(ROOT, 'gateway.yaml')], { encoding: 'utf8' });
  t.equal(ok.status, 0, ok.stderr);
  t.match(ok.stdout, /ok \(1 providers, 4 models, 3 groups, 3 keys/);
  const cfg = baseConfig();
  cfg.groups.chat.models.push('ghost');
  cfg.keys[0].group = 'nowhere';
  const bad = spawnSync(process.execPath, [bin, 'check', writeConfig(cfg)], { encoding: 'utf8' });
  t.equal(bad.status, 1);
  t.match(bad.stderr, /2 errors/);
  t.match(bad.stderr, /gateway\.yaml:\d+:\d+ groups\.chat\.models\[2\]: model 'ghost' is not defined/);
  t.match(bad.stderr, /keys\[0\]\.group: group 'nowhere' is not defined/);
});

t.test('store: redis settings, and workers only with a shared store', async (t) => {
  const cfg = baseConfig();
  cfg.server.workers = 3;
  cfg.store = { kind: 'redis', url: 'redis://10.0.0.5:6379/2', prefix: 'gw1:', instances_hint: 2, timeout: '300ms', lease: '20s' };
  const { config } = await load(YAML.stringify(cfg));
  t.same(config.store, {
    kind: 'redis',
    path: undefined,
    url: 'redis://10.0.0.5:6379/2',
    cluster: false,
    prefix: 'gw1:',
    flushIntervalMs: 1000,
    instancesHint: 2,
    timeoutMs: 300,
    leaseMs: 20_000,
  });
  t.equal(config.server.workers, 3);

  const memory = baseConfig();
  memory.server.workers = 2;
  const refused = await issues(YAML.stringify(memory));
  t.match(
    refused,
    [{ path: 'server.workers', message: /workers: 2 needs store\.kind: redis/ }],
    'the memory store refuses workers > 1, saying why',
  );

  const bad = baseConfig();
  bad.store = { kind: 'redis', lease: '1m', prefix: 'a{b}' };
  const found = (await issues(YAML.stringify(bad))).map((i) => `${i.path}: ${i.message}`).join('\n');
  t.match(found, /store\.prefix/, 'braces would break the hash tags');
  const ctl = baseConfig();
  ctl.store = { kind: 'redis', url: 'redis://127.0.0.1:6379', prefix: 'gw\u001e:' };
  t.match(
    (await issues(YAML.stringify(ctl))).map((i) => i.path),
    ['store.prefix'],
    'control characters would break the packed script values',
  );
  const bad2 = baseConfig();
  bad2.store = { kind: 'redis', lease: '1m' };
  const found2 = (await issues(YAML.stringify(bad2))).map((i) => `${i.path}: ${i.message}`).join('\n');
  t.match(found2, /store\.url: .*needs store\.url/);
  t.match(found2, /store\.lease: lease must be between 1s and 30s/);
});

t.test('each config mistake is reported where it is, saying what was meant', async (t) => {
  // Line and column of each message are asserted: an editor jumps there. The first lines are
  // written out (their positions matter); the rest of a valid config follows them.
  const rest = baseConfig();
  delete rest.version;
  delete rest.server;
  delete rest.providers;
  rest.plugins.fb = { use: 'fallback', with: { max_attempt: 2 } };
  const head = `version: 1
server:
  port: 8080
  body_limit: 256MiB
  headers_timeout: 20s
providers:
  mock: { kind: mock }
`;
  const base = head + YAML.stringify(rest).replace('max_attempt: 2', 'max_attempts: 2');
  const one = async (text: string, env: NodeJS.ProcessEnv = {}) => {
    const found = await issues(text, env);
    t.equal(found.length, 1, `one issue: ${JSON.stringify(found)}`);
    return found[0];
  };

  // An unclosed flow list or quoted string: where it opened (line 4), not where the parser gave up (line 5).
  t.match(await one(base.replace('body_limit: 256MiB', 'body_limit: [256MiB')), {
    line: 4,
    col: 15,
    message: /end with a \] \(the \[ list opened here is never closed\)/,
  });
  t.match(await one(base.replace('body_limit: 256MiB', 'body_limit: "256MiB')), {
    line: 4,
    col: 15,
    message: /Missing closing "quote \(the quoted string opened here is never closed\)/,
  });
  t.match(await one(base.replace('{ kind: mock }', '{ kind: mock')), {
    line: 7,
    col: 9,
    message: /the \{ mapping opened here is never closed/,
  });

  // An unknown setting: its key (column 3), not its value (column 15).
  t.same(await one(base.replace('body_limit:', 'body_limitt:')), {
    path: 'server.body_limitt',
    line: 4,
    col: 3,
    message: 'unknown setting',
  });
  // …in a plugin's options too.
  const plugin = base.replace('max_attempts: 2', 'max_attempt: 2');
  const fbLine = plugin.split('\n').findIndex((l) => l.includes('max_attempt: 2')) + 1;
  t.same(await one(plugin), {
    path: 'plugins.fb.with.max_attempt',
    line: fbLine,
    col: plugin.split('\n')[fbLine - 1].indexOf('max_attempt') + 1,
    message: 'unknown setting',
  });

  // A bad duration or size: what one looks like, not the schema's regular expression.
  t.same(await one(base.replace('20s', '20 seconds')), {
    path: 'server.headers_timeout',
    line: 5,
    col: 20,
    message: 'expected a duration like 30s, 5m, 1h (units: ms, s, m, h, d)',
  });
  t.same(await one(base.replace('256MiB', '256 megs')), {
    path: 'server.body_limit',
    line: 4,
    col: 15,
    message: 'expected a size like 512KiB, 256MiB, 1GiB, or a number of bytes',
  });

  // A value from the environment that has the wrong type names its variable.
  t.same(await one(base.replace('port: 8080', 'port: ${OPS_PORT}'), { OPS_PORT: 'abc' }), {
    path: 'server.port',
    line: 3,
    col: 9,
    message: 'must be integer (the value comes from ${OPS_PORT})',
  });
  t.same(await one(base.replace('port: 8080', 'port: ${OPS_PORT:-$OPS_DEFAULT_PORT}'), { OPS_DEFAULT_PORT: 'x1' }), {
    path: 'server.port',
    line: 3,
    col: 9,
    message: 'must be integer (the value comes from ${OPS_PORT}, ${OPS_DEFAULT_PORT})',
  });
});

t.test('${VAR:-default}: a default may name other variables, as shells and compose files expand it', async (t) => {
  const cfg = baseConfig();
  const env = { TMPDIR: '/var/tmp' };
  for (const dir of ['${GW_DIR:-$TMPDIR/gw}', '${GW_DIR:-${TMPDIR}/gw}', '${GW_DIR:-${GW_OTHER:-$TMPDIR}/gw}']) {
    cfg.failed_requests = { dir };
    t.equal((await load(YAML.stringify(cfg), env)).config.failedRequests.dir, '/var/tmp/gw', dir);
  }
  cfg.failed_requests = { dir: '/tmp/${GW_DIR:-a$$b}' };
  t.equal((await load(YAML.stringify(cfg), env)).config.failedRequests.dir, '/tmp/a$b', '$$ in a default is a literal $');
  cfg.failed_requests = { dir: '${GW_DIR:-$TMPDIR/gw}' };
  const { config } = await load(YAML.stringify(cfg), { ...env, GW_DIR: '/srv/failed' });
  t.equal(config.failedRequests.dir, '/srv/failed', 'the default is not read when the variable is set');

  const text = (dir: string) => `version: 1\nfailed_requests:\n  dir: "${dir}"\n`;
  const problem = async (dir: string) => (await issues(text(dir), {})).find((i) => i.path === 'failed_requests.dir');
  t.match(await problem('${GW_DIR:-$GW_UNSET/x}'), {
    line: 3,
    col: 8,
    message: 'environment variable GW_UNSET is not set (use ${GW_UNSET:-default} for a default)',
  });
  t.match(await problem('${GW_DIR:-${GW_UNSET}/x'), { line: 3, col: 8, message: "'${GW_DIR:-' has no closing }" });
  t.match(await problem('${GW_DIR-x}'), { message: "'${GW_DIR-…': only ${GW_DIR} and ${GW_DIR:-default} are understood" });
});
