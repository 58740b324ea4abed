/**
 * The group-to-endpoint matrix of spec §4 and the body formats of §7.1, cell by cell, on a gateway
 * whose mock upstream speaks all three protocols.
 */
import t from 'tap';
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

let g: TestGateway;
t.before(async () => {
  g = await startGateway(baseConfig());
});
t.teardown(() => g.close());

type Cell = {
  key: string;
  endpoint: string;
  body?: Record<string, unknown>;
  status: number;
  shape?: 'messages' | 'chat' | 'responses-lite' | 'flat';
  type?: string;
};
const endpoints = {
  chat: '/v1/chat/completions',
  messages: '/v1/messages',
  count: '/v1/messages/count_tokens',
  responses: '/v1/responses',
  models: '/v1/models',
  usage: '/v1/usage',
};
const bodies = (model: string) => ({
  chat: chatBody({ model }),
  messages: messagesBody({ model }),
  count: { model, messages: [{ role: 'user', content: 'hi' }] },
  responses: responsesBody({ model }),
});

function shapeOf(json: any): string {
  if (json && json.type === 'error' && json.error && typeof json.error.type === 'string') return 'messages';
  // Flat key-check bodies carry an `error` object too (for OpenAI-shaped clients): `code` decides.
  if (json && typeof json.code === 'string' && typeof json.message === 'string') return 'flat';
  if (json && json.error && typeof json.error.type === 'string' && 'code' in json.error) return 'chat';
  if (json && json.error && !('type' in json.error) && 'code' in json.error) return 'responses-lite';
  if (json && typeof json.code === 'string' && typeof json.message === 'string') return 'flat';
  return 'other';
}

const matrix: Array<[string, Cell[]]> = [
  [
    'chat-only group',
    [
      { key: KEYS.chat, endpoint: 'chat', body: bodies('chat-model').chat, status: 200 },
      {
        key: KEYS.chat,
        endpoint: 'messages',
        body: bodies('chat-model').messages,
        status: 404,
        shape: 'messages',
        type: 'not_found_error',
      },
      { key: KEYS.chat, endpoint: 'count', body: bodies('chat-model').count, status: 404, shape: 'messages', type: 'not_found_error' },
      {
        key: KEYS.chat,
        endpoint: 'responses',
        body: bodies('chat-model').responses,
        status: 404,
        shape: 'messages',
        type: 'not_found_error',
      },
      { key: KEYS.chat, endpoint: 'models', status: 200 },
      { key: KEYS.chat, endpoint: 'usage', status: 200 },
    ],
  ],
  [
    'Messages-style group',
    [
      { key: KEYS.messages, endpoint: 'chat', body: bodies('claude-model').chat, status: 200 },
      { key: KEYS.messages, endpoint: 'messages', body: bodies('claude-model').messages, status: 200 },
      { key: KEYS.messages, endpoint: 'count', body: bodies('claude-model').count, status: 200 },
      { key: KEYS.messages, endpoint: 'responses', body: bodies('claude-model').responses, status: 200 },
      { key: KEYS.messages, endpoint: 'models', status: 200 },
      { key: KEYS.messages, endpoint: 'usage', status: 200 },
    ],
  ],
  [
    'Responses-style group allowing Messages',
    [
      { key: KEYS.responses, endpoint: 'chat', body: bodies('gpt-model').chat, status: 200 },
      { key: KEYS.responses, endpoint: 'messages', body: bodies('gpt-model').messages, status: 200 },
      { key: KEYS.responses, endpoint: 'count', body: bodies('gpt-model').count, status: 404, shape: 'messages', type: 'not_found_error' },
      { key: KEYS.responses, endpoint: 'responses', body: bodies('gpt-model').responses, status: 200 },
    ],
  ],
  [
    'Responses-style group not allowing Messages',
    [
      {
        key: KEYS.responsesNoMsg,
        endpoint: 'messages',
        body: bodies('gpt-model').messages,
        status: 403,
        shape: 'messages',
        type: 'permission_error',
      },
      { key: KEYS.responsesNoMsg, endpoint: 'responses', body: bodies('gpt-model').responses, status: 200 },
    ],
  ],
];

for (const [name, cells] of matrix) {
  t.test(name, async (t) => {
    for (const c of cells) {
      const path = endpoints[c.endpoint as keyof typeof endpoints];
      const r = await call(g.url + path, { headers: bearer(c.key), ...(c.body ? { json: c.body } : {}) });
      t.equal(r.status, c.status, `${c.endpoint}: ${c.status}`);
      if (c.shape) t.equal(shapeOf(r.json), c.shape, `${c.endpoint}: ${c.shape} body`);
      if (c.type) t.equal(r.json.error.type, c.type, `${c.endpoint}: ${c.type}`);
    }
  });
}

t.test('§7.1 body formats per endpoint', async (t) => {
  // Key check errors are flat everywhere.
  for (const [ep, path] of Object.entries(endpoints)) {
    const r = await call(g.url + path, {
      headers: bearer('sk-' + '0'.repeat(64)),
      ...(['models', 'usage'].includes(ep) ? {} : { json: chatBody() }),
    });
    t.equal(r.status, 401, `${ep}: 401`);
    t.equal(shapeOf(r.json), 'flat', `${ep}: flat key-check body`);
  }
  const bad = (key: string, path: string) => call(g.url + path, { headers: bearer(key), body: '{not json', method: 'POST' });
  t.equal(shapeOf((await bad(KEYS.messages, endpoints.messages)).json), 'messages', '/v1/messages: Messages-style');
  t.equal(shapeOf((await bad(KEYS.messages, endpoints.count)).json), 'messages', 'count_tokens: Messages-style');
  t.equal(shapeOf((await bad(KEYS.chat, endpoints.chat)).json), 'chat', 'chat completions: Chat-style');
  t.equal(shapeOf((await bad(KEYS.responses, endpoints.responses)).json), 'chat', 'Responses on a Responses-style group: Chat-style');
  const lite = await bad(KEYS.messages, endpoints.responses);
  t.equal(shapeOf(lite.json), 'responses-lite', 'Responses on a Messages-style group: {error:{code,message}}');
  t.same(Object.keys(lite.json.error).sort(), ['code', 'message']);
  const prev = await call(g.url + endpoints.responses, {
    headers: bearer(KEYS.messages),
    json: responsesBody({ model: 'claude-model', previous_response_id: 'resp_1' }),
  });
  t.equal(prev.status, 400);
  t.same(Object.keys(prev.json.error).sort(), ['code', 'message']);
});

t.test('only the statuses spec §4 allows: an upstream failure on count_tokens is 503, never 502', async (t) => {
  for (const status of [500, 502, 503, 401]) {
    const r = await call(g.url + endpoints.count, {
      headers: bearer(KEYS.messages),
      json: { model: 'claude-model', messages: [{ role: 'user', content: `[[mock: status=${status}]]` }] },
    });
    t.equal(r.status, 503, `upstream ${status} → 503`);
  }
});

t.test('count_tokens never answers 409: a history the Messages endpoint would refuse is forwarded', async (t) => {
  const messages = [
    { role: 'user', content: 'hi' },
    {
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'x', signature: '' },
        { type: 'text', text: 'ok' },
      ],
    },
    { role: 'user', content: 'again' },
  ];
  const count = await call(g.url + endpoints.count, { headers: bearer(KEYS.messages), json: { model: 'claude-model', messages } });
  t.equal(count.status, 200, 'counted by the upstream');
  t.type(count.json.input_tokens, 'number');
  const create = await call(g.url + endpoints.messages, {
    headers: bearer(KEYS.messages),
    json: { model: 'claude-model', max_tokens: 10, messages },
  });
  t.equal(create.status, 409, '/v1/messages refuses the same history');
});

t.test("a body too deeply nested to convert is a 400 in the client's format, and the server keeps serving", async (t) => {
  const depth = 20_000;
  const schema = '{"type":"object","properties":{"a":'.repeat(depth) + '{"type":"string"}' + '}}'.repeat(depth);
  const body = `{"model":"claude-model","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":${schema}}}]}`;
  const r = await call(g.url + endpoints.chat, {
    method: 'POST',
    headers: { ...bearer(KEYS.messages), 'content-type': 'application/json' },
    body,
  });
  t.equal(r.status, 400);
  t.equal(r.json.error.type, 'invalid_request_error');
  t.equal(r.json.error.message, 'Request body is nested too deeply to convert');
  t.equal((await call(g.url + endpoints.chat, { headers: bearer(KEYS.messages), json: chatBody({ model: 'claude-model' }) })).status, 200);
});
