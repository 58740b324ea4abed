/**
 * Upstream account pools across two gateway processes (the real CLI) on one real redis-server:
 * account health lives in the store, so a cooldown, a demotion (slow account) learned by one
 * instance holds on the other; sticky sessions stay on their account whichever instance serves a
 * turn, also near capacity; /admin/accounts on either instance says what every instance holds.
 */
import t from 'tap';
import { rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import YAML from 'yaml';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { baseConfig, tmpDir } from '../helpers/gateway.js';
import { RedisServer } from '../helpers/redis.js';
import { request, startGatewayProcess, type Answer, type GatewayProcess } from '../helpers/process.js';
import { until as poll } from '../helpers/upstream.js';

t.setTimeout(600_000);

const until = (cond: () => Promise<boolean> | boolean, ms = 30_000) => poll(cond, ms, 50);

const KEY = `sk-${'7c'.repeat(32)}`;
const cred = (account: string) => `key-${account}`;

let redis: RedisServer;
let mock: MockServer;
let a: GatewayProcess;
let b: GatewayProcess;

t.before(async () => {
  redis = await RedisServer.start();
  mock = await startMockServer({ keepRequests: 500 });
  const base = baseConfig();
  const provider = (accounts: Record<string, unknown>[], scheduling: Record<string, unknown> = {}) => ({
    kind: 'openai',
    base_url: `${mock.url}/v1`,
    accounts: accounts.map((x) => ({ ...x, api_key: cred(String(x.name)) })),
    scheduling: { cooldown: '30s', ...scheduling },
  });
  const cfg = {
    version: 1,
    server: { host: '127.0.0.1', port: 0, admin_token: 'adm' },
    store: { kind: 'redis', url: redis.url, prefix: 'ma:', instances_hint: 2, lease: '2s', timeout: '3s' },
    providers: {
      solo: provider([{ name: 'solo', concurrency: 2 }]),
      cool: provider([{ name: 'c1' }, { name: 'c2' }]),
      slow: provider([{ name: 's1' }, { name: 's2' }], { slow_factor: 3, slow_margin: '300ms' }),
      full: provider([
        { name: 'f1', concurrency: 1 },
        { name: 'f2', concurrency: 1 },
      ]),
    },
    models: Object.fromEntries(['solo', 'cool', 'slow', 'full'].map((p) => [`${p}-m`, { provider: p, price: { input: 1, output: 1 } }])),
    groups: { g: { kind: 'chat', passthrough: true, models: ['solo-m', 'cool-m', 'slow-m', 'full-m'] } },
    users: { u: { balance: 1_000 } },
    keys: [{ key: KEY, name: 'k', user: 'u', group: 'g' }],
    plugins: base.plugins,
    chains: base.chains,
    routes: base.routes,
  };
  const dir = tmpDir('multi-accounts-');
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, YAML.stringify(cfg));
  [a, b] = await Promise.all([startGatewayProcess(file), startGatewayProcess(file)]);
  t.teardown(async () => {
    await Promise.all([a.stop(), b.stop()]);
    rmSync(dir, { recursive: true, force: true });
    await mock.close();
    await redis.destroy();
  });
});

const ask = (gw: GatewayProcess, model: string, text: string, session?: string) =>
  request(`${gw.url}/v1/chat/completions`, {
    headers: { authorization: `Bearer ${KEY}` },
    body: { model, max_tokens: 20, messages: [{ role: 'user', content: text }], ...(session ? { prompt_cache_key: session } : {}) },
  }).catch((e: Error): Answer => ({ status: 0, headers: {}, text: e.message, json: undefined }));

/** The account that served the request whose text is `text` (the mock records each request with its credential). */
const servedBy = (text: string) => {
  const r = [...mock.requests].reverse().find((x) => x.body.includes(text));
  return r ? r.credential.replace(/^key-/, '') : undefined;
};

async function view(gw: GatewayProcess): Promise<{ counts: string; accounts: Record<string, Record<string, any>> }> {
  const r = await request(`${gw.url}/admin/accounts`, { headers: { authorization: 'Bearer adm' } });
  const accounts: Record<string, Record<string, any>> = {};
  for (const p of r.json.providers) for (const x of p.accounts) accounts[x.name] = x;
  return { counts: r.json.counts, accounts };
}

/** A request that hangs upstream until `abort()` (the client goes away). */
function hanging(gw: GatewayProcess, model: string, text: string): { abort: () => void; answered: Promise<void> } {
  const u = new URL(`${gw.url}/v1/chat/completions`);
  let req!: http.ClientRequest;
  const answered = new Promise<void>((resolve) => {
    req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: 'POST',
        agent: false,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve());
        res.on('error', () => resolve());
      },
    );
    req.on('error', () => resolve());
    req.end(JSON.stringify({ model, max_tokens: 20, messages: [{ role: 'user', content: `[[mock: delay=120000]] ${text}` }] }));
  });
  return { abort: () => req.destroy(), answered };
}

t.test('/admin/accounts on each instance says what every instance holds: an account full across instances is not available', async (t) => {
  const one = hanging(a, 'solo-m', 'held through a');
  const two = hanging(b, 'solo-m', 'held through b');
  t.ok(await until(() => mock.credential(cred('solo')).inFlight === 2), 'one request in flight through each instance');
  for (const gw of [a, b]) {
    const v = await view(gw);
    t.equal(v.counts, 'all_instances');
    t.match(
      v.accounts.solo,
      { in_flight: 2, in_flight_here: 1, concurrency: 2, available: false },
      `instance ${gw.pid}: 2 in flight of 2 (1 through it), not available`,
    );
  }
  const refused = await ask(a, 'solo-m', 'one more');
  t.same([refused.status, refused.json?.error?.code], [503, 'no_available_accounts'], 'and indeed the next request is refused');
  one.abort();
  two.abort();
  await Promise.all([one.answered, two.answered]);
  t.ok(await until(async () => (await view(a)).accounts.solo.in_flight === 0), 'freed across instances');
});

t.test('a cooldown learned by one instance holds on the other: it sends the account nothing', async (t) => {
  // c1 answers 429 once (retry after 30 s): b's request fails over to c2, and b cools c1 down.
  mock.script(cred('c1'), { next: ['status=429 retry_after=30'] });
  for (let i = 0; i < 20 && mock.credential(cred('c1')).requests === 0; i++) t.equal((await ask(b, 'cool-m', `warm ${i}`)).status, 200);
  t.equal(mock.credential(cred('c1')).requests, 1, 'c1 was tried once, through b, and answered 429');
  t.ok(await until(async () => (await view(a)).accounts.c1.state === 'cooling'), 'a shows c1 cooling down');
  t.match((await view(a)).accounts.c1, { cooldown_reason: 'rate_limited', available: false });
  const before = mock.credential(cred('c1')).requests;
  for (let i = 0; i < 10; i++) t.equal((await ask(a, 'cool-m', `through a ${i}`)).status, 200);
  t.equal(mock.credential(cred('c1')).requests, before, 'none of 10 requests through a reached c1');
});

t.test(
  'an account demoted (slow) on one instance is demoted on both: sessions alternating between instances stay on one account',
  async (t) => {
    mock.script(cred('s1'), { always: 'delay=1500' });
    // Times to first token, learned through b only: s1 is far slower than s2.
    for (let i = 0; i < 40 && !(await view(b)).accounts.s1.demoted; i++) t.equal((await ask(b, 'slow-m', `sample ${i}`)).status, 200);
    t.ok((await view(b)).accounts.s1.demoted, 'b demoted s1');
    t.ok(await until(async () => (await view(a)).accounts.s1.demoted, 10_000), 'and a knows it, without a request of its own');
    // A demoted account still gets one probe per 30 s on each instance (sessionless here).
    t.equal((await ask(a, 'slow-m', 'probe a')).status, 200);
    t.equal((await ask(b, 'slow-m', 'probe b')).status, 200);
    const used = new Map<string, string[]>();
    for (let turn = 0; turn < 4; turn++) {
      for (let s = 0; s < 10; s++) {
        const text = `session ${s} turn ${turn}`;
        const r = await ask((turn + s) % 2 ? a : b, 'slow-m', text, `sess-${s}`);
        t.equal(r.status, 200);
        used.set(`sess-${s}`, [...(used.get(`sess-${s}`) ?? []), servedBy(text)!]);
      }
    }
    const moved = [...used].filter(([, accounts]) => new Set(accounts).size > 1);
    t.same(moved, [], 'no session moved between accounts (its prompt cache stays where it is)');
    t.ok(
      [...used.values()].every((accounts) => accounts[0] === 's2'),
      'and none was bound to the slow account',
    );
  },
);

t.test('near capacity: a session whose account is momentarily full across instances is served elsewhere once, then returns', async (t) => {
  const turn = async (gw: GatewayProcess, n: number) => {
    const text = `near capacity turn ${n}`;
    const r = await ask(gw, 'full-m', text, 'sess-full');
    t.equal(r.status, 200, `turn ${n} served`);
    return servedBy(text)!;
  };
  const home = await turn(a, 1);
  const other = home === 'f1' ? 'f2' : 'f1';
  // Fill `home` (concurrency 1) through b: a request that hangs there. If the first lands on the
  // other account, a second can only land on `home`; then the first goes away.
  const inFlight = (x: string) => mock.credential(cred(x)).inFlight;
  const first = hanging(b, 'full-m', 'filler 1');
  t.ok(await until(() => inFlight('f1') + inFlight('f2') === 1), 'the filler reached an account');
  let hold = first;
  if (inFlight(home) === 0) {
    hold = hanging(b, 'full-m', 'filler 2');
    t.ok(await until(() => inFlight(home) === 1), `the second filler reached ${home}`);
    first.abort();
    await first.answered;
  }
  t.ok(await until(async () => (await view(a)).accounts[other].in_flight === 0), `${home} is full (through b), ${other} has room`);
  t.equal(await turn(a, 2), other, `turn 2, through a: ${home} is full across instances, ${other} serves it`);
  hold.abort();
  await hold.answered;
  t.ok(await until(async () => (await view(a)).accounts[home].in_flight === 0), `${home} has room again`);
  t.equal(await turn(b, 3), home, `turn 3, through b: back on ${home}, where the conversation was`);
  t.equal(await turn(a, 4), home, 'and it stays');
});
