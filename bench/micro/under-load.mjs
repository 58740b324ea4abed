// What the micro scripts that load a whole gateway share: its config (the bench's, bench/setup.ts)
// and request body in a temporary directory, the processes they start (stopped together), the
// wait for /healthz and a wrk run from the other core. Not a test; see write-timing.mjs and
// redis-memory.mjs.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
// This checkout's (built), whichever checkout is measured: older ones may not have it.
import { freePort } from '../../dist/bench/setup.js';

export { freePort };

/**
 * The command line's options, taken out of `args` as they are read: `opt(name, default)` for
 * `--name VALUE`, `flag(name)` for `--name`; what is left stays in `args`.
 */
export function argReader(args) {
  return {
    opt(name, dflt) {
      const i = args.indexOf(name);
      return i >= 0 ? args.splice(i, 2)[1] : dflt;
    },
    flag(name) {
      const i = args.indexOf(name);
      return i >= 0 && args.splice(i, 1).length > 0;
    },
  };
}

/**
 * The bench's gateway config for CHECKOUT `root` (built), written with a body file into a new
 * temporary directory; `store` replaces the embedded store; `stream`: the body asks for a stream.
 */
export async function gatewaySetup(root, name, store, stream = false) {
  const { gatewayConfig, AUTH_CHAT } = await import(path.join(root, 'dist/bench/setup.js'));
  const YAML = (await import(path.join(root, 'node_modules/yaml/dist/index.js'))).default;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${name}-`));
  const [mockPort, gwPort] = [await freePort(), await freePort()];
  const mockUrl = `http://127.0.0.1:${mockPort}`;
  const cfg = gatewayConfig({
    root,
    port: gwPort,
    dataDir: path.join(dir, 'data'),
    upstreams: { mock: mockUrl, sink: mockUrl },
    concurrency: 10_000,
    ...(store ? { store } : {}),
  });
  const config = path.join(dir, 'gateway.yaml');
  fs.writeFileSync(config, YAML.stringify(cfg));
  const body = path.join(dir, 'body.json');
  fs.writeFileSync(
    body,
    JSON.stringify({ model: 'bench-chat', max_tokens: 20, stream, messages: [{ role: 'user', content: 'Hello there' }] }),
  );
  return { root, dir, config, body, auth: AUTH_CHAT, mockPort, gwPort, errFile: path.join(dir, 'gateway.err') };
}

/** Processes started in `s.root`, stopped together (in reverse order) by `stopAll`. */
export function processes(s) {
  const procs = [];
  return {
    start(cmd, argv, opts) {
      const p = spawn(cmd, argv, { cwd: s.root, ...opts });
      procs.push(p);
      return p;
    },
    /** The mock upstream, on core 1. */
    mock() {
      return this.start('taskset', ['-c', '1', process.execPath, 'dist/bench/roles.js', 'mock', String(s.mockPort)], { stdio: 'ignore' });
    },
    /** The gateway on core 0 (`nodeArgs` before its entry point), its stderr to `s.errFile`, its stdout to `stdout`. */
    gateway(nodeArgs = [], env = process.env, stdout = 'ignore') {
      const err = fs.openSync(s.errFile, 'a');
      return this.start('taskset', ['-c', '0', process.execPath, ...nodeArgs, 'bin/gateway.js', 'start', '--config', s.config], {
        stdio: ['ignore', stdout, err],
        env,
      });
    },
    async stopAll() {
      for (const p of procs.reverse()) p.kill();
      await sleep(300);
      fs.rmSync(s.dir, { recursive: true, force: true });
    },
  };
}

/** The arguments of bench/roles.ts `side` (proxy, floor, floor-records) after its port, on the setup's mock. */
export function roleArgs(s, side) {
  const mock = `http://127.0.0.1:${s.mockPort}`;
  if (side === 'proxy') return [mock, mock];
  if (side === 'floor-records') return [mock, path.join(s.dir, 'floor-data')];
  return [mock];
}

export async function waitUp(s) {
  for (let i = 0; ; i++) {
    if (i > 600) throw new Error(`the gateway did not start:\n${fs.readFileSync(s.errFile, 'utf8')}`);
    await sleep(100);
    if (
      await fetch(`http://127.0.0.1:${s.gwPort}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return;
  }
}

const wrkArgs = (s, seconds, connections) => [
  ['-c', '1', 'wrk', '-t1', `-c${connections}`, `-d${seconds}s`, '-s', 'bench/wrk.lua', `http://127.0.0.1:${s.gwPort}/v1/chat/completions`],
  { cwd: s.root, env: { ...process.env, BENCH_BODY_FILE: s.body, BENCH_AUTH: s.auth } },
];
const wrkSummary = (out) => JSON.parse(/BENCH_JSON (.*)/.exec(out)[1]);

/** wrk on core 1 for `seconds` with `connections`: its summary (bench/wrk.lua's JSON line). */
export function wrk(s, seconds, connections) {
  return wrkSummary(execFileSync('taskset', ...wrkArgs(s, seconds, connections)).toString());
}

/** `wrk`, not waited for: the summary when it ends. */
export function wrkAsync(s, seconds, connections) {
  return new Promise((resolve, reject) => {
    const p = spawn('taskset', ...wrkArgs(s, seconds, connections));
    let out = '';
    p.stdout.on('data', (c) => (out += c));
    p.on('error', reject);
    p.on('exit', (code) => (code === 0 ? resolve(wrkSummary(out)) : reject(new Error(`wrk exited with ${code}`))));
  });
}

/** `perf`'s sampling rate (Hz) for the scripts that profile a server (`cpu-clock`: a VM has no hardware counters). */
export const PERF_HZ = 4999;

/** Starts `perf record` of process `pid` into `out` (`callers`: with call graphs); resolves to `stop()`. */
export async function perfRecord(pid, out, callers = false) {
  const perf = spawn(
    'perf',
    ['record', ...(callers ? ['-g'] : []), '-e', 'cpu-clock', '-F', String(PERF_HZ), '-p', String(pid), '-o', out],
    {
      stdio: 'ignore',
    },
  );
  await sleep(300);
  return async () => {
    perf.kill('SIGINT');
    await new Promise((resolve) => perf.once('exit', resolve));
  };
}

/**
 * µs per request by symbol in a `perf record` file of `requests` requests at `hz` (JavaScript frames
 * without their tier marker and checkout path; the kernel's marked `[kernel]`).
 */
export function perfSymbols(file, hz, requests) {
  const text = execFileSync('perf', ['report', '-i', file, '--no-children', '--sort', 'sym', '-n', '--stdio'], {
    maxBuffer: 1 << 28,
    stdio: ['ignore', 'pipe', 'ignore'],
  }).toString();
  const m = new Map();
  for (const line of text.split('\n')) {
    const r = /^\s*[\d.]+%\s+(\d+)\s+\[([.k])\]\s+(.*)$/.exec(line);
    if (!r) continue;
    const sym =
      (r[2] === 'k' ? '[kernel] ' : '') +
      r[3]
        .trim()
        .replace(/file:\/\/\/\S*?\/dist\//, '')
        .replace(/^JS:[*~^]?/, 'JS:');
    m.set(sym, (m.get(sym) ?? 0) + (Number(r[1]) * 1e6) / hz / requests);
  }
  return m;
}
