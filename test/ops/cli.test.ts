/**
 * The `gateway` command, run as operators run it (node bin/gateway.js): every command, strict
 * options, exit codes (0 done, 1 failed, 2 wrong usage).
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import YAML from 'yaml';
import { baseConfig, bearer, call, KEYS, ROOT, startGateway, tmpDir, writeConfig } from '../helpers/gateway.js';
import { modelCall } from '../limits/helpers.js';

// Some thirty processes, each a node start: on a loaded machine more than tap's default allows.
t.setTimeout(300_000);

const BIN = path.join(ROOT, 'bin/gateway.js');
// Children run as an operator runs them: without tap's process tracking (NODE_OPTIONS).
const ENV = { ...process.env, NODE_OPTIONS: '' };
const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'));

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** A port nothing listens on (bound, then released). */
function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

function gateway(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { cwd: tmpDir(), env: { ...ENV, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

t.test('--version and --help', async (t) => {
  for (const flag of ['--version', '-v']) {
    const r = await gateway([flag]);
    t.equal(r.code, 0);
    t.equal(r.stdout.trim(), pkg.version, flag);
    t.equal(r.stderr, '', 'nothing built, nothing else said');
  }
  for (const args of [['--help'], ['help'], ['start', '--help']]) {
    const r = await gateway(args);
    t.equal(r.code, 0, args.join(' '));
    t.match(r.stdout, /usage: gateway <command>/);
    t.match(r.stdout, /keygen/);
  }
});

t.test('strict options: unknown or misspelt flags, missing values, stray arguments and unknown commands are errors', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [['start', '--conf', 'x.yaml'], /Unknown option '--conf'/],
    [['check', '--config'], /argument missing|requires a value|--config/i],
    [['check', 'a.yaml', 'b.yaml'], /unexpected argument 'b.yaml'/],
    [['check', 'a.yaml', '--config', 'b.yaml'], /not both/],
    [['keygen', '--length', '10'], /Unknown option '--length'/],
    [['usage'], /needs a KEY_NAME/],
    [['reset-quota'], /needs a KEY_NAME/],
    [['frobnicate'], /unknown command 'frobnicate'/],
    [['--verbose'], /Unknown option '--verbose'/],
    [[], /no command given/],
  ];
  for (const [args, message] of cases) {
    const r = await gateway(args);
    t.equal(r.code, 2, `${args.join(' ')}: exit 2`);
    t.match(r.stderr, message, args.join(' '));
    t.match(r.stderr, /gateway --help/, 'points at the help');
    t.equal(r.stdout, '');
  }
});

t.test('check: ok with a summary, or every error with its line', async (t) => {
  const ok = await gateway(['check', path.join(ROOT, 'gateway.yaml')]);
  t.equal(ok.code, 0);
  t.match(ok.stdout, /gateway.yaml: ok \(1 providers, 4 models, 3 groups, 3 keys, 6 routes\)/);
  const cfg = baseConfig();
  cfg.groups.chat.models.push('ghost');
  cfg.server.port = 'eighty';
  const file = writeConfig(cfg);
  for (const args of [
    ['check', file],
    ['check', '--config', file],
  ]) {
    const bad = await gateway(args);
    t.equal(bad.code, 1);
    t.match(bad.stderr, /gateway.yaml: 2 errors/);
    t.match(bad.stderr, /gateway.yaml:\d+:\d+ server.port: must be integer/);
    t.match(bad.stderr, /groups.chat.models\[2\]: model 'ghost' is not defined/);
  }
  const viaEnv = await gateway(['check'], { GATEWAY_CONFIG: file });
  t.equal(viaEnv.code, 1, 'GATEWAY_CONFIG names the file');
  const missing = await gateway(['check', '/nonexistent/gateway.yaml']);
  t.equal(missing.code, 1);
  t.match(missing.stderr, /cannot read config/);
});

t.test('keygen: sk- and 64 hex, and its SHA-256 for key_sha256 — which the gateway accepts', async (t) => {
  const r = await gateway(['keygen', '--json']);
  t.equal(r.code, 0);
  const { key, key_sha256: digest } = JSON.parse(r.stdout);
  t.match(key, /^sk-[0-9a-f]{64}$/);
  t.equal(digest, createHash('sha256').update(key).digest('hex'));
  const again = JSON.parse((await gateway(['keygen', '--json'])).stdout);
  t.not(again.key, key, 'a new key each time');
  const text = await gateway(['keygen']);
  t.match(text.stdout, /^key: {8}sk-[0-9a-f]{64}\nkey_sha256: [0-9a-f]{64}\n/);

  const cfg = baseConfig();
  cfg.keys.push({ key_sha256: digest, name: 'generated', user: 'alice', group: 'chat' });
  const g = await startGateway(cfg);
  t.teardown(() => g.close());
  t.equal((await modelCall(g, key, 'chat', 'chat-model')).status, 200, 'the key works with only its digest in the config');
});

t.test("usage and reset-quota talk to the running gateway's admin API", async (t) => {
  const cfg = baseConfig();
  cfg.server.admin_token = 'admin-secret-token';
  cfg.keys.find((k: any) => k.name === 'chat').quota = 5;
  cfg.keys.find((k: any) => k.name === 'chat').windows = { '1d': 2 };
  const g = await startGateway(cfg);
  t.teardown(() => g.close());
  t.equal((await modelCall(g, KEYS.chat, 'chat', 'chat-model', { input: 1000, output: 2000 })).status, 200);
  // 1000 × $1/M + 2000 × $2/M = $0.005
  const admin = ['--url', g.url, '--token', 'admin-secret-token'];

  const json = await gateway(['usage', 'chat', '--json', ...admin]);
  t.equal(json.code, 0, json.stderr);
  const u = JSON.parse(json.stdout);
  t.match(u, {
    key: 'chat',
    user: 'alice',
    group: 'chat',
    enabled: true,
    quota: { limit: 5, used: 0.005, reserved: 0 },
    windows: { '1d': { limit: 2, used: 0.005 } },
    balance: { credit: 100, spent: 0.005, remaining: 99.995 },
    usage: { today: { requests: 1, input_tokens: 1000, output_tokens: 2000, actual_cost: 0.005 } },
  });
  t.same(
    u.model_stats.map((m: any) => m.model),
    ['chat-model'],
  );

  // The address and token from the config file, as an operator on the gateway's host runs it.
  const local = YAML.parse(readFileSync(g.file, 'utf8'));
  local.server.port = g.gw.port;
  const file = writeConfig(local);
  const human = await gateway(['usage', 'chat', '--config', file]);
  t.equal(human.code, 0, human.stderr);
  t.match(human.stdout, /key chat \(user alice, group chat\)/);
  t.match(human.stdout, /quota\s+\$0\.005 used of \$5\.00/);
  t.match(human.stdout, /window 1d\s+\$0\.005 used of \$2\.00, resets /);
  t.match(human.stdout, /balance\s+\$99\.995 left of \$100\.00/);
  t.match(human.stdout, /today\s+1 requests, 1000 input \/ 2000 output tokens, \$0\.005 charged/);

  const reset = await gateway(['reset-quota', 'chat', '--config', file]);
  t.equal(reset.code, 0, reset.stderr);
  t.match(reset.stdout, /quota of key 'chat' reset/);
  const after = JSON.parse((await gateway(['usage', 'chat', '--json', ...admin])).stdout);
  t.equal(after.quota.used, 0, 'the used quota is forgotten');
  t.equal(after.usage.today.requests, 1, 'usage records stay');

  const unknown = await gateway(['usage', 'nobody', ...admin]);
  t.equal(unknown.code, 1);
  t.match(unknown.stderr, /usage failed \(404\).*No key named 'nobody'/);
  const wrongToken = await gateway(['usage', 'chat', '--url', g.url, '--token', 'nope']);
  t.equal(wrongToken.code, 1);
  t.match(wrongToken.stderr, /401/);
  const noToken = await gateway(['usage', 'chat', '--config', writeConfig(baseConfig())]);
  t.equal(noToken.code, 1);
  t.match(noToken.stderr, /no admin token/);
  const closed = await freePort();
  const down = await gateway(['reset-quota', 'chat', '--url', `http://127.0.0.1:${closed}`, '--token', 'x']);
  t.equal(down.code, 1);
  t.match(down.stderr, `cannot reach the gateway at http://127.0.0.1:${closed}: connect ECONNREFUSED`);
  t.equal(
    (await call(g.url + '/admin/keys/chat/usage', { method: 'POST', headers: bearer('admin-secret-token') })).status,
    405,
    'usage is GET',
  );
});

t.test('start: serves until SIGTERM or SIGINT, drains, exits 0; a bad config exits 1', async (t) => {
  const dir = tmpDir();
  const cfg = baseConfig();
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, YAML.stringify(cfg));
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    const child = spawn(process.execPath, [BIN, 'start', '--config', file], { env: { ...ENV, GATEWAY_WATCH_CONFIG: '0' } });
    let stderr = '';
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on('data', (d) => {
        stderr += d;
        const line = stderr.split('\n').find((l) => l.includes('"msg":"gateway listening on '));
        if (line) resolve(JSON.parse(line).url);
      });
      child.on('exit', () => reject(new Error(`exited early: ${stderr}`)));
    });
    t.equal(
      (
        await call(url + '/v1/chat/completions', {
          headers: bearer(KEYS.chat),
          json: { model: 'chat-model', messages: [{ role: 'user', content: 'hi' }] },
        })
      ).status,
      200,
    );
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    child.kill(signal);
    t.equal(await exited, 0, `${signal}: exit 0`);
    const lines = stderr
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    t.ok(
      lines.some((l) => l.msg.startsWith('shutting down') && l.signal === signal),
      'the signal is logged',
    );
    t.ok(
      lines.some((l) => l.msg === 'gateway stopped'),
      'and the stop',
    );
    t.ok(
      lines.some((l) => l.msg === 'request' && l.status === 200),
      'the access line was written before exit',
    );
  }
  const bad = writeConfig({ version: 1 });
  const r = await gateway(['start', bad]);
  t.equal(r.code, 1);
  t.match(r.stderr, /missing required setting 'providers'/);
});
