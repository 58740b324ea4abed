/** Bodies of failed requests are kept with credentials removed, and deleted after the retention. */
import t from 'tap';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway, tmpDir } from '../helpers/gateway.js';
import { FailedRequestLog } from '../../core/failed-requests.js';
import { ManualClock } from '../../core/clock.js';
import { silentLogger } from '../../core/log.js';
import { sleep } from '../helpers/upstream.js';

async function files(dir: string, n: number): Promise<any[]> {
  for (let i = 0; i < 100; i++) {
    const all = existsSync(dir)
      ? readdirSync(dir).flatMap((d) =>
          readdirSync(path.join(dir, d))
            .filter((f) => f.endsWith('.json'))
            .map((f) => path.join(dir, d, f)),
        )
      : [];
    if (all.length >= n) return all.map((f) => JSON.parse(readFileSync(f, 'utf8')));
    await sleep(20);
  }
  return [];
}

t.test('failed requests are kept, successes are not, credentials never', async (t) => {
  const dir = tmpDir();
  const cfg = baseConfig();
  cfg.failed_requests = { dir, retention: '30d' };
  const g = await startGateway(cfg);
  t.teardown(() => g.close());
  t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() })).status, 200);
  const bad = await call(g.url + '/v1/chat/completions', {
    headers: { ...bearer(KEYS.chat), 'x-api-key': KEYS.messages },
    body: '{"model":"chat-model", broken',
    method: 'POST',
  });
  t.equal(bad.status, 400);
  const up = await call(g.url + `/v1/chat/completions?api_key=${KEYS.responses}`, { headers: bearer(KEYS.chat), json: chatBody() });
  t.equal(up.status, 400);
  const failedUp = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: chatBody({ messages: [{ role: 'user', content: 'x [[mock: status=500]]' }] }),
  });
  t.equal(failedUp.status, 502);
  const kept = await files(dir, 3);
  t.equal(kept.length, 3, 'three failures kept, the success not');
  const text = JSON.stringify(kept);
  for (const k of [KEYS.chat, KEYS.messages, KEYS.responses]) t.notOk(text.includes(k), 'no key anywhere in the records');
  const json = kept.find((r) => r.status === 400 && r.body);
  t.equal(json.body, '{"model":"chat-model", broken', 'the body as received');
  t.equal(json.error.type, 'invalid_request_error');
  t.equal(json.headers.authorization, '[removed]', 'credential headers keep their name, not their value');
  const q = kept.find((r) => r.error?.code === 'api_key_in_query_deprecated');
  t.match(q.path, /api_key=%5Bremoved%5D/);
  const f502 = kept.find((r) => r.status === 502);
  t.equal(f502.model, 'chat-model');
  t.equal(f502.key, 'chat');
});

t.test('day folders past the retention are deleted', async (t) => {
  const dir = tmpDir();
  for (const d of ['2026-01-01', '2026-02-09', '2026-02-11', 'not-a-day']) {
    mkdirSync(path.join(dir, d));
    writeFileSync(path.join(dir, d, 'x.json'), '{}');
  }
  const clock = new ManualClock(Date.UTC(2026, 2, 12, 12)); // 2026-03-12
  const log = new FailedRequestLog(
    dir,
    { retentionMs: 30 * 86_400_000, maxBytes: 1 << 30, secrets: () => ({ plain: [], digests: new Set() }) },
    clock,
    silentLogger,
  );
  await log.cleanup();
  log.close();
  t.same(readdirSync(dir).sort(), ['2026-02-11', 'not-a-day'], 'older than 30 days gone, the rest kept');
});

t.test('a record is never seen half-written under its final name', async (t) => {
  const dir = tmpDir();
  const clock = new ManualClock(Date.UTC(2026, 2, 12, 12));
  const log = new FailedRequestLog(
    dir,
    { retentionMs: 30 * 86_400_000, maxBytes: 1 << 30, secrets: () => ({ plain: [], digests: new Set() }) },
    clock,
    silentLogger,
  );
  t.teardown(() => {
    log.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const N = 400;
  const body = 'x'.repeat(256 * 1024); // large enough that a write is not one instant
  for (let i = 0; i < N; i++) {
    log.record({ requestId: `req_${i}`, method: 'POST', url: '/v1/chat/completions', headers: {}, status: 400, key: 'k', body });
  }
  // Read every record as soon as it appears under its .json name, until all are there.
  const day = path.join(dir, '2026-03-12');
  let torn = 0;
  const seen = new Set<string>();
  for (let round = 0; round < 5000 && seen.size < N; round++) {
    const names = existsSync(day) ? readdirSync(day).filter((f) => f.endsWith('.json')) : [];
    for (const f of names) {
      if (seen.has(f)) continue;
      try {
        JSON.parse(readFileSync(path.join(day, f), 'utf8'));
        seen.add(f);
      } catch {
        torn++;
        seen.add(f);
      }
    }
    await new Promise((r) => setImmediate(r));
  }
  t.equal(seen.size, N, 'every record written');
  t.equal(torn, 0, 'none read half-written');
});
