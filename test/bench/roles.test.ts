/**
 * The benchmark's own servers (bench/roles.ts) that its figures rest on: the `floor` relay must do
 * what it claims (parse the body, relay the answer, read the usage of a JSON answer and of a
 * stream), or the budget the bench README derives from it is wrong; `floor-records` must also check
 * the key and write the records it claims to; the `reference` must answer with a timing. No load,
 * no timing asserted.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { AUTH_CHAT } from '../../bench/setup.js';

const roles = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../bench/roles.js');

async function freePort(): Promise<number> {
  const s = net.createServer().listen(0, '127.0.0.1');
  await once(s, 'listening');
  const port = (s.address() as net.AddressInfo).port;
  s.close();
  return port;
}

async function role(t: Test, args: string[], ipc = false): Promise<ChildProcess> {
  const child = spawn(process.execPath, [roles, ...args], { stdio: ['ignore', 'ignore', 'inherit', ...(ipc ? ['ipc' as const] : [])] });
  t.teardown(() => {
    child.kill('SIGKILL');
  });
  return child;
}

async function listening(port: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => resolve(!!s.end()));
      s.on('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`port ${port} did not open`);
}

async function up(url: string): Promise<string> {
  for (let i = 0; i < 100; i++) {
    try {
      const r = await fetch(url);
      if (r.ok) return await r.text();
    } catch {
      /* not yet listening */
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not come up`);
}

t.test('the floor relay: parses, relays, reads the usage of answers and streams', async (t) => {
  const [mockPort, floorPort] = [await freePort(), await freePort()];
  await role(t, ['mock', String(mockPort)]);
  await listening(mockPort);
  await role(t, ['floor', String(floorPort), `http://127.0.0.1:${mockPort}`]);
  const floor = `http://127.0.0.1:${floorPort}`;
  t.equal(await up(floor + '/'), 'ok 0', 'up, nothing billed yet');

  const post = (body: string) =>
    fetch(floor + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  const json = await post(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi [[mock: words=7]]' }] }));
  t.equal(json.status, 200);
  const answer = (await json.json()) as { choices: { message: { content: string } }[]; usage: { completion_tokens: number } };
  t.equal(answer.usage.completion_tokens, 7, "the upstream's answer, relayed whole");
  t.equal(await up(floor + '/'), 'ok 7', "the JSON answer's usage was read");

  const stream = await post(JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi [[mock: words=5]]' }] }));
  t.equal(stream.status, 200);
  t.match(stream.headers.get('content-type'), /^text\/event-stream/);
  const text = await stream.text();
  t.match(text, /"usage":\{/, 'the stream asked for its usage (include_usage spliced in)');
  t.match(text, /data: \[DONE\]/, 'relayed to its end');
  t.equal(await up(floor + '/'), 'ok 12', "the stream's usage event was found and read");

  const bad = await post('{"model": ');
  t.equal(bad.status, 400, 'a body that is not JSON is refused');
  const noModel = await post('{"messages": []}');
  t.equal(noModel.status, 400, 'a body without a model is refused');
});

t.test('the floor with records: checks the key, writes two journal lines, a ledger record and an access line per request', async (t) => {
  const [mockPort, port] = [await freePort(), await freePort()];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'floor-records-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  await role(t, ['mock', String(mockPort)]);
  await listening(mockPort);
  await role(t, ['floor-records', String(port), `http://127.0.0.1:${mockPort}`, dir]);
  const url = `http://127.0.0.1:${port}`;
  t.equal(await up(url + '/'), 'ok 0', 'up');

  const post = (body: unknown, auth?: string) =>
    fetch(url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(auth ? { authorization: auth } : {}) },
      body: JSON.stringify(body),
    });
  const refused = await post({ model: 'm', messages: [] }, 'Bearer sk-not-a-key');
  t.equal(refused.status, 401, 'an unknown key is refused');
  const json = await post({ model: 'm', messages: [{ role: 'user', content: 'hi [[mock: words=7]]' }] }, AUTH_CHAT);
  t.equal(json.status, 200);
  await json.text();
  const stream = await post({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi [[mock: words=5]]' }] }, AUTH_CHAT);
  t.equal(stream.status, 200);
  await stream.text();
  t.equal(await up(url + '/'), 'ok 12', 'both answers billed');

  const lines = (f: string) =>
    fs.existsSync(path.join(dir, f))
      ? fs
          .readFileSync(path.join(dir, f), 'utf8')
          .split('\n')
          .filter((l) => l !== '')
          .map((l) => JSON.parse(l) as unknown)
      : [];
  for (let i = 0; i < 50 && lines('access.jsonl').length < 2; i++) await new Promise((r) => setTimeout(r, 50));
  const journal = lines('journal.jsonl') as unknown[][];
  t.same(
    journal.map((l) => l[0]),
    [2, 1, 2, 1],
    'an admission line, then a settlement line, for each request (none for the refused one)',
  );
  t.same(
    journal.filter((l) => l[0] === 1).map((l) => l[10]),
    [7, 5],
    'the settlements carry the output tokens',
  );
  const ledger = lines('ledger.jsonl') as { output_tokens: number; stream: boolean; status: number }[];
  t.same(
    ledger.map((r) => [r.output_tokens, r.stream, r.status]),
    [
      [7, false, 200],
      [5, true, 200],
    ],
    'a ledger record per billed request',
  );
  const access = lines('access.jsonl') as { status: number; msg: string }[];
  t.same(
    access.map((r) => [r.status, r.msg]),
    [
      [200, 'request'],
      [200, 'request'],
    ],
    'an access line per billed request',
  );
});

t.test('the reference work answers with a CPU time', async (t) => {
  const child = await role(t, ['reference'], true);
  const [ready] = (await once(child, 'message')) as [unknown];
  t.equal(ready, 'ready');
  child.send('run');
  const [m] = (await once(child, 'message')) as [{ us: number; samples: number }];
  t.ok(Number.isFinite(m.us) && m.us > 0, `a positive CPU time (${m.us} µs)`);
  t.equal(m.samples, 1, 'asked before its first 2 s sample: timed on the spot');
});
