/**
 * Build on demand, so one `npm start` serves both a fresh clone (no dist/ yet, dev dependencies
 * installed: it compiles once) and a production copy (dist/ shipped: it never compiles).
 * `node scripts/build.mjs` compiles unconditionally (`npm run build`).
 *
 * A build is tsc (the gateway) then esbuild (the web console, console/ → dist/console/: static
 * files the gateway serves; docs/console.md). A successful build writes dist/.build-stamp with a digest of the runtime sources it compiled
 * (cli/, core/, mock/, plugins/, console/ — .ts, .tsx, .lua and the console's assets — and
 * tsconfig.json). The build is stale only when
 * those sources differ from that digest: a file newer than the stamp is hashed, and a copy whose
 * files all got new times (a deployment) but the same contents is not stale. package.json is not
 * a source: installing a plugin (`npm install --omit=dev <plugin>`) rewrites it, and that must never
 * make a deployed gateway compile itself. tsc's own incremental state is no guide here: it leaves
 * dist untouched when a file's mtime changed but not its content, which would make every later
 * start look stale.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const STAMP = path.join(ROOT, 'dist', '.build-stamp');
const ENTRY = path.join(ROOT, 'dist', 'cli', 'main.js');
const SOURCES = ['cli', 'core', 'mock', 'plugins', 'console'];
const SOURCE_FILE = /\.(ts|tsx|lua|css|html|svg|json)$/;

/** The TypeScript compiler, when dev dependencies are installed. */
export function findTsc() {
  try {
    return createRequire(path.join(ROOT, 'package.json')).resolve('typescript/bin/tsc');
  } catch {
    return undefined;
  }
}

/** Every runtime source file (absolute paths, in a stable order). */
function sourceFiles() {
  const files = [];
  const walk = (dir) => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const e of entries) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (SOURCE_FILE.test(e.name)) files.push(p);
    }
  };
  for (const d of SOURCES) walk(path.join(ROOT, d));
  const tsconfig = path.join(ROOT, 'tsconfig.json');
  if (existsSync(tsconfig)) files.push(tsconfig);
  return files;
}

/** A digest of the sources' names and contents: what a build compiled. */
function sourceDigest(files = sourceFiles()) {
  const h = createHash('sha256');
  for (const f of files)
    h.update(`${path.relative(ROOT, f)}\0`)
      .update(readFileSync(f))
      .update('\0');
  return h.digest('hex');
}

/** 'missing' (no dist), 'stale' (sources changed since the last build) or 'fresh'. */
export function buildState() {
  if (!existsSync(ENTRY)) return 'missing';
  let stamp;
  let built;
  try {
    stamp = statSync(STAMP).mtimeMs;
    built = /^digest ([0-9a-f]{64})$/m.exec(readFileSync(STAMP, 'utf8'))?.[1];
  } catch {
    return 'stale';
  }
  const files = sourceFiles();
  // Nothing newer than the stamp: fresh without reading a file. Otherwise the contents decide.
  if (files.every((f) => statSync(f).mtimeMs <= stamp)) return 'fresh';
  return built !== undefined && built === sourceDigest(files) ? 'fresh' : 'stale';
}

/** Compiles with tsc; true on success. Output goes to stderr (stdout may be a command's answer). */
export function build(tsc = findTsc()) {
  if (!tsc) return false;
  const digest = sourceDigest();
  const r = spawnSync(process.execPath, [tsc, '-p', path.join(ROOT, 'tsconfig.json')], { cwd: ROOT, stdio: ['ignore', 2, 2] });
  if (r.status !== 0) return false;
  copyAssets();
  if (!buildConsole(tsc)) return false;
  writeFileSync(STAMP, `${new Date().toISOString()}\ndigest ${digest}\n`);
  return true;
}

/**
 * The web console: type-checked with its own tsconfig (DOM types, Preact's JSX), bundled by esbuild
 * into content-hashed files under dist/console/assets/, and dist/console/index.html written to
 * load them. Without esbuild (it is a dev dependency) the gateway still builds, without a console.
 */
function buildConsole(tsc) {
  const src = path.join(ROOT, 'console');
  if (!existsSync(path.join(src, 'main.tsx'))) return true;
  let esbuild;
  try {
    esbuild = createRequire(path.join(ROOT, 'package.json'))('esbuild');
  } catch {
    process.stderr.write('esbuild is not installed: the web console (console/) is not built\n');
    return true;
  }
  const check = spawnSync(process.execPath, [tsc, '-p', path.join(src, 'tsconfig.json')], { cwd: ROOT, stdio: ['ignore', 2, 2] });
  if (check.status !== 0) return false;
  const out = path.join(ROOT, 'dist', 'console');
  rmSync(out, { recursive: true, force: true });
  mkdirSync(path.join(out, 'assets'), { recursive: true });
  let result;
  try {
    result = esbuild.buildSync({
      absWorkingDir: ROOT,
      entryPoints: [path.join(src, 'main.tsx')],
      bundle: true,
      format: 'esm',
      minify: true,
      target: ['chrome111', 'firefox111', 'safari16.4'],
      jsx: 'automatic',
      jsxImportSource: 'preact',
      outdir: path.join(out, 'assets'),
      entryNames: '[name]-[hash]',
      assetNames: '[name]-[hash]',
      metafile: true,
      logLevel: 'warning',
    });
  } catch {
    return false; // esbuild printed the errors
  }
  const names = Object.keys(result.metafile.outputs).map((f) => path.basename(f));
  const js = names.find((n) => n.endsWith('.js'));
  const css = names.find((n) => n.endsWith('.css'));
  const icon = readFileSync(path.join(src, 'favicon.svg'));
  const iconName = `favicon-${createHash('sha256').update(icon).digest('hex').slice(0, 8)}.svg`;
  writeFileSync(path.join(out, 'assets', iconName), icon);
  const html = readFileSync(path.join(src, 'index.html'), 'utf8')
    .replace('{{js}}', `./assets/${js}`)
    .replace('{{css}}', `./assets/${css}`)
    .replace('{{icon}}', `./assets/${iconName}`);
  writeFileSync(path.join(out, 'index.html'), html);
  return true;
}

/** What tsc does not copy: the Redis store's Lua scripts, next to their compiled module. */
function copyAssets() {
  const from = path.join(ROOT, 'core/store/redis');
  const to = path.join(ROOT, 'dist/core/store/redis');
  mkdirSync(to, { recursive: true });
  for (const f of readdirSync(from)) if (f.endsWith('.lua')) copyFileSync(path.join(from, f), path.join(to, f));
}

/**
 * Before running dist/: build when it is missing, or stale (its sources edited) and tsc is at hand.
 * Without tsc a stale build runs as it is. Throws when there is nothing to run.
 */
export function ensureBuilt() {
  const state = buildState();
  if (state === 'fresh') return;
  const tsc = findTsc();
  if (!tsc) {
    if (state === 'stale') return;
    throw new Error(
      'The gateway is not built and TypeScript is not installed: run `npm ci && npm run build` ' +
        'where dev dependencies are installed, then copy the tree (with dist/) and run `npm ci --omit=dev && npm start`.',
    );
  }
  process.stderr.write(
    state === 'missing' ? 'building the gateway (first start)…\n' : 'sources changed since the last build: rebuilding…\n',
  );
  if (!build(tsc)) throw new Error('the build failed (see the errors above)');
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  if (!findTsc()) {
    console.error('TypeScript is not installed: `npm run build` needs the dev dependencies (npm ci).');
    process.exit(1);
  }
  process.exit(build() ? 0 : 1);
}
