/**
 * The production path, as CI runs it on a fresh machine: the tree built here (dev dependencies
 * present) is copied without node_modules; in the copy `npm ci --omit=dev` installs (no
 * TypeScript), a plugin package built as docs/plugins.md says is installed the documented way
 * (`npm install --omit=dev <plugin>`: no dev dependencies, and never a rebuild) and named by its
 * package name in gateway.yaml; `npm start` serves without compiling, the plugin refuses and marks
 * requests (its response header set with ctx.setResponseHeader), and on SIGTERM sent to the npm
 * process the gateway drains the request in flight and everything exits 0.
 * And the newcomer's path: `npm start` on a clone without dist/ builds once, then never again
 * until a source changes.
 */
import t from 'tap';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  appendFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import YAML from 'yaml';
import path from 'node:path';
import { ROOT, tmpDir } from '../helpers/gateway.js';

t.setTimeout(600_000);

// Children run as an operator runs them: without tap's process tracking (NODE_OPTIONS).
const ENV: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '', GATEWAY_WATCH_CONFIG: '0' };
const DEMO_KEY = 'sk-deadbeef00000000000000000000000000000000000000000000000000000001';
const SKIP = new Set(['node_modules', '.git', '.tap', 'coverage', 'data']);

/** The working tree as a deployment copies it: everything but node_modules (and VCS and runtime state). */
function copyTree(to: string, skip: Set<string> = SKIP): void {
  cpSync(ROOT, to, {
    recursive: true,
    filter: (src) => {
      const rel = path.relative(ROOT, src);
      return rel === '' || !skip.has(rel.split(path.sep)[0]);
    },
  });
}

function run(cmd: string, args: string[], cwd: string): { code: number | null; out: string } {
  const r = spawnSync(cmd, args, { cwd, env: ENV, encoding: 'utf8' });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

/** Resolves with the `gateway listening` log line's URL; rejects if the process exits first. */
function listening(child: ChildProcess, stderr: () => string): Promise<string> {
  return new Promise((resolve, reject) => {
    const look = () => {
      const line = stderr()
        .split('\n')
        .find((l) => l.includes('"msg":"gateway listening on '));
      if (line) resolve(JSON.parse(line).url);
    };
    child.stderr!.on('data', look);
    child.on('exit', (code) => reject(new Error(`exited (${code}) before listening: ${stderr()}`)));
  });
}

t.test('built here, copied without node_modules, npm ci --omit=dev, npm start, SIGTERM to npm: drained, exit 0', async (t) => {
  t.ok(existsSync(path.join(ROOT, 'dist/.build-stamp')), 'the tree is built (npm run build)');
  const copy = tmpDir('gw-production-');
  t.teardown(() => rmSync(copy, { recursive: true, force: true }));
  copyTree(copy);
  t.notOk(existsSync(path.join(copy, 'node_modules')));

  const ci = run('npm', ['ci', '--omit=dev', '--no-audit', '--no-fund', '--prefer-offline'], copy);
  t.equal(ci.code, 0, `npm ci --omit=dev: ${ci.out.slice(-500)}`);
  t.notOk(existsSync(path.join(copy, 'node_modules/typescript')), 'no TypeScript in production');
  t.ok(existsSync(path.join(copy, 'node_modules/pino')), 'runtime dependencies installed');
  const stamp = statSync(path.join(copy, 'dist/.build-stamp')).mtimeMs;
  const packages = readdirSync(path.join(copy, 'node_modules')).length;

  // A plugin package, built as docs/plugins.md says: the example, the gateway packed as its dev dependency.
  const work = tmpDir('gw-plugin-build-');
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const plugin = path.join(work, 'moderation');
  cpSync(path.join(ROOT, 'examples/moderation'), plugin, {
    recursive: true,
    filter: (src) => !/[\\/](node_modules|dist)$/.test(src) && !src.endsWith('.tgz'),
  });
  const version = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version;
  for (const [cmd, ...args] of [
    ['npm', 'pack', ROOT, '--silent'],
    ['npm', 'install', '--save-dev', `./llm-gateway-${version}.tgz`, '--no-audit', '--no-fund', '--prefer-offline'],
    ['npm', 'run', 'build'],
    ['npm', 'pack', '--silent'],
  ]) {
    const r = run(cmd, args, plugin);
    t.equal(r.code, 0, `${cmd} ${args.join(' ')}: ${r.out.slice(-800)}`);
  }
  const tarball = path.join(plugin, 'llm-gateway-moderation-1.0.0.tgz');
  t.ok(existsSync(tarball), 'the plugin, packed');

  // Installed in the production copy the documented way (docs/plugins.md, docs/operations.md).
  const added = run('npm', ['install', '--omit=dev', tarball, '--no-audit', '--no-fund', '--prefer-offline'], copy);
  t.equal(added.code, 0, `npm install --omit=dev <plugin>: ${added.out.slice(-800)}`);
  t.ok(existsSync(path.join(copy, 'node_modules/llm-gateway-moderation/dist/index.js')), 'the plugin is installed');
  t.notOk(existsSync(path.join(copy, 'node_modules/typescript')), 'still no TypeScript');
  t.notOk(existsSync(path.join(copy, 'node_modules/llm-gateway')), 'nothing fetched as llm-gateway: the gateway itself is the peer');
  t.equal(readdirSync(path.join(copy, 'node_modules')).length, packages + 1, 'one package more, no dev dependencies');
  t.match(JSON.parse(readFileSync(path.join(copy, 'package.json'), 'utf8')).dependencies, { 'llm-gateway-moderation': /moderation/ });

  // Named by its package name in the shipped gateway.yaml, right after auth.
  const yamlFile = path.join(copy, 'gateway.yaml');
  const doc = YAML.parseDocument(readFileSync(yamlFile, 'utf8'));
  doc.setIn(['plugins', 'moderation'], doc.createNode({ use: 'llm-gateway-moderation', with: { patterns: ['\\bforbidden\\b'] } }));
  const chain = doc.getIn(['chains', 'model-call']) as YAML.YAMLSeq;
  chain.items.splice(1, 0, doc.createNode('moderation'));
  writeFileSync(yamlFile, doc.toString());

  const npm = spawn('npm', ['start'], { cwd: copy, env: { ...ENV, GATEWAY_PORT: '0' } });
  let stderr = '';
  let stdout = '';
  npm.stdout.on('data', (d) => {
    stdout += d;
  });
  npm.stderr.on('data', (d) => {
    stderr += d;
  });
  const exited = new Promise<number | null>((resolve) => npm.on('exit', (code) => resolve(code)));
  const url = await listening(npm, () => stderr);
  t.notMatch(stderr + stdout, /building|rebuilding/, 'no compilation on start');
  t.equal(statSync(path.join(copy, 'dist/.build-stamp')).mtimeMs, stamp, 'the build is untouched');
  t.equal((await fetch(url + '/readyz')).status, 200, 'ready');

  const chat = (content: string) =>
    fetch(url + '/v1/chat/completions', {
      method: 'POST',
      headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'demo-chat', messages: [{ role: 'user', content }] }),
    });
  const refused = await chat('the forbidden word');
  t.equal(refused.status, 403, 'the plugin refuses');
  t.equal(((await refused.json()) as { error: { code: string } }).error.code, 'content_policy_violation');
  const passed = await chat('hello');
  t.equal(passed.status, 200);
  t.equal(passed.headers.get('x-moderation'), 'passed', 'the header the plugin set (ctx.setResponseHeader)');
  await passed.text();

  // A stream in flight when SIGTERM arrives: 40 words, 25 ms apart.
  const res = await fetch(url + '/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'demo-chat',
      stream: true,
      messages: [{ role: 'user', content: '[[mock: words=40 chunk_delay=25]] hi' }],
    }),
  });
  t.equal(res.status, 200);
  const reader = res.body!.getReader();
  const first = await reader.read();
  let text = Buffer.from(first.value).toString('utf8');
  t.ok(npm.kill('SIGTERM'), 'SIGTERM sent to the npm process');
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString('utf8');
  }
  t.match(text, /data: \[DONE\]/, 'the request in flight finished');
  const words = text
    .split('\n')
    .filter((l) => l.startsWith('data: {'))
    .map((l) => JSON.parse(l.slice(6)).choices?.[0]?.delta?.content ?? '')
    .join('');
  t.equal(words.trim().split(/\s+/).length, 40, 'all of it');
  t.equal(await exited, 0, 'npm (and the gateway under it) exit 0');
  await t.rejects(fetch(url + '/healthz'), 'nothing is left listening');
  const lines = stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l));
  t.ok(
    lines.some((l) => l.msg.startsWith('shutting down') && l.signal === 'SIGTERM'),
    'the gateway itself got SIGTERM',
  );
  t.ok(
    lines.some((l) => l.msg === 'request' && l.status === 200 && l.ttftMs !== undefined),
    'the stream was logged',
  );
  t.ok(lines.some((l) => l.msg === 'gateway stopped'));

  // Even with TypeScript at hand (someone ran a plain `npm install` there), a deployed gateway whose
  // sources are those it was built from never compiles itself: not for a rewritten package.json,
  // not for files whose times changed.
  symlinkSync(path.join(ROOT, 'node_modules/typescript'), path.join(copy, 'node_modules/typescript'), 'dir');
  const later = (Date.now() + 5_000) / 1000;
  utimesSync(path.join(copy, 'package.json'), later, later);
  utimesSync(path.join(copy, 'core/log.ts'), later, later);
  const started = run(process.execPath, [path.join(copy, 'bin/gateway.js'), '--version'], copy);
  t.equal(started.out.trim(), version, 'no rebuild: the version, nothing else');
  t.equal(statSync(path.join(copy, 'dist/.build-stamp')).mtimeMs, stamp, 'the build is untouched');
});

t.test('a clone without dist: the first start builds, later starts do not, a changed source rebuilds', async (t) => {
  const copy = tmpDir('gw-fresh-');
  t.teardown(() => rmSync(copy, { recursive: true, force: true }));
  // Only the runtime sources (tsc compiles what exists): the test suite and the bench stay behind.
  copyTree(copy, new Set([...SKIP, 'dist', 'test', 'bench']));
  const bin = path.join(copy, 'bin/gateway.js');

  const bare = run(process.execPath, [bin, '--version'], copy);
  t.equal(bare.code, 1, 'no dist and no TypeScript: nothing to run');
  t.match(bare.out, /not built and TypeScript is not installed: run `npm ci && npm run build`/);

  symlinkSync(path.join(ROOT, 'node_modules'), path.join(copy, 'node_modules'), 'dir');
  const version = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version;
  const first = run(process.execPath, [bin, '--version'], copy);
  t.equal(first.code, 0, first.out);
  t.match(first.out, /building the gateway \(first start\)/);
  t.match(first.out, version);
  t.ok(existsSync(path.join(copy, 'dist/cli/main.js')));

  const again = run(process.execPath, [bin, '--version'], copy);
  t.equal(again.out.trim(), version, 'built once: no compilation');

  const later = (Date.now() + 5_000) / 1000;
  utimesSync(path.join(copy, 'core/log.ts'), later, later);
  utimesSync(path.join(copy, 'package.json'), later, later);
  t.equal(run(process.execPath, [bin, '--version'], copy).out.trim(), version, 'a touched source or package.json: no rebuild');
  appendFileSync(path.join(copy, 'core/log.ts'), '// edited\n');
  const changed = run(process.execPath, [bin, '--version'], copy);
  t.equal(changed.code, 0);
  t.match(changed.out, /sources changed since the last build: rebuilding/, 'an edited source rebuilds');
  t.equal(run(process.execPath, [bin, '--version'], copy).out.trim(), version, 'and then no more');

  // Runtime dependencies without TypeScript, as after `npm ci --omit=dev`.
  rmSync(path.join(copy, 'node_modules'));
  mkdirSync(path.join(copy, 'node_modules'));
  for (const e of readdirSync(path.join(ROOT, 'node_modules'))) {
    if (e !== 'typescript' && e !== '.bin') symlinkSync(path.join(ROOT, 'node_modules', e), path.join(copy, 'node_modules', e), 'dir');
  }
  appendFileSync(path.join(copy, 'core/log.ts'), '// edited again\n');
  const stale = run(process.execPath, [bin, '--version'], copy);
  t.equal(stale.out.trim(), version, 'changed sources without TypeScript: the existing build runs');
});
