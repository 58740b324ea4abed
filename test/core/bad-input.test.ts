/**
 * Bad input, table-driven: every row gets a clear error in the route's protocol format, and the
 * server keeps serving (a good request succeeds after each row).
 */
import t from 'tap';
import { baseConfig, bearer, call, chatBody, KEYS, messagesBody, startGateway, type TestGateway } from '../helpers/gateway.js';
import { rawRequest, rawSocket } from '../helpers/raw.js';

let g: TestGateway;
t.before(async () => {
  const cfg = baseConfig();
  cfg.server.body_limit = '64KiB';
  g = await startGateway(cfg);
});
t.teardown(() => g.close());

const deep = (n: number) => '{"model":"chat-model","messages":[{"role":"user","content":"hi"}],"x":' + '['.repeat(n) + ']'.repeat(n) + '}';

const rows: Array<{ name: string; body: string | Buffer; status: number; message?: RegExp }> = [
  { name: 'empty body', body: '', status: 400, message: /empty/ },
  { name: 'whitespace body', body: '  \n ', status: 400, message: /empty/ },
  { name: 'malformed JSON', body: '{"model": "chat-model",', status: 400, message: /not valid JSON/ },
  { name: 'trailing garbage', body: '{"model":"chat-model","messages":[]} x', status: 400, message: /not valid JSON/ },
  { name: 'JSON array', body: '[1,2]', status: 400, message: /JSON object/ },
  { name: 'JSON string', body: '"hello"', status: 400, message: /JSON object/ },
  { name: 'JSON null', body: 'null', status: 400, message: /JSON object/ },
  { name: 'missing model', body: '{"messages":[]}', status: 400, message: /'model' is required/ },
  { name: 'null model', body: '{"model":null,"messages":[]}', status: 400, message: /'model' is required/ },
  { name: 'numeric model', body: '{"model":42,"messages":[]}', status: 400, message: /'model' must be a string/ },
  { name: 'object model', body: '{"model":{"id":"x"},"messages":[]}', status: 400, message: /must be a string/ },
  { name: 'empty model', body: '{"model":"","messages":[]}', status: 400, message: /must not be empty/ },
  {
    name: 'string stream',
    body: '{"model":"chat-model","messages":[],"stream":"yes"}',
    status: 400,
    message: /'stream' must be a boolean/,
  },
  { name: 'numeric stream', body: '{"model":"chat-model","messages":[],"stream":1}', status: 400, message: /'stream' must be a boolean/ },
  { name: 'models not an array', body: '{"model":"chat-model","messages":[],"models":"x"}', status: 400, message: /'models'/ },
  { name: 'models with a number', body: '{"model":"chat-model","messages":[],"models":[1]}', status: 400, message: /'models'/ },
  { name: 'messages missing', body: '{"model":"chat-model"}', status: 400, message: /'messages'/ },
  { name: 'invalid UTF-8', body: Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]), status: 400, message: /UTF-8/ },
  { name: 'deeply nested arrays (30k levels)', body: deep(30_000), status: 200 },
  { name: 'deeply nested, unterminated', body: deep(30_000).slice(0, -40), status: 400, message: /not valid JSON/ },
  { name: 'unknown model', body: '{"model":"nope","messages":[]}', status: 503, message: /No available accounts/ },
  { name: 'model of another group', body: '{"model":"claude-model","messages":[]}', status: 503, message: /No available accounts/ },
];

t.test('chat completions: each bad body gets its error, then a good request still works', async (t) => {
  for (const row of rows) {
    const r = await rawRequest(g.url + '/v1/chat/completions', {
      headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
      body: row.body,
    });
    t.equal(r.status, row.status, `${row.name}: status`);
    if (row.status >= 400 && row.status !== 413) {
      t.type(r.json?.error, 'object', `${row.name}: Chat-style error body`);
      t.equal(r.json.error.type, row.status === 503 ? 'api_error' : 'invalid_request_error', `${row.name}: type`);
      if (row.message) t.match(r.json.error.message, row.message, `${row.name}: message`);
      t.ok(r.headers['x-request-id'], `${row.name}: X-Request-ID`);
    }
    if (row.status === 503) t.equal(r.headers['x-should-retry'], 'false', 'model not served: do not retry');
    const ok = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() });
    t.equal(ok.status, 200, `${row.name}: server still serving`);
  }
});

t.test('messages: errors in the Messages format', async (t) => {
  const r = await call(g.url + '/v1/messages', { headers: bearer(KEYS.messages), body: '{oops', method: 'POST' });
  t.equal(r.status, 400);
  t.equal(r.json.type, 'error');
  t.equal(r.json.error.type, 'invalid_request_error');
  const s = await call(g.url + '/v1/messages', { headers: bearer(KEYS.messages), json: messagesBody({ stream: 'true' }) });
  t.equal(s.status, 400);
  t.match(s.json.error.message, /'stream' must be a boolean/);
});

t.test("an output cap no model can produce: 400 in the protocol's format, not to be retried (not a retryable billing 503)", async (t) => {
  const values = ['1e15', '1e308', '9007199254740993', '1e300'];
  const protocols: Array<{ path: string; headers: Record<string, string>; fields: string[]; body: (field: string, v: string) => string }> =
    [
      {
        path: '/v1/chat/completions',
        headers: bearer(KEYS.chat),
        fields: ['max_tokens', 'max_completion_tokens'],
        body: (f, v) => `{"model":"chat-model","messages":[{"role":"user","content":"hi"}],"${f}":${v}}`,
      },
      {
        path: '/v1/messages',
        headers: { 'x-api-key': KEYS.messages, 'anthropic-version': '2023-06-01' },
        fields: ['max_tokens'],
        body: (f, v) => `{"model":"claude-model","messages":[{"role":"user","content":"hi"}],"${f}":${v}}`,
      },
      {
        path: '/v1/responses',
        headers: bearer(KEYS.responses),
        fields: ['max_output_tokens'],
        body: (f, v) => `{"model":"gpt-model","input":"hi","${f}":${v}}`,
      },
    ];
  for (const p of protocols) {
    for (const field of p.fields) {
      for (const v of values) {
        const label = `${p.path} ${field}: ${v}`;
        const r = await rawRequest(g.url + p.path, {
          headers: { ...p.headers, 'content-type': 'application/json' },
          body: p.body(field, v),
        });
        t.equal(r.status, 400, `${label}: 400`);
        t.equal(r.headers['x-should-retry'], 'false', `${label}: x-should-retry: false`);
        const message = new RegExp(`'${field}' must be at most 2147483647`);
        if (p.path === '/v1/messages')
          t.match(r.json, { type: 'error', error: { type: 'invalid_request_error', message } }, `${label}: Messages body`);
        else
          t.match(
            r.json,
            { error: { type: 'invalid_request_error', code: 'invalid_request_error', message } },
            `${label}: Chat-style body`,
          );
      }
    }
    const ok = await rawRequest(g.url + p.path, {
      headers: { ...p.headers, 'content-type': 'application/json' },
      body: p.body(p.fields[0], '32000'),
    });
    t.equal(ok.status, 200, `${p.path}: a real cap (32000) is served`);
  }
});

t.test('__proto__ and constructor keys are data, not prototype writes', async (t) => {
  const body =
    '{"__proto__":{"polluted":true},"constructor":{"prototype":{"polluted2":true}},"model":"chat-model","messages":[{"role":"user","content":"hi","__proto__":{"x":1}}]}';
  const r = await rawRequest(g.url + '/v1/chat/completions', {
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body,
  });
  t.equal(r.status, 200);
  t.equal(({} as any).polluted, undefined);
  t.equal(({} as any).polluted2, undefined);
  const last = g.gw.mocks.get('mock')!.requests.at(-1)!;
  t.match(last.body, /"__proto__":\{"polluted":true\}/, 'forwarded as data, byte for byte');
});

t.test('body size limit: Content-Length refused before reading, streamed bodies cut at the limit', async (t) => {
  const big = JSON.stringify(chatBody({ pad: 'x'.repeat(70 * 1024) }));
  const declared = await rawRequest(g.url + '/v1/chat/completions', {
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json', 'content-length': String(big.length) },
    body: big,
  });
  t.equal(declared.status, 413);
  t.equal(declared.json.error.type, 'request_too_large');
  const chunked = await rawRequest(g.url + '/v1/chat/completions', {
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
    body: big,
  });
  t.equal(chunked.status, 413);
  const msg = await call(g.url + '/v1/messages', { headers: bearer(KEYS.messages), json: messagesBody({ pad: 'y'.repeat(70 * 1024) }) });
  t.equal(msg.status, 413);
  t.equal(msg.json.type, 'error', 'Messages format on /v1/messages');
  t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() })).status, 200);
});

t.test('malformed HTTP: control characters in headers, broken request lines', async (t) => {
  const cases = [
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\nContent-Length: 2\r\n\r\n{}`,
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\x00b\r\n\r\n`,
    `GARBAGE\r\n\r\n`,
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n`,
  ];
  for (const c of cases) {
    const out = await rawSocket(g.url, c);
    t.match(out, /^HTTP\/1\.1 400 /, JSON.stringify(c.slice(0, 40)));
    t.match(out, /x-request-id: req_/i);
    t.match(out, /"type":"invalid_request_error"/);
  }
  t.equal((await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() })).status, 200, 'still serving');
});

t.test('unknown routes and methods', async (t) => {
  const r = await call(g.url + '/v1/nope', { headers: bearer(KEYS.chat), json: {} });
  t.equal(r.status, 404);
  t.equal(r.json.error.type, 'not_found_error');
  const m = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat) });
  t.equal(m.status, 405);
});
