/**
 * Completed means recorded (issue 10, item 1) and one process per store folder (item 3), against
 * real gateway processes: `kill -9` in the middle of a load, then a restart on the same folder.
 * flush_interval is an hour, so nothing here relies on the fsync timer: a settlement must reach the
 * OS by the end of its event-loop turn, and requests in flight must be settled by the recovery rule.
 */
import t from 'tap';
import path from 'node:path';
import { baseConfig, KEYS, startGateway, tmpDir, writeConfig } from '../helpers/gateway.js';
import { MemoryStore } from '../../core/store/memory/index.js';
import { killHard, startFailing, startProcess } from './helpers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test('kill -9 mid-load: every completed request is recorded, none twice, those in flight by the recovery rule', async (t) => {
  const dir = tmpDir('gw-crash-');
  t.teardown(() => import('node:fs').then((fs) => fs.rmSync(dir, { recursive: true, force: true })));
  const cfg = baseConfig();
  cfg.store = { kind: 'memory', path: path.join(dir, 'data'), flush_interval: '1h' };
  const file = writeConfig(cfg, dir);
  const gw = await startProcess(file);
  t.teardown(() => killHard(gw));

  let completed = 0;
  let unfinished = 0;
  let stop = false;
  const one = async (i: number): Promise<void> => {
    const stream = i % 4 === 0;
    // Streams are slow (still in flight at the kill); the others are quick.
    const body = {
      model: 'chat-model',
      stream,
      messages: [{ role: 'user', content: `load ${i} ${stream ? '[[mock: words=40 chunk_delay=40]]' : '[[mock: words=5]]'}` }],
    };
    try {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEYS.chat}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`status ${res.status}: ${text}`);
      if (stream ? !text.includes('data: [DONE]') : !JSON.parse(text).choices) throw new Error('incomplete');
      completed++;
    } catch {
      unfinished++;
    }
  };
  const workers = Array.from({ length: 12 }, async (_, w) => {
    for (let i = w; !stop; i += 12) await one(i);
  });
  // Killed mid-load, once a fair number completed (however loaded the machine is).
  for (let waited = 0; completed < 60 && waited < 60_000; waited += 50) await sleep(50);
  await sleep(100);
  await killHard(gw);
  stop = true;
  await Promise.all(workers);
  t.ok(completed >= 60, `load ran (${completed} completed, ${unfinished} cut by the kill)`);

  const store = await MemoryStore.open({ path: path.join(dir, 'data') });
  const records = (await store.keyStats('chat', '2000-01-01', '2100-01-01')).total.requests;
  await store.close();
  t.ok(records >= completed, `no completed request lost: ${records} records for ${completed} completed`);
  t.ok(records <= completed + unfinished, `none counted twice: ${records} records ≤ ${completed} completed + ${unfinished} in flight`);

  // The next start reports the recovered requests in its log.
  const again = await startProcess(file);
  t.teardown(() => killHard(again));
  t.match(again.stderr(), /store loaded/);
});

t.test('a second gateway on the same store folder refuses to start, naming the folder and the PID', async (t) => {
  const dir = tmpDir('gw-lock-');
  t.teardown(() => import('node:fs').then((fs) => fs.rmSync(dir, { recursive: true, force: true })));
  const cfg = baseConfig();
  const storePath = path.join(dir, 'data');
  cfg.store = { kind: 'memory', path: storePath };
  const first = await startGateway(cfg);
  const file = writeConfig(cfg, dir);
  const second = await startFailing(file);
  t.equal(second.code, 1, 'exit status 1');
  t.match(second.stderr, storePath, 'names the folder');
  t.match(second.stderr, `PID ${process.pid}`, 'names the holder');
  await first.close();

  // A gateway killed with -9 leaves its lock behind: the next start takes it over.
  const killed = await startProcess(file);
  await killHard(killed);
  const restarted = await startProcess(file);
  t.teardown(() => killHard(restarted));
  t.match(restarted.stderr(), /stale lock/);
  const r = await fetch(`${restarted.url}/healthz`);
  t.equal(r.status, 200);
});
