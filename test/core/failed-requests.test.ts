/** Bodies of failed requests are kept with credentials removed, and deleted after the retention. */
import t from 'tap';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway, tmpDir } from '../helpers/gateway.js';
import { FailedRequestLog, MAX_PENDING } from '../../core/failed-requests.js';
import { ManualClock } from '../../core/clock.js';
import { silentLogger } from '../../core/log.js';
import { sleep } from '../helpers/upstream.js';
import { parseProm, total } from '../helpers/prom.js';

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

t.test('a gateway that stops keeps the failures of its last requests: close waits for the records it accepted', async (t) => {
  // The log alone: records accepted, then closed at once.
  const dir = tmpDir();
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const log = new FailedRequestLog(
    dir,
    { retentionMs: 30 * 86_400_000, maxBytes: 64 * 1024 * 1024, secrets: () => ({ plain: [], digests: new Set() }) },
    new ManualClock(Date.UTC(2026, 2, 12, 12)),
    silentLogger,
  );
  for (let i = 0; i < 20; i++)
    log.record({ requestId: `req_${i}`, method: 'POST', url: '/v1/chat/completions', headers: {}, status: 502, key: 'k', body: '{}' });
  await log.close();
  t.equal(folder(dir).records.length, 20, 'every record is in the folder once close resolves');

  // Through a gateway: failing requests answered, then the gateway closed.
  const gdir = tmpDir();
  t.teardown(() => rmSync(gdir, { recursive: true, force: true }));
  const cfg = baseConfig();
  cfg.failed_requests = { dir: gdir };
  const g = await startGateway(cfg);
  const answers = await Promise.all(
    Array.from({ length: 8 }, (_, i) =>
      call(g.url + '/v1/chat/completions', {
        headers: bearer(KEYS.chat),
        json: chatBody({ messages: [{ role: 'user', content: `fail ${i} [[mock: status=500]]` }] }),
      }),
    ),
  );
  t.same(
    answers.map((a) => a.status),
    Array(8).fill(502),
  );
  await g.close();
  t.equal(folder(gdir).records.length, 8, 'the eight failures are in the folder when the gateway has closed');
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
  const N = 200; // 50 MiB in one burst: within what may wait to be written (MAX_PENDING_BYTES)
  const body = 'x'.repeat(256 * 1024); // large enough that a write is not one instant
  for (let i = 0; i < N; i++) {
    log.record({ requestId: `req_${i}`, method: 'POST', url: '/v1/chat/completions', headers: {}, status: 400, key: 'k', body });
  }
  // Read every record as soon as it appears under its .json name, until all are there.
  const day = path.join(dir, '2026-03-12');
  let torn = 0;
  const seen = new Set<string>();
  // Records are written one at a time: wait for all of them, with a bound generous on a loaded machine.
  const deadline = Date.now() + 60_000;
  while (seen.size < N && Date.now() < deadline) {
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

t.test('a burst beyond what may wait: the first MAX_PENDING records are kept, the rest dropped before any scrubbing', async (t) => {
  const dir = tmpDir();
  const clock = new ManualClock(Date.UTC(2026, 2, 12, 12));
  let scrubbed = 0;
  const dropped: string[] = [];
  const log = new FailedRequestLog(
    dir,
    {
      retentionMs: 30 * 86_400_000,
      maxBytes: 1 << 30,
      // Read once per record scrubbed (a reload applies to the next record).
      secrets: () => (scrubbed++, { plain: [], digests: new Set() }),
      dropped: (reason) => dropped.push(reason),
    },
    clock,
    silentLogger,
  );
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const extra = 100;
  for (let i = 0; i < MAX_PENDING + extra; i++) {
    log.record({ requestId: `req_${i}`, method: 'POST', url: '/v1/chat/completions', headers: {}, status: 499, key: 'k', body: '{}' });
  }
  t.equal(scrubbed, MAX_PENDING, 'only the records that may wait were scrubbed');
  t.same(dropped, Array<string>(extra).fill('backlog'), 'the rest counted as dropped (backlog)');
  await log.close(); // resolves once every record it accepted is written
  const kept = folder(dir).records;
  t.equal(kept.length, MAX_PENDING);
  t.same(
    kept.map((r) => Number(String(r.request_id).slice(4))).sort((a, b) => a - b),
    Array.from({ length: MAX_PENDING }, (_, i) => i),
    'the kept records are the first ones',
  );
});

/** Every record file under `dir` (and any being written), with its size. */
function folder(dir: string): { files: number; bytes: number; records: any[] } {
  let files = 0;
  let bytes = 0;
  const records: any[] = [];
  if (!existsSync(dir)) return { files, bytes, records };
  for (const d of readdirSync(dir)) {
    for (const f of readdirSync(path.join(dir, d))) {
      const file = path.join(dir, d, f);
      let size: number;
      try {
        size = statSync(file).size;
      } catch {
        continue; // deleted meanwhile
      }
      files++;
      bytes += size;
      if (f.endsWith('.json')) {
        try {
          records.push(JSON.parse(readFileSync(file, 'utf8')));
        } catch {
          /* deleted meanwhile */
        }
      }
    }
  }
  return { files, bytes, records };
}

t.test("the gateway's own refusals are sampled without their body; every record not kept is counted", async (t) => {
  const dir = tmpDir();
  const cfg = baseConfig();
  cfg.failed_requests = { dir };
  cfg.metrics = { path: '/metrics' };
  cfg.groups.chat.rpm = 1;
  // A fixed minute: every refusal below falls in it.
  const g = await startGateway(cfg, { clock: new ManualClock(Date.UTC(2026, 0, 5, 10, 0, 20)) });
  t.teardown(() => g.close());
  const body = chatBody({ messages: [{ role: 'user', content: 'the prompt text' }] });
  t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: body })).status, 200);
  for (let i = 0; i < 40; i++) {
    const r = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: body });
    t.equal(r.status, 429, `request ${i + 2}: the group's RPM`);
  }
  // A client error keeps its body: it explains the error.
  t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), body: '{"model":', method: 'POST' })).status, 400);
  const kept = await files(dir, 11);
  await sleep(300); // nothing more arrives
  const all = folder(dir).records;
  t.equal(all.length, 11, '10 RPM refusals and the 400 kept, of 41 failures');
  const refusals = all.filter((r) => r.status === 429);
  t.equal(refusals.length, 10, 'the refusals: 10 a minute');
  t.ok(
    refusals.every((r) => r.body === undefined && r.error.code === 'rate_limit_exceeded' && r.key === 'chat'),
    'each with its error and key, without the body',
  );
  t.equal(kept.find((r) => r.status === 400)?.body, '{"model":', 'the 400 with its body');
  const metrics = parseProm(await (await fetch(g.url + '/metrics')).text());
  t.equal(total(metrics, 'gateway_failed_requests_dropped_total', { reason: 'sampled' }), 30, '30 refusals counted as not kept');
});

t.test('the folder never holds more than max_files files nor max_size bytes, writes in progress included', async (t) => {
  const dir = tmpDir();
  const dropped: string[] = [];
  const maxBytes = 600 * 1024;
  const log = new FailedRequestLog(
    dir,
    {
      retentionMs: 30 * 86_400_000,
      maxBytes,
      maxFiles: 5,
      secrets: () => ({ plain: [], digests: new Set() }),
      dropped: (r) => dropped.push(r),
    },
    new ManualClock(Date.UTC(2026, 2, 12, 12)),
    silentLogger,
  );
  t.teardown(() => {
    log.close();
    rmSync(dir, { recursive: true, force: true });
  });
  // 40 records of about 100 KiB, then 40 small ones, faster than the disk takes them.
  const big = 'x'.repeat(100 * 1024);
  let peak = { files: 0, bytes: 0 };
  for (let i = 0; i < 80; i++) {
    log.record({
      requestId: `req_${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      headers: {},
      status: 502,
      key: 'k',
      body: i < 40 ? big : 'small',
    });
    if (i % 8 === 7) {
      // Look at the folder while writes and deletions are in flight.
      for (let j = 0; j < 20; j++) {
        const now = folder(dir);
        peak = { files: Math.max(peak.files, now.files), bytes: Math.max(peak.bytes, now.bytes) };
        await new Promise((r) => setImmediate(r));
      }
    }
  }
  const newest = ['req_75', 'req_76', 'req_77', 'req_78', 'req_79'];
  const ids = () =>
    folder(dir)
      .records.map((r) => r.request_id)
      .sort();
  for (let round = 0; round < 1000 && JSON.stringify(ids()) !== JSON.stringify(newest); round++) {
    const now = folder(dir);
    peak = { files: Math.max(peak.files, now.files), bytes: Math.max(peak.bytes, now.bytes) };
    await sleep(10);
  }
  const end = folder(dir);
  t.ok(peak.files <= 5, `at most 5 files at any time (peak ${peak.files})`);
  t.ok(peak.bytes <= maxBytes, `at most max_size bytes at any time (peak ${peak.bytes})`);
  t.equal(end.files, 5, 'five files kept');
  t.same(end.records.map((r) => r.request_id).sort(), newest, 'the newest');
  t.equal(dropped.length + end.files, 80, 'every record not kept was counted');
  t.ok(dropped.includes('evicted'), 'older records deleted to make room are counted as evicted');
});

t.test('failed_requests.max_files and max_size from the config bound the folder', async (t) => {
  const dir = tmpDir();
  const cfg = baseConfig();
  cfg.failed_requests = { dir, max_files: 3, max_size: '1MiB' };
  cfg.metrics = { path: '/metrics' };
  const g = await startGateway(cfg);
  t.teardown(() => g.close());
  for (let i = 0; i < 8; i++) {
    t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), body: `{"n":${i},`, method: 'POST' })).status, 400);
  }
  const metrics = async () => parseProm(await (await fetch(g.url + '/metrics')).text());
  const settled = async () =>
    total(await metrics(), 'gateway_failed_requests_dropped_total', { reason: 'evicted' }) === 5 && folder(dir).records.length === 3;
  for (let i = 0; i < 1000 && !(await settled()); i++) await sleep(20);
  t.equal(
    total(await metrics(), 'gateway_failed_requests_dropped_total', { reason: 'evicted' }),
    5,
    'five older records deleted to make room',
  );
  const left = folder(dir).records.map((r) => r.body);
  t.same(left.sort(), ['{"n":5,', '{"n":6,', '{"n":7,'], 'the newest three kept');
});
