/**
 * Logs: JSON lines with a level and a time; exactly one access line per request with who, what,
 * how it ended and what it cost; a plugin's exception logged with the plugin's name and its stack
 * (the client gets a plain 500); never a key, a body or a query string.
 */
import t from 'tap';
import path from 'node:path';
import { baseConfig, bearer, call, chatBody, KEYS, ROOT, startGateway, tmpDir, writeConfig, type TestGateway } from '../helpers/gateway.js';
import { bodyFor, directive } from '../limits/helpers.js';
import { builtinPlugins } from '../../plugins/index.js';
import { definePlugin } from '../../core/plugin.js';
import { createLogger, logLevel, logLine } from '../../core/log.js';
import { GatewayError } from '../../core/errors.js';
import { rawSocket } from '../helpers/raw.js';
import { parseProm, total } from '../helpers/prom.js';

const SECRET_WORD = 'zebra-marker-4711';
const boom = definePlugin({
  name: 'boom',
  schema: { type: 'object' },
  create: () => ({
    onAccess() {
      throw new TypeError('kaboom in the plugin');
    },
  }),
});
/** Throws in onAttempt: a hook run by the upstream loop, not by the chain runner. */
const late = definePlugin({
  name: 'late',
  schema: { type: 'object' },
  create: () => ({
    onAttempt() {
      throw new RangeError('late failure');
    },
  }),
});

const lines: string[] = [];
let g: TestGateway;
const records = () => lines.map((l) => JSON.parse(l) as Record<string, any>);
const access = (id: string | null) => records().filter((r) => r.msg === 'request' && r.requestId === id);

t.before(async () => {
  const cfg = baseConfig();
  cfg.models['broken-model'] = { provider: 'mock', upstream: 'broken#status=503', price: { input: 1, output: 2 } };
  cfg.groups.chat.models.push('broken-model');
  cfg.plugins.boom = { use: 'boom' };
  cfg.plugins.late = { use: 'late' };
  cfg.routes.push({ path: '/boom/v1/chat/completions', protocol: 'openai-chat', chain: ['auth', 'boom'] });
  cfg.routes.push({ path: '/late/v1/chat/completions', protocol: 'openai-chat', chain: ['auth', 'late'] });
  g = await startGateway(cfg, {
    registry: new Map([...builtinPlugins, ['boom', boom], ['late', late]]),
    log: createLogger('info', (l) => lines.push(l)),
  });
});
t.teardown(() => g.close());

t.test('one access line per request: request id, route, group, model, status, tokens, cost, duration, attempts', async (t) => {
  const r = await call(g.url + '/v1/chat/completions?trace=1', {
    headers: { ...bearer(KEYS.chat), 'user-agent': 'log-test/2.1 (linux)' },
    json: bodyFor('chat', 'chat-model', `${directive({ input: 10, output: 20 })} ${SECRET_WORD}`),
  });
  t.equal(r.status, 200);
  const mine = access(r.headers.get('x-request-id'));
  t.equal(mine.length, 1, 'exactly one');
  const a = mine[0];
  t.equal(a.level, 'info');
  t.match(a.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  t.match(a, {
    route: 'openai-chat',
    method: 'POST',
    clientIp: '127.0.0.1',
    path: '/v1/chat/completions',
    userAgent: 'log-test/2.1 (linux)',
    status: 200,
    key: 'chat',
    user: 'alice',
    group: 'chat',
    model: 'chat-model',
    provider: 'mock',
    attempts: 1,
    tokens: { input: 10, output: 20, cacheRead: 0, cacheWrite: 0 },
    costMicroUsd: 50,
    listCostMicroUsd: 50,
  });
  t.type(a.durationMs, 'number');
  t.equal(a.ttftMs, undefined, 'no time to first token without a stream');
  t.equal(a.errorCode, undefined);
});

t.test('a stream has its time to first token; a fallback its attempts', async (t) => {
  const s = await fetch(g.url + '/v1/messages', {
    method: 'POST',
    headers: { ...bearer(KEYS.messages), 'content-type': 'application/json' },
    body: JSON.stringify(bodyFor('messages', 'claude-model', directive({ input: 10, output: 20 }), { stream: true })),
  });
  await s.text();
  const [sa] = access(s.headers.get('x-request-id'));
  t.match(sa, { route: 'anthropic-messages', status: 200, group: 'messages', model: 'claude-model', costMicroUsd: 330 });
  t.type(sa.ttftMs, 'number');
  t.ok(sa.ttftMs >= 0 && sa.ttftMs <= sa.durationMs, 'first token within the request');

  const fb = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: { ...chatBody({ model: 'broken-model' }), models: ['chat-model'] },
  });
  t.equal(fb.status, 200);
  const [fa] = access(fb.headers.get('x-request-id'));
  t.match(fa, { status: 200, model: 'chat-model', attempts: 2 });
});

t.test('refusals carry the error code; unrouted requests get a line too; probes do not', async (t) => {
  const bad = await call(g.url + '/v1/chat/completions?key=abc', { headers: bearer(`sk-${'9'.repeat(64)}`), json: chatBody() });
  t.equal(bad.status, 400);
  const [ba] = access(bad.headers.get('x-request-id'));
  t.match(ba, { status: 400, errorCode: 'api_key_in_query_deprecated' });
  const nope = await call(g.url + '/nowhere');
  t.equal(nope.status, 404);
  t.match(access(nope.headers.get('x-request-id'))[0], { route: 'unmatched', status: 404, errorCode: 'route_not_found', path: '/nowhere' });
  const before = records().filter((r) => r.msg === 'request').length;
  await call(g.url + '/healthz');
  await call(g.url + '/readyz');
  await call(g.url + '/metrics');
  t.equal(records().filter((r) => r.msg === 'request').length, before, 'no access lines for probes and scrapes');
});

t.test('answered before any route (no Host, a bad Expect, malformed HTTP): an access line and a request count each', async (t) => {
  const count = async () =>
    total(parseProm(await (await fetch(g.url + '/metrics')).text()), 'gateway_requests_total', { route: 'unmatched', status: '400' });
  const before = await count();
  const sent = [
    { what: 'no Host', bytes: 'GET /v1/models HTTP/1.1\r\nX-Request-ID: refused-no-host\r\n\r\n', method: 'GET' },
    {
      what: 'Expect',
      bytes:
        'POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Request-ID: refused-expect\r\nExpect: bogus\r\nContent-Length: 2\r\n\r\n{}',
      method: 'POST',
    },
    { what: 'bad header characters', bytes: 'GET / HTTP/1.1\r\nHost: gw\r\nBad\u0001Header: x\r\n\r\n' },
  ];
  for (const s of sent) {
    const raw = await rawSocket(g.url, s.bytes);
    t.match(raw, /^HTTP\/1\.1 400 /, `${s.what}: 400`);
    const id = /\r\nx-request-id: (\S+)\r\n/i.exec(raw)?.[1] ?? null;
    const mine = access(id);
    t.equal(mine.length, 1, `${s.what}: one access line for the X-Request-ID answered`);
    t.match(mine[0], { route: 'unmatched', status: 400, errorCode: 'bad_request' }, `${s.what}: route, status and error code`);
    if (s.method) t.equal(mine[0].method, s.method, `${s.what}: its method`);
  }
  t.equal((await count()) - before, sent.length, 'gateway_requests_total{route="unmatched",status="400"} counted each');
});

t.test('a plugin exception: 500 to the client, the plugin and its stack in the log', async (t) => {
  for (const [route, plugin, message, type] of [
    ['boom', 'boom', 'kaboom in the plugin', 'TypeError'],
    ['late', 'late', 'late failure', 'RangeError'],
  ] as const) {
    const r = await call(`${g.url}/${route}/v1/chat/completions`, { headers: bearer(KEYS.chat), json: chatBody() });
    t.equal(r.status, 500, route);
    t.same(r.json.error.code, 'internal_error');
    t.notMatch(r.text, message, 'the message is not leaked to the client');
    const id = r.headers.get('x-request-id');
    const err = records().find((x) => x.level === 'error' && x.requestId === id);
    t.ok(err, `an error line for ${route}`);
    t.equal(err!.plugin, plugin, 'names the plugin instance');
    t.equal(err!.msg, `plugin '${plugin}' threw`);
    t.equal(err!.error.type, type);
    t.equal(err!.error.message, message);
    t.match(err!.error.stack, /\n\s+at /, 'with its stack');
    t.match(access(id)[0], { status: 500, errorCode: 'internal_error' });
  }
});

t.test('never a key, a body or a query string', async (t) => {
  const all = lines.join('\n');
  for (const k of Object.values(KEYS)) t.notOk(all.includes(k), 'no key');
  t.notOk(all.includes('9'.repeat(64)), 'not even an unknown key');
  t.notOk(all.includes(SECRET_WORD), 'no body text');
  t.notOk(all.includes('Hello there'), 'no prompt');
  t.notOk(all.includes('key=abc'), 'no query string');
  t.notOk(all.includes('mock reply'), 'no response text');
});

t.test('levels, errors with causes, GatewayErrors with their code', async (t) => {
  const out: string[] = [];
  const log = createLogger('warn', (l) => out.push(l)).child({ component: 'test' });
  log.info('dropped');
  log.warn('kept', { n: 1 });
  log.error('failed', { error: new GatewayError('INTERNAL', { cause: new Error('root cause') }) });
  t.equal(out.length, 2, 'below the level is dropped');
  const [w, e] = out.map((l) => JSON.parse(l));
  t.match(w, { level: 'warn', msg: 'kept', n: 1, component: 'test' });
  t.match(e, { level: 'error', error: { type: 'GatewayError', code: 'internal_error', status: 500, message: 'Internal gateway error' } });
  t.match(e.error.cause, { type: 'Error', message: 'root cause' }, 'with its cause');
  t.match(e.error.cause.stack, /\n\s+at /);
  t.equal(logLevel('debug'), 'debug');
  t.equal(logLevel(''), 'info', 'unset: info');
  t.throws(
    () => logLevel('loud'),
    /GATEWAY_LOG_LEVEL 'loud' is not a log level: use debug, info, warn, error, silent/,
    'an unknown level is refused',
  );
});

t.test('a line from serialized members (the access line) is the line info and warn write from an object', async (t) => {
  const out: string[] = [];
  const root = createLogger('info', (l) => out.push(l), { instance: 'i-1' });
  const log = root.child({ component: 'access' });
  const fields = { requestId: 'req_1', status: 200, tokens: { input: 1, output: 2 }, note: 'say "hi"\n' };
  const members = JSON.stringify(fields).slice(1, -1);
  log.info('request', fields);
  log.line!('info', 'request', members);
  log.line!('warn', 'request', members);
  log.line!('info', 'bare', '');
  const [viaObject, viaLine, warned, bare] = out.map((l) => JSON.parse(l) as Record<string, unknown>);
  const noTime = ({ time: _time, ...rest }: Record<string, unknown>) => rest;
  t.same(noTime(viaLine), noTime(viaObject), 'the same members, level, logger fields and msg');
  t.same(Object.keys(viaLine), Object.keys(viaObject), 'in the same order');
  t.match(viaLine.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  t.equal(warned.level, 'warn');
  t.same(noTime(bare), { level: 'info', instance: 'i-1', component: 'access', msg: 'bare' }, 'no members: still one JSON line');

  const quiet: string[] = [];
  createLogger('warn', (l) => quiet.push(l)).line!('info', 'request', members);
  t.equal(quiet.length, 0, 'below the level: nothing');
  // A logger without `line` (a plugin's, a test's) gets the same fields through info/warn.
  const got: [string, string, Record<string, unknown>][] = [];
  const plain = {
    debug() {},
    info: (msg: string, f?: Record<string, unknown>) => got.push(['info', msg, f!]),
    warn: (msg: string, f?: Record<string, unknown>) => got.push(['warn', msg, f!]),
    error() {},
    child: () => plain,
  };
  logLine(plain, 'warn', 'request', members);
  t.same(got, [['warn', 'request', fields]]);
});

t.test(
  'stderr to a file: the lines of a turn written together by its end, every line at exit (a fatal one too); to a pipe, every line',
  async (t) => {
    const { spawn } = await import('node:child_process');
    const fs = await import('node:fs');
    const os = await import('node:os');
    const path = await import('node:path');
    const { pathToFileURL } = await import('node:url');
    const logModule = pathToFileURL(
      path.resolve(import.meta.dirname ?? path.dirname(new URL(import.meta.url).pathname), '../../core/log.js'),
    ).href;
    // Logs three lines, then: `kill` dies in the next turn (SIGKILL: no exit handler runs); `exit`
    // exits at once, in the same turn, without flushing (the exit handler writes); `none` ends by itself.
    const child = (end: 'kill' | 'exit' | 'none') => `import(${JSON.stringify(logModule)}).then(({ createLogger }) => {
    const log = createLogger('info');
    for (let i = 1; i <= 3; i++) log.info('line ' + i, { i });
    if (${JSON.stringify(end)} === 'kill') setImmediate(() => setImmediate(() => process.kill(process.pid, 'SIGKILL')));
    if (${JSON.stringify(end)} === 'exit') { log.error('fatal'); process.exit(3); }
  });`;
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gw-log-'));
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    const toFile = async (end: 'kill' | 'exit') => {
      const file = path.join(dir, `${end}.log`);
      const fd = fs.openSync(file, 'w');
      const code = await new Promise((resolve) =>
        spawn(process.execPath, ['-e', child(end)], { stdio: ['ignore', 'ignore', fd] }).on('exit', (c, sig) => resolve(c ?? sig)),
      );
      fs.closeSync(fd);
      const msgs = fs
        .readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l).msg);
      return { code, msgs };
    };
    t.same(
      await toFile('kill'),
      { code: 'SIGKILL', msgs: ['line 1', 'line 2', 'line 3'] },
      "a file: the turn's lines were written before a kill in the next one",
    );
    t.same(
      await toFile('exit'),
      { code: 3, msgs: ['line 1', 'line 2', 'line 3', 'fatal'] },
      'a file: an exit in the same turn writes them',
    );

    const p = spawn(process.execPath, ['-e', child('none')], { stdio: ['ignore', 'ignore', 'pipe'] });
    let piped = '';
    p.stderr.on('data', (c: Buffer) => (piped += c.toString()));
    await new Promise((resolve) => p.on('close', resolve));
    t.same(
      piped
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).msg),
      ['line 1', 'line 2', 'line 3'],
      'a pipe: every line, written asynchronously',
    );
  },
);

// ---- a real run: the CLI's process, its stderr read back ----------------------------------------

/** A port nothing listens on (bound, then released): at `warn` the listening line is not logged. */
async function freePort(): Promise<number> {
  const net = await import('node:net');
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as import('node:net').AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/**
 * `gateway start` on `file` with `env`. With `work`: once /healthz answers on `port`, runs it, then
 * SIGTERM. Resolves with the exit code and every stderr line.
 */
async function run(
  file: string,
  env: NodeJS.ProcessEnv,
  work?: { port: number; fn: (url: string) => Promise<void> },
): Promise<{ code: number | null; lines: string[] }> {
  const { spawn } = await import('node:child_process');
  const child = spawn(process.execPath, [path.join(ROOT, 'bin/gateway.js'), 'start', '--config', file], {
    env: { ...process.env, NODE_OPTIONS: '', GATEWAY_WATCH_CONFIG: '0', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (d: Buffer) => {
    err += d.toString();
    // Expected to be refused: should it start after all, it is stopped (and the test fails on its exit code).
    if (!work && err.includes('"msg":"gateway listening on ')) child.kill('SIGTERM');
  });
  let gone = false;
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      gone = true;
      resolve(code);
    }),
  );
  if (work) {
    const url = `http://127.0.0.1:${work.port}`;
    for (;;) {
      if (gone) break;
      const up = await fetch(url + '/healthz').then(
        (r) => r.ok,
        () => false,
      );
      if (up) {
        await work.fn(url);
        child.kill('SIGTERM');
        break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const code = await exited;
  await new Promise((resolve) => (child.stderr.readableEnded ? resolve(undefined) : child.stderr.on('end', resolve)));
  return { code, lines: err.split('\n').filter((l) => l !== '') };
}

const json = (lines: string[]) => lines.map((l) => JSON.parse(l) as Record<string, any>);

t.test('levels from a real run: debug shows more than info, warn keeps upstream failures and 5xx; every line JSON', async (t) => {
  const cfg = baseConfig();
  cfg.models['broken-model'] = { provider: 'mock', upstream: 'broken#status=503', price: { input: 1, output: 2 } };
  cfg.groups.chat.models.push('broken-model');
  cfg.server.trusted_proxies = ['127.0.0.1/32'];
  cfg.server.port = await freePort();
  const file = writeConfig(cfg);
  const traffic = async (url: string) => {
    const headers = { ...bearer(KEYS.chat), 'user-agent': 'levels-test/1.0', 'x-forwarded-for': '198.51.100.9, 203.0.113.7' };
    t.equal((await call(url + '/v1/chat/completions', { headers, json: chatBody() })).status, 200, 'a success');
    t.equal(
      (await call(url + '/v1/chat/completions', { headers, json: chatBody({ model: 'broken-model' }) })).status,
      502,
      'a 502 (the upstream answered 503)',
    );
    t.equal((await call(url + '/nowhere?secret=1', { headers })).status, 404, 'a 404');
  };
  const runs: Record<string, Record<string, any>[]> = {};
  for (const level of ['debug', 'info', 'warn']) {
    const { code, lines } = await run(file, { GATEWAY_LOG_LEVEL: level }, { port: cfg.server.port, fn: traffic });
    t.equal(code, 0, `${level}: exit 0`);
    t.doesNotThrow(() => json(lines), `${level}: every line is JSON`);
    runs[level] = json(lines);
  }
  const requests = (level: string) => runs[level].filter((l) => l.msg === 'request');
  const named = (level: string, msg: string) => runs[level].filter((l) => l.msg === msg);

  t.ok(runs.debug.length > runs.info.length, `debug shows more than info (${runs.debug.length} > ${runs.info.length} lines)`);
  t.ok(runs.info.length > runs.warn.length, `info more than warn (${runs.info.length} > ${runs.warn.length})`);
  t.match(named('debug', 'upstream attempt answered'), [{ level: 'debug', model: 'chat-model', provider: 'mock', status: 200 }]);
  t.same(named('info', 'upstream attempt answered'), [], 'not at info');

  for (const level of ['debug', 'info']) {
    const [ok, failed, nowhere] = requests(level);
    t.match(ok, { level: 'info', status: 200, clientIp: '203.0.113.7', path: '/v1/chat/completions', userAgent: 'levels-test/1.0' });
    t.match(failed, { level: 'warn', status: 502, model: 'broken-model', clientIp: '203.0.113.7' }, `${level}: a 5xx is a warning`);
    t.match(nowhere, { level: 'info', route: 'unmatched', status: 404, path: '/nowhere', clientIp: '203.0.113.7' });
    t.notOk(JSON.stringify(nowhere).includes('secret=1'), 'no query string');
  }

  // warn: the upstream failure and the 5xx access line, nothing of the successes.
  t.same(
    requests('warn').map((l) => [l.level, l.status]),
    [['warn', 502]],
    'warn: only the 5xx access line',
  );
  t.match(named('warn', 'upstream attempt failed'), [
    {
      level: 'warn',
      model: 'broken-model',
      provider: 'mock',
      account: 'mock/default',
      status: 503,
      failure: 'status',
      error: 'Upstream request failed with status 503',
    },
  ]);
  t.ok(
    runs.warn.every((l) => l.level === 'warn' || l.level === 'error'),
    'nothing below warn',
  );
});

t.test('refusals at start are JSON lines too: an unknown level, a bad config, a store folder in use', async (t) => {
  const dir = tmpDir('gw-refusal-');
  const cfg = baseConfig();
  const loud = await run(writeConfig(cfg, dir), { GATEWAY_LOG_LEVEL: 'loud' });
  t.equal(loud.code, 1, 'an unknown level: exit 1');
  t.match(json(loud.lines), [{ level: 'error', msg: 'the gateway cannot start', error: /GATEWAY_LOG_LEVEL 'loud' is not a log level/ }]);
  t.equal(loud.lines.length, 1);

  const bad = baseConfig();
  bad.server.body_timeout = '30 seconds';
  const badFile = writeConfig(bad, tmpDir('gw-bad-'));
  const rejected = await run(badFile, {});
  t.equal(rejected.code, 1, 'a bad config: exit 1');
  const [line] = json(rejected.lines);
  t.equal(rejected.lines.length, 1, 'one line');
  t.match(line, { level: 'error', msg: 'config rejected', config: badFile });
  t.match(line.errors, [/^gateway\.yaml:\d+:\d+ server\.body_timeout: expected a duration like 30s, 5m, 1h/]);

  const shared = baseConfig();
  shared.store = { kind: 'memory', path: path.join(dir, 'data') };
  const first = await startGateway(shared);
  t.teardown(() => first.close());
  const locked = await run(writeConfig(shared, tmpDir('gw-locked-')), {});
  t.equal(locked.code, 1, 'the store folder is in use: exit 1');
  t.doesNotThrow(() => json(locked.lines), 'every line is JSON');
  t.match(
    json(locked.lines).find((l) => l.level === 'error'),
    { msg: 'the gateway cannot start', error: { message: /store folder .*data is in use by another gateway process \(PID \d+/ } },
  );
});
