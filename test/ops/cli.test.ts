/**
 * The `gateway` command, run as operators run it (node bin/gateway.js): every command, strict
 * options, exit codes (0 done, 1 failed, 2 wrong usage).
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import YAML from 'yaml';
import { baseConfig, bearer, call, chatBody, KEYS, messagesBody, ROOT, startGateway, tmpDir, writeConfig } from '../helpers/gateway.js';
import { modelCall } from '../limits/helpers.js';

// Some hundred processes, each a node start: on a loaded machine more than tap's default allows.
t.setTimeout(900_000);

const BIN = path.join(ROOT, 'bin/gateway.js');
// Children run as an operator runs them: without tap's process tracking (NODE_OPTIONS), and
// without an admin target from the environment unless a test gives one.
const { GATEWAY_URL: _url, GATEWAY_ADMIN_TOKEN: _token, ...inherited } = process.env;
const ENV = { ...inherited, NODE_OPTIONS: '' };
const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'));

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** A port nothing listens on (bound, then released). */
function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

function gateway(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { cwd: tmpDir(), env: { ...ENV, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

t.test('--version and --help', async (t) => {
  for (const flag of ['--version', '-v']) {
    const r = await gateway([flag]);
    t.equal(r.code, 0);
    t.equal(r.stdout.trim(), pkg.version, flag);
    t.equal(r.stderr, '', 'nothing built, nothing else said');
  }
  for (const args of [['--help'], ['help'], ['start', '--help']]) {
    const r = await gateway(args);
    t.equal(r.code, 0, args.join(' '));
    t.match(r.stdout, /usage: gateway <command>/);
    t.match(r.stdout, /keygen/);
    t.match(r.stdout, /users add NAME/);
    t.match(r.stdout, /keys create --user USER --group GROUP/);
    t.match(r.stdout, /topup USER AMOUNT --reference REF \[--idempotency-key K\]/);
    t.match(r.stdout, /same idempotency key never\s+credits twice/);
    t.match(r.stdout, /GATEWAY_ADMIN_TOKEN/);
  }
});

t.test('strict options: unknown or misspelt flags, missing values, stray arguments and unknown commands are errors', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [['start', '--conf', 'x.yaml'], /Unknown option '--conf'/],
    [['check', '--config'], /argument missing|requires a value|--config/i],
    [['check', 'a.yaml', 'b.yaml'], /unexpected argument 'b.yaml'/],
    [['check', 'a.yaml', '--config', 'b.yaml'], /not both/],
    [['keygen', '--length', '10'], /Unknown option '--length'/],
    [['usage'], /needs a KEY_NAME/],
    [['reset-quota'], /needs a KEY_NAME/],
    [['users'], /users needs a subcommand: add, list, show, set/],
    [['users', 'frob'], /unknown users subcommand 'frob'/],
    [['users', 'add'], /users add needs a NAME/],
    [['users', 'add', 'x', 'y'], /unexpected argument 'y'/],
    [['users', 'add', 'x', '--rpm', 'fast'], /--rpm must be a whole number, 0 or more \(got 'fast'\)/],
    [['users', 'add', 'x', '--status', 'gone'], /--status must be active or inactive/],
    [['users', 'set', 'x'], /nothing to change/],
    [['users', 'list', '--source', 'disk'], /--source must be file or store/],
    [['keys'], /keys needs a subcommand/],
    [['keys', 'create', '--user', 'u'], /keys create needs --group GROUP/],
    [['keys', 'create', '--user', 'u', '--group', 'g', '--quota', '$5'], /--quota must be a decimal USD amount/],
    [['keys', 'disable'], /keys disable needs a NAME/],
    [['keys', 'list', '--enabled', 'maybe'], /--enabled must be true or false/],
    [['topup', 'acme'], /topup needs an AMOUNT/],
    [['topup', 'acme', '10'], /topup needs --reference REF/],
    [['topup', 'acme', '1e3', '--reference', 'x'], /AMOUNT must be a decimal USD amount such as 25.50/],
    [['topup', 'acme', '10', '--reference'], /argument missing|--reference/i],
    [['plans', 'grant', 'u'], /plans grant needs a GROUP/],
    [['plans', 'grant', 'u', 'g', '--days', '3', '--expires-at', '2030-01-01T00:00:00Z'], /--days or --expires-at, not both/],
    [['plans', 'extend', 'u', 'g'], /plans extend needs --days N/],
    [['plans', 'suspend', 'u', 'g', '--days', '3'], /Unknown option '--days'/],
    [['audit', '--all', '--cursor', 'x'], /--all or --cursor, not both/],
    [['audit', '--limit', 'ten'], /--limit must be a whole number, 1 or more/],
    [['frobnicate'], /unknown command 'frobnicate'/],
    [['--verbose'], /Unknown option '--verbose'/],
    [[], /no command given/],
  ];
  for (const [args, message] of cases) {
    const r = await gateway(args);
    t.equal(r.code, 2, `${args.join(' ')}: exit 2`);
    t.match(r.stderr, message, args.join(' '));
    t.match(r.stderr, /gateway --help/, 'points at the help');
    t.equal(r.stdout, '');
  }
});

t.test('check: ok with a summary, or every error with its line', async (t) => {
  const ok = await gateway(['check', path.join(ROOT, 'gateway.yaml')]);
  t.equal(ok.code, 0);
  t.match(ok.stdout, /gateway.yaml: ok \(1 providers, 4 models, 3 groups, 3 keys, 6 routes\)/);
  const cfg = baseConfig();
  cfg.groups.chat.models.push('ghost');
  cfg.server.port = 'eighty';
  const file = writeConfig(cfg);
  for (const args of [
    ['check', file],
    ['check', '--config', file],
  ]) {
    const bad = await gateway(args);
    t.equal(bad.code, 1);
    t.match(bad.stderr, /gateway.yaml: 2 errors/);
    t.match(bad.stderr, /gateway.yaml:\d+:\d+ server.port: must be integer/);
    t.match(bad.stderr, /groups.chat.models\[2\]: model 'ghost' is not defined/);
  }
  const viaEnv = await gateway(['check'], { GATEWAY_CONFIG: file });
  t.equal(viaEnv.code, 1, 'GATEWAY_CONFIG names the file');
  const missing = await gateway(['check', '/nonexistent/gateway.yaml']);
  t.equal(missing.code, 1);
  t.match(missing.stderr, /cannot read config/);
});

t.test('keygen: sk- and 64 hex, and its SHA-256 for key_sha256 — which the gateway accepts', async (t) => {
  const r = await gateway(['keygen', '--json']);
  t.equal(r.code, 0);
  const { key, key_sha256: digest } = JSON.parse(r.stdout);
  t.match(key, /^sk-[0-9a-f]{64}$/);
  t.equal(digest, createHash('sha256').update(key).digest('hex'));
  const again = JSON.parse((await gateway(['keygen', '--json'])).stdout);
  t.not(again.key, key, 'a new key each time');
  const text = await gateway(['keygen']);
  t.match(text.stdout, /^key: {8}sk-[0-9a-f]{64}\nkey_sha256: [0-9a-f]{64}\n/);

  const cfg = baseConfig();
  cfg.keys.push({ key_sha256: digest, name: 'generated', user: 'alice', group: 'chat' });
  const g = await startGateway(cfg);
  t.teardown(() => g.close());
  t.equal((await modelCall(g, key, 'chat', 'chat-model')).status, 200, 'the key works with only its digest in the config');
});

t.test("usage and reset-quota talk to the running gateway's admin API", async (t) => {
  const cfg = baseConfig();
  cfg.server.admin_token = 'admin-secret-token';
  cfg.keys.find((k: any) => k.name === 'chat').quota = 5;
  cfg.keys.find((k: any) => k.name === 'chat').windows = { '1d': 2 };
  const g = await startGateway(cfg);
  t.teardown(() => g.close());
  t.equal((await modelCall(g, KEYS.chat, 'chat', 'chat-model', { input: 1000, output: 2000 })).status, 200);
  // 1000 × $1/M + 2000 × $2/M = $0.005
  const admin = ['--url', g.url, '--token', 'admin-secret-token'];

  const json = await gateway(['usage', 'chat', '--json', ...admin]);
  t.equal(json.code, 0, json.stderr);
  const u = JSON.parse(json.stdout);
  t.match(u, {
    key: 'chat',
    user: 'alice',
    group: 'chat',
    enabled: true,
    quota: { limit: 5, used: 0.005, reserved: 0 },
    windows: { '1d': { limit: 2, used: 0.005 } },
    balance: { credit: 100, spent: 0.005, remaining: 99.995 },
    usage: { today: { requests: 1, input_tokens: 1000, output_tokens: 2000, actual_cost: 0.005 } },
  });
  t.same(
    u.model_stats.map((m: any) => m.model),
    ['chat-model'],
  );

  // The address and token from the config file, as an operator on the gateway's host runs it.
  const local = YAML.parse(readFileSync(g.file, 'utf8'));
  local.server.port = g.gw.port;
  const file = writeConfig(local);
  const human = await gateway(['usage', 'chat', '--config', file]);
  t.equal(human.code, 0, human.stderr);
  t.match(human.stdout, /key chat \(user alice, group chat\)/);
  t.match(human.stdout, /quota\s+\$0\.005 used of \$5\.00/);
  t.match(human.stdout, /window 1d\s+\$0\.005 used of \$2\.00, resets /);
  t.match(human.stdout, /balance\s+\$99\.995 left of \$100\.00/);
  t.match(human.stdout, /today\s+1 requests, 1000 input \/ 2000 output tokens, \$0\.005 charged/);

  const reset = await gateway(['reset-quota', 'chat', '--config', file]);
  t.equal(reset.code, 0, reset.stderr);
  t.match(reset.stdout, /quota of key 'chat' reset/);
  const after = JSON.parse((await gateway(['usage', 'chat', '--json', ...admin])).stdout);
  t.equal(after.quota.used, 0, 'the used quota is forgotten');
  t.equal(after.usage.today.requests, 1, 'usage records stay');

  const unknown = await gateway(['usage', 'nobody', ...admin]);
  t.equal(unknown.code, 1);
  t.match(unknown.stderr, /usage failed \(404\).*No key named 'nobody'/);
  const wrongToken = await gateway(['usage', 'chat', '--url', g.url, '--token', 'nope']);
  t.equal(wrongToken.code, 1);
  t.match(wrongToken.stderr, /401/);
  const noToken = await gateway(['usage', 'chat', '--config', writeConfig(baseConfig())]);
  t.equal(noToken.code, 1);
  t.match(noToken.stderr, /no admin token/);
  const closed = await freePort();
  const down = await gateway(['reset-quota', 'chat', '--url', `http://127.0.0.1:${closed}`, '--token', 'x']);
  t.equal(down.code, 1);
  t.match(down.stderr, `cannot reach the gateway at http://127.0.0.1:${closed}: connect ECONNREFUSED`);
  t.equal(
    (await call(g.url + '/admin/keys/chat/usage', { method: 'POST', headers: bearer('admin-secret-token') })).status,
    405,
    'usage is GET',
  );
});

t.test('onboarding a customer entirely through the CLI: users, keys, top-ups, plans, audit', async (t) => {
  const TOKEN = 'admin-secret-token';
  const cfg = baseConfig();
  cfg.server.admin_token = TOKEN;
  const g = await startGateway(cfg);
  t.teardown(() => g.close());
  // The gateway and its token from the environment, as a script sets them once.
  const gw = (...args: string[]) => gateway(args, { GATEWAY_URL: g.url, GATEWAY_ADMIN_TOKEN: TOKEN });
  const api = async (path: string) => (await call(g.url + path, { headers: bearer(TOKEN) })).json;
  const chat = (key: string) => call(`${g.url}/v1/chat/completions`, { headers: bearer(key), json: chatBody() });
  const ok = (r: Run, what: string) => {
    t.equal(r.code, 0, `${what}: exit 0 ${r.stderr}`);
    return r.stdout;
  };
  const fails = (r: Run, what: string, message: string) => {
    t.equal(r.code, 1, `${what}: exit 1`);
    t.equal(r.stdout, '', `${what}: nothing on stdout`);
    t.match(r.stderr, message, what);
  };

  const added = ok(await gw('users', 'add', 'acme', '--note', 'customer #42', '--rpm', '100'), 'users add');
  t.match(added, /^user 'acme' created\nuser acme \(store, active\)\n/);
  t.match(added, /note\s+customer #42\n/);
  t.match(added, /balance\s+\$0\.00 /);
  t.match(added, /rpm\s+100\n/);
  fails(await gw('users', 'add', 'acme'), 'a second acme', "users add failed (409): A user named 'acme' exists [conflict]");
  fails(await gw('users', 'add', 'bad name!'), 'a bad name', 'users add failed (400): /name: must match pattern');
  fails(await gw('users', 'set', 'alice', '--rpm', '1'), 'a user of the file', "User 'alice' is declared in the config file");
  fails(await gw('keys', 'create', '--user', 'ghost', '--group', 'chat'), 'no such user', "/user: no user named 'ghost' [invalid_request]");
  fails(
    await gw('users', 'show', 'acme', '--token', 'nope'),
    '--token over the environment',
    'users show failed (401): Admin token required',
  );

  const created = ok(await gw('keys', 'create', '--user', 'acme', '--group', 'chat', '--name', 'acme-ci', '--quota', '5.5'), 'keys create');
  t.match(created, /^key 'acme-ci' created for user acme, group chat\n/);
  const secret = /^secret: (sk-[0-9a-f]{64})$/m.exec(created)?.[1] ?? '';
  t.ok(secret, 'the secret, labelled');
  t.match(created, /Shown this once, never again/);
  t.match(created, /quota\s+\$5\.50\n/);
  const shown = ok(await gw('keys', 'show', 'acme-ci'), 'keys show');
  t.match(shown, /^key acme-ci \(store, enabled\)\n/);
  t.notOk(shown.includes(secret.slice(3, 40)), 'never shown again');
  t.equal((await chat(secret)).status, 403, 'a new wallet is empty: refused');

  const top = await gw('topup', 'acme', '25.50', '--reference', 'inv-1001');
  t.match(ok(top, 'topup'), /^credited \$25\.50 to user acme\n/);
  t.match(top.stdout, /balance\s+\$25\.50 \(\$25\.50 credited, \$0\.00 spent\)/);
  const idem = /idempotency key: (cli-[0-9a-f]{32})$/m.exec(top.stdout)?.[1] ?? '';
  t.ok(idem, 'the idempotency key it made is printed');
  t.match(top.stderr, `idempotency key: ${idem} (to retry this top-up, pass --idempotency-key ${idem}`, 'and said before the call');
  t.equal((await chat(secret)).status, 200, 'the printed key answers a chat request');
  const spent = (await api('/admin/users/acme')).wallet.spent_usd;
  t.ok(spent > 0, 'charged to the wallet');

  const retry = await gw('topup', 'acme', '25.50', '--reference', 'inv-1001', '--idempotency-key', idem);
  t.match(ok(retry, 'the same top-up again'), /^already credited at .* nothing added again\n/);
  t.equal(retry.stderr, '', 'no new key made');
  const replay = await gw('topup', 'acme', '25.50', '--reference', 'inv-1001', '--idempotency-key', idem, '--json');
  t.match(JSON.parse(ok(replay, 'again, --json')), { user: 'acme', amount_usd: 25.5, reference: 'inv-1001', wallet: { credit_usd: 25.5 } });
  t.equal((await api('/admin/users/acme')).wallet.credit_usd, 25.5, 'credited once');
  fails(
    await gw('topup', 'acme', '30', '--reference', 'inv-1001', '--idempotency-key', idem),
    'the key for another amount',
    'topup failed (409): This Idempotency-Key was used for another top-up',
  );
  const correction = await gw('topup', 'acme', '-0.50', '--reference', 'fix-1', '--idempotency-key', 'fix-1');
  t.match(ok(correction, 'a correction'), /^corrected -\$0\.50 on user acme\n/);
  t.equal((await api('/admin/users/acme')).wallet.credit_usd, 25, 'taken off');
  fails(await gw('topup', 'acme', '-1000', '--reference', 'fix-2'), 'below zero', '[below_zero]');

  // --json is the API's answer.
  for (const [args, path] of [
    [['users', 'show', 'acme'], '/admin/users/acme'],
    [['users', 'list'], '/admin/users'],
    [['users', 'list', '--source', 'store', '--query', 'customer'], '/admin/users?source=store&q=customer'],
    [['keys', 'show', 'acme-ci'], '/admin/keys/acme-ci'],
    [['keys', 'list', '--user', 'acme', '--enabled', 'true'], '/admin/keys?user=acme&enabled=true'],
    [['audit', '--target', 'user:acme', '--limit', '2'], '/admin/audit?target=user%3Aacme&limit=2'],
  ] as const) {
    const r = await gw(...args, '--json');
    t.same(JSON.parse(ok(r, args.join(' '))), await api(path), `${args.join(' ')} --json`);
  }
  const everyone = JSON.parse(ok(await gw('users', 'list', '--all', '--limit', '1', '--json'), 'users list --all'));
  t.same(everyone, { data: (await api('/admin/users')).data, next_cursor: null }, '--all follows next_cursor through every page');
  t.same(
    everyone.data.map((u: any) => u.name),
    ['acme', 'alice'],
  );
  const onePage = ok(await gw('users', 'list', '--limit', '1'), 'users list --limit 1');
  t.match(onePage, /^NAME\s+SOURCE\s+STATUS\s+BALANCE\s+KEYS\s+PLANS\s+NOTE\nacme\s+store\s+active\s+\$\d+\.\d+\s+1\s+—\s+customer #42\n/);
  t.match(onePage, /\(more: --cursor acme, or --all\)/);
  t.match(
    ok(await gw('keys', 'list', '--user', 'acme'), 'keys list'),
    /^NAME\s+USER.*\nacme-ci\s+acme\s+chat\s+enabled\s+store\s+\$5\.50\s+never\s+sk-/,
  );
  const audit = JSON.parse(ok(await gw('audit', '--target', 'user:acme', '--all', '--json'), 'audit --all'));
  t.same(
    audit.data.map((e: any) => e.action),
    ['topup.correction', 'topup', 'user.create'],
    'one top-up in the trail, whatever the retries',
  );
  t.match(
    ok(await gw('audit', '--actor', 'admin', '--limit', '1'), 'audit'),
    /^AT\s+ACTOR\s+ACTION\s+TARGET\s+FROM\n\S+\s+admin\s+topup\.correction\s+user:acme\s+/,
  );

  const changed = JSON.parse(ok(await gw('users', 'set', 'acme', '--rpm', '5', '--concurrency', '2', '--json'), 'users set'));
  t.match(changed, { name: 'acme', rpm: 5, concurrency: 2, revision: 2 });

  t.match(ok(await gw('keys', 'disable', 'acme-ci'), 'keys disable'), /key 'acme-ci' disabled/);
  const disabled = await chat(secret);
  t.same([disabled.status, disabled.json.code], [401, 'API_KEY_DISABLED'], 'disabled at once');
  t.same(
    JSON.parse(ok(await gw('keys', 'list', '--enabled', 'false', '--json'), 'keys list --enabled false')).data.map((k: any) => k.name),
    ['acme-ci'],
  );
  ok(await gw('keys', 'enable', 'acme-ci'), 'keys enable');
  t.equal((await chat(secret)).status, 200, 'enabled again');
  const rotated = ok(await gw('keys', 'rotate', 'acme-ci'), 'keys rotate');
  const fresh = /^secret: (sk-[0-9a-f]{64})$/m.exec(rotated)?.[1] ?? '';
  t.ok(fresh && fresh !== secret, 'a new secret, labelled');
  t.equal((await chat(secret)).status, 401, 'the old secret is dead');
  t.equal((await chat(fresh)).status, 200, 'the new one works');
  const deleted = await gw('keys', 'delete', 'acme-ci', '--json');
  t.equal(ok(deleted, 'keys delete --json'), '', '204: nothing to print');
  t.same((await chat(fresh)).json.code, 'INVALID_API_KEY', 'deleted');
  fails(await gw('keys', 'show', 'acme-ci'), 'a deleted key', "keys show failed (404): No key named 'acme-ci' [not_found]");

  // Plans: each change enforced on the next request.
  ok(await gw('users', 'add', 'planner'), 'users add planner');
  const planKey = JSON.parse(ok(await gw('keys', 'create', '--user', 'planner', '--group', 'plan', '--json'), 'keys create --json'));
  t.match(planKey, { user: 'planner', group: 'plan', source: 'store', key: /^sk-[0-9a-f]{64}$/, name: /^key-[0-9a-f]{12}$/ });
  const msg = async () =>
    (await call(`${g.url}/v1/messages`, { headers: { 'x-api-key': planKey.key, 'anthropic-version': '2023-06-01' }, json: messagesBody() }))
      .json;
  t.equal((await msg()).code, 'SUBSCRIPTION_NOT_FOUND');
  fails(await gw('plans', 'grant', 'planner', 'chat'), 'not a plan group', "/group: group 'chat' is not a plan group");
  t.match(
    ok(await gw('plans', 'grant', 'planner', 'plan', '--days', '30'), 'plans grant'),
    /^plan 'plan' of user planner granted: active, until 20/,
  );
  t.equal((await msg()).type, 'message', 'the plan serves');
  t.match(ok(await gw('plans', 'suspend', 'planner', 'plan'), 'plans suspend'), /suspended: suspended \(not serving\), until/);
  t.equal((await msg()).code, 'SUBSCRIPTION_INVALID');
  const before = Date.parse((await api('/admin/users/planner')).subscriptions[0].expires_at);
  t.match(ok(await gw('plans', 'resume', 'planner', 'plan'), 'plans resume'), /resumed: active, until/);
  t.equal((await msg()).type, 'message');
  const extended = JSON.parse(ok(await gw('plans', 'extend', 'planner', 'plan', '--days', '10', '--json'), 'plans extend'));
  t.equal(Date.parse(extended.subscriptions[0].expires_at), before + 10 * 86_400_000, 'ten days more');
  ok(await gw('plans', 'remove', 'planner', 'plan'), 'plans remove');
  t.equal((await msg()).code, 'SUBSCRIPTION_NOT_FOUND');
  const until = JSON.parse(
    ok(await gw('plans', 'grant', 'planner', 'plan', '--expires-at', '2099-06-30T00:00:00Z', '--json'), 'grant --expires-at'),
  );
  t.match(until.subscriptions, [{ group: 'plan', expires_at: '2099-06-30T00:00:00.000Z', active: true }]);
});

t.test('topup sends AMOUNT as the decimal string given and the Idempotency-Key it prints; --json prints the answer as sent', async (t) => {
  const seen: { headers: http.IncomingHttpHeaders; body: string; url?: string }[] = [];
  const answer =
    '{ "id": "1-0", "user": "acme", "amount_usd": 0.1, "reference": "r", "actor": "ops",\n  "created_at": "2030-01-01T00:00:00.000Z", "wallet": { "credit_usd": 0.1, "spent_usd": 0, "balance_usd": 0.1 } }';
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push({ headers: req.headers, body, url: req.url });
      res.writeHead(201, { 'content-type': 'application/json' }).end(answer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  const r = await gateway(['topup', 'acme', '0.10', '--reference', 'r', '--json', '--url', url, '--token', 't0k']);
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout, `${answer}\n`, 'the answer, byte for byte');
  const key = /idempotency key: (cli-[0-9a-f]{32}) /.exec(r.stderr)?.[1];
  t.ok(key, 'the key it made, on stderr (stdout is the JSON)');
  t.equal(seen[0].url, '/admin/users/acme/topups');
  t.equal(seen[0].body, '{"amount_usd":"0.10","reference":"r"}', 'the amount as a string, as given');
  t.equal(seen[0].headers['idempotency-key'], key, 'the key printed is the key sent');
  t.equal(seen[0].headers.authorization, 'Bearer t0k');
  t.equal(seen[0].headers['content-type'], 'application/json');
  const neg = await gateway([
    'topup',
    'acme',
    '-12345678901.000001',
    '--reference',
    'r',
    '--idempotency-key',
    'k-1',
    '--url',
    url,
    '--token',
    't0k',
  ]);
  t.equal(neg.code, 0, neg.stderr);
  t.equal(neg.stderr, '', 'a key given: none made');
  t.equal(seen[1].body, '{"amount_usd":"-12345678901.000001","reference":"r"}', 'a correction: every digit, no float');
  t.equal(seen[1].headers['idempotency-key'], 'k-1');
});

t.test('start: serves until SIGTERM or SIGINT, drains, exits 0; a bad config exits 1', async (t) => {
  const dir = tmpDir();
  const cfg = baseConfig();
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, YAML.stringify(cfg));
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    const child = spawn(process.execPath, [BIN, 'start', '--config', file], { env: { ...ENV, GATEWAY_WATCH_CONFIG: '0' } });
    let stderr = '';
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on('data', (d) => {
        stderr += d;
        const line = stderr.split('\n').find((l) => l.includes('"msg":"gateway listening on '));
        if (line) resolve(JSON.parse(line).url);
      });
      child.on('exit', () => reject(new Error(`exited early: ${stderr}`)));
    });
    t.equal(
      (
        await call(url + '/v1/chat/completions', {
          headers: bearer(KEYS.chat),
          json: { model: 'chat-model', messages: [{ role: 'user', content: 'hi' }] },
        })
      ).status,
      200,
    );
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    child.kill(signal);
    t.equal(await exited, 0, `${signal}: exit 0`);
    const lines = stderr
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    t.ok(
      lines.some((l) => l.msg.startsWith('shutting down') && l.signal === signal),
      'the signal is logged',
    );
    t.ok(
      lines.some((l) => l.msg === 'gateway stopped'),
      'and the stop',
    );
    t.ok(
      lines.some((l) => l.msg === 'request' && l.status === 200),
      'the access line was written before exit',
    );
  }
  const bad = writeConfig({ version: 1 });
  const r = await gateway(['start', bad]);
  t.equal(r.code, 1);
  t.match(r.stderr, /missing required setting 'providers'/);
});
