// Bytes allocated per request, by function, under load: V8's sampling heap profiler with the
// objects already collected counted too (what the scavenger has to sweep, not what stays).
// The gateway runs as the bench runs it; a separate wrk loads it.
//
//   node bench/micro/alloc-profile.mjs [--root CHECKOUT] [--side gateway|proxy|floor|floor-records] [--stream] [--seconds N] [--top N] [--tree]
//        [--live]   (what was allocated in the window and is still alive when it ends, the load still running: what the
//                    collector keeps, in bytes, not per request)
//        [--store redis]  (the gateway on the Redis store: a redis-server of its own on the load's core, no persistence)
// (not a test: a guide, like the rest of bench/micro)
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { argReader, freePort, gatewaySetup, processes, roleArgs, waitUp, wrk, wrkAsync } from './under-load.mjs';

const args = process.argv.slice(2);
const { opt, flag } = argReader(args);
const root = path.resolve(opt('--root', '.'));
const seconds = Number(opt('--seconds', '6'));
const top = Number(opt('--top', '40'));
const stream = flag('--stream');
const tree = flag('--tree');
const side = opt('--side', 'gateway');
const live = flag('--live');
const store = opt('--store', 'memory');
if (store !== 'memory' && store !== 'redis') throw new Error(`--store memory|redis, not ${store}`);
const redisPort = store === 'redis' ? await freePort() : 0;

const s = await gatewaySetup(
  root,
  'alloc-profile',
  store === 'redis' ? { kind: 'redis', url: `redis://127.0.0.1:${redisPort}/0`, prefix: 'gw:' } : undefined,
  stream,
);
const out = path.join(s.dir, 'alloc.json');
const procs = processes(s);
let profile;
let requests;
try {
  if (store === 'redis')
    procs.start('taskset', ['-c', '1', 'redis-server', '--port', String(redisPort), '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
  procs.mock();
  const preload = path.join(path.dirname(fileURLToPath(import.meta.url)), 'alloc-preload.mjs');
  const env = { ...process.env, ALLOC_PROFILE_OUT: out, ...(live ? { ALLOC_PROFILE_LIVE: '1' } : {}) };
  let gw;
  if (side === 'gateway') {
    gw = procs.gateway(['--import', pathToFileURL(preload).href], env);
    await waitUp(s);
  } else {
    // the bench's bare proxy or a floor relay, on the gateway's port
    const argv = [
      '-c',
      '0',
      process.execPath,
      '--import',
      pathToFileURL(preload).href,
      'dist/bench/roles.js',
      side,
      String(s.gwPort),
      ...roleArgs(s, side),
    ];
    gw = procs.start('taskset', argv, { stdio: 'ignore', env });
    await sleep(1500);
  }
  wrk(s, 5, 50);
  gw.kill('SIGUSR2');
  await sleep(200);
  if (live) {
    // stopped while the load runs: the requests in flight are in it
    const load = wrkAsync(s, seconds + 2, 50);
    await sleep(seconds * 1000);
    gw.kill('SIGUSR2');
    requests = (await load).requests;
  } else {
    requests = wrk(s, seconds, 50).requests;
    gw.kill('SIGUSR2');
  }
  for (let i = 0; i < 100 && !fs.existsSync(out); i++) await sleep(100);
  await sleep(500);
  profile = JSON.parse(fs.readFileSync(out, 'utf8'));
} finally {
  await procs.stopAll();
}
if (profile.error) throw new Error(profile.error);

/** Alive (--live): bytes in all; otherwise per request. */
const per = live ? 1 : requests;
const name = (cf) => `${cf.functionName || '(anonymous)'} ${cf.url.replace(/^.*\/dist\//, '').replace(/^node:/, '')}:${cf.lineNumber + 1}`;
const self = new Map();
let total = 0;
const walk = (node, depth, lines) => {
  const bytes = node.selfSize;
  let sub = bytes;
  const kids = [];
  for (const c of node.children) {
    const k = [];
    const b = walk(c, depth + 1, k);
    sub += b;
    kids.push([b, k]);
  }
  total += bytes;
  const key = name(node.callFrame);
  self.set(key, (self.get(key) ?? 0) + bytes);
  if (tree && sub / per >= 40) {
    lines.push(`${'  '.repeat(depth)}${(sub / per).toFixed(0).padStart(6)} B  ${key}`);
    for (const [, k] of kids.sort((a, b) => b[0] - a[0])) lines.push(...k);
  }
  return sub;
};
const lines = [];
walk(profile.head, 0, lines);
if (live) console.log(`${requests} requests; ${(total / 1024).toFixed(0)} KB allocated since the start and alive at the stop (sampled)`);
else console.log(`${requests} requests; ${(total / requests).toFixed(0)} bytes allocated per request (sampled)`);
for (const [k, v] of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${(v / per).toFixed(0).padStart(7)} B  ${k}`);
if (tree) console.log(lines.join('\n'));
