/**
 * The web console in a real browser (Debian's Chromium, driven by playwright-core) against a real
 * gateway on the memory store with a ledger: an operator signs in, creates a user, tops it up
 * (a double click credits once, an answer lost on the way is retried safely), creates a key and
 * hands it to the openai SDK, sees the spend in the user's chart and the key holder sees it in
 * theirs — the same numbers as /v1/usage and the ledger — then disables the key and the SDK gets
 * 401. Every view passes axe-core (no serious or critical violation) and is photographed for
 * docs/console.md; hostile text renders as text; the Content-Security-Policy is asserted on the
 * wire and seen enforced in the page.
 */
import t from 'tap';
import { rmSync, writeFileSync } from 'node:fs';
import OpenAI from 'openai';
import YAML from 'yaml';
import { baseConfig, call, startGateway, tmpDir, type TapTest, type TestGateway } from '../helpers/gateway.js';
import { AdminClient } from '../helpers/admin.js';
import { axe, launch, screenshot, until, usdNumber, type Browser } from './browser.js';

t.setTimeout(900_000);

const TOKEN = 'console-admin-token-0123456789';
const XSS = '<img src=x onerror=alert(1)>';

let gw: TestGateway;
let admin: AdminClient;
let browser: Browser;
let config: Record<string, any>;
const storeDir = tmpDir('console-store-');

t.before(async () => {
  config = baseConfig();
  config.server.admin_token = TOKEN;
  config.store.path = storeDir;
  config.console = { enabled: true };
  // Prices that make a visible chart.
  config.models['chat-model'].price = { input: 300, output: 600 };
  gw = await startGateway(config);
  admin = await new AdminClient(gw.url, TOKEN).init();
  browser = await launch();
});
t.teardown(async () => {
  await browser?.close();
  await gw?.close();
  rmSync(storeDir, { recursive: true, force: true });
});

const CSP_DIRECTIVES = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
  "object-src 'none'",
  "require-trusted-types-for 'script'",
];

function strictHeaders(t: TapTest, headers: Headers, what: string): void {
  const csp = headers.get('content-security-policy') ?? '';
  for (const d of CSP_DIRECTIVES) t.ok(csp.split('; ').includes(d), `${what}: CSP has ${d}`);
  t.notMatch(csp, /unsafe-inline|unsafe-eval|\*/, `${what}: CSP allows no inline code, eval or wildcard`);
  t.equal(headers.get('x-content-type-options'), 'nosniff', `${what}: nosniff`);
  t.equal(headers.get('referrer-policy'), 'no-referrer', `${what}: no referrer`);
}

t.test('the console over HTTP: files, types, caching, and the same strict headers on every answer', async (t) => {
  const index = await call(`${gw.url}/console/`);
  t.equal(index.status, 200);
  t.equal(index.headers.get('content-type'), 'text/html; charset=utf-8');
  t.equal(index.headers.get('cache-control'), 'no-cache', 'index.html is revalidated on every load');
  strictHeaders(t, index.headers, 'index.html');
  t.notMatch(index.text, /<script>|<style|\sstyle=|\son[a-z]+=/i, 'no inline script, style or handler in the page');
  const assets = [...index.text.matchAll(/(?:src|href)="\.\/(assets\/[^"]+)"/g)].map((m) => m[1]);
  t.equal(assets.length, 3, 'a script, a style sheet and an icon');
  const types: Record<string, string> = { js: 'text/javascript; charset=utf-8', css: 'text/css; charset=utf-8', svg: 'image/svg+xml' };
  for (const a of assets) {
    const r = await call(`${gw.url}/console/${a}`);
    t.equal(r.status, 200, a);
    t.equal(r.headers.get('content-type'), types[a.split('.').pop()!], `${a}: its content type`);
    t.equal(r.headers.get('cache-control'), 'public, max-age=31536000, immutable', `${a}: hashed name, cached for good`);
    t.notMatch(r.text, /https?:\/\/(?!www\.w3\.org)[a-z0-9.-]+\.[a-z]{2,}\//i, `${a}: nothing fetched from elsewhere`);
    strictHeaders(t, r.headers, a);
  }
  const again = await call(`${gw.url}/console/`, { headers: { 'if-none-match': index.headers.get('etag')! } });
  t.equal(again.status, 304, 'an unchanged index.html is not sent again');

  const missing = await call(`${gw.url}/console/assets/nope.js`);
  t.equal(missing.status, 404);
  t.equal(missing.json.error.code, 'route_not_found');
  strictHeaders(t, missing.headers, 'a 404 under /console/');
  const traversal = await fetch(`${gw.url}/console/..%2f..%2fpackage.json`);
  t.equal(traversal.status, 404, 'nothing outside the console folder');
  const post = await call(`${gw.url}/console/`, { method: 'POST', body: 'x' });
  t.equal(post.status, 405);
  t.equal(post.headers.get('allow'), 'GET, HEAD');
  const bare = await fetch(`${gw.url}/console`, { redirect: 'manual' });
  t.equal(bare.status, 301);
  t.equal(bare.headers.get('location'), '/console/');

  // Off unless enabled: a reload turns it off and on.
  writeFileSync(gw.file, YAML.stringify({ ...config, console: { enabled: false } }));
  t.equal(await gw.gw.reload(), undefined);
  const off = await call(`${gw.url}/console/`);
  t.equal(off.status, 404, 'console.enabled: false — not served');
  t.equal(off.json.error.code, 'route_not_found');
  writeFileSync(gw.file, YAML.stringify(config));
  t.equal(await gw.gw.reload(), undefined);
  t.equal((await call(`${gw.url}/console/`)).status, 200, 'enabled again');
});

t.test('an operator runs a customer from the console; the key holder sees the same numbers', async (t) => {
  const page = browser.page;
  const topupPosts: { key: string | undefined }[] = [];
  const userPosts: string[] = [];
  page.on('request', (r) => {
    if (r.method() === 'POST' && /\/admin\/users\/[^/]+\/topups$/.test(r.url())) topupPosts.push({ key: r.headers()['idempotency-key'] });
    if (r.method() === 'POST' && r.url().endsWith('/admin/users')) userPosts.push(r.postData() ?? '');
  });

  const nav = await page.goto(`${gw.url}/console/`);
  strictHeaders(t, await nav!.allHeaders().then((h) => new Headers(h)), 'the page the browser loaded');
  await page.getByRole('heading', { name: 'Sign in', level: 1 }).waitFor();
  await axe(t, page, 'sign in');
  await screenshot(page, 'sign-in');

  // A wrong token: the admin API's answer, plainly.
  await page.getByLabel('Admin token').fill('not-the-token');
  await page.getByRole('button', { name: 'Sign in as operator' }).click();
  const refused = page.getByRole('alert');
  await refused.waitFor();
  t.match(await refused.innerText(), /Admin token required/, 'the message');
  t.match(await refused.innerText(), /unauthorized · HTTP 401/, 'the code and status');

  await page.getByLabel('Admin token').fill(TOKEN);
  await page.getByRole('button', { name: 'Sign in as operator' }).click();
  await page.getByRole('heading', { name: 'Users', level: 1 }).waitFor();
  t.notMatch(page.url(), new RegExp(TOKEN), 'the token is not in the address');
  t.equal(await page.evaluate(`sessionStorage.length`), 1, 'kept in this tab’s session storage');

  // Nothing the API would refuse: a name it would refuse is refused here, and not sent.
  const create = page.getByRole('form', { name: 'New user' });
  await create.getByLabel('Name', { exact: true }).fill(XSS);
  await create.getByRole('button', { name: 'Create user' }).click();
  t.equal(await create.locator('.field-error').first().innerText(), 'Letters, digits, _ . @ and - only, at most 64');
  t.equal(userPosts.length, 0, 'the refused name was never sent');

  await create.getByLabel('Name', { exact: true }).fill('acme');
  await create.getByLabel('Note').fill(XSS);
  await create.getByRole('button', { name: 'Create user' }).click();
  await page.getByRole('heading', { name: /User acme/, level: 1 }).waitFor();
  t.equal(userPosts.length, 1);
  t.equal(await page.getByTestId('user-note').innerText(), XSS, 'hostile text in a note renders as text');
  t.equal(await page.locator('img').count(), 0, 'and makes no element');

  // Top-ups: one click, then a double click — two top-ups, not three.
  const topup = page.getByRole('form', { name: 'Top up' });
  await topup.getByLabel('Amount, USD').fill('1.1234567');
  await topup.getByLabel('Reference').fill('too precise');
  await topup.getByRole('button', { name: 'Top up' }).click();
  t.equal(await topup.locator('.field-error').innerText(), 'At most 6 decimal places');
  t.equal(topupPosts.length, 0, 'an amount the API would refuse is not sent');

  await topup.getByLabel('Amount, USD').fill('5');
  await topup.getByLabel('Reference').fill('invoice 1');
  await topup.getByRole('button', { name: 'Top up' }).click();
  await topup.getByRole('status').filter({ hasText: 'Credited: $5.00 (invoice 1)' }).waitFor();
  await topup.getByLabel('Amount, USD').fill('7.5');
  await topup.getByLabel('Reference').fill('invoice 2');
  await topup.getByRole('button', { name: 'Top up' }).dblclick();
  await topup
    .getByRole('status')
    .filter({ hasText: /credited.*\$7\.50 \(invoice 2\)/i })
    .waitFor();
  // The second click of a double click can land after the answer (a fast gateway): the form still
  // holds the credited top-up and its key, so that click is a replay, not an empty submission.
  await topup.getByRole('button', { name: 'Top up' }).click();
  await topup.getByRole('status').filter({ hasText: 'Already credited (sent twice, credited once): $7.50 (invoice 2)' }).waitFor();
  t.equal(await topup.getByLabel('Amount, USD').inputValue(), '7.5', 'the form keeps what was credited');
  await page.getByTestId('wallet-credit').filter({ hasText: '$12.50' }).waitFor();
  let recorded = (await admin.get('/admin/users/acme/topups')).json.data;
  t.same(
    recorded.map((r: any) => [r.amount_usd, r.reference]),
    [
      [7.5, 'invoice 2'],
      [5, 'invoice 1'],
    ],
    'exactly two top-ups recorded',
  );
  t.ok(
    topupPosts.every((p) => p.key && /^console-[0-9a-f]{32}$/.test(p.key)),
    'every top-up carried an Idempotency-Key',
  );
  const second = topupPosts.slice(1);
  t.ok(second.length >= 1 && new Set(second.map((p) => p.key)).size === 1, 'the double click sent one Idempotency-Key');
  t.not(topupPosts[0].key, topupPosts[1].key, 'a new submission, a new key');

  // An answer lost on the way: the top-up happened, the page does not know; submitting again is safe.
  let lose = true;
  await page.route('**/admin/users/acme/topups', async (route) => {
    if (route.request().method() !== 'POST' || !lose) return route.fallback();
    lose = false;
    await route.fetch(); // it reaches the gateway…
    await route.abort('connectionreset'); // …and its answer never reaches the page
  });
  await topup.getByLabel('Amount, USD').fill('2.25');
  await topup.getByLabel('Reference').fill('invoice 3');
  await topup.getByRole('button', { name: 'Top up' }).click();
  await topup.getByRole('alert').filter({ hasText: 'The top-up was not confirmed' }).waitFor();
  t.match(await topup.innerText(), /Submitting again is safe/);
  await topup.getByRole('button', { name: 'Top up' }).click();
  await topup.getByRole('status').filter({ hasText: 'Already credited (sent twice, credited once): $2.25 (invoice 3)' }).waitFor();
  await page.unroute('**/admin/users/acme/topups');
  recorded = (await admin.get('/admin/users/acme/topups')).json.data;
  t.same(
    recorded.map((r: any) => r.amount_usd),
    [2.25, 7.5, 5],
    'the retried top-up is recorded once',
  );
  t.equal((await admin.get('/admin/users/acme')).json.wallet.credit_usd, 14.75);

  // A key: the secret is shown once, copied with the button, and works with the openai SDK.
  const keyForm = page.getByRole('form', { name: 'New key' });
  await keyForm.getByLabel('Group').fill('chat');
  await keyForm.getByLabel('Name (optional)').fill('acme-key');
  await keyForm.getByLabel('Per day, USD (0: none)').fill('0.1234567');
  await keyForm.getByRole('button', { name: 'Create key' }).click();
  t.equal(await keyForm.locator('.field-error').innerText(), 'At most 6 decimal places');
  await keyForm.getByLabel('Per day, USD (0: none)').fill('0');
  await keyForm.getByRole('button', { name: 'Create key' }).click();
  const secretBox = page.getByRole('region', { name: 'The secret of key acme-key' });
  await secretBox.waitFor();
  const secret = await secretBox.getByTestId('secret').inputValue();
  t.match(secret, /^sk-[0-9a-f]{64}$/, 'the new secret');
  await secretBox.getByRole('button', { name: 'Copy' }).click();
  await secretBox.getByRole('status').filter({ hasText: 'Copied' }).waitFor();
  t.equal(await page.evaluate('navigator.clipboard.readText()'), secret, 'the copy button copies the secret');
  await axe(t, page, 'a user, with a new secret shown');

  const sdk = (key: string) => new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 30_000 });
  for (const text of ['Hello there', 'And again']) {
    const r = await sdk(secret).chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: text }] });
    t.ok(r.choices[0].message.content, 'the SDK is answered');
  }

  // The spend appears in the user's chart: the ledger's numbers, and /v1/usage's.
  const usage = await call(`${gw.url}/v1/usage`, { headers: { authorization: `Bearer ${secret}` } });
  t.equal(usage.status, 200);
  const charged: number = usage.json.usage.total.actual_cost;
  t.ok(charged > 0, 'the requests were charged');
  const ledger = await until(async () => {
    const s = (await admin.get('/admin/ledger/summary?by=model&user=acme&type=request')).json;
    const sum = s.data.reduce((n: number, r: any) => n + Math.round(r.charged_usd * 1e6), 0) / 1e6;
    return sum === charged ? s : undefined;
  }, 'the ledger has both requests');
  t.equal(ledger.data.length, 1);
  t.equal(ledger.data[0].requests, 2);
  await until(async () => {
    await page.reload();
    await page.getByTestId('spend-total').waitFor();
    return usdNumber(await page.getByTestId('spend-total').innerText()) === charged ? true : undefined;
  }, 'the spend in the user chart');
  t.equal(usdNumber(await page.getByTestId('spend-total').innerText()), charged, 'the chart’s total is the ledger’s and /v1/usage’s');
  t.equal(usdNumber(await page.getByTestId('wallet-spent').innerText()), charged, 'and the wallet’s spend');
  const byModel = page.getByRole('table', { name: 'Spend by model' });
  const row = byModel.getByRole('row', { name: /chat-model/ });
  t.match(await row.innerText(), /chat-model\s+2\s/, 'two requests of chat-model');
  t.equal(usdNumber(await row.getByRole('cell').last().innerText()), ledger.data[0].charged_usd);
  const byDay = page.getByRole('table', { name: 'Spend by day' });
  t.equal(await byDay.getByRole('row').count(), 2, 'one day with spend (and the header)');
  t.equal(await page.locator('.chart canvas').count(), 1, 'the chart is drawn');
  await axe(t, page, 'a user');
  await page.evaluate(`document.getElementById('spend-h').scrollIntoView({ block: 'start' })`);
  await screenshot(page, 'user');
  await page.evaluate('window.scrollTo(0, 0)');
  await screenshot(page, 'user-wallet');

  // Limits of a key: what the API would refuse is refused here; the rest is saved.
  await page.getByRole('button', { name: 'Limits of acme-key' }).click();
  const limits = page.getByRole('form', { name: 'Limits of acme-key' });
  await limits.getByLabel('1d window, USD (0: none)').fill('-1');
  await limits.getByRole('button', { name: 'Save limits' }).click();
  t.equal(await limits.locator('.field-error').innerText(), 'Must not be negative');
  await limits.getByLabel('1d window, USD (0: none)').fill('2.5');
  await limits.getByRole('button', { name: 'Save limits' }).click();
  await limits.waitFor({ state: 'detached' });
  t.equal((await admin.get('/admin/keys/acme-key')).json.windows_usd['1d'], 2.5, 'saved through the admin API');

  // The key holder's view, in another tab: the numbers of /v1/usage.
  const holder = await browser.newPage();
  await holder.goto(`${gw.url}/console/`);
  await holder.getByLabel('API key').fill(secret);
  await holder.getByRole('button', { name: 'Show my usage' }).click();
  await holder.getByRole('heading', { name: 'My usage', level: 1 }).waitFor();
  const now = (await call(`${gw.url}/v1/usage`, { headers: { authorization: `Bearer ${secret}` } })).json;
  const cells = async (testid: string) => (await holder.getByTestId(testid).getByRole('cell').allInnerTexts()).map((s) => s.trim());
  const [reqT, , , , listT, chargedT] = await cells('usage-total');
  t.equal(Number(reqT), now.usage.total.requests, 'requests as /v1/usage says');
  t.equal(usdNumber(chargedT), now.usage.total.actual_cost, 'charged as /v1/usage says');
  t.equal(usdNumber(listT), now.usage.total.cost, 'list price as /v1/usage says');
  t.equal(usdNumber((await cells('usage-today'))[5]), now.usage.today.actual_cost, 'today as /v1/usage says');
  const days = holder.getByRole('table', { name: 'Charged per day' });
  const expectDays: [string, number][] = now.daily_usage
    ? now.daily_usage.map((r: any) => [r.date, r.actual_cost])
    : [[new Date().toISOString().slice(0, 10), now.usage.today.actual_cost]];
  const shownDays: [string, number][] = [];
  for (const r of await days.locator('tbody tr').all()) {
    shownDays.push([await r.locator('th').innerText(), usdNumber(await r.locator('td').last().innerText())]);
  }
  t.same(
    shownDays,
    expectDays,
    now.daily_usage ? 'the daily chart is daily_usage' : 'no daily_usage on this gateway: the chart is today’s row',
  );
  t.equal(await holder.locator('.chart canvas').count(), 1, 'the daily chart is drawn');
  t.match(await holder.getByRole('table', { name: 'Usage by model' }).innerText(), /chat-model\s+2\s/, 'per-model stats as /v1/usage says');
  if (now.balance !== undefined) t.equal(usdNumber(await holder.getByTestId('usage-balance').innerText()), now.balance);
  t.notMatch(holder.url(), new RegExp(secret), 'the key is not in the address');
  await axe(t, holder, 'the key holder’s usage');
  await screenshot(holder, 'key-holder');

  // Disable the key: the SDK is refused.
  await page.getByRole('button', { name: 'Disable acme-key' }).click();
  await page.getByRole('button', { name: 'Enable acme-key' }).waitFor();
  const refusedCall = await sdk(secret)
    .chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'Still there?' }] })
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  t.ok(refusedCall instanceof OpenAI.AuthenticationError, 'the SDK gets an authentication error');
  t.equal((refusedCall as InstanceType<typeof OpenAI.APIError>).status, 401, '401');
  t.equal((await admin.get('/admin/keys/acme-key')).json.enabled, false);

  // Rotate: a new secret, shown once; the old one stops.
  await page.getByRole('button', { name: 'Enable acme-key' }).click();
  await page.getByRole('button', { name: 'Disable acme-key' }).waitFor();
  const keys = page.getByRole('region', { name: 'Keys' });
  await keys.getByRole('button', { name: 'Rotate' }).click();
  await keys.getByRole('button', { name: 'Rotate acme-key: the old secret stops' }).click();
  const rotatedBox = page.getByRole('region', { name: 'The secret of key acme-key' }).last();
  const rotated = await until(async () => {
    const v = await rotatedBox.getByTestId('secret').inputValue();
    return v !== secret ? v : undefined;
  }, 'the rotated secret');
  t.match(rotated, /^sk-[0-9a-f]{64}$/);
  const old = await sdk(secret)
    .models.list()
    .then(
      () => 200,
      (e: any) => e.status as number,
    );
  t.equal(old, 401, 'the old secret is refused');
  const fresh = await sdk(rotated).chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'Hi' }] });
  t.ok(fresh.choices[0].message.content, 'the new secret works');

  await holder.close();
  t.same(browser.dialogs, [], 'no dialog ever opened');
  t.same(browser.errors, [], 'no error in the pages');
});

t.test('keys, upstream accounts and the audit log views', async (t) => {
  const page = browser.page;
  await page.getByRole('link', { name: 'Keys', exact: true }).click();
  await page.getByRole('heading', { name: 'Keys', level: 1 }).waitFor();
  await page.getByRole('row', { name: /acme-key/ }).waitFor();
  await axe(t, page, 'keys');
  await screenshot(page, 'keys');

  await page.getByRole('link', { name: 'Upstream accounts' }).click();
  await page.getByRole('heading', { name: 'Upstream accounts', level: 1 }).waitFor();
  const accounts = (await admin.get('/admin/accounts')).json;
  for (const p of accounts.providers) {
    const table = page.getByRole('table', { name: `Accounts of ${p.name}` });
    await table.waitFor();
    for (const a of p.accounts) {
      const row = table.getByRole('row', { name: new RegExp(a.name) });
      t.match(await row.innerText(), new RegExp(`${a.state}`), `${p.name}/${a.name}: its state`);
    }
  }
  await axe(t, page, 'upstream accounts');
  await screenshot(page, 'accounts');

  await page.getByRole('link', { name: 'Audit log' }).click();
  await page.getByRole('heading', { name: 'Audit log', level: 1 }).waitFor();
  await page.getByLabel('Target (user:name or key:name)').fill('user:acme');
  await page.getByRole('row', { name: /user\.create/ }).waitFor();
  const audit = (await admin.get('/admin/audit?target=user:acme')).json.data;
  // The log asks again as the target is typed: the rows of the unfiltered log may still show.
  const trail = await until(
    async () => {
      const n = await page.locator('tbody tr').count();
      return n === audit.length ? n : undefined;
    },
    'the filtered trail',
    10_000,
  ).catch(() => page.locator('tbody tr').count());
  t.equal(trail, audit.length, 'every entry of the trail');
  const created = page.getByRole('row', { name: /user\.create/ });
  await created.getByText('Before and after').click();
  t.match(await created.getByLabel('After').innerText(), XSS, 'the note, as text, in the record after');
  t.equal(await page.locator('img').count(), 0);
  await axe(t, page, 'the audit log');
  await screenshot(page, 'audit');

  // Users list: the search, and suspend.
  await page.getByRole('link', { name: 'Users', exact: true }).click();
  await page.getByLabel('Search name or note').fill('acm');
  await page.getByRole('row', { name: /acme/ }).waitFor();
  // The list asks again as the search is typed: the rows of the unfiltered list may still show.
  const rows = await until(
    async () => {
      const n = await page.locator('tbody tr').count();
      return n === 1 ? n : undefined;
    },
    'the filtered list',
    10_000,
  ).catch(() => page.locator('tbody tr').count());
  t.equal(rows, 1, 'the search finds acme alone');
  t.equal(await page.getByRole('row', { name: /acme/ }).locator('td.note').innerText(), XSS);
  await page.getByRole('button', { name: 'Suspend acme' }).click();
  await page.getByRole('button', { name: 'Reactivate acme' }).waitFor();
  t.equal((await admin.get('/admin/users/acme')).json.status, 'inactive', 'suspended through the admin API');
  await page.getByLabel('Search name or note').fill('');
  await page.getByRole('row', { name: /alice/ }).waitFor();
  await axe(t, page, 'users');
  await screenshot(page, 'users');
  t.same(browser.dialogs, []);
  t.same(browser.errors, []);
});

t.test('hostile input renders as text, and the policy holds in the page', async (t) => {
  const page = browser.page;
  await page.goto(`${gw.url}/console/#/users/${encodeURIComponent(XSS)}`);
  const alert = page.getByRole('alert');
  await alert.waitFor();
  t.match(await alert.innerText(), `No user named '${XSS}'`, 'the 404 names the user, as text');
  t.match(await alert.innerText(), /not_found · HTTP 404/);
  t.equal(await page.getByRole('heading', { level: 1 }).innerText(), `User ${XSS}`, 'the heading too');
  t.equal(await page.locator('img').count(), 0, 'no element made of it');
  await axe(t, page, 'an error');

  // The CSP as the browser applies it: Trusted Types refuse HTML strings and inline handlers; what
  // is not from this origin is not loaded; each refusal is reported.
  const seen = await page.evaluate(`new Promise((resolve) => {
    const out = { violations: [] };
    document.addEventListener('securitypolicyviolation', (e) => out.violations.push(e.effectiveDirective));
    try { document.body.insertAdjacentHTML('beforeend', '<b>x</b>'); out.html = 'inserted'; } catch (e) { out.html = e.name; }
    const img = document.createElement('img');
    try { img.setAttribute('onerror', 'window.__xss = 1'); out.handler = 'set'; } catch (e) { out.handler = e.name; }
    img.addEventListener('error', () => setTimeout(() => {
      out.violations = [...new Set(out.violations)].sort();
      resolve(out);
    }, 100));
    img.src = 'data:image/png;base64,AAAA';
    document.body.append(img);
  })`);
  t.same(
    seen,
    { violations: ['img-src', 'require-trusted-types-for'], html: 'TypeError', handler: 'TypeError' },
    'HTML strings and inline handlers are refused, data: images not loaded, and every refusal reported',
  );
  t.same(browser.dialogs, [], 'no alert ever ran');
});
