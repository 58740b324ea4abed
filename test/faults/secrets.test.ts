/**
 * Nothing secret kept (issue 10, item 7): after mixed traffic carrying a canary client key and a
 * canary provider key everywhere a client might put one (headers, query, body fields, prompt text,
 * the path), neither appears in any file the gateway wrote (failed-request records, the store's
 * folder) nor in any log line; strangers' refusals are sampled, not written one file each.
 */
import t from 'tap';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { baseConfig, KEYS, startGateway, tmpDir } from '../helpers/gateway.js';
import { createLogger } from '../../core/log.js';
import { UNKEYED_PER_MINUTE } from '../../core/failed-requests.js';

const CANARY = 'canary_Key-0123456789abcdefXYZ';
const PROVIDER = 'prov-canary-secret-9876543210';

function allFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) out.push(...allFiles(p));
    else out.push(p);
  }
  return out;
}

t.test('the canary keys appear in no file and no log line after mixed traffic', async (t) => {
  const dir = tmpDir('gw-canary-');
  const lines: string[] = [];
  const cfg = baseConfig();
  cfg.store = { kind: 'memory', path: path.join(dir, 'data') };
  cfg.failed_requests = { dir: path.join(dir, 'failed') };
  cfg.providers.mock.api_key = PROVIDER;
  cfg.keys.push({ key: CANARY, name: 'canary', user: 'alice', group: 'chat' });
  const g = await startGateway(cfg, { log: createLogger('debug', (l) => lines.push(l)) });
  const post = (p: string, headers: Record<string, string>, body: string) =>
    fetch(g.url + p, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body }).then(async (r) => ({
      status: r.status,
      text: await r.text(),
    }));
  const auth = { authorization: `Bearer ${CANARY}` };
  const chat = (content: string, extra: Record<string, unknown> = {}) =>
    JSON.stringify({ model: 'chat-model', messages: [{ role: 'user', content }], ...extra });

  const statuses: number[] = [];
  const go = async (p: Promise<{ status: number }>) => statuses.push((await p).status);
  await go(post('/v1/chat/completions', auth, chat('hello')));
  await go(post('/v1/chat/completions', auth, chat('hello', { stream: true })));
  for (const q of ['apikey', 'KEY', 'api_key', 'access_token', 'token'])
    await go(post(`/v1/chat/completions?${q}=${CANARY}`, auth, chat('q')));
  await go(
    post(
      '/v1/chat/completions',
      auth,
      chat('fail [[mock: status=500]]', { api_key: CANARY, key: CANARY, authorization: CANARY, nested: { Access_Token: CANARY } }),
    ),
  );
  await go(
    post(
      '/v1/chat/completions',
      { ...auth, 'x-custom': `see ${CANARY}`, 'X-Goog-Api-Key': CANARY },
      chat(`my key is ${CANARY} and the provider's ${PROVIDER} [[mock: status=400]]`),
    ),
  );
  for (let i = 0; i < 2; i++) {
    await go(post('/v1/chat/completions', { ...auth, 'user-agent': `agent/1.0 (${CANARY})` }, chat('agent')));
    await go(post('/v1/chat/completions', { ...auth, 'user-agent': `agent/1.0 ${PROVIDER}` }, chat('agent')));
  }
  await go(post('/v1/chat/completions', auth, `{"model":"chat-model","api_key":"${CANARY}", broken`));
  await go(post('/v1/chat/completions', auth, `{"model":"chat-model","x":"${encodeURIComponent(CANARY)}\\n${CANARY}", broken`));
  await go(post('/v1/chat/completions', auth, chat('stream fail [[mock: stream_error=2]]', { stream: true, key: CANARY })));
  await go(post(`/v1/chat/completions/${CANARY}`, auth, chat('no route')));
  await go(
    post(
      '/v1/messages',
      { 'x-api-key': CANARY, 'anthropic-version': '2023-06-01' },
      JSON.stringify({ model: 'nope', max_tokens: 5, messages: [] }),
    ),
  );
  for (let i = 0; i < 40; i++)
    await go(post('/v1/chat/completions', { authorization: `Bearer sk-stranger-${i}-${'x'.repeat(20)}` }, chat('who am i')));
  await g.close();

  t.ok(
    statuses.includes(200) && statuses.includes(400) && statuses.includes(401) && statuses.includes(502),
    `mixed outcomes: ${[...new Set(statuses)].join(', ')}`,
  );
  const files = allFiles(dir);
  const records = files.filter((f) => f.includes(`${path.sep}failed${path.sep}`));
  t.ok(records.length >= 6, `failed requests were kept (${records.length} files)`);
  for (const f of files) {
    const text = readFileSync(f, 'utf8');
    t.notOk(text.includes(CANARY) || text.includes(encodeURIComponent(CANARY)), `no client key in ${path.relative(dir, f)}`);
    t.notOk(text.includes(PROVIDER), `no provider key in ${path.relative(dir, f)}`);
  }
  const log = lines.join('\n');
  t.ok(lines.length > 40, 'the gateway logged');
  t.notOk(log.includes(CANARY), 'no client key in the log');
  t.notOk(log.includes(PROVIDER), 'no provider key in the log');
  const unkeyed = records.map((f) => JSON.parse(readFileSync(f, 'utf8'))).filter((r) => r.key === undefined);
  t.ok(unkeyed.length <= UNKEYED_PER_MINUTE, `refusals before a key was known are sampled: ${unkeyed.length} of 40+ written`);
  t.ok(
    unkeyed.every((r) => r.body === undefined),
    'without their bodies',
  );
  const scrubbed = records.map((f) => JSON.parse(readFileSync(f, 'utf8'))).find((r) => r.status === 502 && r.body?.includes('api_key'));
  t.match(
    JSON.parse(scrubbed.body),
    { api_key: '[removed]', key: '[removed]', authorization: '[removed]', nested: { Access_Token: '[removed]' } },
    'credential body fields removed at any depth',
  );
});

t.test('a user agent holding a secret that a reload added is redacted from then on', async (t) => {
  const lines: string[] = [];
  const cfg = baseConfig();
  const agent = `agent/2.0 ${PROVIDER}`;
  const g = await startGateway(cfg, { log: createLogger('info', (l) => lines.push(l)) });
  t.teardown(() => g.close());
  const send = async () => {
    const r = await fetch(g.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEYS.chat}`, 'user-agent': agent },
      body: JSON.stringify({ model: 'chat-model', messages: [{ role: 'user', content: 'hi' }] }),
    });
    await r.text();
    const id = r.headers.get('x-request-id');
    const line = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'request' && l.requestId === id);
    return { status: r.status, userAgent: line?.userAgent };
  };
  t.same(await send(), { status: 200, userAgent: agent }, 'not a secret yet: logged as sent');
  t.same(await send(), { status: 200, userAgent: agent }, 'the same again');
  cfg.providers.mock.api_key = PROVIDER;
  writeFileSync(g.file, YAML.stringify(cfg));
  t.equal(await g.gw.reload(), undefined, 'reloaded');
  t.same(await send(), { status: 200, userAgent: 'agent/2.0 [removed]' }, 'a provider key now: removed');
});
