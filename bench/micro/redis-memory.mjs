// What Redis holds per request: the gateway as the bench runs it, on the Redis store (a
// redis-server of its own, no persistence), under wrk from the other core; Redis's used_memory and
// its keys by kind before and after a run, after a warm-up that creates the per-key and per-user
// hashes. What stays per request is what an operator sizes `maxmemory` for (docs/operations.md).
//   node bench/micro/redis-memory.mjs [CHECKOUT] [--seconds N]     (CHECKOUT built; default .)
// (not a test: a guide, like the rest of bench/micro)
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const args = process.argv.slice(2);
const secI = args.indexOf('--seconds');
const seconds = secI >= 0 ? Number(args.splice(secI, 2)[1]) : 20;
const root = path.resolve(args[0] ?? '.');
const { gatewayConfig, AUTH_CHAT } = await import(path.join(root, 'dist/bench/setup.js'));
const YAML = (await import(path.join(root, 'node_modules/yaml/dist/index.js'))).default;
const { Redis } = await import(path.join(root, 'node_modules/ioredis/built/index.js'));

const freePort = () =>
  new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redis-memory-'));
const [redisPort, mockPort, gwPort] = [await freePort(), await freePort(), await freePort()];
const mockUrl = `http://127.0.0.1:${mockPort}`;
const cfg = gatewayConfig({
  root,
  port: gwPort,
  dataDir: path.join(dir, 'data'),
  upstreams: { mock: mockUrl, sink: mockUrl },
  concurrency: 10_000,
  store: { kind: 'redis', url: `redis://127.0.0.1:${redisPort}/0`, prefix: 'gw:' },
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
let db;
try {
  start('taskset', ['-c', '1', 'redis-server', '--port', String(redisPort), '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  start('taskset', ['-c', '1', process.execPath, 'dist/bench/roles.js', 'mock', String(mockPort)], { stdio: 'ignore' });
  await sleep(300);
  db = new Redis(redisPort, '127.0.0.1');
  const err = fs.openSync(path.join(dir, 'gateway.err'), 'a');
  start('taskset', ['-c', '0', process.execPath, 'bin/gateway.js', 'start', '--config', path.join(dir, 'gateway.yaml')], {
    stdio: ['ignore', 'ignore', err],
  });
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
      ['-c', '1', 'wrk', '-t1', '-c10', `-d${s}s`, '-s', 'bench/wrk.lua', `http://127.0.0.1:${gwPort}/v1/chat/completions`],
      { cwd: root, env: { ...process.env, BENCH_BODY_FILE: body, BENCH_AUTH: AUTH_CHAT } },
    ).toString();
  const used = async () => Number(/^used_memory:(\d+)/m.exec(await db.info('memory'))[1]);
  /** Keys by kind: the name with its ids (hex runs, numbers) taken out. */
  const kinds = async () => {
    const m = new Map();
    for await (const batch of db.scanStream({ match: 'gw:*', count: 1000 }))
      for (const k of batch) {
        const kind = k.replace(/[0-9a-f]{6,}.*$/, '…').replace(/\d+/g, 'N');
        m.set(kind, (m.get(kind) ?? 0) + 1);
      }
    return m;
  };
  const load = os.loadavg()[0];
  wrk(3); // warm-up: the key's, user's and group's hashes exist after it
  await sleep(2000); // settlements and the ledger's drain done
  const [m0, k0] = [await used(), await kinds()];
  const res = JSON.parse(/BENCH_JSON (.*)/.exec(wrk(seconds))[1]);
  await sleep(2000);
  const [m1, k1] = [await used(), await kinds()];
  const n = res.requests;
  const version = execFileSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD']).toString().trim();
  console.log(`${root} (${version}): ${n} requests in ${seconds} s, load average ${load.toFixed(2)} at the start`);
  console.log(`Redis used_memory ${m0} → ${m1}: **${((m1 - m0) / n).toFixed(1)} bytes per request**`);
  console.log('| key kind | before | after | per 1,000 requests |');
  console.log('|---|---:|---:|---:|');
  for (const kind of [...new Set([...k0.keys(), ...k1.keys()])].sort((a, b) => (k1.get(b) ?? 0) - (k1.get(a) ?? 0)))
    console.log(
      `| \`${kind}\` | ${k0.get(kind) ?? 0} | ${k1.get(kind) ?? 0} | ${((((k1.get(kind) ?? 0) - (k0.get(kind) ?? 0)) * 1000) / n).toFixed(1)} |`,
    );
} finally {
  db?.disconnect();
  for (const p of procs.reverse()) p.kill();
  await sleep(300);
  fs.rmSync(dir, { recursive: true, force: true });
}
