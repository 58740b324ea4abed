/**
 * Per-account settings reach the wire: a relay account's own base URL and headers, each account's
 * own credential in the protocol's style, and `models` subsets that keep an account out of the
 * models it does not serve.
 */
import t from 'tap';
import { baseConfig, bearer, call, KEYS, startGateway } from '../helpers/gateway.js';
import { startMockServer } from '../../mock/server.js';
import { runPool } from './helpers.js';

t.test('relay base URL, headers, credentials and model subsets', async (t) => {
  const direct = await startMockServer();
  const relay = await startMockServer();
  const cfg = baseConfig();
  cfg.providers.up = {
    kind: 'openai',
    base_url: `${direct.url}/v1`,
    protocols: ['openai-chat'],
    headers: { 'x-org': 'org-1' },
    accounts: [
      { name: 'direct', api_key: 'key-direct', models: ['up-a'] },
      { name: 'relay', api_key: 'key-relay', base_url: `${relay.url}/v1`, headers: { 'x-relay': 'yes' } },
    ],
  };
  cfg.providers.claude = {
    kind: 'anthropic',
    base_url: direct.url,
    accounts: [
      { name: 'c1', api_key: 'key-c1' },
      { name: 'c2', api_key: 'key-c2' },
    ],
  };
  cfg.models['up-a'] = { provider: 'up', price: { input: 1, output: 1 } };
  cfg.models['up-b'] = { provider: 'up', price: { input: 1, output: 1 } };
  cfg.models['claude-pool'] = { provider: 'claude', price: { input: 1, output: 1 } };
  cfg.groups.chat.models.push('up-a', 'up-b');
  cfg.groups.messages.models.push('claude-pool');
  const g = await startGateway(cfg);
  t.teardown(async () => {
    await g.close();
    await direct.close();
    await relay.close();
  });

  const ask = (model: string, i: number) =>
    call(g.url + '/v1/chat/completions', {
      headers: bearer(KEYS.chat),
      json: { model, messages: [{ role: 'user', content: `${model} ${i}` }] },
    });
  const b = await runPool(20, 4, (i) => ask('up-b', i));
  t.ok(b.every((r) => r.status === 200));
  t.equal(direct.credential('key-direct').requests, 0, "up-b is not in the direct account's models");
  t.equal(relay.credential('key-relay').requests, 20, 'all of up-b went to the relay');
  const seen = relay.requests[relay.requests.length - 1];
  t.equal(seen.headers.authorization, 'Bearer key-relay');
  t.equal(seen.headers['x-relay'], 'yes', "the account's header");
  t.equal(seen.headers['x-org'], 'org-1', "and the provider's");
  t.equal(seen.path, '/v1/chat/completions', "at the relay's base URL");

  const a = await runPool(40, 4, (i) => ask('up-a', i));
  t.ok(a.every((r) => r.status === 200));
  t.ok(direct.credential('key-direct').requests > 0 && relay.credential('key-relay').requests > 20, 'up-a is served by both');
  t.notOk(
    direct.requests.some((r) => r.credential === 'key-relay'),
    'the relay key never goes to the direct URL',
  );

  const m = await call(g.url + '/v1/messages', {
    headers: { 'x-api-key': KEYS.messages, 'anthropic-version': '2023-06-01' },
    json: { model: 'claude-pool', max_tokens: 50, messages: [{ role: 'user', content: 'hello' }] },
  });
  t.equal(m.status, 200);
  const last = direct.requests[direct.requests.length - 1];
  t.ok(['key-c1', 'key-c2'].includes(String(last.headers['x-api-key'])), 'Messages: the account key as x-api-key');
  t.equal(last.headers.authorization, undefined);
});
