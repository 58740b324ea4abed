/**
 * `readRaw` and the connection's close signal (the gateway's one listener per connection aborts
 * it; the read watches no socket itself): a complete body is read whatever
 * the signal does after, a signal aborted while the body is still arriving ends the read with the
 * client's error at once, and so does one aborted before the read began. Over a real socket.
 */
import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import { readRaw, type RawBody } from '../../core/body.js';
import { Abort } from '../../core/signal.js';

/** A server whose handler reads each request's body with `gone`; resolves with the first read's outcome. */
async function readOne(gone: Abort, send: (port: number) => net.Socket, before?: () => void): Promise<RawBody | Error> {
  let result!: (r: RawBody | Error) => void;
  const outcome = new Promise<RawBody | Error>((r) => (result = r));
  const server = http.createServer((req, res) => {
    before?.();
    readRaw(req, 1024 * 1024, gone).then(result, result);
    res.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  const socket = send(port);
  socket.on('error', () => undefined);
  try {
    return await outcome;
  } finally {
    socket.destroy();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
}

const head = (length: number) => `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: ${length}\r\n\r\n`;

t.test('a complete body is read; an abort after it changes nothing', async (t) => {
  const gone = new Abort();
  const body = '{"model":"m","messages":[]}';
  const r = await readOne(gone, (port) =>
    net.connect(port, '127.0.0.1', function (this: net.Socket) {
      this.write(head(body.length) + body);
    }),
  );
  t.notOk(r instanceof Error, 'read');
  t.equal((r as RawBody).buf?.toString(), body, 'the bytes as sent');
  gone.abort();
  (r as RawBody).release();
});

t.test('the connection closing while the body arrives ends the read at once', async (t) => {
  const gone = new Abort();
  const started = Date.now();
  const r = await readOne(gone, (port) => {
    const s = net.connect(port, '127.0.0.1', () => s.write(head(100) + '{"model":'));
    // The gateway's connection listener, as a late body's 400 closes the socket: the request itself never ends.
    setTimeout(() => gone.abort(), 100);
    return s;
  });
  t.ok(r instanceof Error, 'the read failed');
  t.match((r as Error).message, /not received completely/);
  t.ok(Date.now() - started < 5_000, 'without waiting for a timeout');
});

t.test('a connection closed before the read began ends it at once', async (t) => {
  const gone = new Abort();
  const r = await readOne(
    gone,
    (port) =>
      net.connect(port, '127.0.0.1', function (this: net.Socket) {
        this.write(head(100) + '{"model":');
      }),
    () => gone.abort(),
  );
  t.ok(r instanceof Error, 'the read failed');
  t.match((r as Error).message, /not received completely/);
});
