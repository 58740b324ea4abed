/**
 * 10,000 mixed requests — the three protocols, streamed and not, conversions, fallbacks, clients
 * that leave, streams cut at their reservation, plan and balance billing, three users — and then
 * the ledger's sum per user equals the store's recorded spend to the micro-USD, on the day files
 * and on PostgreSQL, and the reconciliation finds no difference on either (through the admin API
 * and `gateway ledger reconcile`).
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { baseConfig, KEYS, ROOT, startGateway, tmpDir, type TestGateway } from '../helpers/gateway.js';
import { AdminClient } from '../helpers/admin.js';
import { PostgresServer } from '../helpers/postgres.js';
import { TOKEN, fileRecords, spendByUser, untilShipped } from './helpers.js';
import { parseProm, total } from '../helpers/prom.js';
import { until } from '../helpers/upstream.js';

t.setTimeout(900_000);

const run = promisify(execFile);
const TOTAL = 10_000;
const WORKERS = 16;
const hex = (n: number) => `sk-${n.toString(16).padStart(64, '0')}`;
const K = {
  bobChat: hex(0xb0b1),
  bobMsg: hex(0xb0b2),
  bobResp: hex(0xb0b3),
  carolChat: hex(0xca1),
  carolConv: hex(0xca2),
  carolMsg: hex(0xca3),
};

function config(dir: string, pg?: PostgresServer): Record<string, any> {
  const cfg = baseConfig();
  cfg.server.admin_token = TOKEN;
  cfg.store = { kind: 'memory', path: dir };
  if (pg) cfg.ledger = { postgres: { url: pg.url(), batch_size: 200 } };
  cfg.providers.msgonly = { kind: 'mock', protocols: ['anthropic-messages'] };
  cfg.models['fail-model'] = { provider: 'mock', upstream: 'fail-model#status=503', price: { input: 1, output: 2 } };
  cfg.models.pricey = { provider: 'mock', price: { input: 100, output: 1000 } };
  cfg.models['claude-converted'] = { provider: 'msgonly', upstream: 'claude-model', price: { input: 3, output: 15 } };
  for (const g of ['chat', 'messages', 'responses']) cfg.groups[g].models.push('pricey');
  cfg.groups.chat.models.push('fail-model');
  cfg.groups.conv = { kind: 'chat', models: ['claude-converted'] };
  cfg.users.alice.balance = 1000;
  cfg.users.bob = { balance: 1000 };
  cfg.users.carol = { balance: 1000, subscriptions: [{ group: 'plan', expires_at: '2099-01-01T00:00:00Z' }] };
  cfg.keys.push(
    { key: K.bobChat, name: 'bob-chat', user: 'bob', group: 'chat' },
    { key: K.bobMsg, name: 'bob-msg', user: 'bob', group: 'messages' },
    { key: K.bobResp, name: 'bob-resp', user: 'bob', group: 'responses' },
    { key: K.carolChat, name: 'carol-chat', user: 'carol', group: 'chat' },
    { key: K.carolConv, name: 'carol-conv', user: 'carol', group: 'conv' },
    { key: K.carolMsg, name: 'carol-msg', user: 'carol', group: 'messages' },
  );
  return cfg;
}

const dishonest = 'tell me everything [[mock: words=400 chunk_delay=1 ignore_max_tokens]]';
const chatKeys = [KEYS.chat, K.bobChat, K.carolChat];
const msgKeys = [KEYS.messages, K.bobMsg, K.carolMsg];
const respKeys = [KEYS.responses, K.bobResp];

interface Call {
  path: string;
  key: string;
  body: Record<string, unknown>;
  /** Leave after this many ms (a disconnect), or after the first bytes of a stream (0). */
  leaveAfter?: number;
}

/** The i-th request of the mix. */
function nth(i: number): Call {
  const k = <T>(list: T[]) => list[Math.floor(i / 17) % list.length];
  const words = 3 + (i % 11);
  const text = (extra = '') => `request ${i} [[mock: words=${words} ${extra}]]`;
  switch (i % 17) {
    case 0:
      return {
        path: '/v1/chat/completions',
        key: k(chatKeys),
        body: { model: 'chat-model', messages: [{ role: 'user', content: text() }] },
      };
    case 1:
      return {
        path: '/v1/chat/completions',
        key: k(chatKeys),
        body: { model: 'chat-model', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: text() }] },
      };
    case 2:
      return {
        path: '/v1/messages',
        key: k(msgKeys),
        body: { model: 'claude-model', max_tokens: 64, messages: [{ role: 'user', content: text('cache_read=5') }] },
      };
    case 3:
      return {
        path: '/v1/messages',
        key: k(msgKeys),
        body: { model: 'claude-model', max_tokens: 64, stream: true, messages: [{ role: 'user', content: text('thinking=4') }] },
      };
    case 4:
      return { path: '/v1/responses', key: k(respKeys), body: { model: 'gpt-model', input: text() } };
    case 5:
      return { path: '/v1/responses', key: k(respKeys), body: { model: 'gpt-model', stream: true, input: text() } };
    case 6:
      // Conversion: a Chat client, a Messages-only upstream.
      return {
        path: '/v1/chat/completions',
        key: K.carolConv,
        body: { model: 'claude-converted', messages: [{ role: 'user', content: text() }] },
      };
    case 7:
      return {
        path: '/v1/chat/completions',
        key: K.carolConv,
        body: { model: 'claude-converted', stream: true, messages: [{ role: 'user', content: text() }] },
      };
    case 8:
      // Conversion: a Responses client answered by a Chat model.
      return { path: '/v1/responses', key: k(respKeys), body: { model: 'chat-model', stream: i % 2 === 0, input: text() } };
    case 9:
      // Fallback: the first model fails, the next answers.
      return {
        path: '/v1/chat/completions',
        key: k(chatKeys),
        body: { model: 'fail-model', models: ['chat-model'], stream: i % 2 === 0, messages: [{ role: 'user', content: text() }] },
      };
    case 10:
      // Cut at the reservation: an upstream that ignores max_tokens.
      return {
        path: '/v1/chat/completions',
        key: k(chatKeys),
        body: { model: 'pricey', stream: true, max_tokens: 20, messages: [{ role: 'user', content: dishonest }] },
      };
    case 11:
      return {
        path: '/v1/messages',
        key: k(msgKeys),
        body: { model: 'pricey', stream: true, max_tokens: 20, messages: [{ role: 'user', content: dishonest }] },
      };
    case 12:
      return { path: '/v1/responses', key: k(respKeys), body: { model: 'pricey', stream: true, max_output_tokens: 20, input: dishonest } };
    case 13:
      // A client that leaves a stream after its first bytes.
      return {
        path: '/v1/chat/completions',
        key: k(chatKeys),
        body: { model: 'chat-model', stream: true, messages: [{ role: 'user', content: `leave ${i} [[mock: words=200 chunk_delay=5]]` }] },
        leaveAfter: 0,
      };
    case 14:
      // A client that leaves before a non-streamed answer.
      return {
        path: '/v1/messages',
        key: k(msgKeys),
        body: { model: 'claude-model', max_tokens: 64, messages: [{ role: 'user', content: `leave ${i} [[mock: delay=400 words=5]]` }] },
        leaveAfter: 150,
      };
    case 15:
      // Plan billing (alice's and carol's plan).
      return {
        path: '/v1/messages',
        key: i % 2 === 0 ? KEYS.plan : K.carolMsg,
        body: { model: 'claude-model', max_tokens: 64, stream: i % 3 === 0, messages: [{ role: 'user', content: text() }] },
      };
    default:
      // Refused before any upstream (no such model): no record.
      return {
        path: '/v1/chat/completions',
        key: k(chatKeys),
        body: { model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] },
      };
  }
}

async function send(base: string, c: Call): Promise<number> {
  const ac = new AbortController();
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (c.path === '/v1/messages') {
    headers['x-api-key'] = c.key;
    headers['anthropic-version'] = '2023-06-01';
  } else headers.authorization = `Bearer ${c.key}`;
  let timer: NodeJS.Timeout | undefined;
  if (c.leaveAfter && c.leaveAfter > 0) timer = setTimeout(() => ac.abort(), c.leaveAfter);
  try {
    const res = await fetch(base + c.path, { method: 'POST', headers, body: JSON.stringify(c.body), signal: ac.signal });
    if (c.leaveAfter === 0 && res.body) {
      const reader = res.body.getReader();
      await reader.read();
      ac.abort();
      return -1;
    }
    await res.arrayBuffer();
    return res.status;
  } catch {
    return -1; // left
  } finally {
    clearTimeout(timer);
  }
}

/** micro-USD of an amount the admin API gives in USD. */
const micros = (usd: number) => Math.round(usd * 1e6);

async function wallets(admin: AdminClient): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const u of ['alice', 'bob', 'carol']) out.set(u, micros((await admin.get(`/admin/users/${u}`)).json.wallet.spent_usd));
  return out;
}

/** `gateway ledger reconcile` against a running gateway: its exit code and output. */
async function cliReconcile(url: string): Promise<{ code: number; out: string }> {
  try {
    const r = await run(process.execPath, [path.join(ROOT, 'bin/gateway.js'), 'ledger', 'reconcile', '--url', url, '--token', TOKEN], {
      timeout: 120_000,
    });
    return { code: 0, out: r.stdout + r.stderr };
  } catch (e) {
    const x = e as { code?: number; stdout?: string; stderr?: string };
    return { code: x.code ?? -1, out: (x.stdout ?? '') + (x.stderr ?? '') };
  }
}

t.test(
  `${TOTAL.toLocaleString('en')} mixed requests: the ledger equals the store's spend per user on both sinks, and reconciles`,
  async (t) => {
    const pg = await PostgresServer.start();
    t.teardown(() => pg.destroy());
    const dir = tmpDir('ledger-mixed-');
    const g: TestGateway = await startGateway(config(dir, pg));
    let closed = false;
    t.teardown(() => (closed ? undefined : g.close()));

    const statuses = new Map<number, number>();
    let next = 0;
    await Promise.all(
      Array.from({ length: WORKERS }, async () => {
        while (next < TOTAL) {
          const s = await send(g.url, nth(next++));
          statuses.set(s, (statuses.get(s) ?? 0) + 1);
        }
      }),
    );
    t.comment(`statuses: ${JSON.stringify(Object.fromEntries(statuses))}`);
    t.ok((statuses.get(200) ?? 0) > TOTAL * 0.7, 'most were served');
    t.ok((statuses.get(-1) ?? 0) > 0, 'some clients left');

    const ledgerDir = path.join(dir, 'ledger');
    const admin = await new AdminClient(g.url, TOKEN).init();
    // The store settles a request when it ends; a client that left is settled once the gateway sees
    // it, which can be after its client gave up. So first nothing in flight (the day files final),
    // then PostgreSQL caught up with them: their counts could also meet while a settlement was due.
    const inFlight = async () => total(parseProm(await (await fetch(g.url + '/metrics')).text()), 'gateway_requests_in_flight');
    t.ok(await until(async () => (await inFlight()) === 0, 60_000, 100), 'every request ended and settled');
    t.ok(await untilShipped(pg, 'gateway', ledgerDir), 'PostgreSQL holds every record of the day files');
    const files = fileRecords(ledgerDir);
    const requests = files.filter((r) => r.type === 'request');
    t.comment(`${requests.length} request records`);
    t.equal(new Set(files.map((r) => r.id)).size, files.length, 'each record once in the day files');

    // The mix happened.
    const count = (f: (r: Record<string, any>) => boolean) => requests.filter(f).length;
    t.ok(count((r) => r.estimate_reason === 'client_disconnect') > 0, 'disconnects are billed records');
    t.ok(count((r) => r.estimate_reason === 'cut_at_reservation') > 0, 'streams cut at the reservation');
    t.ok(count((r) => r.attempts >= 2 && r.model_requested === 'fail-model') > 0, 'fallbacks');
    t.ok(count((r) => r.protocol_in !== r.protocol_out) > 0, 'conversions');
    t.same(
      new Set(requests.map((r) => r.protocol_in)),
      new Set(['openai-chat', 'anthropic-messages', 'openai-responses']),
      'three protocols',
    );
    t.ok(count((r) => r.stream === true) > 0 && count((r) => r.stream === false) > 0, 'streams and not');
    t.ok(count((r) => r.billing === 'plan') > 0, 'plan billing');

    // Per user: the files, PostgreSQL and the wallets (the store's recorded spend) agree to the micro-USD.
    const fromFiles = spendByUser(files);
    const rows = await pg.query<{ user: string; billing: string; charged: string }>(
      `SELECT "user", billing, sum(charged_micros) AS charged FROM ledger_records WHERE type = 'request' GROUP BY 1, 2`,
    );
    const fromPg = new Map<string, { balance: number; plan: number }>();
    for (const r of rows) {
      const s = fromPg.get(r.user) ?? { balance: 0, plan: 0 };
      s[r.billing === 'plan' ? 'plan' : 'balance'] += Number(r.charged);
      fromPg.set(r.user, s);
    }
    const spent = await wallets(admin);
    for (const user of ['alice', 'bob', 'carol']) {
      t.ok((fromFiles.get(user)?.balance ?? 0) > 0, `${user} spent`);
      t.equal(
        fromFiles.get(user)?.balance,
        spent.get(user),
        `${user}: the day files' charges = the wallet's spend (${spent.get(user)} µ$)`,
      );
      t.same(fromPg.get(user), fromFiles.get(user), `${user}: PostgreSQL's charges = the day files' (balance and plan)`);
    }
    const summary = await admin.get('/admin/ledger/summary?by=user&type=request');
    t.equal(summary.json.source, 'postgres');
    for (const row of summary.json.data) {
      const f = fromFiles.get(row.user)!;
      t.equal(micros(row.charged_usd), f.balance + f.plan, `${row.user}: the summary from PostgreSQL`);
    }

    const pgRec = await admin.get('/admin/ledger/reconcile');
    t.equal(pgRec.json.source, 'postgres');
    t.same(pgRec.json.differences, [], 'PostgreSQL: the reconciliation finds no difference');
    const pgCli = await cliReconcile(g.url);
    t.equal(pgCli.code, 0, 'gateway ledger reconcile exits 0');
    t.match(pgCli.out, /no difference/);

    // The same store and day files without PostgreSQL: the file sink answers.
    await g.close();
    closed = true;
    const again = await startGateway(config(dir));
    t.teardown(() => again.close());
    const fileAdmin = await new AdminClient(again.url, TOKEN).init();
    const fileRec = await fileAdmin.get('/admin/ledger/reconcile');
    t.equal(fileRec.json.source, 'files');
    t.same(fileRec.json.differences, [], 'the day files: the reconciliation finds no difference');
    const fileCli = await cliReconcile(again.url);
    t.equal(fileCli.code, 0);
    t.match(fileCli.out, /no difference/);
    const fileSummary = await fileAdmin.get('/admin/ledger/summary?by=user&type=request');
    t.same(fileSummary.json.data, summary.json.data, 'the same totals from the day files as from PostgreSQL');
    t.same(await wallets(fileAdmin), spent, 'the wallets after the restart');
  },
);
