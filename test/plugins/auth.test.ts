/**
 * auth: every row of spec §5 / §7.3 it touches, the wire-notes header rules and the check order.
 * Each error asserts status, the flat body shape exactly, and that the key never reaches the logs.
 */
import t from 'tap';
import { createHash } from 'node:crypto';
import http from 'node:http';
import {
  baseConfig,
  bearer,
  call,
  chatBody,
  KEYS,
  startGateway,
  messagesBody,
  type TestGateway,
  type TapTest,
} from '../helpers/gateway.js';
import { rawRequest } from '../helpers/raw.js';
import { createLogger } from '../../core/log.js';

const lines: string[] = [];
let g: TestGateway;

const sha = (s: string) => createHash('sha256').update(s).digest('hex');
const K = {
  disabled: 'sk-' + 'e1'.repeat(32),
  noUser: 'sk-' + 'e2'.repeat(32),
  inactive: 'sk-' + 'e3'.repeat(32),
  expired: 'sk-' + 'e4'.repeat(32),
  noGroup: 'sk-' + 'e5'.repeat(32),
  hashed: 'hashed-only-key-0123456789',
  unknown: 'sk-' + 'ff'.repeat(32),
  expiredDenied: 'sk-' + 'e6'.repeat(32),
};

t.before(async () => {
  const cfg = baseConfig();
  cfg.users.bob = { status: 'inactive', balance: 10 };
  cfg.keys.push(
    { key: K.disabled, name: 'disabled', user: 'alice', group: 'chat', enabled: false },
    { key: K.noUser, name: 'no-user', user: 'ghost', group: 'chat' },
    { key: K.inactive, name: 'inactive', user: 'bob', group: 'chat' },
    { key: K.expired, name: 'expired', user: 'alice', group: 'chat', expires_at: '2020-01-01T00:00:00Z' },
    { key: K.noGroup, name: 'no-group', user: 'alice' },
    { key_sha256: sha(K.hashed), name: 'hashed', user: 'alice', group: 'chat' },
    {
      key: K.expiredDenied,
      name: 'expired-denied',
      user: 'alice',
      group: 'chat',
      expires_at: '2020-01-01T00:00:00Z',
      ip_deny: ['127.0.0.0/8', '::1'],
    },
  );
  g = await startGateway(cfg, { log: createLogger('debug', (l) => lines.push(l)) });
});
t.teardown(() => g.close());

const chat = (headers: Record<string, string>, path = '/v1/chat/completions') => call(g.url + path, { headers, json: chatBody() });

function flat(t: TapTest, r: { status: number; json: any; headers: Headers }, status: number, code: string) {
  t.equal(r.status, status, `${code}: status`);
  t.same(Object.keys(r.json).sort(), ['code', 'error', 'message'], `${code}: flat body {code, message} and its error object`);
  t.equal(r.json.code, code);
  t.type(r.json.message, 'string');
  t.same(r.json.error, { type: r.json.error.type, code, message: r.json.message }, `${code}: the error object says the same`);
  t.equal(r.headers.get('x-should-retry'), 'false', `${code}: clients are told not to retry`);
  t.ok(r.headers.get('x-request-id'), 'X-Request-ID present');
}

t.test('the three credential headers and their precedence', async (t) => {
  t.equal((await chat(bearer(KEYS.chat))).status, 200, 'Authorization: Bearer');
  t.equal((await chat({ authorization: `bearer ${KEYS.chat}` })).status, 200, 'scheme is case-insensitive');
  t.equal((await chat({ authorization: `BEARER   ${KEYS.chat}` })).status, 200);
  t.equal((await chat({ authorization: `Bearer \t  ${KEYS.chat}` })).status, 200, 'any whitespace after the scheme');
  t.equal((await chat({ 'x-api-key': KEYS.chat })).status, 200, 'x-api-key');
  t.equal((await chat({ 'x-goog-api-key': KEYS.chat })).status, 200, 'x-goog-api-key');
  t.equal((await chat({ 'x-alt-api-key': KEYS.chat })).status, 200, 'the neutral spelling too');
  t.equal((await chat({ ...bearer(KEYS.chat), 'x-api-key': K.unknown })).status, 200, 'Authorization wins over x-api-key');
  flat(t, await chat({ ...bearer(K.unknown), 'x-api-key': KEYS.chat }), 401, 'INVALID_API_KEY');
  t.equal((await chat({ 'x-api-key': KEYS.chat, 'x-goog-api-key': K.unknown })).status, 200, 'x-api-key wins over x-goog-api-key');
  t.equal((await chat(bearer(KEYS.custom))).status, 200, 'custom key of 16+ characters');
  t.equal((await chat(bearer(K.hashed))).status, 200, 'key stored only as its SHA-256');
});

t.test('key check errors, flat format', async (t) => {
  flat(t, await chat({}), 401, 'API_KEY_REQUIRED');
  flat(t, await chat({ authorization: 'Bearer ' }), 401, 'API_KEY_REQUIRED');
  flat(t, await chat({ authorization: '' }), 401, 'API_KEY_REQUIRED');
  t.equal(
    (await chat({ authorization: 'Bearer', 'x-api-key': KEYS.chat })).status,
    200,
    'a bare Bearer counts as absent: x-api-key is used',
  );
  t.equal((await chat({ authorization: '', 'x-api-key': KEYS.chat })).status, 200, 'an empty Authorization counts as absent');
  flat(t, await chat(bearer('sk-short')), 401, 'INVALID_API_KEY');
  flat(t, await chat(bearer('has spaces in it, 1234567')), 401, 'INVALID_API_KEY');
  flat(t, await chat({ authorization: `Basic ${KEYS.chat}` }), 401, 'INVALID_API_KEY');
  flat(t, await chat(bearer(K.unknown)), 401, 'INVALID_API_KEY');
  flat(t, await chat(bearer(K.disabled)), 401, 'API_KEY_DISABLED');
  flat(t, await chat(bearer(K.noUser)), 401, 'USER_NOT_FOUND');
  flat(t, await chat(bearer(K.inactive)), 401, 'USER_INACTIVE');
  flat(t, await chat(bearer(K.expired)), 403, 'API_KEY_EXPIRED');
});

t.test('one keep-alive connection: every request is checked with the key it presents', async (t) => {
  // The digest of a connection's last key is kept on its socket: switching keys on the same
  // connection must switch who is calling, and a bad key after a good one is still refused.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.teardown(() => agent.destroy());
  const send = (key: string) =>
    new Promise<{ status: number; code?: string; reused: boolean }>((resolve, reject) => {
      const req = http.request(
        g.url + '/v1/messages',
        { method: 'POST', agent, headers: { 'x-api-key': key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' } },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('end', () => {
            const body = JSON.parse(text);
            resolve({ status: res.statusCode ?? 0, code: body.code ?? body.error?.type, reused: req.reusedSocket });
          });
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify(messagesBody()));
    });
  const seen: [string, number, string | undefined][] = [];
  let reused = 0;
  for (const [name, key] of [
    ['messages', KEYS.messages],
    ['messages again', KEYS.messages],
    ['chat (its group serves no Messages)', KEYS.chat],
    ['messages', KEYS.messages],
    ['unknown', K.unknown],
    ['disabled', K.disabled],
    ['inactive user', K.inactive],
    ['messages', KEYS.messages],
  ] as const) {
    const r = await send(key);
    seen.push([name, r.status, r.status === 200 ? undefined : r.code]);
    if (r.reused) reused++;
  }
  t.equal(reused, 7, 'every request after the first went over the same connection');
  t.same(seen, [
    ['messages', 200, undefined],
    ['messages again', 200, undefined],
    ['chat (its group serves no Messages)', 404, 'not_found_error'],
    ['messages', 200, undefined],
    ['unknown', 401, 'INVALID_API_KEY'],
    ['disabled', 401, 'API_KEY_DISABLED'],
    ['inactive user', 401, 'USER_INACTIVE'],
    ['messages', 200, undefined],
  ]);
});

t.test('duplicate credential headers are rejected', async (t) => {
  const twoAuth = await rawRequest(g.url + '/v1/chat/completions', {
    headers: { authorization: [`Bearer ${KEYS.chat}`, `Bearer ${KEYS.chat}`] as any, 'content-type': 'application/json' },
    body: JSON.stringify(chatBody()),
  });
  t.equal(twoAuth.status, 401);
  t.equal(twoAuth.json.code, 'INVALID_API_KEY');
  const joined = await rawRequest(g.url + '/v1/chat/completions', {
    headers: { 'x-api-key': [KEYS.chat, KEYS.messages], 'content-type': 'application/json' },
    body: JSON.stringify(chatBody()),
  });
  t.equal(joined.status, 401);
  t.equal(joined.json.code, 'INVALID_API_KEY');
  const commaJoined = await chat({ 'x-api-key': `${KEYS.chat}, ${KEYS.messages}` });
  t.equal(commaJoined.status, 401);
});

t.test('a key in the query string: 400 on every endpoint, never logged', async (t) => {
  const paths: Array<[string, string]> = [
    ['POST', '/v1/chat/completions'],
    ['POST', '/v1/messages'],
    ['POST', '/v1/messages/count_tokens'],
    ['POST', '/v1/responses'],
    ['GET', '/v1/models'],
    ['GET', '/v1/usage'],
  ];
  for (const [method, p] of paths) {
    for (const q of ['key', 'api_key']) {
      const r = await call(`${g.url}${p}?${q}=${KEYS.chat}`, {
        method,
        headers: bearer(KEYS.chat),
        ...(method === 'POST' ? { json: chatBody() } : {}),
      });
      flat(t, r, 400, 'api_key_in_query_deprecated');
    }
  }
  const r = await call(`${g.url}/v1/chat/completions?key=${K.unknown}`, { json: chatBody() });
  t.equal(r.json.code, 'api_key_in_query_deprecated', 'before any header check');
  t.notOk(
    lines.some((l) => l.includes(KEYS.chat) || l.includes(K.unknown)),
    'no key in any log line',
  );
  t.ok(lines.length > 0, 'logs were captured');
});

t.test('a key without a group: 403 permission_error in the Messages format', async (t) => {
  for (const p of ['/v1/chat/completions', '/v1/messages', '/v1/responses']) {
    const r = await call(g.url + p, { headers: bearer(K.noGroup), json: p === '/v1/messages' ? messagesBody() : chatBody() });
    t.equal(r.status, 403);
    t.same(r.json, { type: 'error', error: { type: 'permission_error', message: 'API key is not assigned to any group' } });
  }
  const u = await call(g.url + '/v1/usage', { headers: bearer(K.noGroup) });
  t.equal(u.status, 403);
  t.equal(u.json.error.type, 'permission_error');
});

t.test('check order: first failure wins', async (t) => {
  t.equal((await chat({ ...bearer(K.disabled) }, `/v1/chat/completions?api_key=x`)).json.code, 'api_key_in_query_deprecated');
  // expired AND denied by IP: IP rules come before expiry
  flat(t, await chat(bearer(K.expiredDenied)), 403, 'ACCESS_DENIED');
  // expired key still reads /v1/usage, but not /v1/models
  t.equal((await call(g.url + '/v1/usage', { headers: bearer(K.expired) })).status, 200);
  flat(t, await call(g.url + '/v1/models', { headers: bearer(K.expired) }), 403, 'API_KEY_EXPIRED');
});

t.test('X-Request-ID: echoed when well-formed, replaced otherwise, on every response', async (t) => {
  const mine = await chat({ ...bearer(KEYS.chat), 'x-request-id': 'client-abc.123:x' });
  t.equal(mine.headers.get('x-request-id'), 'client-abc.123:x');
  const bad = await chat({ ...bearer(KEYS.chat), 'x-request-id': 'has spaces and <tags>' });
  t.match(bad.headers.get('x-request-id'), /^req_[0-9a-f]{24}$/);
  const err = await chat({ 'x-request-id': 'err-1' });
  t.equal(err.headers.get('x-request-id'), 'err-1');
  const unknown = await call(g.url + '/nope');
  t.equal(unknown.status, 404);
  t.ok(unknown.headers.get('x-request-id'));
  t.equal(unknown.json.error.type, 'not_found_error');
});

t.test('HEAD / and GET / answer 200 without a key', async (t) => {
  t.equal((await fetch(g.url + '/', { method: 'HEAD' })).status, 200);
  t.equal((await call(g.url + '/')).status, 200);
});
