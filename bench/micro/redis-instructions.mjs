// Instructions redis-server executes per request (admission + settlement through the Redis store,
// the bench's nine claims, a slot and a recovery settlement; CONC at a time, default 32), counted
// under callgrind: runs of N and 3N requests against a fresh redis-server each, the difference over
// 2N, so start-up and warm-up cancel out. Deterministic for the same binaries and inputs, whatever
// else the machine does, so it compares two checkouts of the Lua scripts exactly:
//   node bench/micro/redis-instructions.mjs /path/to/old/checkout; node bench/micro/redis-instructions.mjs .
// (not a test; needs valgrind and redis-server on PATH: scripts/ensure-redis.sh, scripts/ensure-wrk.sh --valgrind)
// A store that keeps ledger records (Store.takeLedger: each settlement adds one to a stream) has
// them taken and acknowledged every DRAIN_EVERY requests (default 320), as an instance's drainer
// does, so its reads, acknowledgements and deletions count too; DRAIN_EVERY=0 leaves them in Redis.
import path from 'node:path';
import os from 'node:os';
import fs from 'node:fs';
import net from 'node:net';
import { spawn, execFileSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { oneRequest } from './request.mjs';
const root = path.resolve(process.argv[2] ?? '.');
const { RedisStore } = await import(pathToFileURL(`${root}/dist/core/store/redis/index.js`).href);
const C = Number(process.env.CONC ?? 32);
const N = Number(process.env.N ?? 640);
const DRAIN_EVERY = Number(process.env.DRAIN_EVERY ?? 320);
const freePort = () =>
  new Promise((r) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => r(p));
    });
  });

async function count(n) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'micro-redis-cg-'));
  const out = path.join(dir, 'callgrind.out');
  const port = await freePort();
  const redis = spawn(
    'valgrind',
    [
      '--tool=callgrind',
      `--callgrind-out-file=${out}`,
      'redis-server',
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--dir',
      dir,
    ],
    { stdio: 'ignore' },
  );
  const exited = new Promise((r) => redis.on('exit', r));
  const cli = (...a) => execFileSync('redis-cli', ['-p', String(port), ...a], { stdio: 'pipe' });
  try {
    let up = false;
    for (let i = 0; i < 600 && !up; i++) {
      await new Promise((r) => setTimeout(r, 100));
      try {
        cli('PING');
        up = true;
      } catch {
        /* starting under valgrind */
      }
    }
    if (!up) throw new Error('redis-server under valgrind did not start');
    const store = await RedisStore.open({ url: `redis://127.0.0.1:${port}`, prefix: 'micro:', timeoutMs: 30_000 });
    const drain = async () => {
      if (!store.takeLedger || DRAIN_EVERY <= 0) return;
      drains = true;
      for (;;) {
        const batch = await store.takeLedger(1000);
        await batch.ack();
        if (!batch.more) return;
      }
    };
    for (let i = 0; i < n; i += C) {
      await Promise.all(Array.from({ length: C }, () => oneRequest(store)));
      if ((i + C) % DRAIN_EVERY === 0) await drain();
    }
    await drain();
    await store.close();
    cli('SHUTDOWN', 'NOSAVE');
  } catch (e) {
    redis.kill('SIGKILL');
    throw e;
  } finally {
    await exited;
  }
  const total = Number(/^(?:summary|totals): (\d+)/m.exec(fs.readFileSync(out, 'utf8'))[1]);
  fs.rmSync(dir, { recursive: true, force: true });
  return total;
}

let drains = false;
const a = await count(N);
const b = await count(3 * N);
console.log(
  `${root}: redis-server executes ${((b - a) / (2 * N) / 1000).toFixed(1)} k instructions per request (admission + settlement, ${C} at a time${drains ? `, ledger records drained every ${DRAIN_EVERY}` : ''})`,
);
