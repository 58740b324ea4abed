/**
 * Key quota and key spend windows (issue item 4). Quota: 429 API_KEY_QUOTA_EXHAUSTED (flat,
 * x-should-retry: false, no Retry-After), 0 = unlimited; raising it in gateway.yaml (reload) clears
 * the exhaustion; the used quota is reset by the operator — `POST /admin/keys/<name>/reset-quota`
 * and `gateway reset-quota`. Windows 5h / 1d / 7d: fixed, starting at first use, resetting once their
 * duration has passed; 429 rate_limit_exceeded with the exact Chinese message, no Retry-After,
 * x-should-retry: false; reset_at in /v1/usage.
 */
import t from 'tap';
import { writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import path from 'node:path';
import YAML from 'yaml';
import { baseConfig, bearer, call, ROOT, startGateway, type TestGateway } from '../helpers/gateway.js';
import { ManualClock } from '../../core/clock.js';
import { assertError, key, modelCall, usageOf } from './helpers.js';

/** $0.015 on claude-model. */
const COST = { input: 1000, output: 800 };
const ADMIN = 'admin-token-for-tests-0123456789';
const K = {
  quota: key(0x300),
  unlimited: key(0x301),
  w5h: key(0x302),
  w1d: key(0x303),
  w7d: key(0x304),
  all: key(0x305),
  chatW: key(0x306),
  respW: key(0x307),
  cli: key(0x308),
};
const H = 3_600_000;
const D = 24 * H;

const clock = new ManualClock(Date.UTC(2026, 0, 5, 12, 0, 0));
let cfg: Record<string, any>;
let g: TestGateway;

t.before(async () => {
  cfg = baseConfig();
  cfg.server.admin_token = ADMIN;
  cfg.keys.push(
    { key: K.quota, name: 'quota', user: 'alice', group: 'messages', quota: 0.03 },
    { key: K.unlimited, name: 'unlimited', user: 'alice', group: 'messages', quota: 0, windows: { '5h': 0, '1d': 0, '7d': 0 } },
    { key: K.w5h, name: 'w5h', user: 'alice', group: 'messages', windows: { '5h': 0.02 } },
    { key: K.w1d, name: 'w1d', user: 'alice', group: 'messages', windows: { '1d': 0.02 } },
    { key: K.w7d, name: 'w7d', user: 'alice', group: 'messages', windows: { '7d': 0.02 } },
    { key: K.all, name: 'all', user: 'alice', group: 'messages', quota: 1, windows: { '5h': 0.02, '1d': 0.5, '7d': 0.9 } },
    { key: K.chatW, name: 'chat-w', user: 'alice', group: 'chat', windows: { '5h': 0.00005 } },
    { key: K.respW, name: 'resp-w', user: 'alice', group: 'responses', windows: { '1d': 0.00005 } },
    { key: K.cli, name: 'cli', user: 'alice', group: 'messages', quota: 0.015 },
  );
  g = await startGateway(cfg, { clock });
});
t.teardown(() => g.close());

const reload = async () => {
  writeFileSync(g.file, YAML.stringify(cfg));
  const err = await g.gw.reload();
  if (err) throw err;
};
const exhausted = { status: 429, code: 'API_KEY_QUOTA_EXHAUSTED', retryAfter: null, shouldRetryFalse: true };
const ok = async (t: any, k: string, label: string, proto: 'messages' | 'chat' = 'messages') =>
  t.equal((await modelCall(g, k, proto, 'claude-model', COST)).status, 200, label);

t.test('key quota: exhausted → 429 API_KEY_QUOTA_EXHAUSTED; raising it in gateway.yaml clears it', async (t) => {
  await ok(t, K.quota, 'first 0.015');
  await ok(t, K.quota, 'second: 0.015 < 0.03, admitted');
  assertError(t, await modelCall(g, K.quota, 'messages', 'claude-model', COST), exhausted, 'messages');
  assertError(t, await modelCall(g, K.quota, 'chat', 'claude-model', COST), exhausted, 'chat (converted): flat too');
  assertError(t, await modelCall(g, K.quota, 'messages', 'free-model'), exhausted, 'even a $0 model');
  let u = await usageOf(g, K.quota);
  t.match(u, {
    mode: 'quota_limited',
    status: 'quota_exhausted',
    remaining: 0,
    quota: { limit: 0.03, used: 0.03, remaining: 0, unit: 'USD' },
  });

  cfg.keys.find((k: any) => k.name === 'quota').quota = 0.045;
  await reload();
  u = await usageOf(g, K.quota);
  t.match(u, { status: 'active', remaining: 0.015, quota: { limit: 0.045, used: 0.03, remaining: 0.015 } }, 'used survives the reload');
  await ok(t, K.quota, 'raised quota: admitted');
  assertError(t, await modelCall(g, K.quota, 'messages', 'claude-model', COST), exhausted, 'and used up again');
});

t.test('quota 0 and windows 0 mean unlimited', async (t) => {
  for (let i = 0; i < 5; i++) await ok(t, K.unlimited, `call ${i + 1}`);
  const u = await usageOf(g, K.unlimited);
  t.equal(u.mode, 'unrestricted');
});

t.test('reset-quota over the admin API', async (t) => {
  const url = `${g.url}/admin/keys/quota/reset-quota`;
  assertError(t, await call(url, { method: 'POST' }), { status: 401 }, 'no token');
  assertError(t, await call(url, { method: 'POST', headers: bearer('wrong-token-wrong-token') }), { status: 401 }, 'wrong token');
  const r = await call(url, { method: 'POST', headers: bearer(ADMIN) });
  t.equal(r.status, 200);
  t.same(r.json, { ok: true, key: 'quota' });
  const u = await usageOf(g, K.quota);
  t.match(u, { status: 'active', remaining: 0.045, quota: { used: 0, remaining: 0.045 } });
  await ok(t, K.quota, 'usable again');
  t.equal((await usageOf(g, K.quota)).quota.used, 0.015);
  t.equal((await call(`${g.url}/admin/keys/nobody/reset-quota`, { method: 'POST', headers: bearer(ADMIN) })).status, 404, 'unknown key');
});

function runCli(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [path.join(ROOT, 'bin/gateway.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => {
      out += d;
    });
    p.stderr.on('data', (d) => {
      err += d;
    });
    p.on('close', (code) => resolve({ code, out, err }));
  });
}

t.test('reset-quota with the CLI (`gateway reset-quota KEY`)', async (t) => {
  await ok(t, K.cli, 'use the whole quota');
  assertError(t, await modelCall(g, K.cli, 'messages', 'claude-model', COST), exhausted);
  const bad = await runCli(['reset-quota', 'cli', '--url', g.url, '--token', 'not-the-admin-token']);
  t.equal(bad.code, 1, 'a wrong token fails');
  t.equal((await usageOf(g, K.cli)).status, 'quota_exhausted');
  // Address from --url, token from the config file.
  const r = await runCli(['reset-quota', 'cli', '--config', g.file, '--url', g.url]);
  t.equal(r.code, 0, r.err);
  t.match(r.out, /quota of key 'cli' reset/);
  t.match(await usageOf(g, K.cli), { status: 'active', quota: { used: 0, remaining: 0.015 } });
  await ok(t, K.cli, 'usable again');
});

const windowCases = [
  { w: '5h', k: K.w5h, ms: 5 * H, message: 'api key 5小时限额已用完' },
  { w: '1d', k: K.w1d, ms: D, message: 'api key 日限额已用完' },
  { w: '7d', k: K.w7d, ms: 7 * D, message: 'api key 7天限额已用完' },
] as const;

for (const c of windowCases) {
  t.test(`${c.w} window: fixed from first use, 429 with its message, resets once ${c.w} has passed`, async (t) => {
    clock.set(Date.UTC(2026, 0, 5, 12, 0, 0));
    let u = await usageOf(g, c.k);
    t.same(
      u.rate_limits,
      [{ window: c.w, limit: 0.02, used: 0, remaining: 0.02, window_start: null, reset_at: null }],
      'not used yet: nulls',
    );
    clock.advance(17 * 60_000 + 250); // the window starts at first use, not at config time
    const t0 = clock.now();
    await ok(t, c.k, 'first use');
    clock.advance(60_000);
    await ok(t, c.k, 'second: 0.015 < 0.02');
    const err = { status: 429, type: 'rate_limit_exceeded', message: c.message, retryAfter: null, shouldRetryFalse: true };
    const r = await modelCall(g, c.k, 'messages', 'claude-model', COST);
    assertError(t, r, err, 'messages');
    t.same(r.json, { type: 'error', error: { type: 'rate_limit_exceeded', message: c.message } });
    u = await usageOf(g, c.k);
    t.same(u.rate_limits, [
      {
        window: c.w,
        limit: 0.02,
        used: 0.03,
        remaining: 0,
        window_start: new Date(t0).toISOString(),
        reset_at: new Date(t0 + c.ms).toISOString(),
      },
    ]);
    t.equal(u.status, 'active', 'a window does not change status');
    t.notOk('remaining' in u || 'unit' in u || 'quota' in u, 'no quota: no top-level remaining, unit or quota, only the windows');

    clock.set(t0 + c.ms - 1);
    assertError(t, await modelCall(g, c.k, 'messages', 'claude-model', COST), err, 'one ms before reset_at');
    clock.set(t0 + c.ms);
    await ok(t, c.k, 'at reset_at: a new window');
    const t1 = clock.now();
    u = await usageOf(g, c.k);
    t.same(
      u.rate_limits,
      [
        {
          window: c.w,
          limit: 0.02,
          used: 0.015,
          remaining: 0.005,
          window_start: new Date(t1).toISOString(),
          reset_at: new Date(t1 + c.ms).toISOString(),
        },
      ],
      'restarted at this use, only this use counted',
    );
    clock.advance(c.ms + 1);
    u = await usageOf(g, c.k);
    t.same(
      u.rate_limits,
      [{ window: c.w, limit: 0.02, used: 0, remaining: 0.02, window_start: null, reset_at: null }],
      'expired and unused: nulls again',
    );
  });
}

t.test('window errors in the Chat and Responses formats', async (t) => {
  clock.set(Date.UTC(2026, 1, 1, 0, 0, 0));
  t.equal((await modelCall(g, K.chatW, 'chat', 'chat-model')).status, 200);
  const chat = await modelCall(g, K.chatW, 'chat', 'chat-model');
  assertError(t, chat, {
    status: 429,
    type: 'rate_limit_exceeded',
    message: 'api key 5小时限额已用完',
    retryAfter: null,
    shouldRetryFalse: true,
  });
  t.equal(chat.json.error.code, 'rate_limit_exceeded');
  t.equal((await modelCall(g, K.respW, 'responses', 'gpt-model', { input: 100, output: 100 })).status, 200);
  const resp = await modelCall(g, K.respW, 'responses', 'gpt-model');
  assertError(t, resp, {
    status: 429,
    type: 'rate_limit_exceeded',
    message: 'api key 日限额已用完',
    retryAfter: null,
    shouldRetryFalse: true,
  });
});

t.test('reset-quota also forgets the windows; a lowered window applies at once', async (t) => {
  clock.set(Date.UTC(2026, 2, 1, 0, 0, 0));
  await ok(t, K.all, 'first');
  await ok(t, K.all, 'second');
  assertError(t, await modelCall(g, K.all, 'messages', 'claude-model', COST), {
    status: 429,
    type: 'rate_limit_exceeded',
    message: 'api key 5小时限额已用完',
  });
  let u = await usageOf(g, K.all);
  t.equal(u.quota.used, 0.03);
  t.same(
    u.rate_limits.map((r: any) => [r.window, r.used]),
    [
      ['5h', 0.03],
      ['1d', 0.03],
      ['7d', 0.03],
    ],
  );
  const r = await call(`${g.url}/admin/keys/all/reset-quota`, { method: 'POST', headers: bearer(ADMIN) });
  t.equal(r.status, 200);
  u = await usageOf(g, K.all);
  t.equal(u.quota.used, 0);
  t.same(
    u.rate_limits.map((r: any) => [r.window, r.used, r.window_start]),
    [
      ['5h', 0, null],
      ['1d', 0, null],
      ['7d', 0, null],
    ],
  );
  await ok(t, K.all, 'usable again');
  cfg.keys.find((k: any) => k.name === 'all').windows['7d'] = 0.01;
  await reload();
  assertError(t, await modelCall(g, K.all, 'messages', 'claude-model', COST), {
    status: 429,
    type: 'rate_limit_exceeded',
    message: 'api key 7天限额已用完',
  });
});
