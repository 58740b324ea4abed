/**
 * GET /v1/models (spec §4.5, wire-notes "/v1/models"): the key's group's models, as Chat-style
 * entries or as Messages-style ones when the client speaks Messages (`anthropic-version` sent or
 * the key in `x-api-key`); the default list for a group that names no models, empty with
 * `configured_only=true`.
 */
import t from 'tap';
import { baseConfig, bearer, call, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';

const OPEN = `sk-${'0e'.repeat(32)}`;
let g: TestGateway;
t.before(async () => {
  const cfg = baseConfig();
  cfg.groups.open = { kind: 'chat', passthrough: true };
  cfg.keys.push({ key: OPEN, name: 'open', user: 'alice', group: 'open' });
  g = await startGateway(cfg);
});
t.teardown(() => g.close());

const list = (k: string, query = '', headers: Record<string, string> = bearer(k)) => call(g.url + '/v1/models' + query, { headers });

t.test('Chat-style entries for OpenAI clients', async (t) => {
  const r = await list(KEYS.chat);
  t.equal(r.status, 200);
  t.same(r.json, {
    object: 'list',
    data: [
      { id: 'chat-model', object: 'model', type: 'model', display_name: 'chat-model', created: 1704067200, owned_by: 'mock' },
      { id: 'free-model', object: 'model', type: 'model', display_name: 'free-model', created: 1704067200, owned_by: 'mock' },
    ],
  });
});

t.test('Messages-style entries for clients that send anthropic-version or use x-api-key', async (t) => {
  const expected = {
    object: 'list',
    data: [
      { id: 'claude-model', type: 'model', display_name: 'claude-model', created_at: '2024-01-01T00:00:00Z' },
      { id: 'free-model', type: 'model', display_name: 'free-model', created_at: '2024-01-01T00:00:00Z' },
    ],
    has_more: false,
    first_id: 'claude-model',
    last_id: 'free-model',
  };
  const viaVersion = await list(KEYS.messages, '', { ...bearer(KEYS.messages), 'anthropic-version': '2023-06-01' });
  t.same(viaVersion.json, expected, 'Bearer + anthropic-version');
  const viaKey = await list(KEYS.messages, '', { 'x-api-key': KEYS.messages });
  t.same(viaKey.json, expected, 'x-api-key');
  const plain = await list(KEYS.messages);
  t.equal(plain.json.data[0].object, 'model', 'a Bearer client without anthropic-version gets Chat-style entries');
});

t.test('a group naming no models: the default list, or none with configured_only=true', async (t) => {
  const all = await list(OPEN);
  t.same(
    all.json.data.map((m: any) => m.id),
    ['chat-model', 'claude-model', 'gpt-model', 'free-model'],
    'every configured model',
  );
  for (const q of ['?configured_only=true', '?configured_only=1', '?configured_only=TRUE']) {
    t.same((await list(OPEN, q)).json, { object: 'list', data: [] }, q);
  }
  t.equal((await list(OPEN, '?configured_only=false')).json.data.length, 4);
  t.equal((await list(KEYS.chat, '?configured_only=true')).json.data.length, 2, 'a group with models lists them either way');
  const bad = await list(OPEN, '?configured_only=maybe');
  t.equal(bad.status, 400);
  t.same(bad.json, {
    error: {
      type: 'invalid_request_error',
      code: 'invalid_request_error',
      message: "configured_only must be true or false, got 'maybe'",
      param: null,
    },
  });
  t.ok(bad.headers.get('x-request-id'));
});
