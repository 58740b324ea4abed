/**
 * `server.workers: 2` on Redis, run by the real CLI: the README's quick start works against it,
 * both workers serve, a reload (SIGHUP, admin API, file watch) reaches every worker, and SIGTERM
 * drains every worker before the process exits.
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import http from 'node:http';
import { copyFileSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { ROOT, tmpDir } from '../helpers/gateway.js';
import { RedisServer } from '../helpers/redis.js';
import { request, startGatewayProcess, type GatewayProcess } from '../helpers/process.js';
import { until as poll } from '../helpers/upstream.js';

/** Multi-process waits are longer than the shared default. */
const until = (cond: () => Promise<boolean> | boolean, ms = 20_000) => poll(cond, ms, 50);

const README = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
const blocks = (lang: string) => [...README.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1]);
const README_URL = 'http://127.0.0.1:8080';
const DEMO_KEY = 'sk-deadbeef00000000000000000000000000000000000000000000000000000001';
const NEW_KEY = (n: number) => `sk-${n.toString(16).padStart(64, '0')}`;

let redis: RedisServer;
t.before(async () => {
  redis = await RedisServer.start();
});
t.teardown(() => redis.destroy());

/** The shipped gateway.yaml with only the store and the worker count changed. */
function config(dir: string, prefix: string, extra = ''): string {
  const file = path.join(dir, 'gateway.yaml');
  copyFileSync(path.join(ROOT, 'gateway.yaml'), file);
  let text = readFileSync(file, 'utf8');
  text = text.replace(/^ {2}workers: 1.*$/m, '  workers: 2');
  // (A generous Redis timeout: a loaded test machine must not look like an outage.)
  text = text.replace(/^store:\n(?: .*\n)+/m, `store:\n  kind: redis\n  url: ${redis.url}\n  prefix: "${prefix}"\n  timeout: 3s\n`);
  text = text.replace(/^ {2}# admin_token: .*$/m, '  admin_token: test-admin-token');
  writeFileSync(file, text + extra);
  return file;
}

function addKey(file: string, n: number): void {
  const text = readFileSync(file, 'utf8');
  writeFileSync(file, text.replace(/^keys:\n/m, `keys:\n  - { key: ${NEW_KEY(n)}, name: added-${n}, user: demo, group: open-weights }\n`));
}

const chat = (url: string, key: string) =>
  request(`${url}/v1/chat/completions`, {
    headers: { authorization: `Bearer ${key}` },
    body: { model: 'demo-chat', messages: [{ role: 'user', content: 'Hello!' }] },
  });

/** Every one of n requests on its own connection (spread over the workers) answers 200. */
async function allServe(url: string, key: string, n = 16): Promise<number[]> {
  const replies = await Promise.all(Array.from({ length: n }, () => chat(url, key)));
  return replies.map((r) => r.status);
}

/** A streaming chat request on its own connection: `started` once the stream began, `done` at its end. */
function stream(url: string, key: string): { started: Promise<void>; done: Promise<{ status: number; text: string }> } {
  let started!: () => void;
  const startedP = new Promise<void>((r) => (started = r));
  const u = new URL(url);
  const body = JSON.stringify({
    model: 'demo-chat',
    stream: true,
    messages: [{ role: 'user', content: '[[mock: chunk_delay=100 words=12]] Hello!' }],
  });
  const done = new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => {
          text += c.toString();
          started();
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
  return { started: startedP, done };
}

t.test('workers: 2 passes the README quick start, and reloads reach every worker', async (t) => {
  const dir = tmpDir('workers-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = config(dir, 'w1:');
  const gw: GatewayProcess = await startGatewayProcess(file, { env: { GATEWAY_PORT: '0', GATEWAY_WATCH_CONFIG: '0' }, listening: 2 });
  t.teardown(() => gw.stop());
  const listening = gw.logs.filter((l) => String(l.msg).startsWith('gateway listening on '));
  t.same(listening.map((l) => l.worker).sort(), [1, 2], 'two workers');
  t.equal(new Set(listening.map((l) => l.msg)).size, 1, 'on one port');

  // The README's curl command.
  const curl = blocks('sh').find((b) => b.startsWith('curl '))!;
  const url = /curl (\S+)/.exec(curl)![1];
  const headers = Object.fromEntries([...curl.matchAll(/-H '([^:]+): ([^']+)'/g)].map((m) => [m[1], m[2]]));
  const body = /-d '([^']+)'/.exec(curl)![1];
  const r = await request(url.replace(README_URL, gw.url), { headers, body });
  t.equal(r.status, 200);
  t.equal(r.json.object, 'chat.completion');
  t.match(r.json.choices[0].message.content, /mock reply/);

  // The README's SDK snippet, written inside the project so that `import 'openai'` resolves.
  const js = blocks('js').find((b) => b.includes("from 'openai'"))!;
  const demo = path.join(ROOT, 'dist', `readme-workers-${process.pid}.mjs`);
  writeFileSync(demo, js.replace(README_URL, gw.url));
  t.teardown(() => rmSync(demo, { force: true }));
  const { stdout } = await promisify(execFile)(process.execPath, [demo], { timeout: 20_000 });
  t.match(stdout, /This is a mock reply\. You said: Hello!/, 'the streamed text was printed');
  t.match(stdout, /prompt_tokens: \d+/);

  t.same(await allServe(gw.url, DEMO_KEY), Array(16).fill(200));
  t.same([...new Set(gw.logs.filter((l) => l.msg === 'request').map((l) => l.worker))].sort(), [1, 2], 'both workers served requests');

  // Usage recorded by either worker is in the shared store: /v1/usage counts every request.
  // (Settlement follows each response: wait for the last ones.)
  const total = async () =>
    (await request(`${gw.url}/v1/usage`, { headers: { authorization: `Bearer ${DEMO_KEY}` } })).json?.usage?.total?.requests;
  t.ok(await until(async () => (await total()) === 18), 'curl + SDK + 16, whichever worker served them');

  // SIGHUP to the primary reloads every worker.
  addKey(file, 1);
  t.same(await allServe(gw.url, NEW_KEY(1), 4).then((s) => s.every((x) => x === 401)), true, 'not reloaded yet (no file watch)');
  gw.proc.kill('SIGHUP');
  t.ok(await until(async () => gw.logs.filter((l) => l.msg === 'config reloaded').length >= 2), 'both workers logged the reload');
  t.same(await allServe(gw.url, NEW_KEY(1)), Array(16).fill(200), 'every worker knows the new key');

  // POST /admin/reload on one worker reloads the others too.
  addKey(file, 2);
  const reload = await request(`${gw.url}/admin/reload`, { method: 'POST', headers: { authorization: 'Bearer test-admin-token' } });
  t.same([reload.status, reload.json], [200, { ok: true }]);
  t.ok(await until(async () => gw.logs.filter((l) => l.msg === 'config reloaded').length >= 4), 'both workers logged the second reload');
  t.same(await allServe(gw.url, NEW_KEY(2)), Array(16).fill(200), 'every worker knows the key added through the admin reload');

  await gw.stop();
  t.same(await gw.exited, { code: 0, signal: null }, 'the primary exits 0 after its workers');
});

t.test('workers: SIGTERM lets streams in flight on every worker finish', async (t) => {
  const dir = tmpDir('workers-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = config(dir, 'w2:');
  const gw = await startGatewayProcess(file, { env: { GATEWAY_PORT: '0' }, listening: 2 });
  t.teardown(() => gw.stop());
  const streams = Array.from({ length: 6 }, () => stream(`${gw.url}/v1/chat/completions`, DEMO_KEY));
  // Terminate once every stream is being answered.
  await Promise.all(streams.map((s) => s.started));
  gw.proc.kill('SIGTERM');
  const done = await Promise.all(streams.map((s) => s.done));
  t.same(
    done.map((d) => d.status),
    Array(6).fill(200),
  );
  t.ok(
    done.every((d) => d.text.includes('data: [DONE]')),
    'every stream ran to its end',
    { texts: done.filter((d) => !d.text.includes('data: [DONE]')).map((d) => d.text) },
  );
  t.same(await gw.exited, { code: 0, signal: null });
  const drained = new Set(gw.logs.filter((l) => String(l.msg).startsWith('shutting down') && l.worker).map((l) => l.worker));
  t.same([...drained].sort(), [1, 2], 'both workers drained');

  // The file watch reaches every worker (a fresh gateway, watching).
  const gw2 = await startGatewayProcess(config(dir, 'w3:'), { env: { GATEWAY_PORT: '0' }, listening: 2 });
  t.teardown(() => gw2.stop());
  addKey(file, 3);
  t.ok(await until(async () => gw2.logs.filter((l) => l.msg === 'config reloaded').length >= 2), 'both workers saw the file change');
  t.same(await allServe(gw2.url, NEW_KEY(3)), Array(16).fill(200));
  await gw2.stop();
});

t.test('workers: a worker whose supervisor is killed drains and exits, leaving no process behind', async (t) => {
  const dir = tmpDir('workers-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const gw = await startGatewayProcess(config(dir, 'w4:'), { env: { GATEWAY_PORT: '0' }, listening: 2 });
  t.teardown(() => gw.stop());
  const { execFileSync } = await import('node:child_process');
  const workers = execFileSync('ps', ['-o', 'pid=', '--ppid', String(gw.pid)])
    .toString()
    .trim()
    .split(/\s+/)
    .map(Number);
  t.equal(workers.length, 2, 'two worker processes');
  gw.proc.kill('SIGKILL');
  const alive = (pid: number) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  t.ok(await until(async () => workers.every((p) => !alive(p))), 'both workers exited');
});
