/**
 * The ledger's PostgreSQL sink (ledger.postgres) against a real PostgreSQL cluster: the day files
 * are shipped to a table the migrations create; queries, exports and the reconciliation answer
 * from it (each admin answer checked against /admin/openapi.json) and equal the day files and the
 * counters; PostgreSQL stopped for 10 s under load fails no request and loses or doubles no
 * record; after kill -9 of the gateway every completed request has exactly one row.
 */
import t from 'tap';
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { bearer, call, chatBody, KEYS, messagesBody, responsesBody, startGateway, tmpDir } from '../helpers/gateway.js';
import { AdminClient } from '../helpers/admin.js';
import { request, startGatewayProcess, type GatewayProcess } from '../helpers/process.js';
import { PostgresServer } from '../helpers/postgres.js';
import { sleep, until } from '../helpers/upstream.js';
import { TOKEN, fileRecords, ledgerConfig, spendByUser, tableRecords, today, untilShipped } from './helpers.js';

t.setTimeout(600_000);

let pg: PostgresServer;
t.before(async () => {
  pg = await PostgresServer.start();
});
t.teardown(() => pg?.destroy());

/** A fresh database per test, so each starts from an empty table and no migrations. */
async function freshDb(name: string): Promise<string> {
  await pg.query(`CREATE DATABASE ${name}`, [], 'postgres');
  return `postgres://postgres@127.0.0.1:${pg.port}/${name}`;
}

t.test('records reach PostgreSQL; queries, export and reconciliation answer from it and equal the day files', async (t) => {
  const dir = tmpDir('ledger-pg-');
  const url = await freshDb('basic');
  const cfg = ledgerConfig(dir);
  cfg.ledger = { postgres: { url } };
  const g = await startGateway(cfg);
  t.teardown(() => g.close());
  const admin = await new AdminClient(g.url, TOKEN).init();

  const openai = new OpenAI({ apiKey: KEYS.chat, baseURL: `${g.url}/v1`, maxRetries: 0 });
  const anthropic = new Anthropic({ apiKey: KEYS.messages, baseURL: g.url, maxRetries: 0 });
  await openai.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'one' }] });
  const s = await openai.chat.completions.create({ model: 'chat-model', stream: true, messages: [{ role: 'user', content: 'two' }] });
  for await (const _ of s) void _;
  await anthropic.messages.create({ model: 'claude-model', max_tokens: 64, messages: [{ role: 'user', content: 'three' }] });
  const plan = new Anthropic({ apiKey: KEYS.plan, baseURL: g.url, maxRetries: 0 });
  await plan.messages.create({ model: 'claude-model', max_tokens: 64, messages: [{ role: 'user', content: 'on the plan' }] });
  const fb = await call(`${g.url}/v1/chat/completions`, {
    headers: bearer(KEYS.custom),
    json: { model: 'fail-model', models: ['chat-model'], messages: [{ role: 'user', content: 'fall back' }] },
  });
  t.equal(fb.status, 200);
  t.equal((await call(`${g.url}/v1/responses`, { headers: bearer(KEYS.responses), json: responsesBody() })).status, 200);
  await admin.post('/admin/users/alice/topups', { amount_usd: 2, reference: 'inv-1' }, { 'idempotency-key': 'pg-topup' });
  await admin.post('/admin/users/alice/topups', { amount_usd: '-0.5', reference: 'fix-1' }, { 'idempotency-key': 'pg-fix' });

  const ledgerDir = path.join(dir, 'ledger');
  t.ok(await untilShipped(pg, 'basic', ledgerDir, 60_000), 'every record of the day files reaches the table');
  const files = fileRecords(ledgerDir);
  t.equal(files.length, 8, 'six requests and two credits in the day files');
  const rows = await tableRecords(pg, 'basic');
  t.same(new Set(rows.keys()), new Set(files.map((r) => r.id)), 'the same ids');
  for (const r of files) t.same(rows.get(r.id), r, `row ${r.id} is the record, field for field`);

  const migrations = await pg.query(`SELECT table_name, version FROM ledger_migrations`, [], 'basic');
  t.same(migrations, [{ table_name: 'ledger_records', version: 1 }], 'the migration is recorded once');
  t.ok(existsSync(path.join(ledgerDir, 'postgres-ledger_records.position.json')), 'the position is kept in the ledger folder');

  // Queries answer from PostgreSQL.
  const sum = await admin.get(`/admin/ledger/summary?by=user,type`);
  t.equal(sum.json.source, 'postgres');
  const byType = Object.fromEntries(sum.json.data.map((r: any) => [r.type, r]));
  const spend = spendByUser(files).get('alice')!;
  t.equal(Math.round(byType.request.charged_usd * 1e6), spend.balance + spend.plan, 'charged: the records');
  t.equal(byType.request.requests, 6);
  t.equal(Math.round(byType.topup.credited_usd * 1e6), 2_000_000);
  t.equal(Math.round(byType.correction.credited_usd * 1e6), -500_000);
  const wallet = (await admin.get('/admin/users/alice')).json.wallet;
  t.equal(spend.balance, Math.round(wallet.spent_usd * 1e6), "the balance-billed charges are the wallet's spend");
  t.ok(spend.plan > 0, 'and the plan-billed one is on the plan');

  const byDay = await admin.get(`/admin/ledger/summary?by=day,model`);
  t.same(
    byDay.json.data.map((r: any) => [r.day, r.model, r.requests]),
    [
      [today(), '', 0],
      [today(), 'chat-model', 3],
      [today(), 'claude-model', 2],
      [today(), 'gpt-model', 1],
    ],
    'by day and model, in the order the file reader gives',
  );

  const all: any[] = [];
  let cursor: string | null = null;
  do {
    const r: any = await admin.get(`/admin/ledger/records?limit=3${cursor ? `&cursor=${cursor}` : ''}`);
    all.push(...r.json.data);
    cursor = r.json.next_cursor;
  } while (cursor);
  t.equal(all.length, 8, 'paged: every record once');
  t.same(
    all.map((r) => r.ts),
    all.map((r) => r.ts).sort((a, b) => a - b),
    'in time order',
  );
  const byId = new Map(files.map((r) => [r.id, r]));
  for (const r of all) t.same(r, byId.get(r.id), `the page's record ${r.id} is the file's`);
  const keyed = await admin.get(`/admin/ledger/records?key=messages`);
  t.same(
    keyed.json.data.map((r: any) => r.id),
    files.filter((r) => r.key === 'messages').map((r) => r.id),
    "a key's records",
  );

  const jsonl = await call(`${g.url}/admin/ledger/export`, { headers: bearer(TOKEN) });
  t.equal(jsonl.status, 200);
  const exported = jsonl.text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  t.same(
    exported.map((r) => r.id),
    all.map((r) => r.id),
    'the export: every record, in time order',
  );
  t.same(exported[0], byId.get(exported[0].id), 'the exported record is the file record');
  const csv = await call(`${g.url}/admin/ledger/export?format=csv&user=alice`, { headers: bearer(TOKEN) });
  t.equal(csv.text.trim().split('\r\n').length, 9, 'CSV: a header and a row per record');

  const rec = await admin.get('/admin/ledger/reconcile');
  t.equal(rec.json.source, 'postgres');
  t.same(rec.json.differences, [], 'reconciliation: no difference');

  // A row the counters do not know is a difference the reconciliation shows.
  await pg.query(
    `INSERT INTO ledger_records (id, type, ts, "user", "key", model, charged_micros) VALUES ('req_extra', 'request', $1, 'alice', 'chat', 'chat-model', 7)`,
    [Date.now()],
    'basic',
  );
  const off = await admin.get('/admin/ledger/reconcile');
  t.equal(off.json.ok, false, 'an extra row is seen');
  t.match(off.json.differences, [{ what: `key chat on ${today()}, model chat-model`, field: 'requests' }]);
});

t.test('the config refuses ledger.postgres on a memory store without a folder', async (t) => {
  const cfg = ledgerConfig('');
  cfg.store = { kind: 'memory', path: '' };
  cfg.ledger = { postgres: { url: 'postgres://x@127.0.0.1:1/x' } };
  await t.rejects(startGateway(cfg), /ledger\.postgres ships the ledger's day files, and the memory store keeps none without a folder/);
});

/** A load of chat requests on its own connections until `stop()`; the statuses and ids it saw. */
function load(gw: GatewayProcess, workers = 6) {
  const done: number[] = [];
  const failed: string[] = [];
  let stopped = false;
  const worker = async (i: number) => {
    for (let n = i; !stopped; n++) {
      // Chat, Chat streamed, Messages, in turn.
      const kind = n % 3;
      const r = await request(`${gw.url}/v1/${kind === 2 ? 'messages' : 'chat/completions'}`, {
        headers: { authorization: `Bearer ${kind === 2 ? KEYS.messages : KEYS.chat}` },
        body:
          kind === 0
            ? chatBody({ max_tokens: 20 })
            : kind === 1
              ? chatBody({ max_tokens: 20, stream: true, stream_options: { include_usage: true } })
              : messagesBody({ max_tokens: 20 }),
      }).catch((e: Error) => ({ status: 0, text: e.message }));
      if (r.status === 200) done.push(n);
      else failed.push(`${r.status} ${r.text.slice(0, 200)}`);
    }
  };
  const running = Array.from({ length: workers }, (_, i) => worker(i));
  return {
    done,
    failed,
    async stop() {
      stopped = true;
      await Promise.all(running);
    },
  };
}

t.test('PostgreSQL stopped for 10 s under load: no request fails, and once it is back every record arrives once', async (t) => {
  const dir = tmpDir('ledger-pg-down-');
  const url = await freshDb('outage');
  const cfg = ledgerConfig(path.join(dir, 'data'));
  cfg.ledger = { postgres: { url, batch_size: 50 } };
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, YAML.stringify(cfg));
  const gw = await startGatewayProcess(file);
  t.teardown(() => gw.stop());
  // Started again whatever fails here, so that a failure does not become the next test's too.
  t.teardown(async () => (pg.proc ? undefined : pg.restart()));
  const ledgerDir = path.join(dir, 'data', 'ledger');

  const l = load(gw);
  t.ok(await until(() => l.done.length >= 100), 'under load');
  await gw.waitForLog((x) => x.msg === 'ledger: shipping records to PostgreSQL');
  await pg.stop();
  const stoppedAt = l.done.length;
  await gw.waitForLog((x) => x.msg === 'ledger: PostgreSQL unavailable; records wait in the day files and are shipped when it is back');
  await sleep(10_000);
  const duringOutage = l.done.length - stoppedAt;
  await pg.restart();
  await gw.waitForLog((x) => x.msg === 'ledger: PostgreSQL reachable again; shipping the records waiting in the day files');
  const backAt = l.done.length;
  t.ok(await until(() => l.done.length >= backAt + 50), 'served after it is back');
  await l.stop();
  t.same(l.failed, [], 'no request failed');
  t.ok(duringOutage > 0, `requests were served while PostgreSQL was down (${duringOutage})`);

  t.ok(await untilShipped(pg, 'outage', ledgerDir), 'the backlog is shipped');
  const files = fileRecords(ledgerDir);
  const ids = files.map((r) => r.id);
  t.equal(new Set(ids).size, ids.length, 'the day files hold each record once');
  t.ok(ids.length >= l.done.length, `a record per completed request (${ids.length} records, ${l.done.length} completed)`);
  const rows = await pg.query<{ id: string }>('SELECT id FROM ledger_records', [], 'outage');
  t.same(new Set(rows.map((r) => r.id)), new Set(ids), 'PostgreSQL holds exactly the records of the day files: none lost');
  t.equal(rows.length, ids.length, 'none doubled');
  t.equal(
    gw.logs.filter((x) => x.msg === 'ledger: PostgreSQL unavailable; records wait in the day files and are shipped when it is back').length,
    1,
    'the outage is logged once',
  );
  t.equal(gw.logs.filter((x) => x.msg === 'ledger: PostgreSQL reachable again; shipping the records waiting in the day files').length, 1);

  const admin = await new AdminClient(gw.url, TOKEN).init();
  const rec = await admin.get('/admin/ledger/reconcile');
  t.equal(rec.json.source, 'postgres');
  t.same(rec.json.differences, [], 'reconciliation: no difference');
  const metrics = await call(`${gw.url}/metrics`);
  t.match(metrics.text, /^gateway_ledger_postgres_up 1$/m, 'the metric says it is up');
  t.match(metrics.text, /^gateway_ledger_outbox_bytes 0$/m, 'nothing waits');
});

t.test('kill -9 of the gateway under load: after the restart every completed request has exactly one row', async (t) => {
  const dir = tmpDir('ledger-pg-kill-');
  const url = await freshDb('killed');
  const cfg = ledgerConfig(path.join(dir, 'data'));
  cfg.ledger = { postgres: { url, batch_size: 20 } };
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, YAML.stringify(cfg));
  const gw = await startGatewayProcess(file);
  const l = load(gw, 8);
  t.ok(await until(() => l.done.length >= 300), 'under load');
  gw.proc.kill('SIGKILL');
  await l.stop();
  await gw.exited;

  const again = await startGatewayProcess(file);
  t.teardown(() => again.stop());
  const ledgerDir = path.join(dir, 'data', 'ledger');
  t.ok(await untilShipped(pg, 'killed', ledgerDir), 'shipped after the restart');
  const rows = await pg.query<{ id: string; n: string }>('SELECT id FROM ledger_records', [], 'killed');
  const ids = new Set(rows.map((r) => r.id));
  t.equal(ids.size, rows.length, 'no row twice');
  t.same(ids, new Set(fileRecords(ledgerDir).map((r) => r.id)), 'the rows are the records of the day files');
  // Records carry the store's request ids (not the answers'): every completed request is counted
  // among them, and the reconciliation below finds exactly the store's count of each key's requests.
  t.ok(rows.length >= l.done.length, `a row per completed request at least (${rows.length} rows, ${l.done.length} completed)`);
  const admin = await new AdminClient(again.url, TOKEN).init();
  const rec = await admin.get('/admin/ledger/reconcile');
  t.equal(rec.json.source, 'postgres');
  t.same(rec.json.differences, [], 'reconciliation: no difference (the table equals the counters)');
});
