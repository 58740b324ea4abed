/**
 * bench/wrk.lua run by the real wrk (installed by scripts/ensure-wrk.sh, which `npm test` runs
 * first) against a socket that records what arrives: every wrk process sends the same request, its
 * headers in one order. wrk's own formatting walks a Lua table, whose order changed from one wrk
 * process (one bench round) to the next; each new order was a new hidden class for the server's
 * `req.headers` and threw away optimized code in the middle of a measured round.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';

const script = fileURLToPath(new URL('../../../bench/wrk.lua', import.meta.url));
const BODY = '{"model":"bench-chat","messages":[{"role":"user","content":"Hello"}]}';

/** A server that answers every request with a tiny 200 and records each request's head and body. */
async function recorder(): Promise<{ port: number; requests: { head: string[]; body: string }[]; close(): Promise<void> }> {
  const requests: { head: string[]; body: string }[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((sock) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    let buf = '';
    sock.on('error', () => {});
    sock.on('data', (d) => {
      buf += d.toString('latin1');
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.slice(0, end).split('\r\n');
        const length = Number(/^content-length:\s*(\d+)/im.exec(head.join('\n'))?.[1] ?? 0);
        if (buf.length < end + 4 + length) return;
        requests.push({ head, body: buf.slice(end + 4, end + 4 + length) });
        buf = buf.slice(end + 4 + length);
        sock.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const sock of sockets) sock.destroy();
      }),
  };
}

/** A temporary body file for the script, removed when `t` ends. */
function bodyFile(t: Test): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wrk-test-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'body.json');
  fs.writeFileSync(file, BODY);
  return file;
}

function runWrk(port: number, env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('wrk', ['-t1', '-c1', '-d1s', '-s', script, `http://127.0.0.1:${port}/v1/chat/completions`], { env }, (e, out, err) =>
      e ? reject(new Error(`wrk failed (run scripts/ensure-wrk.sh): ${e.message}\n${err}`)) : resolve(out),
    );
  });
}

t.test('every wrk process sends the same request, its headers in one order', async (t) => {
  const env = { ...process.env, BENCH_BODY_FILE: bodyFile(t), BENCH_AUTH: 'Bearer sk-test' };
  const heads = new Set<string>();
  for (let run = 0; run < 4; run++) {
    const server = await recorder();
    try {
      const out = await runWrk(server.port, env);
      t.match(out, /BENCH_JSON \{"requests":\d+/, `run ${run + 1}: the summary line`);
      t.ok(server.requests.length > 0, `run ${run + 1}: requests arrived`);
      t.same([...new Set(server.requests.map((r) => r.body))], [BODY], `run ${run + 1}: every body is the body file, as it is`);
      for (const r of server.requests) heads.add(r.head.join('\n').replace(/:\d+$/m, ':PORT'));
    } finally {
      await server.close();
    }
  }
  t.same(
    [...heads],
    [
      [
        'POST /v1/chat/completions HTTP/1.1',
        'Host: 127.0.0.1:PORT',
        'Content-Type: application/json',
        'Authorization: Bearer sk-test',
        `Content-Length: ${BODY.length}`,
      ].join('\n'),
    ],
    'one head, the same in every run: Host, Content-Type, Authorization, Content-Length',
  );
});

t.test('without BENCH_AUTH no Authorization header is sent', async (t) => {
  const file = bodyFile(t);
  const server = await recorder();
  try {
    await runWrk(server.port, { ...process.env, BENCH_BODY_FILE: file, BENCH_AUTH: '' });
    const names = server.requests[0].head.slice(1).map((l) => l.slice(0, l.indexOf(':')));
    t.same(names, ['Host', 'Content-Type', 'Content-Length']);
  } finally {
    await server.close();
  }
});
