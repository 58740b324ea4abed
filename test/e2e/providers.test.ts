/**
 * Providers of kind `openai` and `anthropic` (real base URLs, here a mock server started apart):
 * paths, credentials in each protocol's style, `protocols:` restricting what an upstream serves,
 * and the upstream aborted when the client goes away.
 */
import t from 'tap';
import { startMockServer, type MockServer } from '../../mock/server.js';
import {
  baseConfig,
  bearer,
  call,
  chatBody,
  KEYS,
  messagesBody,
  responsesBody,
  startGateway,
  type TestGateway,
} from '../helpers/gateway.js';
import { scriptedUpstream, sleep } from '../helpers/upstream.js';

let mock: MockServer;
let g: TestGateway;
t.before(async () => {
  mock = await startMockServer();
  const cfg = baseConfig();
  cfg.providers.openai = { kind: 'openai', base_url: `${mock.url}/v1`, api_key: 'openai-secret' };
  cfg.providers.anthropic = { kind: 'anthropic', base_url: mock.url, api_key: 'anthropic-secret', headers: { 'x-extra': 'yes' } };
  cfg.providers.vllm = { kind: 'openai', base_url: `${mock.url}/v1`, protocols: ['openai-chat'] };
  cfg.models['gpt-real'] = { provider: 'openai', upstream: 'gpt-5-mini', price: { input: 1, output: 1 } };
  cfg.models['claude-real'] = { provider: 'anthropic', upstream: 'claude-sonnet-4-5', price: { input: 1, output: 1 } };
  cfg.models['qwen'] = { provider: 'vllm', upstream: 'Qwen/Qwen3-32B', price: { input: 1, output: 1 } };
  cfg.groups.chat.models.push('gpt-real', 'qwen');
  cfg.groups.messages.models.push('claude-real');
  cfg.groups.responses.models.push('gpt-real', 'qwen');
  g = await startGateway(cfg);
});
t.teardown(async () => {
  await g.close();
  await mock.close();
});

const last = () => mock.requests.at(-1)!;

t.test('kind openai: base_url + /chat/completions and /responses, Bearer credential', async (t) => {
  t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody({ model: 'gpt-real' }) })).status, 200);
  t.equal(last().path, '/v1/chat/completions');
  t.equal(last().headers.authorization, 'Bearer openai-secret');
  t.equal(JSON.parse(last().body).model, 'gpt-5-mini');
  t.equal(
    (await call(g.url + '/v1/responses', { headers: bearer(KEYS.responses), json: responsesBody({ model: 'gpt-real' }) })).status,
    200,
  );
  t.equal(last().path, '/v1/responses');
});

t.test('kind anthropic: /v1/messages and count_tokens, x-api-key, anthropic-version, extra headers', async (t) => {
  t.equal(
    (await call(g.url + '/v1/messages', { headers: bearer(KEYS.messages), json: messagesBody({ model: 'claude-real' }) })).status,
    200,
  );
  t.equal(last().path, '/v1/messages');
  t.equal(last().headers['x-api-key'], 'anthropic-secret');
  t.equal(last().headers['anthropic-version'], '2023-06-01', 'default version when the client sent none');
  t.equal(last().headers['x-extra'], 'yes');
  t.notOk(last().headers.authorization, 'no Bearer on Messages upstreams');
  const ct = await call(g.url + '/v1/messages/count_tokens', {
    headers: bearer(KEYS.messages),
    json: { model: 'claude-real', messages: [{ role: 'user', content: 'a b c' }] },
  });
  t.equal(ct.status, 200);
  t.equal(last().path, '/v1/messages/count_tokens');
  t.equal(JSON.parse(last().body).model, 'claude-sonnet-4-5');
});

t.test('protocols: an upstream without Responses gets converted Chat', async (t) => {
  const r = await call(g.url + '/v1/responses', { headers: bearer(KEYS.responses), json: responsesBody({ model: 'qwen' }) });
  t.equal(r.status, 200);
  t.equal(r.json.object, 'response');
  t.equal(last().path, '/v1/chat/completions', 'sent as Chat Completions');
  t.equal(JSON.parse(last().body).model, 'Qwen/Qwen3-32B');
});

t.test('the upstream is aborted when the client goes away', async (t) => {
  const up = await scriptedUpstream(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(
      'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n',
    );
    for (let i = 0; i < 100 && !res.destroyed; i++) {
      res.write(
        `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" more"},"finish_reason":null}]}\n\n`,
      );
      await sleep(50);
    }
    res.end();
  });
  t.teardown(() => up.close());
  const cfg = baseConfig();
  cfg.providers.slow = { kind: 'openai', base_url: `${up.url}/v1` };
  cfg.models.slow = { provider: 'slow', price: { input: 1, output: 1 } };
  cfg.groups.chat.models.push('slow');
  const g2 = await startGateway(cfg);
  t.teardown(() => g2.close());
  const ac = new AbortController();
  const res = await fetch(g2.url + '/v1/chat/completions', {
    method: 'POST',
    signal: ac.signal,
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ model: 'slow', stream: true })),
  });
  const reader = res.body!.getReader();
  await reader.read();
  ac.abort();
  await Promise.race([up.seen[0].closed, sleep(3000)]);
  t.ok(up.seen[0].aborted, 'the upstream connection was closed before it finished');
});
