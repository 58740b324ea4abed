/**
 * The console on two gateway processes (the real CLI) sharing one real redis-server: the operator
 * works in instance A's console while the customer's SDK talks to instance B. Top-ups made in A
 * (a double click among them) are recorded exactly once each, as B's admin API sees them; a key
 * made in A serves through B; B's spend shows in A's console and in the key holder's view, with
 * /v1/usage's numbers; the key disabled in A is refused by B.
 */
import t from 'tap';
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import YAML from 'yaml';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { baseConfig, tmpDir } from '../helpers/gateway.js';
import { RedisServer } from '../helpers/redis.js';
import { request, startGatewayProcess, type GatewayProcess } from '../helpers/process.js';
import { AdminClient } from '../helpers/admin.js';
import { axe, launch, until, usdNumber, type Browser } from './browser.js';

t.setTimeout(900_000);

const TOKEN = 'console-instances-admin-token';

let redis: RedisServer;
let mock: MockServer;
let browser: Browser;
let a: GatewayProcess;
let b: GatewayProcess;
const dir = tmpDir('console-instances-');

t.before(async () => {
  redis = await RedisServer.start();
  mock = await startMockServer();
  const base = baseConfig();
  const cfg = {
    version: 1,
    server: { host: '127.0.0.1', port: 0, admin_token: TOKEN },
    store: { kind: 'redis', url: redis.url, prefix: 'console:', instances_hint: 2, timeout: '2s' },
    console: { enabled: true },
    ledger: { dir: path.join(dir, 'ledger') },
    providers: { up: { kind: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream' } },
    models: { m: { provider: 'up', price: { input: 1000, output: 2000 } } },
    groups: { g: { kind: 'chat', passthrough: true, models: ['m'] } },
    users: {},
    keys: [],
    plugins: base.plugins,
    chains: base.chains,
    routes: base.routes,
  };
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, YAML.stringify(cfg));
  [a, b] = await Promise.all([startGatewayProcess(file), startGatewayProcess(file)]);
  browser = await launch();
});
t.teardown(async () => {
  await browser?.close();
  await Promise.all([a?.stop(), b?.stop()]);
  await mock?.close();
  await redis?.destroy();
  rmSync(dir, { recursive: true, force: true });
});

t.test('operated in A’s console, served by B', async (t) => {
  const B = await new AdminClient(b.url, TOKEN).init();
  const page = browser.page;
  await page.goto(`${a.url}/console/`);
  await page.getByLabel('Admin token').fill(TOKEN);
  await page.getByRole('button', { name: 'Sign in as operator' }).click();
  await page.getByRole('heading', { name: 'Users', level: 1 }).waitFor();

  const create = page.getByRole('form', { name: 'New user' });
  await create.getByLabel('Name', { exact: true }).fill('team');
  await create.getByRole('button', { name: 'Create user' }).click();
  await page.getByRole('heading', { name: /User team/, level: 1 }).waitFor();

  const topup = page.getByRole('form', { name: 'Top up' });
  await topup.getByLabel('Amount, USD').fill('3');
  await topup.getByLabel('Reference').fill('r1');
  await topup.getByRole('button', { name: 'Top up' }).click();
  await topup.getByRole('status').filter({ hasText: 'Credited: $3.00 (r1)' }).waitFor();
  await topup.getByLabel('Amount, USD').fill('4.000001');
  await topup.getByLabel('Reference').fill('r2');
  await topup.getByRole('button', { name: 'Top up' }).dblclick();
  await topup
    .getByRole('status')
    .filter({ hasText: /credited.*\$4\.000001 \(r2\)/i })
    .waitFor();
  const recorded = (await B.get('/admin/users/team/topups')).json.data;
  t.same(
    recorded.map((r: any) => [r.amount_usd, r.reference]),
    [
      [4.000001, 'r2'],
      [3, 'r1'],
    ],
    'exactly two top-ups, as instance B reads them',
  );
  await page.getByTestId('wallet-credit').filter({ hasText: '$7.000001' }).waitFor();

  const keyForm = page.getByRole('form', { name: 'New key' });
  await keyForm.getByLabel('Group').fill('g');
  await keyForm.getByLabel('Name (optional)').fill('team-key');
  await keyForm.getByRole('button', { name: 'Create key' }).click();
  const secret = await page.getByRole('region', { name: 'The secret of key team-key' }).getByTestId('secret').inputValue();
  t.match(secret, /^sk-[0-9a-f]{64}$/);

  // The customer's SDK talks to B: the key made through A is served there (docs/accounts.md: within 2 s).
  const sdk = new OpenAI({ apiKey: secret, baseURL: `${b.url}/v1`, maxRetries: 0, timeout: 30_000 });
  const chat = () => sdk.chat.completions.create({ model: 'm', max_tokens: 20, messages: [{ role: 'user', content: 'Hello' }] });
  await until(() => chat().then(() => true), 'the key made through A answers through B');
  await chat();

  const usage = (await request(`${b.url}/v1/usage`, { headers: { authorization: `Bearer ${secret}` } })).json;
  t.equal(usage.usage.total.requests, 2);
  const charged: number = usage.usage.total.actual_cost;
  t.ok(charged > 0);

  // A's console: the wallet's spend is the store's (B's requests), the spend chart is the ledger's.
  await until(async () => {
    await page.reload();
    await page.getByTestId('wallet-spent').waitFor();
    return usdNumber(await page.getByTestId('wallet-spent').innerText()) === charged ? true : undefined;
  }, 'B’s spend in A’s console');
  // The spend chart is the ledger's: on Redis each instance drains the records into its day files
  // (here one folder for both), and A's chart shows them once drained.
  const ledger = await B.get('/admin/ledger/summary?by=day,model&user=team&type=request');
  t.equal(ledger.status, 200, 'the Redis store keeps a ledger');
  await until(async () => {
    await page.reload();
    await page.getByTestId('spend-total').waitFor();
    return usdNumber(await page.getByTestId('spend-total').innerText()) === charged ? true : undefined;
  }, 'the ledger’s spend in A’s chart');
  const again = await B.get('/admin/ledger/summary?by=day,model&user=team&type=request');
  const ledgerTotal = again.json.data.reduce((n: number, r: any) => n + Math.round(r.charged_usd * 1e6), 0) / 1e6;
  t.equal(ledgerTotal, charged, 'the chart’s total is the ledger’s and the store’s');
  await axe(t, page, 'a user, on Redis');

  // The key holder, on A: /v1/usage's numbers (the counters are the store's, shared).
  const holder = await browser.newPage();
  await holder.goto(`${a.url}/console/`);
  await holder.getByLabel('API key').fill(secret);
  await holder.getByRole('button', { name: 'Show my usage' }).click();
  const total = holder.getByTestId('usage-total');
  await total.waitFor();
  const cells = (await total.getByRole('cell').allInnerTexts()).map((s) => s.trim());
  t.equal(Number(cells[0]), usage.usage.total.requests, 'requests as /v1/usage says');
  t.equal(usdNumber(cells[5]), charged, 'charged as /v1/usage says');
  t.equal(usdNumber(await holder.getByTestId('usage-remaining').innerText()), usage.remaining, 'what is left, as /v1/usage says');
  await holder.close();

  // Upstream accounts: the state of each, as A reports it.
  await page.getByRole('link', { name: 'Upstream accounts' }).click();
  const accounts = (await request(`${a.url}/admin/accounts`, { headers: { authorization: `Bearer ${TOKEN}` } })).json;
  for (const p of accounts.providers) {
    for (const acc of p.accounts) {
      const row = page.getByRole('table', { name: `Accounts of ${p.name}` }).getByRole('row', { name: new RegExp(acc.name) });
      t.match(await row.innerText(), acc.state, `${p.name}/${acc.name}`);
    }
  }

  // Disabled in A's console, refused by B.
  await page.getByRole('link', { name: 'Keys', exact: true }).click();
  await page.getByRole('button', { name: 'Disable team-key' }).click();
  await page.getByRole('button', { name: 'Enable team-key' }).waitFor();
  const status = await until(
    () =>
      chat().then(
        () => undefined,
        (e: any) => (e.status === 401 ? e : undefined),
      ),
    'B refuses the key disabled through A',
  );
  t.ok(status instanceof OpenAI.AuthenticationError, 'the SDK gets 401');
  t.same(browser.dialogs, []);
  t.same(browser.errors, []);
});
