/**
 * What a served request leaves behind: nothing. Once its answer is written and its connection is
 * closed, the gateway holds no reference to the request (its headers, its body and everything its
 * body read made), so the garbage collector can take it at once. A request kept for a while after
 * its answer (the body-timeout check once held every request with a body for up to 500 ms) lives
 * through young-generation collections and is promoted to the old generation: at thousands of
 * requests a second, that was a third of the gateway's collection work (issue 29).
 *
 * Watched with a WeakRef to the IncomingMessage, taken from Node's own diagnostics channel, and a
 * forced full collection.
 */
import t from 'tap';
import dc from 'node:diagnostics_channel';
import http from 'node:http';
import v8 from 'node:v8';
import vm from 'node:vm';
import { setTimeout as sleep } from 'node:timers/promises';
import { KEYS, baseConfig, chatBody, startGateway } from '../helpers/gateway.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

/** One POST on its own connection (closed after the answer): its status once the socket closed. */
function post(url: string, path: string, body: unknown, close: boolean, agent?: http.Agent): Promise<number> {
  const u = new URL(url);
  const bytes = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path,
        method: 'POST',
        agent: agent ?? false,
        headers: {
          authorization: `Bearer ${KEYS.chat}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(bytes),
          ...(close ? { connection: 'close' } : {}),
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => {
          if (!close) return resolve(res.statusCode ?? 0);
          const socket = req.socket;
          if (!socket || socket.destroyed) resolve(res.statusCode ?? 0);
          else socket.once('close', () => resolve(res.statusCode ?? 0));
        });
      },
    );
    req.on('error', reject);
    req.end(bytes);
  });
}

/** WeakRefs to the requests the server on `port` receives while `fn` runs. */
async function watched(port: number, fn: () => Promise<void>): Promise<WeakRef<http.IncomingMessage>[]> {
  const refs: WeakRef<http.IncomingMessage>[] = [];
  const onStart = (msg: unknown) => {
    const { request } = msg as { request: http.IncomingMessage };
    if (request.socket.localPort === port) refs.push(new WeakRef(request));
  };
  dc.subscribe('http.server.request.start', onStart);
  try {
    await fn();
  } finally {
    dc.unsubscribe('http.server.request.start', onStart);
  }
  return refs;
}

/** Whether every request is collected, within a few full collections (settlement may take a turn or two). */
async function collected(refs: WeakRef<object>[]): Promise<boolean> {
  for (let i = 0; i < 10; i++) {
    await sleep(10);
    gc();
    if (refs.every((r) => r.deref() === undefined)) return true;
  }
  return false;
}

t.test('a request answered on a closed connection is left for the collector at once', async (t) => {
  const g = await startGateway(baseConfig());
  t.teardown(() => g.close());
  const port = Number(new URL(g.url).port);
  const statuses: number[] = [];
  const refs = await watched(port, async () => {
    for (let i = 0; i < 3; i++) statuses.push(await post(g.url, '/v1/chat/completions', chatBody(), true));
  });
  t.same(statuses, [200, 200, 200], 'answered');
  t.equal(refs.length, 3, 'three requests seen');
  // Well within the body check's 500 ms period: held by it, they would still be alive here.
  t.ok(await collected(refs), 'no request is held after its connection closed');
});

t.test('on a kept-alive connection, only the latest request is held (by its connection)', async (t) => {
  const g = await startGateway(baseConfig());
  t.teardown(() => g.close());
  const port = Number(new URL(g.url).port);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.teardown(() => agent.destroy());
  const statuses: number[] = [];
  const refs = await watched(port, async () => {
    for (let i = 0; i < 4; i++) statuses.push(await post(g.url, '/v1/chat/completions', chatBody(), false, agent));
  });
  t.same(statuses, [200, 200, 200, 200], 'answered');
  t.equal(refs.length, 4, 'four requests seen');
  t.ok(await collected(refs.slice(0, 3)), 'the three before the latest are collected');
  t.ok(refs[3].deref(), 'the latest is still its connection’s (a late body is answered through it)');
});
