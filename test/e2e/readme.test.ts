/**
 * The README's quick start works verbatim: its curl command and its OpenAI SDK snippet, run
 * against the shipped gateway.yaml (on a free port and a scratch data directory instead of
 * 127.0.0.1:8080 and ./data — the only substitutions).
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { copyFileSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Gateway } from '../../core/server.js';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { builtinPlugins } from '../../plugins/index.js';
import { silentLogger } from '../../core/log.js';
import { ROOT, tmpDir } from '../helpers/gateway.js';

const README = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
const blocks = (lang: string) => [...README.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1]);
const README_URL = 'http://127.0.0.1:8080';

let gw: Gateway<MockServer>;
t.before(async () => {
  const dir = tmpDir('readme-');
  copyFileSync(path.join(ROOT, 'gateway.yaml'), path.join(dir, 'gateway.yaml'));
  gw = await Gateway.start({
    configFile: path.join(dir, 'gateway.yaml'),
    registry: builtinPlugins,
    mockUpstream: startMockServer,
    log: silentLogger,
    watch: false,
    env: { GATEWAY_PORT: '0' },
  });
});
t.teardown(() => gw.close());

t.test('the curl command', async (t) => {
  const curl = blocks('sh').find((b) => b.startsWith('curl '));
  t.ok(curl, 'the README has a curl example');
  const url = /curl (\S+)/.exec(curl!)![1];
  const headers = Object.fromEntries([...curl!.matchAll(/-H '([^:]+): ([^']+)'/g)].map((m) => [m[1], m[2]]));
  const body = /-d '([^']+)'/.exec(curl!)![1];
  t.ok(url.startsWith(README_URL));
  const r = await fetch(url.replace(README_URL, gw.url), { method: 'POST', headers, body });
  t.equal(r.status, 200);
  const json: any = await r.json();
  t.equal(json.object, 'chat.completion');
  t.match(json.choices[0].message.content, /mock reply/);
});

t.test('the OpenAI SDK snippet', async (t) => {
  const js = blocks('js').find((b) => b.includes("from 'openai'"));
  t.ok(js, 'the README has an SDK example');
  t.ok(js!.includes(`${README_URL}/v1`));
  // Written inside the project so that `import 'openai'` resolves as it does for a user.
  const file = path.join(ROOT, 'dist', `readme-demo-${process.pid}.mjs`);
  writeFileSync(file, js!.replace(README_URL, gw.url));
  t.teardown(() => rmSync(file, { force: true }));
  const { stdout } = await promisify(execFile)(process.execPath, [file], { timeout: 20_000 });
  t.match(stdout, /This is a mock reply\. You said: Hello!/, 'the streamed text was printed');
  t.match(stdout, /prompt_tokens: \d+/, 'then the usage of finalChatCompletion()');
});
