/**
 * Several gateway processes (the real CLI) on one Redis, one shared mock upstream: the same
 * limits and the same money across processes, a killed instance, Redis stopped mid-load.
 * Every figure is read from Redis itself and from what the clients received.
 */
import t from 'tap';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { Redis } from 'ioredis';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { baseConfig, tmpDir } from '../helpers/gateway.js';
import { RedisServer } from '../helpers/redis.js';
import { request, startGatewayProcess, type Answer, type GatewayProcess } from '../helpers/process.js';
import { until as poll } from '../helpers/upstream.js';
import { roomInMinute } from '../helpers/minute.js';

/** Multi-process waits are longer than the shared default. */
const until = (cond: () => Promise<boolean> | boolean, ms = 30_000) => poll(cond, ms, 50);

const KEY = `sk-${'5a'.repeat(32)}`;
/** USD per million tokens: 1000 micro-USD a token, so charges are easy to recompute. */
const PRICE = 1000;
const LEASE_MS = 2_000;

let redis: RedisServer;
let mock: MockServer;
let db: Redis;
t.before(async () => {
  redis = await RedisServer.start({ persist: true });
  mock = await startMockServer();
  db = new Redis(redis.url, { maxRetriesPerRequest: null });
});
t.teardown(async () => {
  db.disconnect();
  await mock.close();
  await redis.destroy();
});

interface Limits {
  quota?: number;
  rpm?: number;
  concurrency?: number;
  queue?: { size: number; max_wait: string };
  windows?: Record<string, number>;
}

/** Starts `n` gateway processes sharing one config file (one key prefix per test). */
async function instances(t: Tap, prefix: string, n: number, limits: Limits): Promise<GatewayProcess[] & { file: string }> {
  const base = baseConfig();
  const cfg = {
    version: 1,
    server: { host: '127.0.0.1', port: 0, drain_timeout: '5s', admin_token: 'adm' },
    store: { kind: 'redis', url: redis.url, prefix, instances_hint: n, lease: `${LEASE_MS / 1000}s`, timeout: '3s' },
    providers: { up: { kind: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream' } },
    models: { m: { provider: 'up', price: { input: PRICE, output: PRICE } } },
    groups: { g: { kind: 'chat', passthrough: true, models: ['m'], rpm: limits.rpm ?? 0 } },
    users: {
      u: { balance: 100_000, concurrency: limits.concurrency ?? 0, ...(limits.queue ? { queue: limits.queue } : {}) },
      broke: { balance: 0 },
    },
    keys: [
      {
        key: KEY,
        name: 'k',
        user: 'u',
        group: 'g',
        ...(limits.quota ? { quota: limits.quota } : {}),
        ...(limits.windows ? { windows: limits.windows } : {}),
      },
    ],
    plugins: base.plugins,
    chains: base.chains,
    routes: base.routes,
  };
  const dir = tmpDir('multi-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, YAML.stringify(cfg));
  const gws = await Promise.all(Array.from({ length: n }, () => startGatewayProcess(file)));
  t.teardown(() => Promise.all(gws.map((g) => g.stop())));
  return Object.assign(gws, { file });
}

type Tap = Parameters<Parameters<typeof t.test>[0]>[0];

const chat = (gw: GatewayProcess, content = 'Hello there', extra: Record<string, unknown> = {}) =>
  request(`${gw.url}/v1/chat/completions`, {
    headers: { authorization: `Bearer ${KEY}` },
    body: { model: 'm', max_tokens: 30, messages: [{ role: 'user', content }], ...extra },
  }).catch((e: Error): Answer => ({ status: 0, headers: {}, text: e.message, json: undefined }));

/** What a 200 answer was charged: its usage at the model's price (integer micro-USD). */
const charge = (a: Answer) => (a.json.usage.prompt_tokens + a.json.usage.completion_tokens) * PRICE;

/** The records Redis holds for the key and its user. */
async function records(prefix: string) {
  const [counters, totals, wallet] = await Promise.all([
    db.hgetall(`${prefix}{k:k}:counters`),
    db.hgetall(`${prefix}{k:k}:totals`),
    db.hgetall(`${prefix}{u:u}:wallet`),
  ]);
  const n = (v: string | undefined) => Number(v ?? 0);
  return {
    used: n(counters.used),
    reserved: n(counters.res),
    requests: n(totals.requests),
    actual: n(totals.actual),
    recovered: n(totals.recoveredRequests),
    spent: n(wallet.spent),
    walletReserved: n(wallet.res),
  };
}

async function keysOf(prefix: string): Promise<string[]> {
  const out: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await db.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    out.push(...batch);
  } while (cursor !== '0');
  return out;
}

/** Redis's clock (epoch ms): the shared RPM counters count its minutes. */
async function redisNow(): Promise<number> {
  const [s, us] = await db.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

t.test('200 requests racing one key quota across two instances: bounded overspend, charges = records', async (t) => {
  const prefix = 'mq:';
  const [a, b] = await instances(t, prefix, 2, { quota: 2 }); // $2 = 2,000,000 micro-USD
  // 200 requests from 20 clients at once, half on each instance: reservations in flight fill the
  // quota (a transient 429), settlements free it, until the quota itself is spent. The output
  // (200 words, max_tokens 200) dominates, so a request costs close to its reservation.
  const answers: Answer[] = [];
  let sent = 0;
  await Promise.all(
    Array.from({ length: 20 }, async (_, c) => {
      while (sent < 200) {
        const i = sent++;
        answers.push(await chat(c % 2 ? a : b, `[[mock: delay=20 words=200]] Hello number ${i}`, { max_tokens: 200 }));
      }
    }),
  );
  const ok = answers.filter((r) => r.status === 200);
  const refused = answers.filter((r) => r.status !== 200);
  t.equal(answers.length, 200);
  t.ok(
    refused.every((r) => r.status === 429),
    'refusals are 429',
  );
  t.ok(
    refused.some((r) => (r.json.error?.code ?? r.json.code) === 'API_KEY_QUOTA_EXHAUSTED'),
    `the quota ran out (${ok.length} served, ${refused.length} refused)`,
  );
  const charged = ok.reduce((s, r) => s + charge(r), 0);
  const most = Math.max(...ok.map(charge));
  // A request is settled after its answer is sent: the last settlements may still be on their way.
  await until(async () => {
    const r = await records(prefix);
    return r.reserved === 0 && r.walletReserved === 0;
  }, 5_000);
  const rec = await records(prefix);
  t.equal(rec.used, charged, 'the key quota used = the sum of what the served requests cost');
  t.equal(rec.actual, charged, 'the usage records add up to the same');
  t.equal(rec.spent, charged, 'and so does the wallet');
  t.equal(rec.requests, ok.length, 'one usage record per served request');
  t.ok(rec.used < 2_000_000 + most, `overspend ${rec.used - 2_000_000} is less than one request (${most})`);
  t.same([rec.reserved, rec.walletReserved], [0, 0], 'nothing left reserved');
});

t.test("an instance's consecutive requests keep their done markers together, 16 to a hash", async (t) => {
  const prefix = 'mdone:';
  const [a] = await instances(t, prefix, 1, {});
  for (let i = 0; i < 48; i++) t.equal((await chat(a)).status, 200);
  // A request is settled after its answer is sent: the last settlement may still be on its way.
  let hashes: string[] = [];
  let markers = 0;
  await until(async () => {
    hashes = (await keysOf(prefix)).filter((k) => k.includes(':done:'));
    markers = (await Promise.all(hashes.map((k) => db.hlen(k)))).reduce((x, y) => x + y, 0);
    return markers >= 48;
  }, 5_000);
  t.equal(markers, 48, 'one marker per request');
  // 48 consecutive ledger ids span 3 or 4 hashes of 16; ids shared with the responses' x-request-id
  // would have spread them over twice as many.
  t.ok(hashes.length <= 4, `${hashes.length} hashes`);
});

t.test('limit + 50 requests in one minute across two instances admit exactly the limit', async (t) => {
  const prefix = 'mr:';
  const limit = 30;
  const [a, b] = await instances(t, prefix, 2, { rpm: limit });
  await roomInMinute(20_000, redisNow);
  const answers = await Promise.all(Array.from({ length: limit + 50 }, (_, i) => chat(i % 2 ? a : b)));
  const statuses = answers.map((r) => r.status);
  t.equal(statuses.filter((s) => s === 200).length, limit, 'exactly the limit served');
  const refused = answers.filter((r) => r.status === 429);
  t.equal(refused.length, 50, 'the other 50 refused');
  t.ok(
    refused.every((r) => r.json.error.code === 'rate_limit_exceeded' && Number(r.headers['retry-after']) >= 1),
    'as RPM refusals with Retry-After',
  );
});

t.test('concurrency C across two instances: at most C upstream calls, exact queue refusals, no slot leaked', async (t) => {
  const prefix = 'mc:';
  const C = 3;
  const Q = 4;
  const N = 20;
  const [a, b] = await instances(t, prefix, 2, { concurrency: C, queue: { size: Q, max_wait: '60s' } });
  mock.resetPeak();
  const answers = await Promise.all(Array.from({ length: N }, (_, i) => chat(i % 2 ? a : b, '[[mock: delay=1500]] Hello')));
  const full = answers.filter((r) => r.status === 429);
  t.equal(full.length, N - C - Q, 'the queue-full refusals: everyone beyond C running and Q waiting');
  t.ok(
    full.every((r) => /Too many pending requests/.test(r.json.error.message)),
    'answered at once as queue full',
  );
  t.equal(answers.filter((r) => r.status === 200).length, C + Q, 'the running and the queued were served');
  t.equal(mock.peakInFlight, C, `never more than ${C} upstream calls at once (the upstream's own gauge)`);
  // Releases are sent as the responses end; give them a moment to land.
  const empty = async () => (await db.zcard(`${prefix}{u:u}:slot:held`)) + (await db.zcard(`${prefix}{u:u}:slot:queue`)) === 0;
  t.ok(await until(empty, 5_000), 'no slot held, nobody queued afterwards', {
    held: await db.zrange(`${prefix}{u:u}:slot:held`, '0', '-1', 'WITHSCORES'),
    queue: await db.zrange(`${prefix}{u:u}:slot:queue`, '0', '-1'),
  });
});

t.test('kill -9 of one instance mid-load: nothing completed lost or doubled, its slots and reservations resolved', async (t) => {
  const prefix = 'mk:';
  const C = 6;
  const [a, b] = await instances(t, prefix, 2, { concurrency: C, queue: { size: 40, max_wait: '30s' } });
  let running = true;
  const results: { on: 'a' | 'b'; answer: Answer }[] = [];
  const client = async (on: 'a' | 'b', gw: GatewayProcess) => {
    while (running && !(on === 'a' && killed)) {
      const answer = await chat(gw, '[[mock: chunk_delay=40 words=20]] Hello', { stream: true, stream_options: { include_usage: true } });
      results.push({ on, answer });
    }
  };
  let killed = false;
  const clients = [...Array.from({ length: 5 }, () => client('a', a)), ...Array.from({ length: 8 }, () => client('b', b))];
  await until(() => results.filter((r) => r.on === 'a').length >= 5 && mock.inFlight >= C);
  killed = true;
  a.proc.kill('SIGKILL');
  t.equal((await a.exited).signal, 'SIGKILL');
  // Its slots come back within the lease: instance b alone reaches C upstream calls again.
  t.ok(await until(() => mock.inFlight === C, 15_000), `b alone runs ${C} upstream calls again`);
  await new Promise((r) => setTimeout(r, 500));
  running = false;
  await Promise.all(clients);

  const done = (r: { answer: Answer }) => r.answer.status === 200 && r.answer.text.includes('data: [DONE]');
  const completed = results.filter(done);
  const cut = results.filter((r) => !done(r));
  t.ok(
    cut.every((r) => r.on === 'a'),
    'only requests on the killed instance were cut',
  );
  // The reaper of b resolves a's admissions once a's lease ran out.
  const ofA = (k: string) => k.includes(`-${a.pid}-`);
  t.ok(
    await until(async () => (await keysOf(prefix)).every((k) => !/:adm:/.test(k) && !(ofA(k) && k.endsWith(':admissions')))),
    'no admission left open',
  );
  t.ok(
    await until(async () => !(await db.zrange(`${prefix}{i}:live`, '0', '-1')).some((m) => ofA(String(m)))),
    'the dead instance left the registry',
  );
  const rec = await records(prefix);
  t.same([rec.reserved, rec.walletReserved], [0, 0], 'every reservation released');
  t.ok(rec.requests >= completed.length, `no completed request lost (${rec.requests} records, ${completed.length} completed)`);
  t.ok(rec.requests <= completed.length + cut.length, `none doubled (${rec.requests} ≤ ${completed.length} completed + ${cut.length} cut)`);
  t.ok(rec.recovered <= 5, `recovered by the documented rule: at most one per client of the dead instance (${rec.recovered})`);
  t.comment(`kill -9: ${completed.length} completed, ${cut.length} cut, ${rec.requests} records of which ${rec.recovered} recovered`);
  t.equal(rec.used, rec.actual, 'the key quota used = the usage records');
  t.equal(rec.spent, rec.actual, 'the wallet = the usage records');
  // A waiter of the dead instance still queued may have been handed a slot as b released its
  // own; such a grant lives only as long as that waiter's lease would have (slots.lua), so within
  // one lease of the kill nothing is held.
  t.ok(
    await until(async () => (await db.zcard(`${prefix}{u:u}:slot:held`)) === 0, 3 * LEASE_MS),
    "no slot left held once the dead instance's leases ran out",
  );
  await b.stop();
});

t.test(
  'Redis stopped and restarted mid-load: 503 meanwhile, recovery without a restart, counters = records, every volatile key expires',
  async (t) => {
    const prefix = 'ms:';
    const [a, b] = await instances(t, prefix, 2, { concurrency: 8, queue: { size: 8, max_wait: '10s' } });
    type Phase = 'before' | 'down' | 'after';
    const now: { phase: Phase } = { phase: 'before' };
    let running = true;
    const results: { phase: Phase; answer: Answer }[] = [];
    const client = async (gw: GatewayProcess) => {
      while (running) {
        const at = now.phase;
        results.push({ phase: at, answer: await chat(gw, '[[mock: delay=30]] Hello') });
      }
    };
    const clients = [a, a, a, b, b, b].map(client);
    await until(() => results.filter((r) => r.answer.status === 200).length >= 20);
    await redis.stop();
    now.phase = 'down';
    await until(() => results.filter((r) => r.phase === 'down').length >= 30);
    await redis.restart();
    now.phase = 'after';
    t.ok(
      await until(() => results.filter((r) => r.phase === 'after' && r.answer.status === 200).length >= 20),
      'serving again without a restart',
    );
    running = false;
    await Promise.all(clients);

    const down = results.filter((r) => r.phase === 'down' && r.answer.status !== 200);
    t.ok(down.length > 0, 'refused while Redis was away');
    t.ok(
      down.every((r) => r.answer.status === 503 && r.answer.json?.error?.type === 'billing_service_error'),
      'always as 503 billing_service_error, never a crash',
    );
    const served = results.filter((r) => r.answer.status === 200);
    const charged = served.reduce((s, r) => s + charge(r.answer), 0);
    // Settlements queued while Redis was away arrive once it is back.
    t.ok(await until(async () => (await records(prefix)).requests === served.length, 10_000), 'every served request recorded');
    const rec = await records(prefix);
    t.same(
      [rec.requests, rec.actual, rec.used, rec.spent],
      [served.length, charged, charged, charged],
      'counters = usage records = what the served requests cost, none twice',
    );
    t.same([rec.reserved, rec.walletReserved], [0, 0], 'nothing left reserved');
    for (const gw of [a, b]) {
      t.ok(
        gw.logs.some((l) => /store degraded/.test(l.msg)) && gw.logs.some((l) => /store recovered/.test(l.msg)),
        `instance ${gw.pid} logged the outage and the recovery`,
      );
    }
    const durable = /\}:(wallet|caps|plan:.+|counters|totals|days|day:.+|ledger)$/;
    const keys = await keysOf(prefix);
    const ttls = await Promise.all(keys.map(async (k) => [k, await db.pttl(k)] as const));
    const without = ttls.filter(([k, ttl]) => !durable.test(k) && ttl < 0).map(([k]) => k);
    t.same(without, [], 'every volatile key has a TTL');
    t.ok(
      keys.some((k) => /:rpm$|:ring$|:done:|\{i\}:live$/.test(k)),
      'volatile keys were checked',
    );
  },
);

t.test('state across instances: usage seen everywhere at once, key changes and quota resets enforced by every instance', async (t) => {
  const prefix = 'mx:';
  const gws = await instances(t, prefix, 2, { quota: 1, windows: { '5h': 1 } });
  const [a, b] = gws;
  const usage = (gw: GatewayProcess) => request(`${gw.url}/v1/usage`, { headers: { authorization: `Bearer ${KEY}` } });
  // Settlement follows the response: wait for it, as a client reading its usage right after would.
  const recorded = (n: number) => until(async () => (await usage(b)).json.usage.total.requests === n);
  for (let i = 0; i < 3; i++) t.equal((await chat(a)).status, 200);
  await recorded(3);
  const [ua, ub] = await Promise.all([usage(a), usage(b)]);
  t.equal(ub.status, 200);
  t.same(ub.json, ua.json, 'every field of /v1/usage is the same on the instance that served nothing');
  t.same([ub.json.usage.total.requests, ub.json.usage.rpm], [3, 3], 'the last-minute rpm included');
  t.ok(
    ub.json.usage.tpm > 0 && ub.json.rate_limits[0].window_start !== null && ub.json.quota.used > 0,
    'tpm, the window and the quota too',
  );

  // Spend the quota on a, see it refused on b; reset it through a's admin API, b serves again.
  await request(`${a.url}/v1/chat/completions`, {
    headers: { authorization: `Bearer ${KEY}` },
    body: { model: 'm', max_tokens: 1000, messages: [{ role: 'user', content: '[[mock: words=1000]] spend' }] },
  });
  t.ok(await until(async () => (await usage(b)).json.quota.used >= 1), 'spent on a, seen on b once settled');
  const refused = await chat(b);
  t.same([refused.status, refused.json.code ?? refused.json.error?.code], [429, 'API_KEY_QUOTA_EXHAUSTED'], 'b refuses the key');
  const reset = await request(`${a.url}/admin/keys/k/reset-quota`, { method: 'POST', headers: { authorization: 'Bearer adm' } });
  t.equal(reset.status, 200);
  t.equal((await chat(b)).status, 200, 'reset through a, served by b');
  await recorded(5);

  // Config changes reach both instances (each watches the file): moved, disabled, expired.
  const edit = async (change: (key: Record<string, any>) => void) => {
    const cfg = YAML.parse(readFileSync(gws.file, 'utf8'));
    change(cfg.keys[0]);
    const before = [a, b].map((g) => g.logs.filter((l) => l.msg === 'config reloaded').length);
    writeFileSync(gws.file, YAML.stringify(cfg));
    t.ok(
      await until(() => [a, b].every((g, i) => g.logs.filter((l) => l.msg === 'config reloaded').length > before[i])),
      'both instances reloaded',
    );
  };
  const usedBefore = (await usage(a)).json.quota.used;
  await edit((k) => (k.user = 'broke'));
  const moved = await Promise.all([chat(a), chat(b)]);
  t.same(
    moved.map((r) => r.status),
    [403, 403],
    'moved to a user without money: refused by both',
  );
  t.equal((await usage(b)).json.quota.used, usedBefore, 'the key keeps its used quota when it moves');
  await edit((k) => {
    k.user = 'u';
    k.enabled = false;
  });
  t.same(
    (await Promise.all([chat(a), chat(b)])).map((r) => [r.status, r.json.code ?? r.json.error?.code]),
    [
      [401, 'API_KEY_DISABLED'],
      [401, 'API_KEY_DISABLED'],
    ],
    'disabled everywhere',
  );
  await edit((k) => {
    k.enabled = true;
    k.expires_at = '2020-01-01T00:00:00Z';
  });
  t.same(
    (await Promise.all([chat(a), chat(b)])).map((r) => [r.status, r.json.code ?? r.json.error?.code]),
    [
      [403, 'API_KEY_EXPIRED'],
      [403, 'API_KEY_EXPIRED'],
    ],
    'expired everywhere',
  );
});
