/**
 * The console on the production path: the package ships the built console (dist/console/), and a
 * tree built here, copied without node_modules and installed with `npm ci --omit=dev` (no esbuild,
 * no Preact, no TypeScript) serves it as built.
 */
import t from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT, tmpDir } from '../helpers/gateway.js';

t.setTimeout(600_000);

const ENV: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '', GATEWAY_WATCH_CONFIG: '0' };
const SKIP = new Set(['node_modules', '.git', '.tap', 'coverage', 'data']);
const built = () => readdirSync(path.join(ROOT, 'dist/console/assets')).map((f) => `dist/console/assets/${f}`);

t.test('the package ships the built console', async (t) => {
  const r = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: ROOT, env: ENV, encoding: 'utf8' });
  t.equal(r.status, 0, r.stderr);
  const files = new Set((JSON.parse(r.stdout) as { files: { path: string }[] }[])[0].files.map((f) => f.path));
  for (const f of ['dist/console/index.html', ...built()]) t.ok(files.has(f), `${f} is in the package`);
  t.notOk(
    [...files].some((f) => f.startsWith('console/')),
    'the sources are not (the package runs what was built)',
  );
});

t.test('built here, copied, npm ci --omit=dev: the console is served without a bundler', async (t) => {
  const copy = tmpDir('gw-console-production-');
  t.teardown(() => rmSync(copy, { recursive: true, force: true }));
  cpSync(ROOT, copy, {
    recursive: true,
    filter: (src) => {
      const rel = path.relative(ROOT, src);
      return rel === '' || !SKIP.has(rel.split(path.sep)[0]);
    },
  });
  const ci = spawnSync('npm', ['ci', '--omit=dev', '--no-audit', '--no-fund', '--prefer-offline'], {
    cwd: copy,
    env: ENV,
    encoding: 'utf8',
  });
  t.equal(ci.status, 0, `npm ci --omit=dev: ${(ci.stdout + ci.stderr).slice(-500)}`);
  for (const dev of ['esbuild', 'preact', 'uplot', 'typescript']) t.notOk(existsSync(path.join(copy, 'node_modules', dev)), `no ${dev}`);

  const config = `${readFileSync(path.join(copy, 'gateway.yaml'), 'utf8')}\nconsole:\n  enabled: true\n`;
  writeFileSync(path.join(copy, 'console.yaml'), config);
  const gw = spawn(process.execPath, ['bin/gateway.js', 'start', '--config', './console.yaml'], {
    cwd: copy,
    env: { ...ENV, GATEWAY_PORT: '0' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  t.teardown(() => void gw.kill('SIGKILL'));
  let stderr = '';
  const url = await new Promise<string>((resolve, reject) => {
    gw.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
      const line = stderr.split('\n').find((l) => l.includes('"msg":"gateway listening on '));
      if (line) resolve((JSON.parse(line) as { url: string }).url);
    });
    gw.once('exit', (code) => reject(new Error(`exited (${code}) before listening: ${stderr}`)));
  });
  t.notMatch(stderr, /building|rebuilding/, 'nothing is compiled or bundled at start');
  const index = await fetch(`${url}/console/`);
  t.equal(index.status, 200);
  const html = await index.text();
  t.equal(html, readFileSync(path.join(ROOT, 'dist/console/index.html'), 'utf8'), 'the page as built');
  for (const f of built()) {
    const r = await fetch(`${url}/console/${f.slice('dist/console/'.length)}`);
    t.equal(r.status, 200, f);
    t.equal(Buffer.from(await r.arrayBuffer()).length, readFileSync(path.join(ROOT, f)).length, `${f} as built`);
  }
  gw.kill('SIGTERM');
  await new Promise((resolve) => gw.once('exit', resolve));
});
