/**
 * Every answer in the contract, and every answer delivered (issue 10, items 6 and 8): malformed
 * HTTP gets 400 or 413 with a JSON error body and an X-Request-ID; over-limit bodies get their 413
 * read by the client, 50 in a row per framing and protocol; slow headers and slow bodies are closed
 * with a 400; waiting for upstream headers is upstream_timeout's, silence after them the idle one's.
 */
import t from 'tap';
import net from 'node:net';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let g: TestGateway;
t.before(async () => {
  const cfg = baseConfig();
  cfg.server.body_limit = '256KiB';
  cfg.server.headers_timeout = '1s';
  cfg.server.body_timeout = '1s';
  g = await startGateway(cfg);
});
t.teardown(() => g.close());

/** Sends bytes (optionally in timed pieces) and collects the answer until the server closes. */
function exchange(
  pieces: Array<string | Buffer>,
  opts: { gapMs?: number; maxMs?: number } = {},
): Promise<{ text: string; closed: boolean }> {
  return new Promise((resolve) => {
    const s = net.connect(g.gw.port, '127.0.0.1');
    let text = '';
    let closed = false;
    s.on('data', (d) => {
      text += d.toString('latin1');
    });
    s.on('error', () => undefined);
    s.on('close', () => {
      closed = true;
      clearTimeout(timer);
      resolve({ text, closed });
    });
    const timer = setTimeout(() => {
      s.destroy();
      resolve({ text, closed });
    }, opts.maxMs ?? 10_000);
    void (async () => {
      for (const p of pieces) {
        if (s.destroyed) return;
        s.write(p);
        if (opts.gapMs) await sleep(opts.gapMs);
      }
    })();
  });
}

function parse(raw: string): { status: number; headers: Record<string, string>; body: any } {
  const head = raw.slice(0, raw.indexOf('\r\n\r\n'));
  const [line, ...rest] = head.split('\r\n');
  const headers: Record<string, string> = {};
  for (const h of rest) headers[h.slice(0, h.indexOf(':')).toLowerCase()] = h.slice(h.indexOf(':') + 1).trim();
  let body = raw.slice(head.length + 4);
  if (headers['transfer-encoding'] === 'chunked') body = body.replace(/^[0-9a-f]+\r\n/, '').replace(/\r\n0\r\n\r\n$/, '');
  let json: any;
  try {
    json = JSON.parse(body);
  } catch {
    json = undefined;
  }
  return { status: Number(line.split(' ')[1]), headers, body: json };
}

function inContract(t: any, raw: string, status: number, code: string, label: string) {
  const r = parse(raw);
  t.equal(r.status, status, `${label}: ${status}`);
  t.match(r.headers['x-request-id'], /^\S+$/, `${label}: X-Request-ID`);
  t.match(r.headers['content-type'], /application\/json/, `${label}: JSON`);
  t.match(r.body, { error: { type: String, code, message: String } }, `${label}: documented error body`);
}

const chatReq = (extra: string, body = JSON.stringify(chatBody())) =>
  `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ${KEYS.chat}\r\nContent-Type: application/json\r\n${extra}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

t.test('malformed HTTP is answered in the contract', async (t) => {
  inContract(t, (await exchange([chatReq('Expect: bogus\r\n')])).text, 400, 'bad_request', 'Expect other than 100-continue');
  inContract(t, (await exchange(['GET /v1/models HTTP/1.1\r\nAuthorization: Bearer x\r\n\r\n'])).text, 400, 'bad_request', 'no Host');
  inContract(t, (await exchange([chatReq(`X-Big: ${'a'.repeat(20_000)}\r\n`)])).text, 413, 'headers_too_large', 'headers over 16 KiB');
  inContract(
    t,
    (
      await exchange([
        `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ${KEYS.chat}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
      ])
    ).text,
    400,
    'bad_request',
    'bad chunking',
  );
  inContract(
    t,
    (await exchange(['GET / HTTP/1.1\r\nHost: gw\r\nBad\u0001Header: x\r\n\r\n'])).text,
    400,
    'bad_request',
    'bad header characters',
  );
  const ok = await call(`${g.url}/v1/models`, { headers: bearer(KEYS.chat) });
  t.equal(ok.status, 200, 'still serving');
});

t.test('slowloris headers and a body slower than its Content-Length are answered 400 and closed', async (t) => {
  const slow = 'GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Slow: '.split('');
  const loris = await exchange([...slow, ...Array.from({ length: 100 }, () => 'a')], { gapMs: 100, maxMs: 15_000 });
  t.ok(loris.closed, 'the slow sender is closed');
  inContract(t, loris.text, 400, 'request_timeout', 'slow headers');

  const body = JSON.stringify(chatBody());
  const slowBody = await exchange([chatReq('', body).slice(0, -10)], { maxMs: 15_000 });
  t.ok(slowBody.closed, 'a body that never completes is closed');
  inContract(t, slowBody.text, 400, 'request_timeout', 'slow body');
});

/**
 * One upload over a fresh connection, sent whole before the answer is read (as curl and most
 * blocking clients do): resolves with the status read, or the error the client got. A server that
 * closes with the body unread resets the connection, and the client never reads its answer.
 */
function upload(path: string, headers: Record<string, string>, size: number, chunked: boolean): Promise<number | string> {
  return new Promise((resolve) => {
    const s = net.connect(g.gw.port, '127.0.0.1');
    let done = false;
    const finish = (v: number | string) => {
      if (done) return;
      done = true;
      s.destroy();
      resolve(v);
    };
    s.on('error', (e: NodeJS.ErrnoException) => finish(`socket ${e.code ?? e.message}`));
    s.on('close', () => finish('closed without an answer'));
    const head =
      `POST ${path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n` +
      Object.entries(headers)
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join('') +
      (chunked ? 'Transfer-Encoding: chunked\r\n' : `Content-Length: ${size}\r\n`) +
      '\r\n';
    const piece = Buffer.alloc(64 * 1024, 'a');
    const frames: Buffer[] = [Buffer.from(head)];
    for (let sent = 0; sent < size; sent += piece.length) {
      const p = piece.subarray(0, Math.min(piece.length, size - sent));
      frames.push(chunked ? Buffer.concat([Buffer.from(`${p.length.toString(16)}\r\n`), p, Buffer.from('\r\n')]) : p);
    }
    if (chunked) frames.push(Buffer.from('0\r\n\r\n'));
    let i = 0;
    const readAnswer = () => {
      let text = '';
      s.on('data', (d) => {
        text += d.toString('latin1');
        const m = /^HTTP\/1\.1 (\d{3}) /m.exec(text.replace(/^HTTP\/1\.1 1\d\d [^\r]*\r\n\r\n/gm, ''));
        if (m) finish(Number(m[1]));
      });
    };
    const pump = () => {
      while (i < frames.length) {
        if (!s.write(frames[i++])) return void s.once('drain', pump);
      }
      readAnswer();
    };
    s.once('connect', pump);
  });
}

t.test('over-limit bodies: 50 uploads in a row per framing and protocol all read their 413', async (t) => {
  const targets: Array<[string, Record<string, string>]> = [
    ['/v1/chat/completions', { authorization: `Bearer ${KEYS.chat}` }],
    ['/v1/messages', { 'x-api-key': KEYS.messages, 'anthropic-version': '2023-06-01' }],
    ['/v1/responses', { authorization: `Bearer ${KEYS.responses}` }],
  ];
  for (const [path, headers] of targets) {
    for (const chunked of [false, true]) {
      const got: Array<number | string> = [];
      for (let i = 0; i < 50; i++) got.push(await upload(path, headers, 4 * 1024 * 1024, chunked));
      const bad = got.filter((s) => s !== 413);
      t.same(bad, [], `${path} ${chunked ? 'chunked' : 'Content-Length'}: 50 of 50 read 413`);
    }
  }
  t.equal((await call(`${g.url}/v1/chat/completions`, { headers: bearer(KEYS.chat), json: chatBody() })).status, 200, 'still serving');
});

t.test('upstream_timeout covers waiting for the headers; upstream_idle_timeout only silence after them', async (t) => {
  const cfg = baseConfig();
  cfg.server.upstream_idle_timeout = '300ms';
  cfg.server.upstream_timeout = '5s';
  const g2 = await startGateway(cfg);
  t.teardown(() => g2.close());
  const slowHeaders = await call(`${g2.url}/v1/chat/completions`, {
    headers: bearer(KEYS.chat),
    json: chatBody({ messages: [{ role: 'user', content: 'x [[mock: delay=800]]' }] }),
  });
  t.equal(slowHeaders.status, 200, 'headers after 800 ms with a 300 ms idle timeout: served');

  const cfg3 = baseConfig();
  cfg3.server.upstream_idle_timeout = '60s';
  cfg3.server.upstream_timeout = '500ms';
  const g3 = await startGateway(cfg3);
  t.teardown(() => g3.close());
  const never = await call(`${g3.url}/v1/chat/completions`, {
    headers: bearer(KEYS.chat),
    json: chatBody({ messages: [{ role: 'user', content: 'x [[mock: hang]]' }] }),
  });
  t.equal(never.status, 502, 'an upstream that never sends headers ends at upstream_timeout');
  t.match(never.json.error.message, /timed out/);
});

t.test('upstream_idle_timeout counts silence, not length: a stream that keeps sending for longer than it completes', async (t) => {
  const cfg = baseConfig();
  cfg.server.upstream_idle_timeout = '400ms';
  cfg.server.upstream_timeout = '10s';
  const g2 = await startGateway(cfg);
  t.teardown(() => g2.close());
  // 14 frames 100 ms apart: about 1.4 s of answer, never 400 ms silent.
  const res = await fetch(`${g2.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ stream: true, messages: [{ role: 'user', content: 'x [[mock: words=12 chunk_delay=100]]' }] })),
  });
  t.equal(res.status, 200);
  const text = await res.text();
  t.notMatch(text, /event: error/, 'no error event');
  t.match(text, /"finish_reason":"stop"/, 'the stream ended as the upstream ended it');
  t.match(text, /data: \[DONE\]\n\n$/, 'and completed');
});

t.test('server.body_memory: a body that does not fit waits, then gets 503 body_memory_exhausted; room comes back', async (t) => {
  const cfg = baseConfig();
  cfg.server.body_limit = '256KiB';
  cfg.server.body_memory = '300KiB';
  const g2 = await startGateway(cfg);
  t.teardown(() => g2.close());
  const big = JSON.stringify(chatBody({ messages: [{ role: 'user', content: 'x'.repeat(200 * 1024) }] }));
  const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ${KEYS.chat}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(big)}\r\n\r\n`;
  // A holds 200 KiB of the 300 KiB budget while its body is still arriving.
  const a = net.connect(g2.gw.port, '127.0.0.1');
  let aText = '';
  a.on('data', (d) => {
    aText += d.toString('latin1');
  });
  const aDone = new Promise((r) => a.on('close', r));
  a.write(head + big.slice(0, 1000));
  await sleep(200);
  const b = await call(`${g2.url}/v1/chat/completions`, { headers: bearer(KEYS.chat), body: big, method: 'POST' });
  t.equal(b.status, 503, 'no room: 503');
  t.equal(b.json.error.code, 'body_memory_exhausted');
  t.ok(b.headers.get('retry-after'), 'with Retry-After');
  a.end(big.slice(1000));
  await aDone;
  t.match(aText, /^HTTP\/1\.1 200 /m, 'the body holding the budget is served');
  const c = await call(`${g2.url}/v1/chat/completions`, { headers: bearer(KEYS.chat), body: big, method: 'POST' });
  t.equal(c.status, 200, 'its bytes were released');
});
