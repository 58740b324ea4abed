/**
 * The ledger on the embedded store (day files written with the journal): one record per billed
 * request and per credit, equal to the counters; queried, exported and reconciled through the admin
 * API (each answer checked against /admin/openapi.json); exact after kill -9.
 */
import t from 'tap';
import { readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway, tmpDir, type TestGateway } from '../helpers/gateway.js';
import { AdminClient } from '../helpers/admin.js';
import { request, startGatewayProcess } from '../helpers/process.js';
import { LedgerFiles } from '../../core/ledger/files.js';
import { silentLogger } from '../../core/log.js';

const TOKEN = 'ledger-admin-token-123';

function config(dir: string) {
  const cfg = baseConfig();
  cfg.server.admin_token = TOKEN;
  cfg.store = { kind: 'memory', path: dir };
  cfg.models['fail-model'] = { provider: 'mock', upstream: 'fail-model#status=503', price: { input: 1, output: 2 } };
  cfg.groups.chat.models.push('fail-model');
  return cfg;
}

const today = () => new Date().toISOString().slice(0, 10);

t.test('every billed request and credit leaves one record with its details; sums equal the counters', async (t) => {
  const dir = tmpDir('ledger-');
  const g: TestGateway = await startGateway(config(dir));
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
  // A fallback: the first model fails, the second answers: one record, for the answering model.
  const fb = await call(`${g.url}/v1/chat/completions`, {
    headers: bearer(KEYS.custom),
    json: { model: 'fail-model', models: ['chat-model'], messages: [{ role: 'user', content: 'fall back' }] },
  });
  t.equal(fb.status, 200);
  // A refused request is not billed and leaves no record.
  t.equal((await call(`${g.url}/v1/chat/completions`, { headers: bearer(KEYS.chat), json: chatBody({ model: 'nope' }) })).status, 503);
  await admin.post('/admin/users/alice/topups', { amount_usd: 2, reference: 'inv-1' }, { 'idempotency-key': 'ledger-topup' });

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
  t.match(
    recs.find((r) => r.type === 'topup'),
    { user: 'alice', charged_micros: 2_000_000, reference: 'inv-1', actor: 'admin' },
  );
  t.notOk(JSON.stringify(recs).includes('Hello'), 'no prompt or completion text');

  const sum = await admin.get(`/admin/ledger/summary?by=user,type`);
  const charged = sum.json.data.filter((r: any) => r.type === 'request').reduce((a: number, r: any) => a + r.charged_usd, 0);
  const wallet = (await admin.get('/admin/users/alice')).json.wallet;
  t.equal(Math.round(charged * 1e6), Math.round(wallet.spent_usd * 1e6) - planSpend(requests), "ledger charges = the wallet's spend");
  const rec = await admin.get('/admin/ledger/reconcile');
  t.same(rec.json.differences, [], 'reconciliation: no difference');
  t.equal(rec.json.ok, true);

  const jsonl = await call(`${g.url}/admin/ledger/export`, { headers: bearer(TOKEN) });
  t.equal(jsonl.headers.get('content-type'), 'application/x-ndjson');
  t.same(
    jsonl.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).id),
    recs.map((r) => r.id),
    'the export holds the records',
  );
  const csv = await call(`${g.url}/admin/ledger/export?format=csv`, { headers: bearer(TOKEN) });
  const lines = csv.text.trim().split('\r\n');
  t.match(lines[0], /^id,type,ts,user,key,/);
  t.equal(lines.length, recs.length + 1, 'a header and a row per record');
  t.equal((await admin.get('/admin/ledger/summary?by=color')).status, 400);
  t.equal((await admin.get('/admin/ledger/records?from=2026-13-01')).status, 400);
});

/** Charges of plan-billed records (the wallet counts balance spend only). */
function planSpend(recs: any[]): number {
  return recs.filter((r) => r.billing === 'plan').reduce((a, r) => a + r.charged_micros, 0);
}

t.test(
  'kill -9 under load: every completed request has exactly one record after the restart, and the ledger equals the counters',
  async (t) => {
    const dir = tmpDir('ledger-kill-');
    const cfg = config(path.join(dir, 'data'));
    cfg.server.port = 0;
    const file = path.join(dir, 'gateway.yaml');
    writeFileSync(file, YAML.stringify(cfg));
    const gw = await startGatewayProcess(file);
    const done: string[] = [];
    let stop = false;
    const worker = async () => {
      while (!stop) {
        const r = await request(`${gw.url}/v1/chat/completions`, {
          headers: { authorization: `Bearer ${KEYS.chat}` },
          body: chatBody({ max_tokens: 20 }),
        }).catch(() => undefined);
        if (r?.status === 200) done.push(r.json.id as string);
      }
    };
    const workers = Array.from({ length: 8 }, worker);
    while (done.length < 300) await new Promise((r) => setTimeout(r, 10));
    gw.proc.kill('SIGKILL');
    stop = true;
    await Promise.all(workers);
    await gw.exited;
    const again = await startGatewayProcess(file);
    t.teardown(() => again.stop());
    const admin = await new AdminClient(again.url, TOKEN).init();
    const all: any[] = [];
    let cursor: string | null = null;
    do {
      const r = await admin.get(`/admin/ledger/records?limit=200${cursor ? `&cursor=${cursor}` : ''}`);
      all.push(...r.json.data);
      cursor = r.json.next_cursor;
    } while (cursor);
    const ids = all.filter((r) => r.type === 'request').map((r) => r.id);
    t.equal(new Set(ids).size, ids.length, `no record twice (${ids.length} records)`);
    t.ok(ids.length >= done.length, `at least every completed request (${done.length} completed)`);
    t.same((await admin.get('/admin/ledger/reconcile')).json.differences, [], 'reconciliation: no difference');
    // Every file line parses, and its seq only grows.
    const ledgerDir = path.join(dir, 'data', 'ledger');
    let last = 0;
    for (const f of readdirSync(ledgerDir)) {
      for (const line of readFileSync(path.join(ledgerDir, f), 'utf8').split('\n').filter(Boolean)) {
        const r = JSON.parse(line);
        if (!(r.seq > last)) t.fail(`seq does not increase: ${line}`);
        last = r.seq;
      }
    }
  },
);

t.test('day files: a line torn by a killed writer never swallows the next record', async (t) => {
  const dir = tmpDir('ledger-torn-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const day = today();
  writeFileSync(path.join(dir, `${day}.jsonl`), '{"seq":0,"id":"whole","type":"request"}\n{"seq":0,"id":"torn","ty');
  const files = new LedgerFiles({ dir, retentionMs: 86_400_000, log: silentLogger });
  files.appendSync([{ ts: Date.now(), line: '{"seq":0,"id":"next","type":"request"}\n' }]);
  await files.sync();
  const ids: string[] = [];
  for await (const r of files.read(day, day)) ids.push(r.id);
  files.close();
  t.same(ids, ['whole', 'next'], 'the torn line is skipped, the next record read');
});
