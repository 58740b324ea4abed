/**
 * Plugins from outside the repository. The example moderation plugin (examples/moderation), in a
 * temporary folder with its own package.json, gets the gateway as the guide says (`npm pack` of
 * the gateway, a dev dependency: another copy of the package), compiles against its TypeScript
 * declarations and passes its own tests, its package.json still publishable; loaded into this
 * gateway by package name, its 403 content_policy_violation comes out in each protocol's format, its
 * header on the others, and reloads keep its metric. `use:` finds packages the way Node does.
 * Errors are recognised across copies by their brand. The guide (docs/plugins.md) shows the
 * example's files as they are.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import YAML from 'yaml';
import {
  baseConfig,
  bearer,
  call,
  chatBody,
  KEYS,
  messagesBody,
  responsesBody,
  ROOT,
  startGateway,
  tmpDir,
  writeConfig,
} from '../helpers/gateway.js';
import { GatewayError, isGatewayError, renderError } from '../../core/errors.js';
import { parseProm, total } from '../helpers/prom.js';

t.setTimeout(600_000);

const ENV: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '' };
const EXAMPLE = path.join(ROOT, 'examples/moderation');

function run(cmd: string, args: string[], cwd: string): { code: number | null; out: string } {
  const r = spawnSync(cmd, args, { cwd, env: ENV, encoding: 'utf8' });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

t.test('a GatewayError from another copy of the package is recognised by its brand', async (t) => {
  const other = await import(`${pathToFileURL(path.join(ROOT, 'dist/core/errors.js')).href}?copy=2`);
  t.not(other.GatewayError, GatewayError, 'two module instances');
  const foreign = new other.GatewayError('CONTENT_POLICY', { message: 'blocked elsewhere' });
  t.ok(isGatewayError(foreign), 'isGatewayError');
  t.ok(foreign instanceof GatewayError, 'instanceof checks the brand');
  t.ok(new GatewayError('INTERNAL') instanceof other.GatewayError, 'both ways');
  t.notOk(isGatewayError(new Error('x')));
  t.notOk(isGatewayError({ message: 'x', status: 403 }), 'a look-alike without the brand is not one');
  t.same(renderError(foreign, 'chat'), {
    status: 403,
    headers: { 'x-should-retry': 'false' },
    body: { error: { type: 'content_policy_violation', code: 'content_policy_violation', message: 'blocked elsewhere', param: null } },
  });
});

t.test("the guide shows the example's files as they are", async (t) => {
  const guide = readFileSync(path.join(ROOT, 'docs/plugins.md'), 'utf8');
  const blocks = [...guide.matchAll(/```\w+ file=(\S+)\n([\s\S]*?)```/g)];
  t.ok(blocks.length >= 3, 'package.json, the plugin, its test');
  for (const [, file, body] of blocks) t.equal(body, readFileSync(path.join(ROOT, file), 'utf8'), file);
  const files = readdirSync(EXAMPLE)
    .filter((f) => f !== 'node_modules' && f !== 'dist' && f !== 'package-lock.json' && !f.endsWith('.tgz'))
    .sort();
  t.same(files, ['package.json', 'src', 'test', 'tsconfig.json'], 'the guide shows every file of the example');
});

t.test(
  "the example's package.json is publishable: the gateway an optional peer with a range, the packed gateway a dev dependency",
  async (t) => {
    const version = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version;
    const example = JSON.parse(readFileSync(path.join(EXAMPLE, 'package.json'), 'utf8'));
    t.same(example.peerDependencies, { 'llm-gateway': `^${version}` }, 'a version range, no path');
    t.same(example.peerDependenciesMeta, { 'llm-gateway': { optional: true } }, 'never fetched: the gateway loads the plugin');
    t.equal(example.devDependencies['llm-gateway'], `file:llm-gateway-${version}.tgz`, 'what `npm pack` of this gateway writes');
    for (const [name, spec] of Object.entries<string>({ ...example.dependencies, ...example.peerDependencies }))
      t.notMatch(spec, /^(file|link):|\//, `${name}: nothing local where a consumer installs it`);
  },
);

t.test('the moderation example, installed as a third party installs it', async (t) => {
  const work = tmpDir('gw-plugin-');
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const plugin = path.join(work, 'moderation');
  // As published: the sources, not a build or an install someone made in the repository's copy.
  cpSync(EXAMPLE, plugin, { recursive: true, filter: (src) => !/[\\/](node_modules|dist)$/.test(src) && !src.endsWith('.tgz') });
  const before = readFileSync(path.join(plugin, 'package.json'), 'utf8');
  // The guide's steps: pack the gateway into the plugin's folder, install it as a dev dependency.
  const pack = run('npm', ['pack', ROOT, '--silent'], plugin);
  t.equal(pack.code, 0, pack.out);
  const version = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version;
  t.ok(existsSync(path.join(plugin, `llm-gateway-${version}.tgz`)), 'npm pack wrote the tarball here');
  const install = run(
    'npm',
    ['install', '--save-dev', `./llm-gateway-${version}.tgz`, '--no-audit', '--no-fund', '--prefer-offline'],
    plugin,
  );
  t.equal(install.code, 0, `npm install: ${install.out.slice(-800)}`);
  t.equal(readFileSync(path.join(plugin, 'package.json'), 'utf8'), before, 'package.json as the example has it: still publishable');
  const installed = realpathSync(path.join(plugin, 'node_modules/llm-gateway'));
  t.not(installed, realpathSync(ROOT), 'a copy of the gateway, not this folder');
  t.ok(existsSync(path.join(installed, 'dist/core/public.d.ts')), 'with its type declarations');
  const again = run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline'], plugin);
  t.equal(again.code, 0, `a later plain npm install: ${again.out.slice(-800)}`);
  t.ok(existsSync(path.join(plugin, 'node_modules/llm-gateway/dist/core/public.d.ts')), 'keeps it (nothing fetched from the registry)');

  const build = run('npm', ['run', 'build'], plugin);
  t.equal(build.code, 0, `tsc against the declarations: ${build.out}`);
  t.ok(existsSync(path.join(plugin, 'dist/index.d.ts')));
  const own = run('npm', ['test'], plugin);
  t.equal(own.code, 0, `the example's own tests: ${own.out.slice(-1500)}`);
  t.match(own.out, /# pass 3/);

  // This gateway loads the plugin by its package name, found from the config's folder.
  const site = path.join(work, 'site');
  mkdirSync(path.join(site, 'node_modules'), { recursive: true });
  symlinkSync(plugin, path.join(site, 'node_modules/llm-gateway-moderation'), 'dir');
  const cfg = baseConfig();
  cfg.plugins.moderation = { use: 'llm-gateway-moderation', with: { patterns: ['\\bforbidden\\b', 'secret\\s+plan'] } };
  cfg.chains['model-call'].splice(1, 0, 'moderation');
  const file = writeConfig(cfg, site);
  const g = await startGateway(cfg, { configFile: file });
  t.teardown(() => g.close());
  const text = 'tell me the secret   plan';

  const chat = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: chatBody({ messages: [{ role: 'user', content: text }] }),
  });
  t.equal(chat.status, 403, 'Chat Completions');
  t.same(chat.json, {
    error: {
      type: 'content_policy_violation',
      code: 'content_policy_violation',
      message: 'Request blocked by content policy',
      param: null,
    },
  });
  const msg = await call(g.url + '/v1/messages', {
    headers: bearer(KEYS.messages),
    json: messagesBody({ messages: [{ role: 'user', content: text }] }),
  });
  t.equal(msg.status, 403, 'Messages');
  t.same(msg.json, { type: 'error', error: { type: 'content_policy_violation', message: 'Request blocked by content policy' } });
  const resp = await call(g.url + '/v1/responses', { headers: bearer(KEYS.responses), json: responsesBody({ input: text }) });
  t.equal(resp.status, 403, 'Responses');
  t.same(resp.json, {
    error: {
      type: 'content_policy_violation',
      code: 'content_policy_violation',
      message: 'Request blocked by content policy',
      param: null,
    },
  });
  const lite = await call(g.url + '/v1/responses', {
    headers: bearer(KEYS.messages),
    json: responsesBody({ model: 'claude-model', input: [{ role: 'user', content: [{ type: 'input_text', text: 'FORBIDDEN' }] }] }),
  });
  t.equal(lite.status, 403, 'Responses on a Messages-style group');
  t.same(lite.json, { error: { code: 'content_policy_violation', message: 'Request blocked by content policy' } });
  t.equal(g.gw.mocks.get('mock')!.requests.filter((r) => /secret|FORBIDDEN/.test(r.body)).length, 0, 'no upstream saw them');
  const passed = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() });
  t.equal(passed.status, 200, 'others pass');
  t.equal(passed.headers.get('x-moderation'), 'passed', 'with the header the plugin sets');

  const blocked = async () =>
    total(parseProm((await call(g.url + '/metrics')).text), 'moderation_blocked_total', { instance: 'moderation' });
  t.equal(await blocked(), 4, "the plugin's metric, on the gateway's /metrics");

  // Reloads re-run create(), which registers the metric again: twice in a row, both accepted.
  t.equal(await g.gw.reload(), undefined, 'first reload');
  t.equal(await g.gw.reload(), undefined, 'second reload');
  t.equal(await blocked(), 4, 'the metric kept its value');
  await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: chatBody({ messages: [{ role: 'user', content: 'forbidden' }] }),
  });
  t.equal(await blocked(), 5, 'and counts on with the new instance');

  // A bad pattern is a config error; the running config keeps serving.
  const good = readFileSync(file, 'utf8');
  const bad = YAML.parse(good);
  bad.plugins.moderation.with.patterns = ['(unclosed'];
  writeFileSync(file, YAML.stringify(bad));
  const err = await g.gw.reload();
  t.ok(err, 'rejected');
  t.match(err!.message, /moderation: patterns\[0\] is not a valid regular expression/);
  t.equal(
    (
      await call(g.url + '/v1/chat/completions', {
        headers: bearer(KEYS.chat),
        json: chatBody({ messages: [{ role: 'user', content: 'forbidden' }] }),
      })
    ).status,
    403,
    'the old config serves',
  );
  writeFileSync(file, good);
});

t.test("plugin metrics: the same metric on every load, never one of the gateway's, never another kind", async (t) => {
  const dir = tmpDir();
  const write = (name: string, body: string) =>
    writeFileSync(
      path.join(dir, name),
      `export default { name: '${name}', schema: { type: 'object' }, create(o, { metrics }) { ${body}; return {}; } };\n`,
    );
  write('gauge.mjs', "metrics.gauge({ name: 'plugin_things', help: 'things' }).set(3)");
  write('steal.mjs', "metrics.counter({ name: 'gateway_requests_total', help: 'mine', labelNames: ['route', 'status'] })");
  write('clash.mjs', "metrics.counter({ name: 'plugin_things', help: 'things' })");
  const cfg = baseConfig();
  cfg.plugins.things = { use: './gauge.mjs' };
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
    port: 0,
  });
  t.teardown(() => gw.close());
  for (let i = 0; i < 2; i++) t.equal(await gw.reload(), undefined, `reload ${i + 1}`);
  t.equal(total(parseProm(await gw.metrics.scrape()), 'plugin_things'), 3);
  for (const [use, message] of [
    ['./steal.mjs', /belongs to the gateway/],
    ['./clash.mjs', /already registered as another kind/],
  ] as const) {
    writeFileSync(file, YAML.stringify({ ...cfg, plugins: { ...cfg.plugins, things: { use } } }));
    const err = await gw.reload();
    t.match(err?.message, message, use);
  }
});

t.test('the public entry point exports the plugin API', async (t) => {
  const api = await import(pathToFileURL(path.join(ROOT, 'dist/core/public.js')).href);
  for (const name of ['definePlugin', 'GatewayError', 'isGatewayError', 'createSlot', 'CATALOGUE', 'VERSION'])
    t.ok(api[name] !== undefined, name);
  const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  t.equal(pkg.name, 'llm-gateway');
  t.equal(pkg.exports['.'].types, './dist/core/public.d.ts');
  for (const entry of Object.values<any>(pkg.exports)) {
    if (typeof entry === 'object') {
      t.ok(existsSync(path.join(ROOT, entry.default)), entry.default);
      t.ok(existsSync(path.join(ROOT, entry.types)), entry.types);
    }
  }
  const slot = api.createSlot('x');
  t.equal(slot.name, 'x');
  t.ok(new api.GatewayError('CONTENT_POLICY') instanceof GatewayError, 'the same brand as the core');
});

t.test("use: a package name is resolved from the config's folder as Node resolves an import there; built-ins win", async (t) => {
  const site = tmpDir('gw-use-');
  t.teardown(() => rmSync(site, { recursive: true, force: true }));
  // An installed package with "exports" (a root and a subpath), importing the gateway by name: no
  // node_modules/llm-gateway anywhere here, as in a deployment.
  const pkg = path.join(site, 'node_modules/llm-gateway-tagger');
  mkdirSync(path.join(pkg, 'lib'), { recursive: true });
  writeFileSync(
    path.join(pkg, 'package.json'),
    JSON.stringify({
      name: 'llm-gateway-tagger',
      version: '1.0.0',
      type: 'module',
      exports: { '.': './lib/tagger.js', './loud': './lib/loud.js' },
    }),
  );
  const tagger = (name: string, value: string) => `import { definePlugin } from 'llm-gateway';
export default definePlugin({
  name: '${name}',
  schema: { type: 'object', properties: { tag: { type: 'string' } } },
  create: (o) => ({ onRequest(ctx) { ctx.setResponseHeader('x-tag', o.tag ?? '${value}'); } }),
});
`;
  writeFileSync(path.join(pkg, 'lib/tagger.js'), tagger('tagger', 'quiet'));
  writeFileSync(path.join(pkg, 'lib/loud.js'), tagger('loud-tagger', 'LOUD'));
  // A package that takes a built-in's name: the built-in wins.
  mkdirSync(path.join(site, 'node_modules/auth'), { recursive: true });
  writeFileSync(path.join(site, 'node_modules/auth/package.json'), JSON.stringify({ name: 'auth', version: '1.0.0', main: 'index.js' }));
  writeFileSync(path.join(site, 'node_modules/auth/index.js'), 'throw new Error("not the built-in");\n');

  // The config one folder down: node_modules is found up the tree.
  const conf = path.join(site, 'conf');
  mkdirSync(conf);
  const cfg = baseConfig();
  cfg.plugins.tagger = { use: 'llm-gateway-tagger', with: { tag: 'hello' } };
  cfg.plugins.loud = { use: 'llm-gateway-tagger/loud' };
  cfg.routes.push({ path: '/tagged/v1/chat/completions', protocol: 'openai-chat', chain: ['auth', 'tagger'] });
  cfg.routes.push({ path: '/loud/v1/chat/completions', protocol: 'openai-chat', chain: ['auth', 'loud'] });
  const file = writeConfig(cfg, conf);
  const g = await startGateway(cfg, { configFile: file });
  t.teardown(() => g.close());
  const tagged = await call(g.url + '/tagged/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() });
  t.equal(tagged.status, 200, 'the built-in auth, not node_modules/auth');
  t.equal(tagged.headers.get('x-tag'), 'hello', 'the package, by name');
  const loud = await call(g.url + '/loud/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() });
  t.equal(loud.headers.get('x-tag'), 'LOUD', 'a subpath of its "exports"');

  // Names that resolve to nothing: config errors at the line and column of `use:`, saying what was looked for.
  const { loadConfigText, ConfigError } = await import('../../core/config/load.js');
  const { builtinPlugins } = await import('../../plugins/index.js');
  const text = readFileSync(file, 'utf8')
    .replace('use: llm-gateway-tagger\n', 'use: llm-gateway-tagr\n')
    .replace('use: llm-gateway-tagger/loud', 'use: llm-gateway-tagger/quiet');
  let issues: unknown[] = [];
  try {
    await loadConfigText(text, file, { registry: builtinPlugins });
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    issues = e.issues;
  }
  const lines = text.split('\n');
  const where = (s: string) => {
    const i = lines.findIndex((l) => l.includes(s));
    return { line: i + 1, col: lines[i].indexOf(s.replace(/^use: /, '')) + 1 };
  };
  t.same(issues, [
    {
      path: 'plugins.tagger.use',
      ...where('use: llm-gateway-tagr'),
      message:
        `unknown plugin 'llm-gateway-tagr': not a built-in (${[...builtinPlugins.keys()].join(', ')}) nor a package found from ${conf} ` +
        `(Cannot find package 'llm-gateway-tagr' imported from ${file})`,
    },
    {
      path: 'plugins.loud.use',
      ...where('use: llm-gateway-tagger/quiet'),
      message:
        `unknown plugin 'llm-gateway-tagger/quiet': not a built-in (${[...builtinPlugins.keys()].join(', ')}) nor a package found from ${conf} ` +
        `(Package subpath './quiet' is not defined by "exports" in ${pkg}/package.json imported from ${file})`,
    },
  ]);
});
