/**
 * Several gateway processes (the real CLI) on one real redis-server through the faults an operator
 * meets: Redis killed and back within a minute (what each instance counted alone is carried back),
 * an instance frozen past its lease (its lost slots are fenced, its late settlements corrected),
 * Redis frozen (every request's 503 within one timeout), Redis restarted empty (said as such).
 * docs/operations.md, "Scale out", states each rule.
 */
import t from 'tap';
import { rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import YAML from 'yaml';
import { Redis } from 'ioredis';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { baseConfig, tmpDir } from '../helpers/gateway.js';
import { RedisServer } from '../helpers/redis.js';
import { request, startGatewayProcess, type Answer, type GatewayProcess } from '../helpers/process.js';
import { until as poll } from '../helpers/upstream.js';
import { roomInMinute } from '../helpers/minute.js';

t.setTimeout(900_000);

/** Multi-process waits are longer than the shared default. */
const until = (cond: () => Promise<boolean> | boolean, ms = 30_000) => poll(cond, ms, 50);

const KEY = `sk-${'6b'.repeat(32)}`;
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

type Tap = Parameters<Parameters<typeof t.test>[0]>[0];

interface Setup {
  /** The key's group bills a plan without allowances: RPM and concurrency only, served while Redis is away. */
  plan?: boolean;
  userRpm?: number;
  concurrency?: number;
  queue?: { size: number; max_wait: string };
  timeout?: string;
  url?: string;
}

/** Starts `n` gateway processes sharing one config file (one key prefix per test). */
async function instances(t: Tap, prefix: string, n: number, s: Setup): Promise<GatewayProcess[]> {
  const base = baseConfig();
  const cfg = {
    version: 1,
    server: { host: '127.0.0.1', port: 0, drain_timeout: '5s', admin_token: 'adm' },
    store: {
      kind: 'redis',
      url: s.url ?? redis.url,
      prefix,
      instances_hint: n,
      lease: `${LEASE_MS / 1000}s`,
      timeout: s.timeout ?? '3s',
    },
    providers: { up: { kind: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream' } },
    models: { m: { provider: 'up', price: { input: PRICE, output: PRICE } } },
    groups: { g: { kind: 'chat', passthrough: true, models: ['m'], ...(s.plan ? { billing: 'plan' } : {}) } },
    users: {
      u: {
        balance: 100_000,
        rpm: s.userRpm ?? 0,
        concurrency: s.concurrency ?? 0,
        ...(s.queue ? { queue: s.queue } : {}),
        ...(s.plan ? { subscriptions: [{ group: 'g', expires_at: '2099-01-01T00:00:00Z' }] } : {}),
      },
    },
    keys: [{ key: KEY, name: 'k', user: 'u', group: 'g' }],
    plugins: base.plugins,
    chains: base.chains,
    routes: base.routes,
  };
  const dir = tmpDir('multi-faults-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, YAML.stringify(cfg));
  const gws = await Promise.all(Array.from({ length: n }, () => startGatewayProcess(file)));
  t.teardown(() => Promise.all(gws.map((g) => g.stop())));
  return gws;
}

const chat = (gw: GatewayProcess, content = 'Hello there', extra: Record<string, unknown> = {}) =>
  request(`${gw.url}/v1/chat/completions`, {
    headers: { authorization: `Bearer ${KEY}` },
    body: { model: 'm', max_tokens: 30, messages: [{ role: 'user', content }], ...extra },
  }).catch((e: Error): Answer => ({ status: 0, headers: {}, text: e.message, json: undefined }));

/** A streamed request: `onContent` is called once, when its first content reaches the client. */
function streamed(gw: GatewayProcess, body: unknown, onContent: () => void): Promise<Answer> {
  const u = new URL(`${gw.url}/v1/chat/completions`);
  return new Promise((resolve) => {
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: 'POST',
        agent: false,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      },
      (res) => {
        let text = '';
        let told = false;
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          text += c;
          if (!told && /"content":"[^"]/.test(text)) {
            told = true;
            onContent();
          }
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: undefined }));
        res.on('error', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: undefined }));
      },
    );
    req.on('error', (e) => resolve({ status: 0, headers: {}, text: e.message, json: undefined }));
    req.end(JSON.stringify(body));
  });
}

/** Redis's clock (epoch ms): the shared RPM counters count its minutes. */
async function redisNow(): Promise<number> {
  const [s, us] = await db.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

/** Resolves once every instance has logged a line matching `re` more times than it had when called. */
function nextLog(gws: GatewayProcess[], re: RegExp): () => Promise<void> {
  const before = gws.map((g) => g.logs.filter((l) => re.test(String(l.msg))).length);
  return async () => {
    const ok = await until(() => gws.every((g, i) => g.logs.filter((l) => re.test(String(l.msg))).length > before[i]));
    if (!ok) throw new Error(`not every instance logged ${re}`);
  };
}

t.test('Redis killed and back within the minute: what each instance admitted alone counts against the shared RPM', async (t) => {
  const prefix = 'fr:';
  const [a, b] = await instances(t, prefix, 2, { plan: true, userRpm: 20 });
  await roomInMinute(40_000, redisNow);
  const recovered = nextLog([a, b], /store recovered/);
  await redis.stop('SIGKILL');
  // Alone, each instance admits its share: 20 / 2 = 10.
  const during = await Promise.all(Array.from({ length: 30 }, (_, i) => chat(i % 2 ? a : b)));
  t.equal(during.filter((r) => r.status === 200).length, 20, 'Redis away: 10 + 10 served, at the per-instance share');
  t.ok(
    during.filter((r) => r.status !== 200).every((r) => r.status === 429 && r.json.error.code === 'rate_limit_exceeded'),
    'the rest refused as RPM',
  );
  await redis.restart();
  await recovered();
  t.equal(Number(await db.hget(`${prefix}{u:u}:rpm`, 'c')), 20, "Redis's minute counter holds both instances' counts");
  const after = await Promise.all(Array.from({ length: 30 }, (_, i) => chat(i % 2 ? a : b)));
  t.equal(
    after.filter((r) => r.status === 200).length,
    0,
    'back in the same minute: the 20 served during the outage used up the limit of 20, nothing more is served',
  );
  t.ok(
    after.every((r) => r.status === 429 && Number(r.headers['retry-after']) >= 1),
    'all refused as RPM with Retry-After',
  );
});

t.test('Redis killed and back: slots held alone during the outage count against the shared concurrency', async (t) => {
  const prefix = 'fc:';
  const [a, b] = await instances(t, prefix, 2, { plan: true, concurrency: 4, queue: { size: 0, max_wait: '1s' } });
  const recovered = nextLog([a, b], /store recovered/);
  await redis.stop('SIGKILL');
  mock.resetPeak();
  // Alone, a holds its share of the 4 slots (2) for long requests.
  const slow = [chat(a, '[[mock: delay=20000]] slow one'), chat(a, '[[mock: delay=20000]] slow two')];
  t.ok(await until(() => mock.inFlight === 2), 'a runs its 2 requests while Redis is away');
  await redis.restart();
  await recovered();
  t.equal(await db.zcard(`${prefix}{u:u}:slot:held`), 2, "a's two slots are leases in Redis now");
  // b asks for 4 while a's 2 still run: only 2 fit under the limit of 4.
  const more = await Promise.all(Array.from({ length: 4 }, () => chat(b, '[[mock: delay=1500]] Hello')));
  t.same(
    more.map((r) => r.status).sort(),
    [200, 200, 429, 429],
    "b gets the 2 slots a's outage requests left, the other 2 are refused (no queue)",
  );
  t.equal(mock.peakInFlight, 4, 'never more than 4 upstream calls at once');
  const done = await Promise.all(slow);
  t.same(
    done.map((r) => r.status),
    [200, 200],
    "a's requests finished normally",
  );
  t.ok(await until(async () => (await db.zcard(`${prefix}{u:u}:slot:held`)) === 0, 10_000), 'and their leases were freed in Redis');
});

t.test(
  'an instance frozen past its lease: its slots went to others, so it ends those requests once it runs; its settlements are corrected, never dropped',
  async (t) => {
    const prefix = 'fp:';
    const C = 4;
    const [a, b] = await instances(t, prefix, 2, { concurrency: C, queue: { size: 8, max_wait: '60s' } });
    let contentSeen = 0;
    const stream = (gw: GatewayProcess, words: number) =>
      streamed(
        gw,
        {
          model: 'm',
          max_tokens: 2000,
          stream: true,
          stream_options: { include_usage: true },
          messages: [{ role: 'user', content: `[[mock: chunk_delay=100 words=${words}]] Hello` }],
        },
        () => contentSeen++,
      );
    // b holds every slot with long streams (about 60 s each), each already streaming to its client.
    const onB = Array.from({ length: C }, () => stream(b, 600));
    t.ok(await until(() => contentSeen === C), `b streams ${C} answers`);
    b.proc.kill('SIGSTOP');
    t.teardown(() => b.proc.kill('SIGCONT'));
    // a's reaper takes b for dead once its lease ran out: its admissions are settled by the recovery rule, its slots freed.
    t.ok(
      await until(async () => Number(await db.hget(`${prefix}{k:k}:totals`, 'recoveredRequests')) === C),
      "a's reaper resolved b's admissions",
    );
    const onA = Array.from({ length: C }, () => stream(a, 300));
    t.ok(await until(() => mock.inFlight === 2 * C), `a got the freed slots: ${2 * C} upstream calls in flight while b is frozen`);
    const ended: Answer[] = [];
    for (const p of onB) void p.then((r) => ended.push(r));
    b.proc.kill('SIGCONT');
    t.ok(
      await until(() => ended.length === C),
      "once b runs again, it ends its requests whose slots a holds (b's streams had a minute left)",
    );
    t.ok(await until(() => mock.inFlight === C, 10_000), `${C} upstream calls in flight again (a's): the limit`);
    t.ok(
      ended.length === C &&
        ended.every(
          (r) => r.status === 200 && /event: error\ndata: \{"error":\{"type":"api_error","code":"concurrency_lease_lost"/.test(r.text),
        ),
      "b's clients got the protocol's error event, saying why",
    );
    const answersA = await Promise.all(onA);
    t.ok(
      answersA.every((r) => r.status === 200 && r.text.includes('data: [DONE]')),
      "a's requests completed",
    );

    // Money: a's requests as their usage says; each of b's at the larger of the recovered estimate
    // and what it really used (its settlement added the difference), never less, never twice.
    const usageOf = (r: Answer) => {
      const last = r.text
        .split('\n')
        .filter((l) => l.startsWith('data: {') && l.includes('"usage":{'))
        .pop()!;
      const u = JSON.parse(last.slice(6)).usage;
      return (u.prompt_tokens + u.completion_tokens) * PRICE;
    };
    const chargedA = answersA.reduce((s, r) => s + usageOf(r), 0);
    const late = () => b.logs.filter((l) => /settlement arrived after crash recovery/.test(String(l.msg)));
    t.ok(await until(() => late().length === C), 'b settled each of its requests late, after the recovery, and said so');
    const corrections = late();
    t.ok(
      corrections.length === C &&
        corrections.every(
          (l) => l.charged === Math.max(l.recovered, l.actual) && l.actual > l.recovered && l.added === l.actual - l.recovered,
        ),
      'each had streamed more than the estimate: the difference was added',
    );
    const chargedB = corrections.reduce((s, l) => s + Number(l.charged), 0);
    const totals = async () => {
      const [tot, counters, wallet] = await Promise.all([
        db.hgetall(`${prefix}{k:k}:totals`),
        db.hgetall(`${prefix}{k:k}:counters`),
        db.hgetall(`${prefix}{u:u}:wallet`),
      ]);
      return { requests: Number(tot.requests), actual: Number(tot.actual), used: Number(counters.used ?? 0), spent: Number(wallet.spent) };
    };
    t.ok(await until(async () => (await totals()).requests === 2 * C), 'every request recorded once');
    t.same(
      await totals(),
      { requests: 2 * C, actual: chargedA + chargedB, used: chargedA + chargedB, spent: chargedA + chargedB },
      "usage records, key quota and wallet: a's charges plus, for each of b's, the larger of estimate and usage",
    );
    t.ok(
      b.logs.some((l) => /taken for dead/.test(String(l.msg))),
      'b logged that it had been taken for dead',
    );
    t.ok(await until(async () => (await db.zcard(`${prefix}{u:u}:slot:held`)) === 0, 10_000), 'no slot left held');
  },
);

t.test(
  'an instance frozen past its lease whose slots nobody took: it takes them back and its requests finish, charged the larger of estimate and usage',
  async (t) => {
    const prefix = 'fq:';
    const [a, b] = await instances(t, prefix, 2, { concurrency: 4, queue: { size: 8, max_wait: '60s' } });
    let contentSeen = 0;
    const body = {
      model: 'm',
      max_tokens: 2000,
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: '[[mock: chunk_delay=100 words=200]] Hello' }],
    };
    const onB = [streamed(b, body, () => contentSeen++), streamed(b, body, () => contentSeen++)];
    t.ok(await until(() => contentSeen === 2), 'b streams 2 answers');
    b.proc.kill('SIGSTOP');
    t.teardown(() => b.proc.kill('SIGCONT'));
    t.ok(
      await until(async () => Number(await db.hget(`${prefix}{k:k}:totals`, 'recoveredRequests')) === 2),
      "a's reaper resolved b's admissions, freeing their slots",
    );
    t.equal(await db.zcard(`${prefix}{u:u}:slot:held`), 0, 'nothing held in Redis while b is frozen');
    b.proc.kill('SIGCONT');
    t.ok(
      await until(async () => (await db.zcard(`${prefix}{u:u}:slot:held`)) === 2),
      'b runs again and holds its 2 slots again: the limit counts them',
    );
    t.ok(
      b.logs.some((l) => /lease had expired; taken back/.test(String(l.msg))),
      'b says it took them back',
    );
    const answers = await Promise.all(onB);
    t.ok(
      answers.every((r) => r.status === 200 && r.text.includes('data: [DONE]') && !r.text.includes('event: error')),
      "b's requests finished normally",
    );
    const late = () => b.logs.filter((l) => /settlement arrived after crash recovery/.test(String(l.msg)));
    t.ok(await until(() => late().length === 2), 'both settled after the recovery');
    const charged = late().reduce((sum, l) => sum + Number(l.charged), 0);
    t.ok(
      late().every((l) => l.charged === Math.max(l.recovered, l.actual) && l.actual > l.recovered),
      'each at its real usage, above the estimate',
    );
    const [tot, wallet] = await Promise.all([db.hgetall(`${prefix}{k:k}:totals`), db.hgetall(`${prefix}{u:u}:wallet`)]);
    t.same([Number(tot.requests), Number(tot.actual), Number(wallet.spent)], [2, charged, charged], 'recorded once each, at those charges');
    t.ok(await until(async () => (await db.zcard(`${prefix}{u:u}:slot:held`)) === 0, 10_000), 'and their slots freed at the end');

    // The ledger: each request's crash-recovery record and its late correction (`<id>:late`), drained
    // by whichever instance took them, summing to the counters' charge and counting two requests.
    const records = new Map<string, Record<string, any>>();
    t.ok(
      await until(async () => {
        for (const g of [a, b]) {
          const r = await request(`${g.url}/admin/ledger/records?user=u&limit=100`, { headers: { authorization: 'Bearer adm' } });
          for (const x of JSON.parse(r.text).data ?? []) records.set(x.id, x);
        }
        return records.size === 4;
      }),
      'four records across the instances',
    );
    const list = [...records.values()];
    t.same(list.map((r) => r.usage_source).sort(), ['estimated', 'estimated', 'late', 'late'], 'two recoveries, two late corrections');
    t.ok(
      list.filter((r) => r.usage_source === 'late').every((r) => records.has(r.id.replace(/:late$/, ''))),
      'each correction names its request',
    );
    t.equal(
      list.reduce((sum, r) => sum + r.charged_micros, 0),
      charged,
      'the records sum to what the counters charged',
    );
    const summary = JSON.parse((await request(`${b.url}/admin/ledger/summary?by=user`, { headers: { authorization: 'Bearer adm' } })).text);
    t.ok(
      summary.data.every((row: any) => row.requests <= 2),
      'a correction counts no request',
    );
  },
);

t.test(
  'Redis frozen: each request waits at most one store timeout for its 503, also one queued behind a call Redis never answered',
  async (t) => {
    const prefix = 'fz:';
    const TIMEOUT = 3_000;
    const [a] = await instances(t, prefix, 1, { timeout: `${TIMEOUT / 1000}s` });
    t.equal((await chat(a)).status, 200);
    redis.pause();
    t.teardown(() => redis.resume());
    const timed = async () => {
      const began = Date.now();
      const r = await chat(a);
      return { r, ms: Date.now() - began };
    };
    const first = timed();
    // The second arrives while the first one's call waits in Redis: it waits behind it.
    await new Promise((r) => setTimeout(r, TIMEOUT / 3));
    const second = timed();
    const answers = await Promise.all([first, second]);
    redis.resume();
    t.same(
      answers.map((x) => [x.r.status, x.r.json?.error?.type]),
      [
        [503, 'billing_service_error'],
        [503, 'billing_service_error'],
      ],
      'both refused',
    );
    // Bounded by one timeout each (with room for a loaded machine), where two were spent before:
    // the admission's, then its cancel's or the call it waited behind.
    for (const [i, x] of answers.entries()) t.ok(x.ms < 1.5 * TIMEOUT, `request ${i + 1} answered in ${x.ms} ms (timeout ${TIMEOUT} ms)`);
    t.ok(await until(async () => (await chat(a)).status === 200), 'served again once Redis answers');
  },
);

t.test('Redis restarted empty: each instance says Redis lost its data, not that the other took it for dead', async (t) => {
  const empty = await RedisServer.start(); // no persistence: a restart loses everything
  t.teardown(() => empty.destroy());
  const gws = await instances(t, 'fe:', 2, { url: empty.url });
  for (const g of gws) t.equal((await chat(g)).status, 200);
  const said = nextLog(gws, /Redis lost its data/);
  await empty.restart();
  await said();
  t.ok(await until(async () => (await Promise.all(gws.map((g) => chat(g)))).every((r) => r.status === 200)), 'both serve again');
  for (const g of gws) {
    t.notOk(
      g.logs.some((l) => /taken for dead/.test(String(l.msg))),
      `instance ${g.pid} did not claim it had been taken for dead`,
    );
  }
});
