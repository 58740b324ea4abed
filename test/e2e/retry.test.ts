/**
 * Retry behaviour of the real SDKs against the gateway's errors (wire-notes "Retry signals"): the
 * openai SDK and both @anthropic-ai/sdk majors, with their default retry policy (2 retries), make
 * exactly one HTTP attempt for every error the contract says not to retry — each status, each
 * kind of 429 — and retry 429 rate limits and 5xx. Attempts are counted at the SDK's `fetch`.
 */
import t from 'tap';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import Anthropic0 from 'anthropic0';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';

const hex = (n: number) => `sk-${n.toString(16).padStart(64, '0')}`;
const K = {
  quota: hex(0x701),
  window: hex(0x702),
  plan: hex(0x703),
  cap: hex(0x704),
  expired: hex(0x705),
};

let g: TestGateway;
t.before(async () => {
  const cfg = baseConfig();
  cfg.groups['tiny-plan'] = { kind: 'messages', billing: 'plan', models: ['claude-model', 'chat-model'], plan: { daily: 0.000001 } };
  cfg.users.quota = { balance: 100 };
  cfg.users.window = { balance: 100 };
  cfg.users.plan = { balance: 0, subscriptions: [{ group: 'tiny-plan', expires_at: '2099-01-01T00:00:00Z' }] };
  cfg.users.cap = { balance: 100, spend_caps: { weekly: 0.000001 } };
  cfg.keys.push(
    { key: K.quota, name: 'r-quota', user: 'quota', group: 'messages', quota: 0.000001 },
    { key: K.window, name: 'r-window', user: 'window', group: 'messages', windows: { '5h': 0.000001 } },
    { key: K.plan, name: 'r-plan', user: 'plan', group: 'tiny-plan' },
    { key: K.cap, name: 'r-cap', user: 'cap', group: 'messages' },
    { key: K.expired, name: 'r-expired', user: 'alice', group: 'messages', expires_at: '2020-01-01T00:00:00Z' },
  );
  g = await startGateway(cfg);
  // One paid request each uses up the tiny limits (the request that crosses a limit completes).
  for (const key of [K.quota, K.window, K.plan, K.cap]) {
    const r = await call(g.url + '/v1/chat/completions', { headers: bearer(key), json: chatBody({ model: 'claude-model' }) });
    if (r.status !== 200) throw new Error(`setup: ${r.status} ${r.text}`);
  }
});
t.teardown(() => g.close());

interface Client {
  name: string;
  make(key: string, count: () => void, maxRetries?: number): { post(path: string, opts: object): Promise<unknown> };
}

const counting = (count: () => void) =>
  ((url: any, init: any) => {
    count();
    return fetch(url, init);
  }) as typeof fetch;

const CLIENTS: Client[] = [
  {
    name: 'openai 6',
    make: (key, count, maxRetries) =>
      new OpenAI({ apiKey: key, baseURL: g.url + '/v1', fetch: counting(count), ...(maxRetries !== undefined ? { maxRetries } : {}) }),
  },
  {
    name: '@anthropic-ai/sdk 1',
    make: (key, count, maxRetries) =>
      new Anthropic({ apiKey: key, baseURL: g.url, fetch: counting(count), ...(maxRetries !== undefined ? { maxRetries } : {}) }),
  },
  {
    name: '@anthropic-ai/sdk 0',
    make: (key, count, maxRetries) =>
      new Anthropic0({ apiKey: key, baseURL: g.url, fetch: counting(count), ...(maxRetries !== undefined ? { maxRetries } : {}) }),
  },
];

const claude = (extra: Record<string, unknown> = {}) => ({
  model: 'claude-model',
  max_tokens: 64,
  messages: [{ role: 'user', content: 'Hello' }],
  ...extra,
});

/** Each non-retryable error: the key, the path (relative to the SDK's base URL) and the body. */
const FINAL: Array<{
  name: string;
  status: number;
  key: string;
  path: [openai: string, anthropic: string];
  body: Record<string, unknown>;
  code?: string;
}> = [
  {
    name: '400 invalid request (no model)',
    status: 400,
    key: KEYS.messages,
    path: ['/messages', '/v1/messages'],
    body: { max_tokens: 5, messages: [] },
  },
  { name: '401 wrong key', status: 401, key: hex(0xdead), path: ['/messages', '/v1/messages'], body: claude(), code: 'INVALID_API_KEY' },
  { name: '402 spend cap reached', status: 402, key: K.cap, path: ['/messages', '/v1/messages'], body: claude() },
  { name: '403 expired key', status: 403, key: K.expired, path: ['/messages', '/v1/messages'], body: claude(), code: 'API_KEY_EXPIRED' },
  { name: '404 endpoint not served (chat-only group)', status: 404, key: KEYS.chat, path: ['/messages', '/v1/messages'], body: claude() },
  {
    name: '409 malformed session (unsigned thinking)',
    status: 409,
    key: KEYS.messages,
    path: ['/messages', '/v1/messages'],
    body: claude({
      messages: [
        { role: 'user', content: 'a' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'x' },
            { type: 'text', text: 'b' },
          ],
        },
        { role: 'user', content: 'c' },
      ],
    }),
  },
  {
    name: '413 body too large',
    status: 413,
    key: KEYS.messages,
    path: ['/messages', '/v1/messages'],
    body: claude({ messages: [{ role: 'user', content: 'x'.repeat(1_100_000) }] }),
  },
  {
    name: '429 key quota exhausted',
    status: 429,
    key: K.quota,
    path: ['/messages', '/v1/messages'],
    body: claude(),
    code: 'API_KEY_QUOTA_EXHAUSTED',
  },
  { name: '429 key window used up', status: 429, key: K.window, path: ['/messages', '/v1/messages'], body: claude() },
  {
    name: '429 plan limit reached',
    status: 429,
    key: K.plan,
    path: ['/messages', '/v1/messages'],
    body: claude(),
    code: 'USAGE_LIMIT_EXCEEDED',
  },
  {
    name: '503 no available accounts (model not served)',
    status: 503,
    key: KEYS.messages,
    path: ['/messages', '/v1/messages'],
    body: claude({ model: 'no-such-model' }),
  },
];

for (const c of FINAL) {
  t.test(`${c.name}: one HTTP attempt with every SDK`, async (t) => {
    for (const sdk of CLIENTS) {
      let attempts = 0;
      const client = sdk.make(c.key, () => attempts++);
      const err: any = await client.post(sdk.name.startsWith('openai') ? c.path[0] : c.path[1], { body: c.body }).then(
        () => undefined,
        (e) => e,
      );
      t.ok(err, `${sdk.name}: throws`);
      t.equal(err?.status, c.status, `${sdk.name}: status ${c.status}`);
      t.equal(err?.headers?.get?.('x-should-retry') ?? err?.headers?.['x-should-retry'], 'false', `${sdk.name}: told not to retry`);
      t.equal(attempts, 1, `${sdk.name}: exactly one HTTP attempt`);
      if (c.code) t.match(String(err?.message), /./, `${sdk.name}: a message`);
    }
  });
}

t.test('the openai SDK shows the message of a flat key-check body (not "no body")', async (t) => {
  const client = new OpenAI({ apiKey: hex(0xdead), baseURL: g.url + '/v1', maxRetries: 0 });
  const err: any = await client.chat.completions
    .create({ model: 'chat-model', messages: [{ role: 'user', content: 'hi' }] })
    .catch((e) => e);
  t.equal(err.status, 401);
  t.match(err.message, /Invalid API key/, 'the message');
  t.equal(err.code, 'INVALID_API_KEY', 'error.code');
  for (const [name, C] of [
    ['@anthropic-ai/sdk 1', Anthropic],
    ['@anthropic-ai/sdk 0', Anthropic0],
  ] as const) {
    const a: any = await new (C as any)({ apiKey: hex(0xdead), baseURL: g.url, maxRetries: 0 }).messages
      .create(claude())
      .catch((e: unknown) => e);
    t.equal(a.status, 401, `${name}: 401`);
    t.match(a.message, /INVALID_API_KEY|Invalid API key/, `${name}: still shows the flat body`);
    t.equal(a.error?.code, 'INVALID_API_KEY', `${name}: the body's code is unchanged`);
  }
  // /v1/usage consumers (wire-notes) read `code` and `message` of a refusal, and the body of a success.
  const bad = await call(g.url + '/v1/usage', { headers: bearer(hex(0xdead)) });
  t.equal(bad.status, 401);
  t.equal(bad.json.code, 'INVALID_API_KEY', '/v1/usage refusal: code');
  t.equal(bad.json.message, 'Invalid API key', '/v1/usage refusal: message');
  const ok = await call(g.url + '/v1/usage', { headers: bearer(KEYS.messages) });
  t.equal(ok.status, 200);
  t.notOk('error' in ok.json || 'code' in ok.json, '/v1/usage success body unchanged');
});

const RETRIED: Array<{ name: string; status: number; directive: string }> = [
  { name: '429 provider rate limit', status: 429, directive: '[[mock: status=429 retry_after=0]]' },
  { name: '502 upstream failure', status: 502, directive: '[[mock: status=500]]' },
  { name: '503 provider overloaded', status: 503, directive: '[[mock: status=529]]' },
];

for (const c of RETRIED) {
  t.test(`${c.name}: retried by every SDK`, async (t) => {
    for (const sdk of CLIENTS) {
      let attempts = 0;
      const client = sdk.make(KEYS.messages, () => attempts++, 1);
      const body = claude({ messages: [{ role: 'user', content: `Hello ${c.directive}` }] });
      const err: any = await client.post(sdk.name.startsWith('openai') ? '/messages' : '/v1/messages', { body }).then(
        () => undefined,
        (e) => e,
      );
      t.equal(err?.status, c.status, `${sdk.name}: status ${c.status}`);
      t.equal(err?.headers?.get?.('x-should-retry') ?? null, null, `${sdk.name}: no x-should-retry`);
      t.equal(attempts, 2, `${sdk.name}: retried (maxRetries 1 → two attempts)`);
    }
  });
}
