/**
 * Large request bodies (issue 10, item 5) end to end: a body over the large-body size is decoded as
 * it arrives and parsed a turn at a time, yet the upstream receives exactly what the small-body
 * path would send — passthrough byte for byte, converted as the same JSON — whether the body came
 * with a Content-Length or chunked; bad ones get the same 400s, with their head in the
 * failed-request record; body_memory still holds and never queues a small body behind a large one.
 * (Speed is measured in bench/, `npm run bench -- --only bodies`, not here.)
 */
import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { readdirSync, readFileSync } from 'node:fs';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { spliceJson } from '../../core/protocols/splice.js';
import { hubConversion } from '../../core/protocols/convert.js';
import { baseConfig, bearer, call, KEYS, startGateway, tmpDir, type TestGateway } from '../helpers/gateway.js';

const MiB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let mock: MockServer;
let g: TestGateway;
let failedDir: string;

t.before(async () => {
  mock = await startMockServer({ keepRequests: 4 });
  const cfg = baseConfig();
  cfg.server.body_limit = '48MiB';
  failedDir = path.join(tmpDir(), 'failed');
  cfg.failed_requests = { dir: failedDir };
  // A Chat-only upstream: Chat clients pass through to it, Messages clients are converted.
  cfg.providers.up = { kind: 'openai', base_url: `${mock.url}/v1`, api_key: 'up-key', protocols: ['openai-chat'] };
  cfg.models['up-model'] = { provider: 'up', upstream: 'up-upstream-name', price: { input: 1, output: 2 } };
  cfg.groups.chat.models.push('up-model');
  cfg.groups.messages.models.push('up-model');
  g = await startGateway(cfg);
});
t.teardown(async () => {
  await g.close();
  await mock.close();
});

/** A base64 payload of about `n` bytes (what makes real request bodies large). */
const base64 = (n: number) =>
  Buffer.alloc(Math.ceil((n * 3) / 4), 'the image bytes \u00ff\u0000')
    .toString('base64')
    .slice(0, n);
/** Text with what a body's strings carry: non-ASCII (2-, 3- and 4-byte UTF-8), escapes, a lone surrogate escape. */
const TEXT = 'héllo “quotes” 😀 \\ "x"\n\t\u0001 \ud800 end';

/** POSTs `body` with a Content-Length, or chunked in pieces of `piece` bytes. */
function post(
  pathname: string,
  headers: Record<string, string>,
  body: string,
  chunked = false,
  piece = 200_000,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const bytes = Buffer.from(body, 'utf8');
    const req = http.request(
      `${g.url}${pathname}`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers, ...(chunked ? {} : { 'content-length': String(bytes.length) }) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => {
          text += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    if (!chunked) return void req.end(bytes);
    // Pieces that cut multi-byte characters and escapes anywhere.
    for (let at = 0; at < bytes.length; at += piece) req.write(bytes.subarray(at, at + piece));
    req.end();
  });
}

const lastUpstream = () => mock.requests.at(-1)!;

t.test('passthrough: a 16 MiB Chat body reaches the upstream byte for byte (Content-Length and chunked)', async (t) => {
  const json = {
    model: 'up-model',
    models: ['chat-model'],
    temperature: 1.0,
    seed: 12345678901234567000, // as JSON.stringify writes the nearest double
    messages: [
      { role: 'system', content: TEXT.repeat(1000) },
      {
        role: 'user',
        content: [
          { type: 'text', text: TEXT },
          { type: 'image_url', image_url: { url: `data:image/png;base64,${base64(16 * MiB)}` } },
        ],
      },
    ],
  };
  // Formatted as a client might: spaces and newlines between members, `1.0` and a big integer kept as sent.
  const body = JSON.stringify(json, null, 1)
    .replace('"temperature": 1', '"temperature": 1.0')
    .replace('12345678901234567000', '12345678901234567890');
  t.ok(Buffer.byteLength(body) > 16 * MiB);
  for (const chunked of [false, true]) {
    const r = await post('/v1/chat/completions', bearer(KEYS.chat), body, chunked, 333_333);
    t.equal(r.status, 200, `answered (${chunked ? 'chunked' : 'Content-Length'})`);
    const expected = spliceJson(body, { set: { model: 'up-upstream-name' }, remove: ['models'] });
    const got = lastUpstream().body;
    t.equal(got.length, expected.length, 'the upstream body has the expected length');
    t.ok(got === expected, 'and is exactly the client body with model rewritten and models removed');
    t.equal(lastUpstream().headers['content-length'], String(Buffer.byteLength(expected)), 'its Content-Length is its byte length');
  }
});

t.test('passthrough: a large streamed Chat request gets stream_options and streams back', async (t) => {
  const body = JSON.stringify({
    model: 'up-model',
    stream: true,
    messages: [{ role: 'user', content: `${TEXT} [[mock: words=5]] ${base64(3 * MiB)}` }],
  });
  const r = await post('/v1/chat/completions', bearer(KEYS.chat), body, true, 65_537);
  t.equal(r.status, 200);
  t.match(r.text, /data: \[DONE\]/, 'the stream ended');
  t.equal(
    lastUpstream().body,
    spliceJson(body, { set: { model: 'up-upstream-name', stream_options: { include_usage: true } }, remove: ['models'] }),
  );
});

t.test(
  'converted: a 16 MiB Messages body with a base64 image reaches the Chat upstream as the small-body path would encode it',
  async (t) => {
    const image = base64(16 * MiB);
    const json = {
      model: 'up-model',
      max_tokens: 64,
      system: TEXT,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: TEXT.repeat(2000) },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: image } },
          ],
        },
      ],
    };
    const body = JSON.stringify(json);
    for (const chunked of [false, true]) {
      const r = await post('/v1/messages', { 'x-api-key': KEYS.messages, 'anthropic-version': '2023-06-01' }, body, chunked);
      t.equal(r.status, 200, `answered (${chunked ? 'chunked' : 'Content-Length'})`);
      t.equal(JSON.parse(r.text).type, 'message');
      const got = lastUpstream().body;
      const expected = hubConversion('anthropic-messages', 'openai-chat')!.requestBody({
        text: body,
        json: JSON.parse(body),
        stream: false,
        upstreamModel: 'up-upstream-name',
        requestId: 'r',
        defaultMaxTokens: undefined,
      });
      t.ok(got === expected, 'the upstream text is what JSON.stringify of the converted request gives');
      const sent = JSON.parse(got);
      const url = sent.messages.at(-1).content.find((p: any) => p.type === 'image_url').image_url.url;
      t.ok(url === `data:image/png;base64,${image}`, 'the image arrived intact as a data URL');
    }
  },
);

t.test('bad large bodies: 400 with a clear message; the record keeps the head and the full length', async (t) => {
  const big = base64(3 * MiB);
  const cases: Array<[string, Buffer, RegExp]> = [
    [
      'invalid JSON',
      Buffer.from(`{"model":"up-model","messages":[{"role":"user","content":"${big}"}],}`),
      /^Request body is not valid JSON: Unexpected token "}" at position \d+$/,
    ],
    [
      'a raw control character in a long string',
      Buffer.from(`{"model":"up-model","messages":[{"role":"user","content":"${big}\u0001"}]}`),
      /^Request body is not valid JSON: Bad control character in string literal at position \d+$/,
    ],
    [
      'unterminated',
      Buffer.from(`{"model":"up-model","messages":[{"role":"user","content":"${big}`),
      /^Request body is not valid JSON: Unterminated string/,
    ],
    [
      'not UTF-8',
      Buffer.concat([Buffer.from(`{"model":"up-model","x":"${big}`), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]),
      /^Request body is not valid UTF-8$/,
    ],
    ['whitespace only', Buffer.alloc(2 * MiB, ' '), /^Request body is empty$/],
    ['not an object', Buffer.from(`["${big}"]`), /^Request body must be a JSON object$/],
  ];
  for (const [name, bytes, message] of cases) {
    const r = await call(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
      body: bytes,
    });
    t.equal(r.status, 400, `${name}: 400`);
    t.match(r.json?.error?.message, message, `${name}: ${r.json?.error?.message}`);
  }
  // The server keeps serving, and the records were written with a head of the body.
  const ok = await call(`${g.url}/v1/chat/completions`, {
    method: 'POST',
    headers: bearer(KEYS.chat),
    json: { model: 'up-model', messages: [{ role: 'user', content: 'hi' }] },
  });
  t.equal(ok.status, 200);
  await sleep(300);
  const records = readdirSync(failedDir).flatMap((d) =>
    readdirSync(path.join(failedDir, d))
      .filter((f) => f.endsWith('.json'))
      .map((f) => JSON.parse(readFileSync(path.join(failedDir, d, f), 'utf8'))),
  );
  const invalid = records.find((r) => /Unexpected token/.test(r.error?.message ?? ''));
  t.ok(invalid, 'the invalid JSON was recorded');
  t.equal(invalid.body_truncated_from, Buffer.byteLength(cases[0][1]), 'with the full length of the body');
  t.equal(invalid.body.length, 1024 * 1024, 'and its first MiB');
  t.ok(invalid.body.startsWith('{"model":"up-model"'));
});

t.test('server.body_memory with large bodies: a waiting large body gets its 503; a small one is not queued behind it', async (t) => {
  const cfg = baseConfig();
  cfg.server.body_limit = '32MiB';
  cfg.server.body_memory = '20MiB';
  cfg.providers.up = { kind: 'openai', base_url: `${mock.url}/v1`, api_key: 'up-key', protocols: ['openai-chat'] };
  cfg.models['up-model'] = { provider: 'up', price: { input: 1, output: 2 } };
  cfg.groups.chat.models.push('up-model');
  const g2 = await startGateway(cfg);
  t.teardown(() => g2.close());
  const big = JSON.stringify({ model: 'up-model', messages: [{ role: 'user', content: base64(12 * MiB) }] });
  const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ${KEYS.chat}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(big)}\r\n\r\n`;
  // A holds 12 MiB of the 20 MiB while its body is still arriving.
  const a = net.connect(g2.gw.port, '127.0.0.1');
  let aText = '';
  a.on('data', (d) => {
    aText += d.toString('latin1');
  });
  const aDone = new Promise((r) => a.on('close', r));
  a.write(head + big.slice(0, 1000));
  await sleep(200);
  // B needs 12 MiB more: it waits for room. C, small, arrives while B waits.
  const order: string[] = [];
  const b = call(`${g2.url}/v1/chat/completions`, { headers: bearer(KEYS.chat), body: big, method: 'POST' }).then((r) => {
    order.push('B');
    return r;
  });
  await sleep(200);
  const c = await call(`${g2.url}/v1/chat/completions`, {
    headers: bearer(KEYS.chat),
    json: { model: 'up-model', messages: [{ role: 'user', content: 'small' }] },
  });
  order.push('C');
  t.equal(c.status, 200, 'the small body is served');
  const rb = await b;
  t.equal(rb.status, 503, 'the large body found no room: 503');
  t.equal(rb.json.error.code, 'body_memory_exhausted');
  t.same(order, ['C', 'B'], 'the small body was answered while the large one still waited');
  a.end(big.slice(1000));
  await aDone;
  t.match(aText, /^HTTP\/1\.1 200 /m, 'the body holding the budget is served');
  const again = await call(`${g2.url}/v1/chat/completions`, { headers: bearer(KEYS.chat), body: big, method: 'POST' });
  t.equal(again.status, 200, 'its bytes were released');
});
