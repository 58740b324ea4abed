/**
 * /metrics after mixed traffic — successes, a stream, a fallback, limit and key rejections, a
 * plugin exception, a store failure, probes, reloads — checked value by value against what the
 * traffic must have produced (and against the store's own usage records); then the Grafana
 * dashboard: it parses, and every metric its queries use has samples in that scrape.
 * Also: metrics.token, metrics.listen (metrics and probes on their own port), metrics.key_labels.
 */
import t from 'tap';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { baseConfig, bearer, call, chatBody, KEYS, ROOT, startGateway, type TestGateway } from '../helpers/gateway.js';
import { bodyFor, directive, key, modelCall, usageOf } from '../limits/helpers.js';
import { find, parseProm, total, type Sample } from '../helpers/prom.js';
import { builtinPlugins } from '../../plugins/index.js';
import { definePlugin } from '../../core/plugin.js';
import type { InstrumentedStore } from '../../core/metrics.js';

const LIMITED = key(0x7001);
const boom = definePlugin({
  name: 'boom',
  schema: { type: 'object' },
  create: () => ({
    onAccess() {
      throw new Error('kaboom');
    },
  }),
});

function config(): Record<string, any> {
  const cfg = baseConfig();
  // An upstream name with a mock directive: this model always answers 503, so fallback moves on.
  cfg.models['broken-model'] = { provider: 'mock', upstream: 'broken#status=503', price: { input: 1, output: 2 } };
  cfg.groups.chat.models.push('broken-model');
  cfg.users.limited = { balance: 10, rpm: 1 };
  cfg.keys.push({ key: LIMITED, name: 'limited', user: 'limited', group: 'chat' });
  // An account pool: account `first` fails once (503), the request fails over to `second`.
  cfg.providers.pool = {
    kind: 'mock',
    accounts: [
      { name: 'first', api_key: 'key-pool-first', priority: 0 },
      { name: 'second', api_key: 'key-pool-second', priority: 1 },
    ],
  };
  cfg.models['pool-model'] = { provider: 'pool', price: { input: 1, output: 2 } };
  cfg.groups.chat.models.push('pool-model');
  cfg.plugins.boom = { use: 'boom' };
  cfg.routes.push({ path: '/boom/v1/chat/completions', protocol: 'openai-chat', chain: ['auth', 'boom'] });
  return cfg;
}

const registry = new Map([...builtinPlugins, ['boom', boom]]);
let g: TestGateway;
let samples: Sample[];
let scrapeText: string;
const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
const expected = { chatCost: 0, claudeCost: 0, poolCost: 0 };

t.before(async () => {
  g = await startGateway(config(), { registry });
  const chat = (extra: Record<string, unknown> = {}, k = KEYS.chat) =>
    call(g.url + '/v1/chat/completions', {
      headers: bearer(k),
      json: bodyFor('chat', 'chat-model', directive({ input: 10, output: 20 }), extra),
    });

  // successes: two non-stream chat calls (10 in, 20 out at $1/$2 per M: 50 micro-USD each)
  for (let i = 0; i < 2; i++) if ((await chat()).status !== 200) throw new Error('chat failed');
  expected.chatCost = 2 * (10 * 1 + 20 * 2);
  // a stream on Messages (claude-model at $3/$15: 30 + 300 micro-USD)
  const s = await fetch(g.url + '/v1/messages', {
    method: 'POST',
    headers: { ...bearer(KEYS.messages), 'content-type': 'application/json' },
    body: JSON.stringify(bodyFor('messages', 'claude-model', directive({ input: 10, output: 20 }), { stream: true })),
  });
  if (!(await s.text()).includes('message_stop')) throw new Error('stream failed');
  expected.claudeCost = 10 * 3 + 20 * 15;
  // a fallback: broken-model answers 503, chat-model answers
  const fb = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: { ...bodyFor('chat', 'broken-model', directive({ input: 10, output: 20 })), models: ['chat-model'] },
  });
  if (fb.status !== 200 || fb.json.model !== 'chat-model') throw new Error(`fallback failed: ${fb.status} ${fb.text}`);
  expected.chatCost += 50;
  // account failover inside one model: `first` answers 503, `second` answers
  g.gw.mocks.get('pool')!.script('key-pool-first', { next: ['status=503'] });
  const pooled = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: bodyFor('chat', 'pool-model', directive({ input: 10, output: 20 })),
  });
  if (pooled.status !== 200) throw new Error(`pool failed: ${pooled.status} ${pooled.text}`);
  expected.poolCost = 50;
  // rejections: an unknown key, and the second request of a user limited to 1 per minute
  if ((await chat({}, `sk-${'9'.repeat(64)}`)).status !== 401) throw new Error('expected 401');
  if ((await chat({}, LIMITED)).status !== 200) throw new Error('expected 200');
  expected.chatCost += 50;
  if ((await chat({}, LIMITED)).status !== 429) throw new Error('expected 429');
  // a plugin that throws
  if ((await call(g.url + '/boom/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() })).status !== 500)
    throw new Error('expected 500');
  // the store failing one admission
  // On the store the instrumentation wraps: its failure is counted like a real one.
  const store = (g.gw.store as InstrumentedStore).inner as unknown as Record<string, unknown>;
  store.admit = async () => {
    throw new Error('store down');
  };
  store.admitNow = () => {
    throw new Error('store down');
  };
  const down = await chat();
  delete store.admit;
  delete store.admitNow;
  if (down.status !== 503) throw new Error(`expected 503, got ${down.status}`);
  // probes (three readiness checks), usage reads, reloads (one accepted, one rejected)
  for (const p of ['/healthz', '/readyz', '/readyz', '/readyz', '/', '/metrics']) await call(g.url + p);
  await usageOf(g, KEYS.chat);
  if (await g.gw.reload()) throw new Error('reload failed');
  const good = readFileSync(g.file, 'utf8');
  writeFileSync(g.file, good.replace('version: 1', 'version: 2'));
  if (!(await g.gw.reload())) throw new Error('a broken config was accepted');
  writeFileSync(g.file, good);

  const res = await fetch(g.url + '/metrics');
  scrapeText = await res.text();
  samples = parseProm(scrapeText);
});
t.teardown(() => g.close());

t.test('requests by route and status; probes are not counted', async (t) => {
  t.equal(
    total(samples, 'gateway_requests_total', { route: 'openai-chat', status: '200' }),
    5,
    "two plain calls, the fallback, the pool, the limited user's first",
  );
  t.equal(total(samples, 'gateway_requests_total', { route: 'anthropic-messages', status: '200' }), 1);
  t.equal(total(samples, 'gateway_requests_total', { route: 'openai-chat', status: '401' }), 1);
  t.equal(total(samples, 'gateway_requests_total', { route: 'openai-chat', status: '429' }), 1);
  t.equal(total(samples, 'gateway_requests_total', { route: 'openai-chat', status: '500' }), 1, 'the plugin exception');
  t.equal(total(samples, 'gateway_requests_total', { route: 'openai-chat', status: '503' }), 1, 'the store failure');
  t.equal(total(samples, 'gateway_requests_total', { route: 'usage', status: '200' }), 1);
  const routes = new Set(find(samples, 'gateway_requests_total').map((s) => s.labels.route));
  t.notOk(routes.has('health') || routes.has('metrics') || routes.has('readyz') || routes.has('unmatched'), 'no probe series');
  t.equal(total(samples, 'gateway_request_duration_seconds_count'), 11, 'one duration per counted request');
  t.equal(total(samples, 'gateway_requests_in_flight'), 0, 'nothing in flight');
});

t.test('time to first token: one observation for the one stream, by provider and model', async (t) => {
  t.equal(total(samples, 'gateway_time_to_first_token_seconds_count'), 1);
  t.equal(total(samples, 'gateway_time_to_first_token_seconds_count', { provider: 'mock', model: 'claude-model' }), 1);
  t.ok(total(samples, 'gateway_time_to_first_token_seconds_sum') > 0, 'a positive time');
});

t.test('upstream attempts and latency by provider and model; the fallback', async (t) => {
  t.equal(total(samples, 'gateway_upstream_attempts_total', { provider: 'mock', model: 'broken-model', outcome: '503' }), 1);
  t.equal(total(samples, 'gateway_upstream_attempts_total', { provider: 'mock', model: 'chat-model', outcome: 'ok' }), 4);
  t.equal(total(samples, 'gateway_upstream_attempts_total', { provider: 'mock', model: 'claude-model', outcome: 'ok' }), 1);
  t.equal(total(samples, 'gateway_upstream_latency_seconds_count', { provider: 'mock', model: 'chat-model' }), 4);
  t.equal(total(samples, 'gateway_upstream_latency_seconds_count', { provider: 'mock', model: 'broken-model' }), 1);
  t.same(
    find(samples, 'gateway_fallback_attempts_total').map((s) => [s.labels, s.value]),
    [[{ model: 'chat-model', reason: '503' }, 1]],
    'the account failover is not a model fallback',
  );
  t.equal(total(samples, 'gateway_upstream_attempts_total', { provider: 'pool', model: 'pool-model', outcome: '503' }), 1);
  t.equal(total(samples, 'gateway_upstream_attempts_total', { provider: 'pool', model: 'pool-model', outcome: 'ok' }), 1);
});

t.test('per-account series: requests by outcome, the failover, the cooldown, state', async (t) => {
  t.equal(total(samples, 'gateway_account_requests_total', { provider: 'pool', account: 'first', outcome: 'server_error' }), 1);
  t.equal(total(samples, 'gateway_account_requests_total', { provider: 'pool', account: 'second', outcome: 'ok' }), 1);
  t.equal(total(samples, 'gateway_account_failovers_total', { provider: 'pool' }), 1);
  t.equal(total(samples, 'gateway_account_cooldowns_total', { provider: 'pool', account: 'first' }), 1);
  t.equal(total(samples, 'gateway_account_state', { provider: 'pool', account: 'first', state: 'cooling' }), 1);
  t.equal(total(samples, 'gateway_account_state', { provider: 'pool', account: 'second', state: 'available' }), 1);
  t.equal(total(samples, 'gateway_account_in_flight', { provider: 'pool' }), 0);
  t.equal(total(samples, 'gateway_account_ttft_seconds_count', { provider: 'pool', account: 'second' }), 1);
});

t.test("tokens and cost by provider, model and group, equal to the store's records", async (t) => {
  const chat = { provider: 'mock', model: 'chat-model', group: 'chat' };
  const claude = { provider: 'mock', model: 'claude-model', group: 'messages' };
  t.equal(total(samples, 'gateway_tokens_total', { ...chat, bucket: 'input' }), 40, '4 answered chat calls × 10');
  t.equal(total(samples, 'gateway_tokens_total', { ...chat, bucket: 'output' }), 80);
  t.equal(total(samples, 'gateway_tokens_total', { ...claude, bucket: 'input' }), 10);
  t.equal(total(samples, 'gateway_tokens_total', { ...claude, bucket: 'output' }), 20);
  t.equal(total(samples, 'gateway_charged_micro_usd_total', chat), expected.chatCost);
  t.equal(total(samples, 'gateway_charged_micro_usd_total', claude), expected.claudeCost);
  t.equal(total(samples, 'gateway_tokens_total', { model: 'broken-model' }), 0, 'the failed attempt is not billed');
  const usage = (await usageOf(g, KEYS.chat)).usage.total;
  t.equal(
    Math.round(usage.actual_cost * 1e6 + (await usageOf(g, LIMITED)).usage.total.actual_cost * 1e6),
    expected.chatCost + expected.poolCost,
    'the store agrees',
  );
  t.equal(total(samples, 'gateway_tokens_total', { provider: 'pool', model: 'pool-model', group: 'chat', bucket: 'output' }), 20);
  t.equal(total(samples, 'gateway_charged_micro_usd_total', { provider: 'pool', model: 'pool-model', group: 'chat' }), expected.poolCost);
});

t.test('rejections by code, plugin exceptions by plugin, store errors and latency by operation', async (t) => {
  t.same(
    find(samples, 'gateway_limit_rejections_total').map((s) => [s.labels.code, s.value]),
    [
      ['invalid_api_key', 1],
      ['rpm_exceeded', 1],
    ],
    "the gateway's own refusals, by catalogue id",
  );
  t.same(
    find(samples, 'gateway_plugin_errors_total').map((s) => [s.labels.plugin, s.value]),
    [['boom', 1]],
  );
  t.same(
    find(samples, 'gateway_store_errors_total').map((s) => [s.labels, s.value]),
    [[{ store: 'memory', op: 'admit' }, 1]],
  );
  t.equal(total(samples, 'gateway_store_operation_seconds_count', { store: 'memory', op: 'health' }), 3, 'one per /readyz');
  t.equal(total(samples, 'gateway_store_operation_seconds_count', { op: 'settle' }), 6, 'one settlement per answered model call');
  t.ok(total(samples, 'gateway_store_operation_seconds_count', { op: 'admit' }) >= 6);
  t.equal(total(samples, 'gateway_concurrency_queue_waiting'), 0);
});

t.test('reloads by result, build info, Node.js and process metrics', async (t) => {
  t.equal(total(samples, 'gateway_config_reloads_total', { result: 'ok' }), 1);
  t.equal(total(samples, 'gateway_config_reloads_total', { result: 'rejected' }), 1);
  t.equal(total(samples, 'gateway_build_info', { version: pkg.version, node: process.version }), 1);
  for (const name of [
    'process_cpu_seconds_total',
    'process_resident_memory_bytes',
    'nodejs_heap_size_used_bytes',
    'nodejs_eventloop_lag_p99_seconds',
    'nodejs_version_info',
  ]) {
    t.ok(find(samples, name).length > 0, `${name} is exported`);
  }
});

t.test('label sets are bounded: no key or user names, no request ids', async (t) => {
  const labelNames = new Set(samples.filter((s) => s.name.startsWith('gateway_')).flatMap((s) => Object.keys(s.labels)));
  for (const l of labelNames)
    t.ok(
      [
        'route',
        'status',
        'error',
        'provider',
        'account',
        'state',
        'model',
        'outcome',
        'reason',
        'group',
        'bucket',
        'code',
        'plugin',
        'store',
        'op',
        'result',
        'le',
        'version',
        'node',
      ].includes(l),
      `label ${l}`,
    );
  const values = samples.flatMap((s) => Object.values(s.labels));
  t.notOk(
    values.some((v) => v === 'alice' || v === 'limited' || v.startsWith('sk-')),
    'no user, key name or key as a label value',
  );
  t.notMatch(scrapeText, /sk-[0-9a-f]/, 'no key anywhere');
});

t.test('the Grafana dashboard parses and every metric it queries is in the scrape', async (t) => {
  const dash = JSON.parse(readFileSync(path.join(ROOT, 'examples/grafana/llm-gateway.json'), 'utf8'));
  t.equal(dash.uid, 'llm-gateway');
  const exprs: string[] = [];
  const walk = (panels: any[]) => {
    for (const p of panels) {
      for (const target of p.targets ?? []) exprs.push(target.expr);
      if (p.panels) walk(p.panels);
    }
  };
  walk(dash.panels);
  t.ok(exprs.length >= 20, `${exprs.length} queries`);
  const names = new Set(exprs.flatMap((e) => [...e.matchAll(/\b((?:gateway|process|nodejs)_[a-z0-9_]+)\b/g)].map((m) => m[1])));
  t.ok(names.size >= 20, `${names.size} metric names`);
  for (const n of names) t.ok(find(samples, n).length > 0, `${n} has samples`);
  // Every selector is limited to the chosen gateways: the process panels never mix in Prometheus's own.
  const unlimited = exprs.flatMap((e) =>
    [...e.matchAll(/\b((?:gateway|process|nodejs)_[a-z0-9_]+)(\{[^}]*\})?/g)]
      .filter((m) => !m[2]?.startsWith('{job=~"$job",instance=~"$instance"'))
      .map((m) => `${m[1]} in ${e}`),
  );
  t.same(unlimited, [], 'every selector is limited to $job and $instance');
  const vars = Object.fromEntries(dash.templating.list.map((v: any) => [v.name, v]));
  t.match(vars.job, { type: 'query', query: { query: 'label_values(gateway_build_info, job)' }, includeAll: true });
  t.match(vars.instance, { type: 'query', query: { query: 'label_values(gateway_build_info{job=~"$job"}, instance)' } });
  t.notOk(vars.job.allValue, '"All" means the jobs found, not every job');
  const errors = exprs.filter((e) => e.includes('status=~"5.."'));
  t.ok(errors.length > 0 && errors.every((e) => e.includes('error!="no_accounts"')), 'the 5xx share leaves out models not served');
  t.ok(
    exprs.some((e) => e.includes('error="no_accounts"')),
    'and shows them on their own',
  );
  const gatewayFamilies = new Set(
    scrapeText
      .split('\n')
      .filter((l) => l.startsWith('# TYPE gateway_'))
      .map((l) => l.split(' ')[2]),
  );
  for (const f of gatewayFamilies) {
    t.ok(
      [...names].some((n) => n === f || n.startsWith(`${f}_`)),
      `the dashboard shows ${f}`,
    );
  }
});

t.test('metrics.token, metrics.listen and metrics.key_labels', async (t) => {
  const cfg = baseConfig();
  cfg.metrics = { listen: '127.0.0.1:0', token: 'scrape-secret', key_labels: true };
  const h = await startGateway(cfg);
  t.teardown(() => h.close());
  t.ok(h.gw.metricsUrl, 'a second listener');
  const onApi = await call(h.url + '/metrics');
  t.equal(onApi.status, 404, 'the API port no longer serves metrics');
  t.equal(onApi.json.error.code, 'route_not_found');
  const noToken = await call(h.gw.metricsUrl + '/metrics');
  t.equal(noToken.status, 401);
  t.equal(noToken.headers.get('www-authenticate'), 'Bearer');
  t.equal((await call(h.gw.metricsUrl + '/metrics', { headers: bearer('wrong') })).status, 401);
  t.equal((await modelCall(h, KEYS.chat, 'chat', 'chat-model', { input: 10, output: 20 })).status, 200);
  const ok = await call(h.gw.metricsUrl + '/metrics', { headers: bearer('scrape-secret') });
  t.equal(ok.status, 200);
  t.match(ok.headers.get('content-type'), /^text\/plain/);
  const s = parseProm(ok.text);
  t.equal(total(s, 'gateway_key_requests_total', { key: 'chat', user: 'alice', status: '200' }), 1, 'per-key series when asked for');
  t.equal(total(s, 'gateway_key_charged_micro_usd_total', { key: 'chat', user: 'alice' }), 50);
  t.equal((await call(h.gw.metricsUrl + '/readyz')).status, 200, 'probes on the metrics port');
  t.equal((await call(h.gw.metricsUrl + '/healthz')).status, 200);
  t.equal(
    (await call(h.gw.metricsUrl + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() })).status,
    404,
    'no API there',
  );

  const plain = await startGateway(baseConfig());
  t.teardown(() => plain.close());
  await modelCall(plain, KEYS.chat, 'chat', 'chat-model');
  const text = (await call(plain.url + '/metrics')).text;
  t.notMatch(text, /gateway_key_/, 'no per-key series by default');
  t.equal(YAML.parse(readFileSync(plain.file, 'utf8')).metrics, undefined);
});

t.test("limit rejections are the gateway's own decisions; an unknown model's 503 is labelled; promtool accepts the scrape", async (t) => {
  const cfg = baseConfig();
  // Upstreams that refuse: their 429, 400 and 413 reach the client, and are the upstream's, not a limit.
  for (const status of [429, 400, 413]) {
    cfg.models[`refuses-${status}`] = { provider: 'mock', upstream: `refuses#status=${status}`, price: { input: 1, output: 2 } };
    cfg.groups.chat.models.push(`refuses-${status}`);
  }
  cfg.users.slow = { balance: 10, rpm: 1 };
  cfg.keys.push({ key: key(0x7002), name: 'slow', user: 'slow', group: 'chat' });
  const h = await startGateway(cfg);
  t.teardown(() => h.close());
  const chat = (model: string, k = KEYS.chat) => call(h.url + '/v1/chat/completions', { headers: bearer(k), json: chatBody({ model }) });
  t.equal((await chat('refuses-429')).status, 429, "the upstream's 429");
  t.equal((await chat('refuses-400')).status, 400, "the upstream's 400");
  t.equal((await chat('refuses-413')).status, 413, "the upstream's 413");
  t.equal((await chat('no-such-model')).status, 503, 'an unknown model');
  t.equal((await call(h.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), body: '{"model":' })).status, 400, 'a broken body');
  t.equal((await chat('chat-model', key(0x7002))).status, 200);
  t.equal((await chat('chat-model', key(0x7002))).status, 429, 'the RPM limit');
  t.equal((await chat('chat-model', `sk-${'8'.repeat(64)}`)).status, 401, 'an unknown key');
  t.equal((await call(h.url + '/v1/models')).status, 401, 'no key');

  const text = (await call(h.url + '/metrics')).text;
  const s = parseProm(text);
  t.same(
    find(s, 'gateway_limit_rejections_total').map((x) => [x.labels.code, x.value]),
    [
      ['rpm_exceeded', 1],
      ['invalid_api_key', 1],
      ['api_key_required', 1],
    ],
    'only the key check and the RPM limit: no upstream refusal, no bad request',
  );
  t.equal(
    total(s, 'gateway_requests_total', { route: 'openai-chat', status: '503', error: 'no_accounts' }),
    1,
    "the unknown model's 503 says so",
  );
  t.equal(total(s, 'gateway_requests_total', { route: 'openai-chat', status: '429', error: 'provider_rate_limit' }), 1);
  t.equal(total(s, 'gateway_requests_total', { route: 'openai-chat', status: '200', error: '' }), 1, 'a success has no error');

  // promtool (Debian's prometheus package, installed by scripts/ensure-promtool.sh) checks the names,
  // types and help of the whole output.
  const { spawnSync } = await import('node:child_process');
  const which = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
  if (which.error) {
    t.comment('promtool is not installed (scripts/ensure-promtool.sh installs it): the check is left out');
    return;
  }
  const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  t.equal(check.status, 0, `promtool check metrics: ${check.stdout}${check.stderr}`);
  t.equal(`${check.stdout}${check.stderr}`.trim(), '', 'no complaint at all');
});
