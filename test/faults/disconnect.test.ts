/**
 * Disconnects are billed (issue 10, item 2) and streams are held to their reservation (item 4).
 * - A non-streaming client that leaves (reset, or FIN) once the upstream has its request is billed
 *   the input estimate; a client that half-closes after sending still reads its answer.
 * - An upstream that ignores max_tokens is cut at the reservation as the protocol's length stop, and
 *   200 racing requests on a $1.00 key quota overspend it by at most one reservation.
 */
import t from 'tap';
import net from 'node:net';
import { baseConfig, bearer, startGateway, type TestGateway } from '../helpers/gateway.js';
import { sseText } from '../helpers/raw.js';
import { until } from '../helpers/upstream.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const hex = (n: number) => `sk-${n.toString(16).padStart(64, '0')}`;
const K = {
  quota: hex(0x901),
  rst: hex(0x902),
  fin: hex(0x903),
  half: hex(0x904),
  cut: hex(0x905),
  cutMsg: hex(0x906),
  cutResp: hex(0x907),
  cutConv: hex(0x908),
};
/** $ per million tokens: 100 µ$ an input token, 1000 µ$ an output token. */
const PRICEY = { input: 100, output: 1000 };

let g: TestGateway;
t.before(async () => {
  const cfg = baseConfig();
  cfg.models.pricey = { provider: 'mock', price: PRICEY };
  cfg.providers.msgonly = { kind: 'mock', protocols: ['anthropic-messages'] };
  cfg.models['pricey-converted'] = { provider: 'msgonly', upstream: 'pricey', price: PRICEY };
  cfg.groups.chat.models.push('pricey');
  cfg.groups.messages.models.push('pricey');
  cfg.groups.responses.models.push('pricey');
  cfg.groups.conv = { kind: 'chat', models: ['pricey-converted'] };
  cfg.keys.push(
    { key: K.quota, name: 'quota', user: 'alice', group: 'chat', quota: 1 },
    { key: K.rst, name: 'rst', user: 'alice', group: 'chat' },
    { key: K.fin, name: 'fin', user: 'alice', group: 'chat' },
    { key: K.half, name: 'half', user: 'alice', group: 'chat' },
    { key: K.cut, name: 'cut', user: 'alice', group: 'chat' },
    { key: K.cutMsg, name: 'cut-msg', user: 'alice', group: 'messages' },
    { key: K.cutResp, name: 'cut-resp', user: 'alice', group: 'responses' },
    { key: K.cutConv, name: 'cut-conv', user: 'alice', group: 'conv' },
  );
  g = await startGateway(cfg);
});
t.teardown(() => g.close());

const stats = (key: string) => g.gw.store.keyStats(key, '2000-01-01', '2100-01-01').then((s) => s.total);
function rawPost(path: string, key: string, body: string): string {
  return (
    `POST ${path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
  );
}
const slowBody = JSON.stringify({
  model: 'chat-model',
  messages: [{ role: 'user', content: 'leaving early [[mock: delay=1500 words=5]]' }],
});

t.test('non-streaming: a client that resets the connection is billed the input the upstream processed', async (t) => {
  const s = net.connect(g.gw.port, '127.0.0.1');
  s.on('error', () => undefined);
  s.write(rawPost('/v1/chat/completions', K.rst, slowBody));
  await sleep(300);
  s.resetAndDestroy();
  t.ok(await until(async () => (await stats('rst')).requests === 1), 'one usage record');
  const u = await stats('rst');
  t.ok(u.actual > 0, `billed (${u.actual} µ$), not free`);
  t.equal(u.output, 0, 'no output reached anyone');
  t.ok(u.input > 0, 'the input estimate');
});

t.test('non-streaming: a client that closes (FIN) and is gone is billed too', async (t) => {
  const ac = new AbortController();
  const p = fetch(`${g.url}/v1/chat/completions`, {
    method: 'POST',
    signal: ac.signal,
    headers: { ...bearer(K.fin), 'content-type': 'application/json' },
    body: slowBody,
  }).catch(() => 'aborted');
  await sleep(300);
  ac.abort();
  t.equal(await p, 'aborted');
  t.ok(await until(async () => (await stats('fin')).requests === 1), 'one usage record');
  t.ok((await stats('fin')).actual > 0, 'billed');
});

t.test('a client that half-closes after sending (shutdown(SHUT_WR)) gets its response, and it is billed', async (t) => {
  const s = net.connect(g.gw.port, '127.0.0.1');
  let out = '';
  s.on('data', (d) => {
    out += d.toString('utf8');
  });
  const closed = new Promise((r) => s.on('close', r));
  s.write(
    rawPost(
      '/v1/chat/completions',
      K.half,
      JSON.stringify({ model: 'chat-model', messages: [{ role: 'user', content: 'half [[mock: delay=300 words=5]]' }] }),
    ),
  );
  s.end(); // FIN after the request: still reading
  await closed;
  t.match(out, /^HTTP\/1\.1 200 OK/m, 'the final status (after any interim 1xx)');
  t.match(out, /"object":"chat\.completion".*"role":"assistant"/, 'the whole answer');
  t.ok(await until(async () => (await stats('half')).requests === 1));
  t.ok((await stats('half')).output > 0, 'billed the answer');
});

const dishonest = 'tell me everything [[mock: words=400 chunk_delay=1 ignore_max_tokens]]';

t.test("a stream past its reservation ends as the protocol's length stop and is billed what was generated", async (t) => {
  const chat = await sseText(`${g.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...bearer(K.cut), 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'pricey',
      stream: true,
      max_tokens: 20,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: dishonest }],
    }),
  });
  t.equal(chat.status, 200);
  t.match(chat.text, /"finish_reason":"length"/, 'Chat: finish_reason length');
  t.match(chat.text, /data: \[DONE\]\n\n$/, 'Chat: [DONE] last');
  const words = [...chat.text.matchAll(/"content":"([^"]*)"/g)]
    .map((m) => m[1])
    .join('')
    .split(/\s+/)
    .filter(Boolean).length;
  t.ok(words < 100, `far fewer than the 400 words the upstream would send (${words})`);

  const msg = await sseText(`${g.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': K.cutMsg, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'pricey', stream: true, max_tokens: 20, messages: [{ role: 'user', content: dishonest }] }),
  });
  t.match(msg.text, /event: content_block_stop\n/, 'Messages: the open block is closed');
  t.match(msg.text, /"stop_reason":"max_tokens"/, 'Messages: stop_reason max_tokens');
  t.match(msg.text, /event: message_stop\ndata: \{"type":"message_stop"\}\n\n$/, 'Messages: message_stop last');

  const resp = await sseText(`${g.url}/v1/responses`, {
    method: 'POST',
    headers: { ...bearer(K.cutResp), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'pricey', stream: true, max_output_tokens: 20, input: dishonest }),
  });
  t.match(resp.text, /event: response\.incomplete\n/, 'Responses: response.incomplete');
  t.match(resp.text, /"incomplete_details":\{"reason":"max_output_tokens"\}/);

  const conv = await sseText(`${g.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...bearer(K.cutConv), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'pricey-converted', stream: true, max_tokens: 20, messages: [{ role: 'user', content: dishonest }] }),
  });
  t.match(conv.text, /"finish_reason":"length"/, 'converted (Chat client, Messages upstream): finish_reason length');

  for (const k of ['cut', 'cut-msg', 'cut-resp', 'cut-conv']) {
    t.ok(await until(async () => (await stats(k)).requests === 1), `${k}: one record`);
    const u = await stats(k);
    t.ok(u.output > 0 && u.output < 100, `${k}: billed what was generated (${u.output} output tokens), not the 400 words`);
  }
});

t.test('200 racing requests on a $1.00 quota against an upstream that ignores max_tokens: overspend ≤ one reservation', async (t) => {
  const body = JSON.stringify({
    model: 'pricey',
    stream: true,
    max_tokens: 100,
    messages: [{ role: 'user', content: 'race [[mock: words=500 chunk_delay=2 ignore_max_tokens]]' }],
  });
  // The reservation (core/billing.ts worstCaseCharge): a token per 2 body bytes of input, and the
  // output cap, at the model's price.
  const reservation = Math.ceil(Buffer.byteLength(body) / 2) * PRICEY.input + 100 * PRICEY.output;
  const statuses = await Promise.all(
    Array.from({ length: 200 }, async () => {
      const r = await fetch(`${g.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...bearer(K.quota), 'content-type': 'application/json' },
        body,
      });
      await r.text();
      return r.status;
    }),
  );
  t.ok(statuses.filter((s) => s === 200).length >= 5, 'some were served');
  t.ok(
    statuses.every((s) => s === 200 || s === 429),
    'the rest refused by the quota',
  );
  const used = (await g.gw.store.keyState('quota')).used;
  t.ok(
    used - 1_000_000 <= reservation,
    `spent ${used} µ$ of a 1,000,000 µ$ quota: overspend ${used - 1_000_000} ≤ one reservation (${reservation})`,
  );
});
