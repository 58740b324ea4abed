/**
 * The admin API on one gateway (memory store, persisted): an operator onboards a customer end to end
 * over HTTP, and every answer is checked against /admin/openapi.json (test/helpers/admin.ts).
 */
import t from 'tap';
import OpenAI from 'openai';
import { baseConfig, bearer, call, chatBody, startGateway, tmpDir, type TestGateway } from '../helpers/gateway.js';
import { AdminClient } from '../helpers/admin.js';

const ADMIN = 'admin-token-0123456789';
const OPS = 'ops-token-abcdefghijklmnop';

function config(dir = tmpDir('gw-admin-')) {
  const cfg = baseConfig();
  cfg.server.admin_token = ADMIN;
  cfg.admin = { tokens: [{ name: 'ops', token: OPS }], auth_failures_per_minute: 5 };
  cfg.store = { kind: 'memory', path: dir };
  return cfg;
}

let g: TestGateway;
let admin: AdminClient;
let dir: string;
const logs: Record<string, any>[] = [];
const capture = {
  debug: () => undefined,
  info: (msg: string, fields?: Record<string, unknown>) => logs.push({ msg, ...fields }),
  warn: (msg: string, fields?: Record<string, unknown>) => logs.push({ msg, level: 'warn', ...fields }),
  error: (msg: string, fields?: Record<string, unknown>) => logs.push({ msg, level: 'error', ...fields }),
  child() {
    return capture;
  },
} as any;

t.before(async () => {
  dir = tmpDir('gw-admin-');
  g = await startGateway(config(dir), { log: capture });
  admin = await new AdminClient(g.url, OPS).init();
});
t.teardown(() => g?.close());

const sdk = (key: string) => new OpenAI({ apiKey: key, baseURL: `${g.url}/v1`, maxRetries: 0 });

t.test('onboarding a customer: user, key, top-up, the key works; disable, rotate and delete take effect at once', async (t) => {
  const u = await admin.post('/admin/users', { name: 'acme', note: 'customer #42', rpm: 100 });
  t.equal(u.status, 201);
  t.match(u.json, {
    name: 'acme',
    source: 'store',
    status: 'active',
    rpm: 100,
    wallet: { credit_usd: 0, spent_usd: 0, balance_usd: 0 },
    keys: [],
    revision: 1,
  });

  const k = await admin.post('/admin/keys', { user: 'acme', group: 'chat', name: 'acme-ci' });
  t.equal(k.status, 201);
  t.match(k.json.key, /^sk-[0-9a-f]{64}$/, 'the secret, shown once');
  t.equal(k.json.hint, `${k.json.key.slice(0, 6)}…${k.json.key.slice(-4)}`);
  const secret: string = k.json.key;
  const shown = await admin.get('/admin/keys/acme-ci');
  t.notOk('key' in shown.json, 'never shown again');
  t.notOk(JSON.stringify(shown.json).includes(secret.slice(3, 40)), 'nothing of it but the hint');
  t.notOk(JSON.stringify((await admin.get('/admin/keys')).json).includes('digest'), 'no digest in the list');

  const broke = await sdk(secret)
    .chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'hi' }] })
    .catch((e: any) => e);
  t.equal(broke.status, 403, 'a new wallet starts at zero: a priced model is refused');

  const top = await admin.post(
    '/admin/users/acme/topups',
    { amount_usd: '25.50', reference: 'inv-1001' },
    { 'idempotency-key': 'pay-1001' },
  );
  t.equal(top.status, 201);
  t.match(top.json, { user: 'acme', amount_usd: 25.5, reference: 'inv-1001', actor: 'ops', wallet: { balance_usd: 25.5 } });

  const reply = await sdk(secret).chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'hi' }] });
  t.ok(reply.choices[0].message.content, 'the key answers a chat request through the real SDK');
  const usage = await call(`${g.url}/v1/usage`, { headers: bearer(secret) });
  const after = await admin.get('/admin/users/acme');
  t.ok(after.json.wallet.spent_usd > 0, 'the request was charged to the wallet');
  t.equal(usage.json.balance, after.json.wallet.balance_usd, '/v1/usage shows the same balance');
  t.same(after.json.keys, ['acme-ci']);

  const off = await admin.patch('/admin/keys/acme-ci', { enabled: false });
  t.equal(off.status, 200);
  t.equal(off.json.enabled, false);
  const disabled = await call(`${g.url}/v1/chat/completions`, { headers: bearer(secret), json: chatBody() });
  t.same([disabled.status, disabled.json.code], [401, 'API_KEY_DISABLED'], 'disabled at once');

  await admin.patch('/admin/keys/acme-ci', { enabled: true });
  const rotated = await admin.post('/admin/keys/acme-ci/rotate');
  t.equal(rotated.status, 200);
  t.not(rotated.json.key, secret);
  t.equal(
    (await call(`${g.url}/v1/chat/completions`, { headers: bearer(secret), json: chatBody() })).status,
    401,
    'the old secret is dead',
  );
  t.equal(
    (await call(`${g.url}/v1/chat/completions`, { headers: bearer(rotated.json.key), json: chatBody() })).status,
    200,
    'the new one works',
  );

  t.equal((await admin.del('/admin/keys/acme-ci')).status, 204);
  const gone = await call(`${g.url}/v1/chat/completions`, { headers: bearer(rotated.json.key), json: chatBody() });
  t.same([gone.status, gone.json.code], [401, 'INVALID_API_KEY'], 'deleted');
  t.equal((await admin.get('/admin/keys/acme-ci')).status, 404);
});

t.test('top-ups: Idempotency-Key replays, conflicts and is required; amounts are exact decimals; corrections', async (t) => {
  await admin.post('/admin/users', { name: 'wallet-user' });
  const body = { amount_usd: 10, reference: 'inv-7' };
  const first = await admin.post('/admin/users/wallet-user/topups', body, { 'idempotency-key': 'k-7' });
  const again = await admin.post('/admin/users/wallet-user/topups', body, { 'idempotency-key': 'k-7' });
  t.equal(again.status, 201);
  t.same(again.json, first.json, 'the same result');
  t.equal(again.headers.get('idempotent-replayed'), 'true');
  t.equal(first.headers.get('idempotent-replayed'), null);
  const other = await admin.post('/admin/users/wallet-user/topups', { ...body, amount_usd: 11 }, { 'idempotency-key': 'k-7' });
  t.same([other.status, other.json.error.code], [409, 'idempotency_conflict']);
  t.equal((await admin.get('/admin/users/wallet-user')).json.wallet.credit_usd, 10, 'credited once');

  const noKey = await admin.post('/admin/users/wallet-user/topups', body);
  t.same([noKey.status, noKey.json.error.code], [400, 'idempotency_key_required']);
  const long = await admin.post('/admin/users/wallet-user/topups', body, { 'idempotency-key': 'x'.repeat(201) });
  t.same([long.status, long.json.error.code], [400, 'invalid_request']);

  for (const [amount, why] of [
    [0.0000001, 'seven decimal places'],
    ['1.2345678', 'seven decimal places'],
    [0, 'zero'],
    ['ten', 'not a number'],
    [1e20, 'too large'],
  ] as const) {
    const r = await admin.post(
      '/admin/users/wallet-user/topups',
      { amount_usd: amount, reference: 'x' },
      { 'idempotency-key': `bad-${String(amount)}` },
    );
    t.equal(r.status, 400, `${why}: 400`);
    t.match(r.json.error.details, [{ path: '/amount_usd' }], `${why}: names the field`);
  }
  const exact = await admin.post(
    '/admin/users/wallet-user/topups',
    { amount_usd: '0.000001', reference: 'x' },
    { 'idempotency-key': 'tiny' },
  );
  t.equal(exact.json.amount_usd, 0.000001, 'one micro-USD, exactly');

  const below = await admin.post(
    '/admin/users/wallet-user/topups',
    { amount_usd: -20, reference: 'refund' },
    { 'idempotency-key': 'neg-1' },
  );
  t.same([below.status, below.json.error.code], [409, 'below_zero'], 'a correction cannot take the wallet below zero');
  const fix = await admin.post('/admin/users/wallet-user/topups', { amount_usd: -4, reference: 'refund' }, { 'idempotency-key': 'neg-2' });
  t.equal(fix.status, 201);
  t.equal(fix.json.wallet.balance_usd, 6.000001);
  const list = await admin.get('/admin/users/wallet-user/topups?limit=2');
  t.same(
    list.json.data.map((x: any) => x.reference),
    ['refund', 'x'],
    'newest first',
  );
  const rest = await admin.get(`/admin/users/wallet-user/topups?limit=2&cursor=${list.json.next_cursor}`);
  t.same(
    rest.json.data.map((x: any) => x.amount_usd),
    [10],
  );
  t.equal(rest.json.next_cursor, null);
  t.equal((await admin.post('/admin/users/nobody/topups', body, { 'idempotency-key': 'n' })).status, 404);
});

t.test('the config file owns what it declares: 409 managed_by_config; its users can still be topped up', async (t) => {
  const patch = await admin.patch('/admin/users/alice', { rpm: 5 });
  t.same([patch.status, patch.json.error.code], [409, 'managed_by_config']);
  const create = await admin.post('/admin/users', { name: 'alice' });
  t.same([create.status, create.json.error.code], [409, 'managed_by_config']);
  const keyPatch = await admin.patch('/admin/keys/chat', { enabled: false });
  t.same([keyPatch.status, keyPatch.json.error.code], [409, 'managed_by_config']);
  t.equal((await admin.del('/admin/keys/chat')).status, 409);
  const alice = await admin.get('/admin/users/alice');
  t.match(alice.json, { source: 'file', revision: 0, created_at: null });
  const before = alice.json.wallet.credit_usd;
  const top = await admin.post('/admin/users/alice/topups', { amount_usd: 5, reference: 'gift' }, { 'idempotency-key': 'alice-1' });
  t.equal(top.status, 201);
  t.equal((await admin.get('/admin/users/alice')).json.wallet.credit_usd, before + 5, "added to the file's balance");
  const fileKey = await admin.get('/admin/keys/chat');
  t.match(fileKey.json, { source: 'file', hint: null, user: 'alice' });
});

t.test('subscriptions: grant, suspend, extend, remove — each enforced on the next request', async (t) => {
  await admin.post('/admin/users', { name: 'planner' });
  const k = await admin.post('/admin/keys', { user: 'planner', group: 'plan', name: 'planner-key' });
  const msg = () =>
    call(`${g.url}/v1/messages`, {
      headers: { 'x-api-key': k.json.key, 'anthropic-version': '2023-06-01' },
      json: { model: 'claude-model', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] },
    });
  t.equal((await msg()).json.code, 'SUBSCRIPTION_NOT_FOUND', 'no plan yet');
  const granted = await admin.post('/admin/users/planner/subscriptions', { group: 'plan', days: 30 });
  t.equal(granted.status, 201);
  t.match(granted.json.subscriptions, [{ group: 'plan', status: 'active', active: true }]);
  t.equal((await msg()).status, 200, 'the plan serves');
  const suspended = await admin.patch('/admin/users/planner/subscriptions/plan', { status: 'suspended' });
  t.match(suspended.json.subscriptions, [{ status: 'suspended', active: false }]);
  t.equal((await msg()).json.code, 'SUBSCRIPTION_INVALID');
  const before = Date.parse(suspended.json.subscriptions[0].expires_at);
  const resumed = await admin.patch('/admin/users/planner/subscriptions/plan', { status: 'active', extend_days: 10 });
  t.equal(Date.parse(resumed.json.subscriptions[0].expires_at), before + 10 * 86_400_000, 'extended by ten days');
  t.equal((await msg()).status, 200);
  t.equal((await admin.req('DELETE', '/admin/users/planner/subscriptions/plan')).status, 200);
  t.equal((await msg()).json.code, 'SUBSCRIPTION_NOT_FOUND');
  const notPlan = await admin.post('/admin/users/planner/subscriptions', { group: 'chat' });
  t.match(notPlan.json.error, { code: 'invalid_request', details: [{ path: '/group' }] });
});

t.test('lists: paginated and filtered, file and store entries together', async (t) => {
  for (const n of ['list-a', 'list-b', 'list-c'])
    await admin.post('/admin/users', { name: n, status: n === 'list-b' ? 'inactive' : 'active' });
  const p1 = await admin.get('/admin/users?q=list-&limit=2');
  t.same(
    p1.json.data.map((u: any) => u.name),
    ['list-a', 'list-b'],
  );
  const p2 = await admin.get(`/admin/users?q=list-&limit=2&cursor=${p1.json.next_cursor}`);
  t.same(
    p2.json.data.map((u: any) => u.name),
    ['list-c'],
  );
  t.equal(p2.json.next_cursor, null);
  t.same(
    (await admin.get('/admin/users?q=list-&status=inactive')).json.data.map((u: any) => u.name),
    ['list-b'],
  );
  t.ok((await admin.get('/admin/users?source=file')).json.data.every((u: any) => u.source === 'file'));
  t.ok((await admin.get('/admin/keys?source=file')).json.data.some((k: any) => k.name === 'chat'));
  t.equal((await admin.get('/admin/users?limit=0')).status, 400);
  t.equal((await admin.get('/admin/keys?enabled=maybe')).status, 400);
});

t.test('bad input: every field error named; unknown paths 404, wrong methods 405 with Allow; bodies bounded', async (t) => {
  const r = await admin.post('/admin/users', { name: 'bad name!', rpm: -1, color: 'red' });
  t.equal(r.status, 400);
  t.same(r.json.error.details.map((d: any) => d.path).sort(), ['/color', '/name', '/rpm']);
  t.equal((await admin.post('/admin/users', undefined)).status, 400, 'no body');
  const notJson = await call(`${g.url}/admin/users`, { method: 'POST', headers: bearer(OPS), body: '{"name":' });
  t.same([notJson.status, notJson.json.error.code], [400, 'invalid_request']);
  const big = await call(`${g.url}/admin/users`, {
    method: 'POST',
    headers: bearer(OPS),
    body: JSON.stringify({ name: 'x', note: 'y'.repeat(70_000) }),
  });
  t.same([big.status, big.json.error.code], [413, 'body_too_large']);
  const key = await admin.post('/admin/keys', { user: 'nobody', group: 'chat', ip_allow: ['300.1.1.1'], quota_usd: -1 });
  t.same(key.json.error.details.map((d: any) => d.path).sort(), ['/user'], 'the first check that fails');
  const ips = await admin.post('/admin/keys', { user: 'alice', group: 'chat', ip_allow: ['300.1.1.1'] });
  t.match(ips.json.error.details, [{ path: '/ip_allow' }]);
  const grp = await admin.post('/admin/keys', { user: 'alice', group: 'nowhere' });
  t.match(grp.json.error.details, [{ path: '/group' }]);
  const custom = await admin.post('/admin/keys', { user: 'alice', group: 'chat', key: 'short' });
  t.match(custom.json.error.details, [{ path: '/key' }]);
  const unknown = await call(`${g.url}/admin/nothing-here`, { headers: bearer(OPS) });
  t.same([unknown.status, unknown.json.error.code], [404, 'not_found']);
  t.ok(admin.isError(unknown.json), 'in the one error shape');
  const wrong = await call(`${g.url}/admin/users/alice`, { method: 'DELETE', headers: bearer(OPS) });
  t.same([wrong.status, wrong.json.error.code, wrong.headers.get('allow')], [405, 'method_not_allowed', 'GET, PATCH']);
  t.ok(admin.isError(wrong.json), 'in the one error shape');
  t.equal((await admin.get('/admin/users/nobody')).status, 404);
});

t.test('authentication: named tokens, constant-time checks, failures logged without the token and limited per address', async (t) => {
  const none = await call(`${g.url}/admin/users`);
  t.same([none.status, none.json.error.code, none.headers.get('www-authenticate')], [401, 'unauthorized', 'Bearer']);
  await admin.post('/admin/users', { name: 'by-admin' }); // as ops
  const asAdmin = new AdminClient(g.url, ADMIN);
  await asAdmin.init();
  await asAdmin.patch('/admin/users/by-admin', { note: 'changed by the other token' });
  const entries = (await admin.get('/admin/audit?target=user:by-admin')).json.data;
  t.same(
    entries.map((e: any) => [e.action, e.actor]),
    [
      ['user.update', 'admin'],
      ['user.create', 'ops'],
    ],
    'each write names its token',
  );
  t.equal((await call(`${g.url}/admin/openapi.json`)).status, 200, 'the document needs no token');
  // A test-only address per run: the limit is per client address (loopback here), so the earlier 401 counts.
  const wrongToken = 'not-the-token-' + 'z'.repeat(20);
  let limited = 0;
  for (let i = 0; i < 8; i++) {
    const r = await call(`${g.url}/admin/users`, { headers: bearer(wrongToken) });
    if (r.status === 429) {
      limited++;
      t.ok(Number(r.headers.get('retry-after')) >= 1, 'with Retry-After');
    }
  }
  t.ok(limited >= 3, `past 5 failures a minute the address gets 429 (${limited})`);
  const ok = await call(`${g.url}/admin/users`, { headers: bearer(OPS) });
  t.equal(ok.status, 429, 'even with the right token, until the minute ends');
  t.notOk(JSON.stringify(logs).includes(wrongToken), 'the presented token is never logged');
  t.ok(
    logs.some((l) => l.msg === 'admin authentication failed' && l.ip),
    'the failure is logged with the address',
  );
});

t.test('audit: every write recorded with before and after, never a secret; logged as one line each', async (t) => {
  // (the previous test limited this address for the rest of the minute: a fresh gateway on the same folder)
  await g.close();
  g = await startGateway(config(dir), { log: capture });
  admin = await new AdminClient(g.url, OPS).init();
  const k = await admin.post('/admin/keys', { user: 'acme', group: 'chat', name: 'audited' });
  await admin.patch('/admin/keys/audited', { quota_usd: 3 });
  const [update, create] = (await admin.get('/admin/audit?target=key:audited')).json.data;
  t.match(create, {
    action: 'key.create',
    actor: 'ops',
    method: 'POST',
    path: '/admin/keys',
    before: null,
    after: { name: 'audited', quota: 0 },
  });
  t.match(update, { action: 'key.update', before: { quota: 0 }, after: { quota: 3_000_000 } });
  const text = JSON.stringify((await admin.get('/admin/audit?limit=200')).json);
  t.notOk(text.includes(k.json.key), 'no secret in the trail');
  t.notOk(/"digest"/.test(text), 'no digest either');
  t.ok(
    logs.some((l) => l.msg === 'admin audit' && l.audit?.action === 'key.update'),
    'logged',
  );
  const page = await admin.get('/admin/audit?limit=1');
  const next = await admin.get(`/admin/audit?limit=1&cursor=${page.json.next_cursor}`);
  t.not(next.json.data[0].id, page.json.data[0].id, 'paged');
  t.equal((await admin.get('/admin/audit?since=yesterday')).status, 400);
});

t.test('races: one name created twice, one Idempotency-Key twice — exactly one wins; money stays exact', async (t) => {
  const creates = await Promise.all([1, 2].map(() => admin.post('/admin/users', { name: 'racer' })));
  t.same(creates.map((r) => r.status).sort(), [201, 409]);
  const keys = await Promise.all([1, 2].map(() => admin.post('/admin/keys', { user: 'racer', group: 'chat', name: 'racer-key' })));
  t.same(keys.map((r) => r.status).sort(), [201, 409]);
  const tops = await Promise.all(
    [1, 2, 3, 4].map(() => admin.post('/admin/users/racer/topups', { amount_usd: 1, reference: 'once' }, { 'idempotency-key': 'race-1' })),
  );
  t.ok(tops.every((r) => r.status === 201));
  t.equal(tops.filter((r) => r.headers.get('idempotent-replayed') === 'true').length, 3);
  t.equal((await admin.get('/admin/users/racer')).json.wallet.credit_usd, 1);
});

t.test('a key deleted while its stream is in flight: the stream completes and is billed; the next request is refused', async (t) => {
  await admin.post('/admin/users', { name: 'streamer' });
  await admin.post('/admin/users/streamer/topups', { amount_usd: 5, reference: 's' }, { 'idempotency-key': 'stream-seed' });
  const key = (await admin.post('/admin/keys', { user: 'streamer', group: 'chat', name: 'stream-key' })).json.key as string;
  const stream = await sdk(key).chat.completions.create({
    model: 'chat-model',
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'a slow answer [[mock: chunk_delay=40]]' }],
  });
  let deleted = false;
  let text = '';
  let usage: unknown;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
    if (!deleted) {
      deleted = true;
      t.equal((await admin.del('/admin/keys/stream-key')).status, 204, 'deleted mid-stream');
    }
  }
  t.ok(text.length > 0 && usage, 'the stream ran to its end, with its usage');
  const spent = (await admin.get('/admin/users/streamer')).json.wallet.spent_usd;
  t.ok(spent > 0, `and was billed (${spent} USD)`);
  const after = await call(`${g.url}/v1/chat/completions`, { headers: bearer(key), json: chatBody() });
  t.same([after.status, after.json.code], [401, 'INVALID_API_KEY'], 'the next request is refused');
});

t.test('1,000 top-ups racing spending: balance = credits − recorded spend, exactly', async (t) => {
  await admin.post('/admin/users', { name: 'spender' });
  const k = (await admin.post('/admin/keys', { user: 'spender', group: 'chat', name: 'spender-key' })).json.key;
  await admin.post('/admin/users/spender/topups', { amount_usd: 1, reference: 'seed' }, { 'idempotency-key': 'seed' });
  let credited = 1_000_000;
  const work: Promise<unknown>[] = [];
  for (let i = 0; i < 1_000; i++) {
    if (i % 2 === 0) {
      const micros = 1 + ((i * 7919) % 5_000);
      credited += micros;
      work.push(
        admin.post(
          '/admin/users/spender/topups',
          { amount_usd: (micros / 1e6).toFixed(6), reference: `r${i}` },
          { 'idempotency-key': `t${i}` },
        ),
      );
    } else {
      work.push(call(`${g.url}/v1/chat/completions`, { headers: bearer(k), json: chatBody({ max_tokens: 20 }) }));
    }
    if (work.length >= 50) await Promise.all(work.splice(0));
  }
  await Promise.all(work);
  const u = (await admin.get('/admin/users/spender')).json;
  t.equal(Math.round(u.wallet.credit_usd * 1e6), credited, 'every top-up credited once');
  const usage = await call(`${g.url}/v1/usage`, { headers: bearer(k) });
  t.equal(Math.round(u.wallet.spent_usd * 1e6), Math.round(usage.json.usage.total.actual_cost * 1e6), 'spend = the recorded charges');
  t.equal(Math.round(u.wallet.balance_usd * 1e6), credited - Math.round(u.wallet.spent_usd * 1e6), 'balance = credits − spend');
});

t.test('what the API made outlives the process: users, keys, credits, Idempotency-Keys, the audit trail', async (t) => {
  await admin.post('/admin/users', { name: 'durable' });
  const k = (await admin.post('/admin/keys', { user: 'durable', group: 'chat', name: 'durable-key' })).json.key;
  const top = await admin.post('/admin/users/durable/topups', { amount_usd: 3, reference: 'd' }, { 'idempotency-key': 'dur-1' });
  await g.close();
  g = await startGateway(config(dir), { log: capture });
  admin = await new AdminClient(g.url, OPS).init();
  t.equal(
    (await call(`${g.url}/v1/chat/completions`, { headers: bearer(k), json: chatBody() })).status,
    200,
    'the key serves after a restart',
  );
  const again = await admin.post('/admin/users/durable/topups', { amount_usd: 3, reference: 'd' }, { 'idempotency-key': 'dur-1' });
  t.same(again.json, top.json, 'the Idempotency-Key still answers');
  t.ok((await admin.get('/admin/audit?target=user:durable')).json.data.length >= 2, 'the trail');
});

t.test('the quick start needs no admin API: the declared demo keys serve as before', async (t) => {
  const r = await call(`${g.url}/v1/chat/completions`, { headers: bearer(baseConfig().keys[0].key), json: chatBody() });
  t.equal(r.status, 200);
});
