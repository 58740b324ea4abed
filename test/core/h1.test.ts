/**
 * The gateway's HTTP/1.1 client (core/upstream/h1.ts), against raw sockets that answer with exactly
 * the bytes a test gives: every framing, split at every byte, read as Node's own client reads the
 * same bytes; keep-alive reuse and its limits; malformed answers; bodies cut short; back-pressure;
 * TLS, with the certificate checked.
 */
import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import path from 'node:path';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { NOTHING_YET, Pool, requestHead, UpstreamBody, type Exchange } from '../../core/upstream/h1.js';
import { until } from '../helpers/upstream.js';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '../../../test/fixtures/tls');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A server that reads each request (head and Content-Length body) and answers with the next of
 * `answers` (raw bytes; a function may act on the socket itself). Counts connections.
 */
async function rawServer(answers: Array<string | Buffer | ((s: net.Socket) => void)>, opts: { secure?: boolean } = {}) {
  let next = 0;
  const sockets = new Set<net.Socket>();
  let connections = 0;
  const onSocket = (s: net.Socket) => {
    connections++;
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
    let buf = Buffer.alloc(0);
    s.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const len = Number(/content-length: (\d+)/i.exec(buf.subarray(0, end).toString('latin1'))?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        buf = buf.subarray(end + 4 + len);
        const a = answers[Math.min(next++, answers.length - 1)];
        if (typeof a === 'function') a(s);
        else s.write(a);
      }
    });
  };
  const server = opts.secure
    ? tls.createServer(
        { key: readFileSync(path.join(FIXTURES, 'localhost.key')), cert: readFileSync(path.join(FIXTURES, 'localhost.crt')) },
        onSocket,
      )
    : net.createServer(onSocket);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    get connections() {
      return connections;
    },
    sockets,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}

interface Got {
  status: number;
  rawHeaders: string[];
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** One exchange through `pool`: resolves with the whole response, rejects with the error (before or during the body). */
function send(
  pool: Pool,
  opts: { body?: string; onBody?: (b: UpstreamBody) => void; onSocket?: (s: net.Socket) => void } = {},
): Promise<Got> {
  const { body = '{"a":1}', onBody } = opts;
  const { head } = requestHead('/v1/x', ['host', 'localhost', 'content-type', 'application/json', 'content-length', String(body.length)]);
  return new Promise((resolve, reject) => {
    const ex: Exchange = {
      write(socket, sent) {
        opts.onSocket?.(socket);
        socket.write(head + body, 'latin1', sent);
      },
      onResponse(res) {
        onBody?.(res);
        res.readAll(Infinity).then((bytes) => {
          if (!res.complete) return reject(new Error('ended incomplete'));
          resolve({ status: res.statusCode, rawHeaders: res.rawHeaders, headers: res.headers, body: bytes });
        }, reject);
      },
      onError: reject,
    };
    pool.send(ex);
  });
}

/** What Node's own client makes of the same bytes. */
function viaNode(port: number): Promise<Got> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, method: 'POST', path: '/v1/x', agent: false, headers: { 'content-length': 7 } },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode!, rawHeaders: res.rawHeaders, headers: res.headers, body: Buffer.concat(parts) }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end('{"a":1}');
  });
}

const CASES: Record<string, string> = {
  'content-length': 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}',
  'content-length, no reason phrase, repeated headers':
    'HTTP/1.1 429\r\nX-RateLimit-Remaining: 0\r\nx-ratelimit-remaining: 1\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\nRetry-After: 3\r\nretry-after: 9\r\nContent-Length: 2\r\n\r\n{}',
  'chunked, with an extension and trailers':
    'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;name=value\r\nhello\r\nA\r\n, world!!!\r\n0\r\nX-Trailer: yes\r\nX-Other: 2\r\n\r\n',
  'chunked, upper-case size and whitespace in values':
    'HTTP/1.1 200 OK\r\nTransfer-Encoding:  chunked  \r\nX-Pad:   padded   \r\n\r\n1F\r\n' + 'x'.repeat(31) + '\r\n0\r\n\r\n',
  'chunked, many chunks, lower-case and zero-padded sizes':
    'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0a\r\n0123456789\r\n00b\r\nabcdefghijk\r\nf\r\n' +
    'y'.repeat(15) +
    '\r\n1\r\nz\r\n000\r\n\r\n',
  '100 Continue first, then the answer': 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 3\r\n\r\nabc',
  '204 without a body': 'HTTP/1.1 204 No Content\r\nX-Done: 1\r\n\r\n',
  'empty Content-Length body': 'HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n',
  'UTF-8 body': 'HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n' + Buffer.from('héllo wörld', 'utf8').toString('latin1'),
};

t.test('each framing reads as Node reads it, delivered whole and split at every byte', async (t) => {
  for (const [name, text] of Object.entries(CASES)) {
    const bytes = Buffer.from(text, 'latin1');
    const srv = await rawServer([bytes]);
    const expected = await viaNode(srv.port);
    const pool = new Pool({ secure: false, hostname: '127.0.0.1', port: srv.port }, 4, 4);
    const whole = await send(pool);
    t.same(whole, expected, `${name}: whole`);
    await srv.close();
    pool.close();
    // Split at every byte: each split point delivered as two reads of the socket.
    const quiet = await rawServer([() => {}]);
    for (let cut = 1; cut < bytes.length; cut++) {
      const p = new Pool({ secure: false, hostname: '127.0.0.1', port: quiet.port }, 1, 1);
      let sock!: net.Socket;
      const got = send(p, { onSocket: (s) => (sock = s) });
      sock.emit('data', bytes.subarray(0, cut));
      sock.emit('data', bytes.subarray(cut));
      const r = await got;
      if (JSON.stringify(r) !== JSON.stringify(expected)) t.same(r, expected, `${name}: split at ${cut}`);
      p.close();
    }
    await quiet.close();
    t.pass(`${name}: the same at each of ${bytes.length - 1} split points`);
  }
});

const pool = (port: number, max = 4, opts: { secure?: boolean; hostname?: string } = {}) =>
  new Pool({ secure: opts.secure ?? false, hostname: opts.hostname ?? '127.0.0.1', port }, max, max);
const ok = (body: string, extra = '') => `HTTP/1.1 200 OK\r\n${extra}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

t.test(
  'keep-alive: one socket for requests in turn; Connection: close, a short Keep-Alive hint or bytes left over mean a new one',
  async (t) => {
    // [what the server answers each time, requests in turn, connections expected, why]
    const cases: Array<[string, number, number, string]> = [
      [ok('a'), 3, 1, 'three requests, one connection'],
      [ok('x', 'Connection: close\r\n'), 3, 3, 'Connection: close: a connection each'],
      [ok('h', 'Keep-Alive: timeout=1\r\n'), 2, 2, 'Keep-Alive timeout=1: not kept (a second less than the hint)'],
      [ok('e') + 'HTTP/1.1 200 OK\r\n', 2, 2, 'bytes after the answer: the socket is not used again'],
    ];
    for (const [answer, requests, connections, why] of cases) {
      const srv = await rawServer([answer]);
      const p = pool(srv.port);
      const want = /\r\n\r\n(.)/.exec(answer)![1];
      for (let i = 0; i < requests; i++) t.equal((await send(p)).body.toString(), want, `${why}: the answer is read`);
      t.equal(srv.connections, connections, why);
      p.close();
      await srv.close();
    }
  },
);

t.test('an idle socket the server closed leaves the pool: the next request opens a new one and succeeds', async (t) => {
  const srv = await rawServer([ok('1'), ok('2')]);
  const p = pool(srv.port);
  t.equal((await send(p)).body.toString(), '1');
  for (const s of srv.sockets) s.end();
  await sleep(50);
  t.equal((await send(p)).body.toString(), '2');
  t.equal(srv.connections, 2);
  p.close();
  await srv.close();
});

t.test('maxSockets: requests beyond it wait for a socket, in order, and all complete', async (t) => {
  const srv = await rawServer([
    (s) => {
      setTimeout(() => s.write(ok('slow')), 20);
    },
  ]);
  const p = pool(srv.port, 2);
  const all = await Promise.all(Array.from({ length: 7 }, () => send(p)));
  t.same(
    all.map((g) => g.body.toString()),
    Array(7).fill('slow'),
  );
  t.equal(srv.connections, 2, 'never more than two connections');
  p.close();
  await srv.close();
});

t.test('a body framed by the end of the connection is read to the end; that socket is not used again', async (t) => {
  const srv = await rawServer([
    (s) => {
      s.write('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil ');
      setTimeout(() => s.end('the end'), 10);
    },
  ]);
  const p = pool(srv.port);
  t.equal((await send(p)).body.toString(), 'until the end');
  t.equal((await send(p)).body.toString(), 'until the end');
  t.equal(srv.connections, 2);
  p.close();
  await srv.close();
});

t.test('malformed answers fail with an HPE_ code; the pool keeps serving', async (t) => {
  const bad: Record<string, [string, string]> = {
    'not HTTP': ['SSH-2.0-OpenSSH\r\n\r\n', 'HPE_INVALID_CONSTANT'],
    'a status of two digits': ['HTTP/1.1 20 OK\r\n\r\n', 'HPE_INVALID_CONSTANT'],
    'Content-Length with Transfer-Encoding': [
      'HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n',
      'HPE_UNEXPECTED_CONTENT_LENGTH',
    ],
    'two Content-Lengths (as Node: even equal ones)': [
      'HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc',
      'HPE_UNEXPECTED_CONTENT_LENGTH',
    ],
    'a list in Content-Length': ['HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc', 'HPE_INVALID_CONTENT_LENGTH'],
    'a Content-Length that is not a number': ['HTTP/1.1 200 OK\r\nContent-Length: 3x\r\n\r\n', 'HPE_INVALID_CONTENT_LENGTH'],
    'a header without a colon': ['HTTP/1.1 200 OK\r\nNoColon\r\n\r\n', 'HPE_INVALID_HEADER_TOKEN'],
    'a header name with a space': ['HTTP/1.1 200 OK\r\nBad Name: 1\r\n\r\n', 'HPE_INVALID_HEADER_TOKEN'],
    'a control character in a header value': ['HTTP/1.1 200 OK\r\nX-A: 1\r\nX-B: a\x01b\r\n\r\n', 'HPE_INVALID_HEADER_TOKEN'],
    'a bare LF inside a header line': ['HTTP/1.1 200 OK\r\nX-A: a\nb\r\nContent-Length: 0\r\n\r\n', 'HPE_INVALID_HEADER_TOKEN'],
    'a head larger than 64 KiB': [`HTTP/1.1 200 OK\r\nX-Big: ${'b'.repeat(70_000)}\r\n\r\n`, 'HPE_HEADER_OVERFLOW'],
    'a protocol switch': ['HTTP/1.1 101 Switching Protocols\r\n\r\n', 'HPE_INVALID_CONSTANT'],
  };
  for (const [name, [bytes, code]] of Object.entries(bad)) {
    const srv = await rawServer([bytes, ok('fine')]);
    const p = pool(srv.port);
    const err = await send(p).then(
      () => undefined,
      (e: Error & { code?: string }) => e,
    );
    t.equal(err?.code, code, name);
    t.equal((await send(p)).body.toString(), 'fine', `${name}: the next request is served`);
    p.close();
    await srv.close();
  }
  // In the body: the response began, so the body fails.
  const chunk = await rawServer(['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n']);
  const p = pool(chunk.port);
  const err = await send(p).then(
    () => undefined,
    (e: Error & { code?: string }) => e,
  );
  t.equal(err?.code, 'HPE_INVALID_CHUNK_SIZE', 'a bad chunk size fails the body');
  const crlf = await rawServer(['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n']);
  const p2 = pool(crlf.port);
  t.equal(
    await send(p2).then(
      () => undefined,
      (e: Error & { code?: string }) => e.code,
    ),
    'HPE_STRICT',
    'chunk data not followed by CRLF fails the body',
  );
  p.close();
  p2.close();
  await chunk.close();
  await crlf.close();
});

t.test('cut short: before the answer "socket hang up", inside the body "aborted" (both ECONNRESET); refused: ECONNREFUSED', async (t) => {
  const before = await rawServer([(s) => s.destroy()]);
  const p = pool(before.port);
  const e1 = (await send(p).catch((e: unknown) => e)) as Error & { code?: string };
  t.match(e1, { message: 'socket hang up', code: 'ECONNRESET' });
  const inside = await rawServer([
    (s) => {
      s.write('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b');
      setTimeout(() => s.destroy(), 10);
    },
  ]);
  const p2 = pool(inside.port);
  let body: UpstreamBody | undefined;
  const e2 = (await send(p2, { onBody: (b) => (body = b) }).catch((e: unknown) => e)) as Error & { code?: string };
  t.match(e2, { message: 'aborted', code: 'ECONNRESET' });
  t.equal(body?.complete, false, 'the body is not complete');
  const port = before.port;
  await before.close();
  await inside.close();
  const p3 = pool(port);
  const e3 = (await send(p3).catch((e: unknown) => e)) as Error & { code?: string };
  t.equal(e3.code, 'ECONNREFUSED');
  for (const x of [p, p2, p3]) x.close();
});

t.test('unfinished bodies destroyed one after another: every socket is closed before any body reports its close', async (t) => {
  // Thousands of clients leaving at once destroy their upstream bodies, each from its own callback
  // (the client's close). Every upstream must be closed before the work a body's close sets off
  // (billing, records) runs for any of them.
  const n = 20;
  const srv = await rawServer([(s) => s.write('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nten bytes.')]);
  const p = pool(srv.port, n);
  const { head } = requestHead('/x', ['content-length', '0']);
  const bodies = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<UpstreamBody>((resolve, reject) =>
          p.send({ write: (s, sent) => s.write(head, 'latin1', sent), onResponse: resolve, onError: reject }),
        ),
    ),
  );
  t.equal(srv.connections, n, 'one socket each');
  const sockets = bodies.map((b) => b.socket!);
  const open: number[] = [];
  const failures: string[] = [];
  const closed = bodies.map(
    (b) =>
      new Promise<void>((resolve) =>
        b.onWake(() => {
          open.push(sockets.filter((s) => !s.destroyed).length);
          try {
            b.take();
          } catch (e) {
            failures.push((e as Error).message);
          }
          resolve();
        }),
      ),
  );
  for (const b of bodies) setImmediate(() => b.destroy());
  await Promise.all(closed);
  t.same(open, Array<number>(n).fill(0), 'no socket still open when a body reports its close');
  t.same(failures, Array<string>(n).fill('the upstream body closed before its end'), 'and each reader is told it was cut short');
  t.ok(await until(() => srv.sockets.size === 0), 'the server sees every connection closed');
  p.close();
  await srv.close();
});

t.test("a response's header values are read trimmed, tabs and latin-1 kept, as Node's parser reads them", async (t) => {
  const head = 'HTTP/1.1 200 OK\r\nX-Tab: \ta\tb \r\nX-Latin: caf\u00e9\r\nX-Edge: \x0bv\x0c\r\nContent-Length: 2\r\n\r\nok';
  const srv = await rawServer([Buffer.from(head, 'latin1')]);
  const p = pool(srv.port);
  const got = await send(p);
  t.same(got.rawHeaders, ['X-Tab', 'a\tb', 'X-Latin', 'caf\u00e9', 'X-Edge', 'v', 'Content-Length', '2']);
  t.equal(got.body.toString(), 'ok');
  p.close();
  await srv.close();
});

t.test('a header HTTP does not allow throws before anything is sent, as Node does', async (t) => {
  t.throws(() => requestHead('/x', ['x-bad', 'a\r\nInjected: 1']), { code: 'ERR_INVALID_CHAR' });
  t.throws(() => requestHead('/x', ['x-bad', 'snow ☃']), { code: 'ERR_INVALID_CHAR' });
  t.throws(() => requestHead('/x', ['bad name', 'v']), { code: 'ERR_INVALID_HTTP_TOKEN' });
  t.throws(() => requestHead('/x', ['x-del', 'a\x7f']), { code: 'ERR_INVALID_CHAR' });
  t.same(requestHead('/x', ['x-latin', 'caf\u00e9']), { head: 'POST /x HTTP/1.1\r\nx-latin: caf\u00e9\r\n\r\n', ascii: false });
  t.equal(requestHead('/x', ['a', 'plain', 'b', 'tab\there', 'c', '~!']).ascii, true, 'tabs and printable ASCII: an ASCII head');
  t.equal(requestHead('/x', ['a', 'plain', 'b', '\u00ff']).ascii, false, 'a latin-1 value after a plain one: not ASCII');
  t.equal(requestHead('/caf\u00e9', ['a', 'plain']).ascii, false, 'a path that is not ASCII: not ASCII');
});

t.test('back-pressure: an unread body stops the socket; reading resumes it and the body completes', async (t) => {
  const size = 8 * 1024 * 1024;
  const srv = await rawServer([
    (s) => s.write(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Length: ${size}\r\n\r\n`), Buffer.alloc(size, 120)])),
  ]);
  const p = pool(srv.port);
  const { head } = requestHead('/x', ['content-length', '0']);
  const body = await new Promise<UpstreamBody>((resolve, reject) =>
    p.send({
      write: (s, sent) => s.write(head, 'latin1', sent),
      onResponse: resolve,
      onError: reject,
    }),
  );
  await sleep(300);
  const read = body.socket!.bytesRead;
  t.ok(read < size / 2, `the socket stopped reading (${read} of ${size} bytes)`);
  let total = 0;
  for await (const c of body) total += c.length;
  t.equal(total, size);
  t.equal(body.complete, true);
  p.close();
  await srv.close();
});

t.test('TLS: the certificate is checked; a trusted one serves, with the connection kept', async (t) => {
  const srv = await rawServer([ok('secret')], { secure: true });
  const p = pool(srv.port, 4, { secure: true, hostname: 'localhost' });
  const err = (await send(p).catch((e: unknown) => e)) as Error & { code?: string };
  t.match(err.code, /SELF_SIGNED|UNABLE_TO_VERIFY/, `an untrusted certificate is refused (${err.code})`);
  p.close();
  // Trusted the way an operator trusts a private CA: NODE_EXTRA_CA_CERTS, read at start.
  const { execFile } = await import('node:child_process');
  const { promisify } = await import('node:util');
  const h1 = path.join(path.dirname(fileURLToPath(import.meta.url)), '../../core/upstream/h1.js');
  const script = `
    const { Pool, requestHead } = await import(${JSON.stringify(h1)});
    const p = new Pool({ secure: true, hostname: 'localhost', port: ${srv.port} }, 4, 4);
    const { head } = requestHead('/x', ['host', 'localhost', 'content-length', '0']);
    const one = () => new Promise((resolve, reject) => p.send({
      write: (s, sent) => s.write(head, 'latin1', sent),
      onResponse: (b) => b.readAll(Infinity).then((t) => resolve(b.statusCode + ' ' + t), reject),
      onError: reject,
    }));
    console.log(JSON.stringify([await one(), await one()]));
    p.close();`;
  // Asynchronously: the server answering it is in this process.
  const { stdout: out } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {
    env: { ...process.env, NODE_EXTRA_CA_CERTS: path.join(FIXTURES, 'localhost.crt') },
    encoding: 'utf8',
    timeout: 30_000,
  });
  t.same(JSON.parse(out), ['200 secret', '200 secret']);
  t.equal(srv.connections, 1, 'the two requests on one connection (the refused handshake never became one)');
  await srv.close();
});

t.test(
  'the transport: a request whose connection was refused was not sent (a client that leaves then is not billed its input)',
  async (t) => {
    const { Transport, TransportError } = await import('../../core/upstream/transport.js');
    const srv = await rawServer([]);
    const port = srv.port;
    await srv.close();
    const transport = new Transport();
    t.teardown(() => transport.close());
    const call = transport.send({
      provider: { name: 'p', maxSockets: 4 } as never,
      url: `http://127.0.0.1:${port}/v1/chat/completions`,
      headers: { 'content-type': 'application/json' },
      body: '{"model":"m"}',
      timeoutMs: 5000,
      idleTimeoutMs: 0,
    });
    const err = await call.response.catch((e: unknown) => e);
    t.ok(err instanceof TransportError);
    t.match(err, { kind: 'connect', code: 'ECONNREFUSED' });
    await sleep(20);
    t.equal(call.sent(), false, 'not sent');
    call.done();
  },
);

t.test('UpstreamBody for its one reader: chunks in order, the end, failures, the limit and back-pressure', async (t) => {
  const b = new UpstreamBody(200, [], undefined);
  let wakes = 0;
  b.onWake(() => wakes++);
  t.equal(b.take(), NOTHING_YET, 'nothing yet');
  b.push(Buffer.from('a'));
  b.push(Buffer.from('b'));
  t.equal(wakes, 2, 'the reader is woken for each push');
  t.same([b.take()?.toString(), b.take()?.toString(), b.take()], ['a', 'b', NOTHING_YET], 'taken as they came, then nothing yet');
  b.end();
  t.equal(b.take(), null, 'the end, once everything was taken');

  const cut = new UpstreamBody(200, [], undefined);
  cut.push(Buffer.from('dropped'));
  cut.destroy();
  t.throws(
    () => cut.take(),
    { message: 'the upstream body closed before its end' },
    'destroyed before its end: unread bytes dropped, a failure',
  );
  const failed = new UpstreamBody(200, [], undefined);
  failed.destroy(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
  t.throws(() => failed.take(), { code: 'ECONNRESET' }, 'destroyed with an error: that error');
  const whole = new UpstreamBody(200, [], undefined);
  whole.end();
  whole.destroy();
  t.equal(whole.take(), null, 'destroyed after its end: just the end');

  const big = new UpstreamBody(200, [], undefined);
  const read = big.readAll(10);
  big.push(Buffer.alloc(6));
  big.push(Buffer.alloc(6));
  await t.rejects(read, { message: 'upstream body too large' });
  t.equal(big.destroyed, true, 'a body past the limit is destroyed');
  const small = new UpstreamBody(200, [], undefined);
  const all = small.readAll(10);
  small.push(Buffer.from('he'));
  small.push(Buffer.from('llo'));
  small.end();
  t.equal((await all).toString(), 'hello');

  // Back-pressure: push says stop at 16 KiB unread; taking below it resumes the connection once.
  let resumed = 0;
  const fake = { resume: () => resumed++, socket: undefined } as unknown as ConstructorParameters<typeof UpstreamBody>[2];
  const bp = new UpstreamBody(200, [], fake);
  t.equal(bp.push(Buffer.alloc(10 * 1024)), true, 'below the mark: go on');
  t.equal(bp.push(Buffer.alloc(10 * 1024)), false, 'past it: stop reading');
  bp.take();
  bp.take();
  t.equal(resumed, 1, 'resumed once the buffer is taken below the mark');
});
