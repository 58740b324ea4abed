// What a gateway's synchronous file writes cost it under load, in place: the gateway as the bench
// runs it (memory store, ledger on, log level info) with its stderr redirected to a file, wall time
// of every writeSync/fsyncSync by file (write-timing-preload.mjs), a separate wrk on the other
// core. Answers "cost or blocking?": blocking shows as a tail (calls over 1 ms, the journal's fsync
// running beside them), cost as a steady median.
//   node bench/micro/write-timing.mjs [CHECKOUT] [--seconds N]     (CHECKOUT built; default .)
// (not a test: a guide, like the rest of bench/micro)
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const args = process.argv.slice(2);
const secI = args.indexOf('--seconds');
const seconds = secI >= 0 ? Number(args.splice(secI, 2)[1]) : 20;
const root = path.resolve(args[0] ?? '.');
const here = path.dirname(new URL(import.meta.url).pathname);
const { gatewayConfig, AUTH_CHAT } = await import(path.join(root, 'dist/bench/setup.js'));
const YAML = (await import(path.join(root, 'node_modules/yaml/dist/index.js'))).default;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'write-timing-'));
const [mockPort, gwPort] = [18000 + Math.floor(Math.random() * 1000), 19000 + Math.floor(Math.random() * 1000)];
const mockUrl = `http://127.0.0.1:${mockPort}`;
const cfg = gatewayConfig({
  root,
  port: gwPort,
  dataDir: path.join(dir, 'data'),
  upstreams: { mock: mockUrl, sink: mockUrl },
  concurrency: 10_000,
});
fs.writeFileSync(path.join(dir, 'gateway.yaml'), YAML.stringify(cfg));
const body = path.join(dir, 'body.json');
fs.writeFileSync(body, JSON.stringify({ model: 'bench-chat', max_tokens: 20, messages: [{ role: 'user', content: 'Hello there' }] }));

const procs = [];
const start = (cmd, argv, opts) => {
  const p = spawn(cmd, argv, { cwd: root, ...opts });
  procs.push(p);
  return p;
};
const statsFile = path.join(dir, 'stats.json');
try {
  start('taskset', ['-c', '1', process.execPath, 'dist/bench/roles.js', 'mock', String(mockPort)], { stdio: 'ignore' });
  const err = fs.openSync(path.join(dir, 'gateway.err'), 'a');
  const gw = start(
    'taskset',
    [
      '-c',
      '0',
      process.execPath,
      '--import',
      path.join(here, 'write-timing-preload.mjs'),
      'bin/gateway.js',
      'start',
      '--config',
      path.join(dir, 'gateway.yaml'),
    ],
    {
      stdio: ['ignore', 'ignore', err],
      env: { ...process.env, WRITE_TIMING_OUT: statsFile },
    },
  );
  for (let i = 0; ; i++) {
    if (i > 600) throw new Error(`the gateway did not start:\n${fs.readFileSync(path.join(dir, 'gateway.err'), 'utf8')}`);
    await sleep(100);
    if (
      await fetch(`http://127.0.0.1:${gwPort}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      break;
  }
  const wrk = (s) =>
    execFileSync(
      'taskset',
      ['-c', '1', 'wrk', '-t1', '-c50', `-d${s}s`, '-s', 'bench/wrk.lua', `http://127.0.0.1:${gwPort}/v1/chat/completions`],
      {
        cwd: root,
        env: { ...process.env, BENCH_BODY_FILE: body, BENCH_AUTH: AUTH_CHAT },
      },
    ).toString();
  const load = os.loadavg()[0];
  wrk(5); // warm-up
  process.kill(gw.pid, 'SIGUSR2'); // the timing starts again (the preload runs in node, under taskset's exec)
  await sleep(300);
  const res = JSON.parse(/BENCH_JSON (.*)/.exec(wrk(seconds))[1]);
  process.kill(gw.pid, 'SIGUSR2');
  await sleep(500);
  const rows = JSON.parse(fs.readFileSync(statsFile, 'utf8'));
  const n = res.requests;
  console.log(`${root}: ${n} requests in ${seconds} s (${Math.round(n / seconds)}/s), load average ${load.toFixed(2)} at the start`);
  console.log(
    '| call | file | calls per request | bytes per call | µs per call (mean / p50 / p99 / max) | calls > 1 ms | µs per request |',
  );
  console.log('|---|---|---|---|---|---|---|');
  for (const r of rows.sort((a, b) => b.totalUs - a.totalUs)) {
    const file = r.path.startsWith(dir) ? r.path.slice(dir.length + 1) : r.path;
    console.log(
      `| ${r.call} | ${file} | ${(r.calls / n).toFixed(3)} | ${Math.round(r.bytes / r.calls)} | ${(r.totalUs / r.calls).toFixed(1)} / ${r.p50.toFixed(1)} / ${r.p99.toFixed(1)} / ${r.max.toFixed(0)} | ${r.over1ms} | ${(r.totalUs / n).toFixed(2)} |`,
    );
  }
} finally {
  for (const p of procs) p.kill();
  await sleep(300);
  fs.rmSync(dir, { recursive: true, force: true });
}
