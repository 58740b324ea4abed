/**
 * The ledger on the Redis store: every settlement that applies (the reaper's crash recovery
 * included) and every credit adds its record to a Redis stream in the script that moves the money;
 * each instance drains records into its own day files. Checked here against a real redis-server:
 * through a gateway and its admin API (each answer checked against /admin/openapi.json), with
 * gateways as processes where kill -9 matters, and at the store and drainer level for what a
 * process test cannot aim at (a death between writing a batch and acknowledging it).
 */
import t from 'tap';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { RedisStore } from '../../core/store/redis/index.js';
import { LedgerFiles } from '../../core/ledger/files.js';
import { LedgerDrainer } from '../../core/ledger/drain.js';
import { silentLogger } from '../../core/log.js';
import type { LedgerBatch, Settlement } from '../../core/store/types.js';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway, tmpDir, type TapTest } from '../helpers/gateway.js';
import { AdminClient } from '../helpers/admin.js';
import { RedisServer } from '../helpers/redis.js';
import { request, startGatewayProcess, type Answer, type GatewayProcess } from '../helpers/process.js';
import { until as poll } from '../helpers/upstream.js';

/** Multi-process waits are longer than the shared default: they only matter when something is wrong. */
const until = (cond: () => Promise<boolean> | boolean, ms = 60_000) => poll(cond, ms, 100);

const TOKEN = 'ledger-admin-token-123';
const KEY = `sk-${'6b'.repeat(32)}`;
const LEASE_MS = 2_000;

let redis: RedisServer;
let mock: MockServer;
let db: Redis;
t.before(async () => {
  redis = await RedisServer.start({ persist: true });
  // Every request kept: `holdInFlight` finds its requests among them.
  mock = await startMockServer({ keepRequests: 100_000 });
  db = new Redis(redis.url, { maxRetriesPerRequest: null });
});
t.teardown(async () => {
  db.disconnect();
  await mock.close();
  await redis.destroy();
});

const today = () => new Date().toISOString().slice(0, 10);

/** Every record line of a ledger folder, parsed. */
function lines(dir: string): Record<string, any>[] {
  if (!existsSync(dir)) return [];
  const out: Record<string, any>[] = [];
  for (const f of readdirSync(dir).sort()) {
    for (const line of readFileSync(path.join(dir, f), 'utf8').split('\n')) if (line) out.push(JSON.parse(line));
  }
  return out;
}

/** The ids of request records that appear more than once in `records`. */
function twice(records: Record<string, any>[]): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  for (const r of records) {
    if (seen.has(r.id)) out.push(r.id);
    seen.add(r.id);
  }
  return out;
}

/** The key's counters in Redis (what reconciliation compares with). */
async function totals(prefix: string) {
  const h = await db.hgetall(`${prefix}{k:k}:totals`);
  return { requests: Number(h.requests ?? 0), actual: Number(h.actual ?? 0), recovered: Number(h.recoveredRequests ?? 0) };
}

const sum = (records: Record<string, any>[]) => records.reduce((a, r) => a + r.charged_micros, 0);

// ---- through a gateway ---------------------------------------------------------------------------

t.test('a gateway on Redis: one record per billed request and per credit, queried, exported and reconciled', async (t) => {
  const dir = tmpDir('ledger-redis-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const cfg = baseConfig();
  cfg.server.admin_token = TOKEN;
  cfg.store = { kind: 'redis', url: redis.url, prefix: 'lg:' };
  cfg.ledger = { dir: path.join(dir, 'ledger') };
  cfg.models['fail-model'] = { provider: 'mock', upstream: 'fail-model#status=503', price: { input: 1, output: 2 } };
  cfg.groups.chat.models.push('fail-model');
  const g = await startGateway(cfg);
  t.teardown(() => g.close());
  const admin = await new AdminClient(g.url, TOKEN).init();

  const openai = new OpenAI({ apiKey: KEYS.chat, baseURL: `${g.url}/v1`, maxRetries: 0 });
  const anthropic = new Anthropic({ apiKey: KEYS.messages, baseURL: g.url, maxRetries: 0 });
  await openai.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'one' }] });
  const s = await openai.chat.completions.create({ model: 'chat-model', stream: true, messages: [{ role: 'user', content: 'two' }] });
  for await (const _ of s) void _;
  await anthropic.messages.create({ model: 'claude-model', max_tokens: 64, messages: [{ role: 'user', content: 'three' }] });
  const conv = new OpenAI({ apiKey: KEYS.messages, baseURL: `${g.url}/v1`, maxRetries: 0 });
  await conv.chat.completions.create({ model: 'claude-model', messages: [{ role: 'user', content: 'converted' }] });
  const fb = await call(`${g.url}/v1/chat/completions`, {
    headers: bearer(KEYS.custom),
    json: { model: 'fail-model', models: ['chat-model'], messages: [{ role: 'user', content: 'fall back' }] },
  });
  t.equal(fb.status, 200);
  t.equal((await call(`${g.url}/v1/chat/completions`, { headers: bearer(KEYS.chat), json: chatBody({ model: 'nope' }) })).status, 503);
  t.equal(
    (await admin.post('/admin/users/alice/topups', { amount_usd: 2, reference: 'inv-1' }, { 'idempotency-key': 'lg-topup' })).status,
    201,
  );
  const again = await admin.post('/admin/users/alice/topups', { amount_usd: 2, reference: 'inv-1' }, { 'idempotency-key': 'lg-topup' });
  t.equal(again.headers.get('idempotent-replayed'), 'true', 'the same top-up again: its first answer, and no second record');

  // The queries catch the drainer up first: right after the requests, every record is there.
  const page = await admin.get(`/admin/ledger/records?from=${today()}&to=${today()}&limit=100`);
  const recs = page.json.data as any[];
  const requests = recs.filter((r) => r.type === 'request');
  t.equal(requests.length, 5, 'one record per billed request');
  t.equal(new Set(requests.map((r) => r.id)).size, 5, 'ids unique');
  t.match(
    requests.find((r) => r.protocol_in === 'anthropic-messages'),
    { model: 'claude-model', provider: 'mock', usage_source: 'reported', stream: false, status: 200, user: 'alice', key: 'messages' },
  );
  t.match(
    requests.find((r) => r.stream === true),
    { protocol_in: 'openai-chat', model: 'chat-model' },
  );
  t.match(
    requests.find((r) => r.key === 'custom'),
    { model_requested: 'fail-model', model: 'chat-model', attempts: 2 },
    'the fallback',
  );
  t.match(
    requests.find((r) => r.key === 'messages' && r.protocol_in === 'openai-chat'),
    { protocol_out: 'anthropic-messages' },
    'converted',
  );
  const topups = recs.filter((r) => r.type === 'topup');
  t.equal(topups.length, 1, 'one record for the top-up');
  t.match(topups[0], { user: 'alice', charged_micros: 2_000_000, reference: 'inv-1', actor: 'admin', id: /^credit:\d+-\d+$/ });

  const wallet = (await admin.get('/admin/users/alice')).json.wallet;
  const plan = requests.filter((r) => r.billing === 'plan');
  t.equal(sum(requests) - sum(plan), Math.round(wallet.spent_usd * 1e6), "the records' charges = the wallet's spend");
  const rec = await admin.get('/admin/ledger/reconcile');
  t.same(rec.json.differences, [], 'reconciliation: no difference');
  t.match(rec.json, { ok: true, source: 'files', scope: 'instance', note: /only instance/ }, 'it says what its files hold');
  const jsonl = await call(`${g.url}/admin/ledger/export`, { headers: bearer(TOKEN) });
  t.same(
    jsonl.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).id),
    recs.map((r) => r.id),
    'the export holds the records',
  );
  const onDisk = lines(path.join(dir, 'ledger'));
  t.same(
    onDisk.map((r) => r.id),
    recs.map((r) => r.id),
    'in the day files, in the order drained',
  );
  t.ok(
    onDisk.every((r) => r.seq === 0),
    'with seq 0 (the ids identify them)',
  );
  // Acknowledged once the lines are fsynced: a moment after they can be read.
  t.ok(await until(async () => (await db.xlen('lg:{q}:ledger')) === 0, 10_000), 'nothing left waiting in Redis');
});

// ---- gateways as processes -------------------------------------------------------------------------

/** A config file for one instance: its own folder, ledger folder `<folder>/ledger`. */
function instanceConfig(t: TapTest, prefix: string): { file: string; ledger: string } {
  const base = baseConfig();
  const dir = tmpDir('ledger-proc-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const cfg = {
    version: 1,
    server: { host: '127.0.0.1', port: 0, drain_timeout: '5s', admin_token: TOKEN },
    store: { kind: 'redis', url: redis.url, prefix, lease: `${LEASE_MS / 1000}s`, timeout: '3s' },
    ledger: { dir: 'ledger' },
    providers: { up: { kind: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream' } },
    models: { m: { provider: 'up', price: { input: 1000, output: 1000 } } },
    groups: { g: { kind: 'chat', passthrough: true, models: ['m'] } },
    users: { u: { balance: 100_000 } },
    keys: [{ key: KEY, name: 'k', user: 'u', group: 'g' }],
    plugins: base.plugins,
    chains: base.chains,
    routes: base.routes,
  };
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, YAML.stringify(cfg));
  return { file, ledger: path.join(dir, 'ledger') };
}

const chat = (gw: GatewayProcess, content = '[[mock: delay=200]] Hello') =>
  request(`${gw.url}/v1/chat/completions`, {
    headers: { authorization: `Bearer ${KEY}` },
    body: { model: 'm', max_tokens: 20, messages: [{ role: 'user', content }] },
  }).catch((e: Error): Answer => ({ status: 0, headers: {}, text: e.message, json: undefined }));

/**
 * Sends requests to `gw` that the upstream holds for a minute, and returns once the upstream has
 * `n` of them still open: admitted, so in flight in the store's view. A kill at a moment chosen by
 * the answers of a load can find nothing admitted (between one request's settlement and the next
 * one's admission, or while the instance refuses with Redis marked away), and then crash recovery
 * has nothing to recover: a CI run of cdc1380 failed so. Any held request answered before the
 * kill (refused, or ended after reaching the upstream) is replaced by a new one.
 */
async function holdInFlight(gw: GatewayProcess, n: number): Promise<void> {
  let sent = 0;
  let waiting = true;
  const open = new Set<string>();
  const answered: string[] = [];
  const reached = (m: string) => mock.requests.some((r) => r.body.includes(m));
  const send = () => {
    const m = `held ${gw.pid}-${sent++}`;
    open.add(m);
    void chat(gw, `[[mock: delay=60000]] ${m}`).then((a) => {
      open.delete(m);
      if (!waiting) return;
      answered.push(`${a.status} ${a.text.slice(0, 120)}`);
      send();
    });
  };
  for (let i = 0; i < n; i++) send();
  const held = await until(() => [...open].filter(reached).length >= n, 30_000);
  waiting = false;
  if (!held)
    throw new Error(`the upstream did not get ${n} held requests of instance ${gw.pid}; answered meanwhile: ${answered.join(' | ')}`);
}

/** Clients sending requests one after another until `stop()`; the answers so far in `answers`. */
function load(gws: GatewayProcess[], clients: number) {
  let running = true;
  const answers: Answer[] = [];
  const done = Promise.all(
    Array.from({ length: clients }, async (_, i) => {
      const gw = gws[i % gws.length];
      while (running && gw.proc.exitCode === null && gw.proc.signalCode === null) answers.push(await chat(gw));
    }),
  );
  return {
    answers,
    ok: () => answers.filter((a) => a.status === 200).length,
    stop: async () => {
      running = false;
      await done;
    },
  };
}

t.test('kill -9 mid-load, then a restart: every completed request has one record, and the ledger equals the counters', async (t) => {
  const prefix = 'lk:';
  const inst = instanceConfig(t, prefix);
  const gw = await startGatewayProcess(inst.file);
  const l = load([gw], 8);
  t.ok(await until(() => l.ok() >= 60), 'served under load');
  await holdInFlight(gw, 3);
  gw.proc.kill('SIGKILL');
  await gw.exited;
  await l.stop();
  const completed = l.ok();

  const again = await startGatewayProcess(inst.file);
  t.teardown(() => again.stop());
  const admin = await new AdminClient(again.url, TOKEN).init();
  // The restarted instance's reaper settles what was in flight (once the dead one's lease ran
  // out); its drainer takes what the dead one left, read or not.
  t.ok(
    await until(async () => {
      const c = await totals(prefix);
      const recs = lines(inst.ledger).filter((r) => r.type === 'request');
      return c.recovered >= 3 && recs.length >= c.requests && (await admin.get('/admin/ledger/reconcile')).json.ok === true;
    }),
    'the ledger caught up with the counters',
  );
  const c = await totals(prefix);
  const recs = lines(inst.ledger).filter((r) => r.type === 'request');
  t.same(twice(recs), [], `no record twice in the files (${recs.length} records)`);
  t.equal(recs.length, c.requests, 'one record per request the counters hold');
  t.equal(sum(recs), c.actual, 'and the same money');
  t.ok(recs.length >= completed, `every completed request has its record (${completed} completed)`);
  const recovered = recs.filter((r) => r.estimate_reason === 'crash_recovery');
  t.equal(recovered.length, c.recovered, `the requests in flight at the kill: recovered, each with its record (${c.recovered})`);
  t.ok(
    recovered.every((r) => r.usage_source === 'estimated' && r.output_tokens === 0),
    'estimated by the recovery rule',
  );
  t.same((await admin.get('/admin/ledger/reconcile')).json.differences, [], 'reconciliation: no difference');
});

t.test('two instances, one killed with requests in flight: the other resolves them and drains every record', async (t) => {
  const prefix = 'l2k:';
  const [ia, ib] = [instanceConfig(t, prefix), instanceConfig(t, prefix)];
  const [a, b] = await Promise.all([startGatewayProcess(ia.file), startGatewayProcess(ib.file)]);
  t.teardown(() => b.stop());
  const l = load([a, b], 8);
  t.ok(await until(() => l.answers.filter((x) => x.status === 200).length >= 60), 'served under load');
  await holdInFlight(a, 3);
  a.proc.kill('SIGKILL');
  await a.exited;
  t.ok(await until(() => l.answers.length >= 100), 'b still serving');
  await l.stop();

  // b's reaper recovers a's admissions once a's lease ran out; b's drainer takes what a left.
  const all = () => [...lines(ia.ledger), ...lines(ib.ledger)].filter((r) => r.type === 'request');
  t.ok(
    await until(async () => {
      const c = await totals(prefix);
      return c.recovered >= 3 && new Set(all().map((r) => r.id)).size === c.requests;
    }),
    "every request the counters hold has a record in one of the instances' files",
  );
  const c = await totals(prefix);
  const ofB = lines(ib.ledger).filter((r) => r.type === 'request');
  t.same(twice(ofB), [], 'no record twice in the files of b');
  const ids = new Set(all().map((r) => r.id));
  const once = [...ids].map((id) => all().find((r) => r.id === id)!);
  t.equal(sum(once), c.actual, 'counted once each, the records hold the money the counters hold');
  const recovered = ofB.filter((r) => r.estimate_reason === 'crash_recovery');
  t.equal(recovered.length, c.recovered, `the recovered requests' records, drained by b (${c.recovered})`);
  t.ok(
    lines(ia.ledger).every((r) => r.estimate_reason !== 'crash_recovery'),
    'none of them in the files of a',
  );
  // Acknowledged once the lines are fsynced: a moment after they can be read.
  t.ok(await until(async () => (await db.xlen(`${prefix}{q}:ledger`)) === 0, 10_000), 'nothing left waiting in Redis');
});

t.test('two instances on one Redis: every record drained exactly once across their files', async (t) => {
  const prefix = 'l2:';
  const [ia, ib] = [instanceConfig(t, prefix), instanceConfig(t, prefix)];
  const [a, b] = await Promise.all([startGatewayProcess(ia.file), startGatewayProcess(ib.file)]);
  t.teardown(() => Promise.all([a.stop(), b.stop()]));
  const l = load([a, b], 8);
  t.ok(await until(() => l.ok() >= 150), 'served under load');
  await l.stop();
  t.ok(await until(async () => (await totals(prefix)).requests === l.ok()), 'the counters hold every served request');
  const c = await totals(prefix);
  const of = (dir: string) => lines(dir).filter((r) => r.type === 'request');
  t.ok(await until(() => of(ia.ledger).length + of(ib.ledger).length >= c.requests), 'drained');
  const [ra, rb] = [of(ia.ledger), of(ib.ledger)];
  t.equal(ra.length + rb.length, c.requests, `one record per request across the two (${ra.length} + ${rb.length})`);
  t.same(twice([...ra, ...rb]), [], 'none in both, none twice');
  t.equal(sum(ra) + sum(rb), c.actual, 'the money: the counters');
  for (const gw of [a, b]) {
    const admin = await new AdminClient(gw.url, TOKEN).init();
    t.match(
      (await admin.get('/admin/ledger/reconcile')).json,
      { scope: 'instance', note: /PostgreSQL/ },
      `instance ${gw.pid}: reconciliation says its files hold what it drained`,
    );
  }
});

t.test('Redis stopped mid-load and restarted: the records of settlements queued meanwhile arrive once', async (t) => {
  const prefix = 'ls:';
  const inst = instanceConfig(t, prefix);
  const gw = await startGatewayProcess(inst.file);
  t.teardown(() => gw.stop());
  const l = load([gw], 8);
  t.ok(await until(() => l.ok() >= 30), 'served before the outage');
  await redis.stop();
  const atStop = l.ok();
  // Requests admitted before the stop end meanwhile: their settlements (and records) wait, and
  // the drainer says it waits too.
  t.ok(await until(() => l.answers.filter((a) => a.status === 503).length >= 5), 'refused while Redis is away');
  await gw.waitForLog((x) => /records wait in the store/.test(x.msg));
  t.ok(l.ok() > atStop, `requests admitted before the stop were served meanwhile (${l.ok() - atStop}): their settlements wait`);
  await redis.restart();
  await gw.waitForLog((x) => /draining again/.test(x.msg));
  const before = l.ok();
  t.ok(await until(() => l.ok() >= before + 30), 'serving again');
  await l.stop();
  const served = l.ok();
  t.ok(await until(async () => (await totals(prefix)).requests === served), 'every served request settled');
  const admin = await new AdminClient(gw.url, TOKEN).init();
  t.ok(await until(async () => (await admin.get('/admin/ledger/reconcile')).json.ok === true), 'the ledger caught up');
  const recs = lines(inst.ledger).filter((r) => r.type === 'request');
  t.equal(recs.length, served, 'one record per served request');
  t.same(twice(recs), [], 'none twice');
  t.equal(sum(recs), (await totals(prefix)).actual, 'the money: the counters');
});

// ---- the store and the drainer ----------------------------------------------------------------------

const settlement = (actual: number): Settlement => ({
  keyId: 'k1',
  user: 'u1',
  group: 'g1',
  model: 'm1',
  billing: 'balance',
  usage: { input: 1, output: 2, cacheRead: 0, cacheWrite: 0 },
  cost: actual,
  actual,
  durationMs: 5,
  windows: [],
});

const openStore = (prefix: string) => RedisStore.open({ url: redis.url, prefix, leaseMs: 1_000, timeoutMs: 5_000 });

t.test('store: records taken and never acknowledged come back to another reader, marked; acknowledged ones are gone', async (t) => {
  const prefix = 'lc:';
  const a = await openStore(prefix);
  const b = await openStore(prefix);
  t.teardown(() => b.close());
  for (let i = 0; i < 3; i++) await a.settle(`lc-${i}`, settlement(10 + i));
  const first = await a.takeLedger(100);
  t.same(
    first.records.map((r) => [r.id, r.redelivered ?? false]),
    [
      ['lc-0', false],
      ['lc-1', false],
      ['lc-2', false],
    ],
    'taken once, in order',
  );
  t.same((await b.takeLedger(100)).records, [], 'not given to another reader while the first may still write them');
  a.crash(); // between writing them and acknowledging them
  let again: LedgerBatch | undefined;
  t.ok(
    await until(async () => {
      again = await b.takeLedger(100);
      return again.records.length > 0;
    }, 30_000),
    'claimed by the other reader once idle for two leases',
  );
  t.same(
    again!.records.map((r) => [r.id, r.redelivered]),
    [
      ['lc-0', true],
      ['lc-1', true],
      ['lc-2', true],
    ],
    'marked as delivered before',
  );
  await again!.ack();
  t.equal(await db.xlen(`${prefix}{q}:ledger`), 0, 'acknowledged: deleted');
  t.equal(((await db.xpending(`${prefix}{q}:ledger`, 'drain')) as [number])[0], 0, 'and pending for no one');
});

t.test('store: an entry this version cannot read is left in Redis for one that can, never dropped', async (t) => {
  const prefix = 'lu:';
  const store = await openStore(prefix);
  t.teardown(() => store.close());
  await store.settle('lu-1', settlement(5));
  const stream = `${prefix}{q}:ledger`;
  // As a later version packing another way would write them.
  await db.xadd(stream, '*', 't', '1700000000000', 'r2', 'something new');
  await db.xadd(stream, '*', 't', '1700000000000', 'r', 'not\x1fpacked');
  await store.settle('lu-2', settlement(6));
  const b = await store.takeLedger(100);
  t.same(
    b.records.map((r) => r.id),
    ['lu-1', 'lu-2'],
    'the readable records',
  );
  await b.ack();
  t.equal(await db.xlen(stream), 2, 'the two others stay');
  t.equal(((await db.xpending(stream, 'drain')) as [number])[0], 2, 'pending, for another reader to claim');
});

/** The store as a drainer's source, whose acknowledgements fail (a death right after the fsync). */
function dyingSource(store: RedisStore) {
  return {
    takeLedger: async (max: number): Promise<LedgerBatch> => {
      const b = await store.takeLedger(max);
      return {
        records: b.records,
        ack: async () => {
          store.crash();
          throw new Error('killed before acknowledging');
        },
      };
    },
  };
}

t.test('drainer: a death between writing a batch and acknowledging it, then a restart: each record once in the files', async (t) => {
  const prefix = 'ld:';
  const dir = tmpDir('ledger-drain-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const first = await openStore(prefix);
  for (let i = 0; i < 5; i++) await first.settle(`ld-${i}`, settlement(7));
  const files1 = new LedgerFiles({ dir, retentionMs: 86_400_000, log: silentLogger });
  const d1 = await LedgerDrainer.start({ source: dyingSource(first), files: files1, log: silentLogger });
  t.ok(await until(() => d1.counts.written === 5, 10_000), 'written to the files');
  await d1.close(100);
  files1.close();
  t.equal(lines(dir).length, 5);

  // The next process on the same folder: the records come back to it once idle.
  const second = await openStore(prefix);
  t.teardown(() => second.close());
  const files2 = new LedgerFiles({ dir, retentionMs: 86_400_000, log: silentLogger });
  const d2 = await LedgerDrainer.start({ source: second, files: files2, log: silentLogger });
  t.teardown(async () => {
    await d2.close();
    files2.close();
  });
  t.ok(await until(() => d2.counts.skipped === 5, 30_000), 'delivered again, found in the files, skipped');
  t.same(
    lines(dir).map((r) => r.id),
    ['ld-0', 'ld-1', 'ld-2', 'ld-3', 'ld-4'],
    'each record once',
  );
  await second.settle('ld-5', settlement(7));
  t.ok(await until(() => lines(dir).length === 6, 10_000), 'and the next one drained as usual');
  // Acknowledged once the lines are fsynced: a moment after they can be read.
  t.ok(await until(async () => (await db.xlen(`${prefix}{q}:ledger`)) === 0, 10_000), 'nothing left waiting in Redis');
});

t.test('drainer: another process sharing the folder takes over a batch a sibling wrote and never acknowledged', async (t) => {
  const prefix = 'lw:';
  const dir = tmpDir('ledger-sibling-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // The sibling starts first (its view of the files' end predates the dying one's writes).
  const sibling = await openStore(prefix);
  t.teardown(() => sibling.close());
  const filesS = new LedgerFiles({ dir, retentionMs: 86_400_000, log: silentLogger });
  let paused = true;
  const gated = { takeLedger: async (max: number) => (paused ? { records: [], ack: async () => {} } : sibling.takeLedger(max)) };
  const ds = await LedgerDrainer.start({ source: gated, files: filesS, log: silentLogger });
  t.teardown(async () => {
    await ds.close();
    filesS.close();
  });
  const dying = await openStore(prefix);
  for (let i = 0; i < 4; i++) await dying.settle(`lw-${i}`, settlement(3));
  const filesD = new LedgerFiles({ dir, retentionMs: 86_400_000, log: silentLogger });
  const dd = await LedgerDrainer.start({ source: dyingSource(dying), files: filesD, log: silentLogger });
  t.ok(await until(() => dd.counts.written === 4, 10_000));
  await dd.close(100);
  filesD.close();
  paused = false;
  t.ok(await until(() => ds.counts.skipped === 4, 30_000), 'the sibling claims them, finds them in the shared files, skips them');
  t.same(
    lines(dir).map((r) => r.id),
    ['lw-0', 'lw-1', 'lw-2', 'lw-3'],
    'each record once',
  );
});
