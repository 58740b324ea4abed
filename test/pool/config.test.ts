/**
 * Provider accounts in gateway.yaml: defaults, the implicit account of `api_key`, scheduling
 * units, and every mistake reported with its path.
 */
import t from 'tap';
import path from 'node:path';
import YAML from 'yaml';
import { ConfigError, loadConfigText } from '../../core/config/load.js';
import { builtinPlugins } from '../../plugins/index.js';
import { baseConfig, tmpDir } from '../helpers/gateway.js';

const load = (cfg: Record<string, any>) =>
  loadConfigText(YAML.stringify(cfg), path.join(tmpDir(), 'gateway.yaml'), { registry: builtinPlugins, env: {} });

async function issues(cfg: Record<string, any>) {
  try {
    await load(cfg);
  } catch (e) {
    if (e instanceof ConfigError) return e.issues;
    throw e;
  }
  return [];
}

function withProvider(
  p: Record<string, unknown>,
  models: Record<string, unknown> = { 'p-model': { provider: 'p', price: { input: 1, output: 1 } } },
) {
  const cfg = baseConfig();
  cfg.providers.p = p;
  Object.assign(cfg.models, models);
  return cfg;
}

t.test('accounts with defaults; api_key is one implicit account', async (t) => {
  const { config } = await load(
    withProvider({
      kind: 'anthropic',
      base_url: 'https://api.example.com/',
      headers: { 'x-org': 'o' },
      accounts: [
        { name: 'main-1', api_key: 'k1', weight: 4, concurrency: 20 },
        {
          name: 'relay',
          api_key: 'k2',
          base_url: 'https://relay.example/v1/',
          priority: 1,
          headers: { 'x-relay': 'r' },
          models: ['p-model'],
        },
      ],
      scheduling: { sticky_ttl: '2h', cooldown: '10s', max_cooldown: '5m', max_attempts: 2, slow_factor: 4, slow_margin: '500ms' },
    }),
  );
  const p = config.providers.p;
  t.match(p.accounts[0], {
    name: 'main-1',
    id: 'p/main-1',
    apiKey: 'k1',
    weight: 4,
    priority: 0,
    concurrency: 20,
    rpm: 0,
    models: undefined,
    baseUrl: undefined,
    headers: { 'x-org': 'o' },
  });
  t.match(p.accounts[1], {
    name: 'relay',
    baseUrl: 'https://relay.example/v1',
    priority: 1,
    weight: 1,
    headers: { 'x-org': 'o', 'x-relay': 'r' },
    models: ['p-model'],
  });
  t.same(p.scheduling, {
    stickyTtlMs: 7_200_000,
    cooldownMs: 10_000,
    maxCooldownMs: 300_000,
    maxAttempts: 2,
    slowFactor: 4,
    slowMarginMs: 500,
  });
  t.equal(p.apiKey, '');
  const single = (await load(withProvider({ kind: 'openai', api_key: 'sk-one' }))).config.providers.p;
  t.match(single.accounts, [{ name: 'default', id: 'p/default', apiKey: 'sk-one', weight: 1, concurrency: 0, rpm: 0 }]);
  t.same(single.scheduling, {
    stickyTtlMs: 3_600_000,
    cooldownMs: 30_000,
    maxCooldownMs: 3_600_000,
    maxAttempts: 3,
    slowFactor: 3,
    slowMarginMs: 1000,
  });
});

t.test('mistakes are reported with their path', async (t) => {
  t.match(await issues(withProvider({ kind: 'openai', api_key: 'x', accounts: [{ name: 'a' }] })), [
    { path: 'providers.p.api_key', message: /either api_key .* or accounts/ },
  ]);
  t.match(await issues(withProvider({ kind: 'openai', accounts: [{ name: 'a' }, { name: 'a' }] })), [
    { path: 'providers.p.accounts[1].name', message: /listed twice/ },
  ]);
  t.match(await issues(withProvider({ kind: 'mock', accounts: [{ name: 'a', base_url: 'http://x' }] })), [
    { path: 'providers.p.accounts[0].base_url' },
  ]);
  t.match(
    await issues(
      withProvider({
        kind: 'openai',
        accounts: [
          { name: 'a', models: ['chat-model'] },
          { name: 'b', models: ['nope'] },
        ],
      }),
    ),
    [
      { path: 'providers.p.accounts[0].models[0]', message: /served by provider 'mock', not 'p'/ },
      { path: 'providers.p.accounts[1].models[0]', message: /not defined/ },
      { path: 'models.p-model.provider', message: /no account of provider 'p' serves model 'p-model'/ },
    ],
  );
  t.match(await issues(withProvider({ kind: 'openai', accounts: [{ name: 'a', weight: 0 }] })), [
    { path: 'providers.p.accounts[0].weight' },
  ]);
  t.match(await issues(withProvider({ kind: 'openai', accounts: [] })), [{ path: 'providers.p.accounts' }]);
  t.match(await issues(withProvider({ kind: 'openai', accounts: [{ name: 'a' }], scheduling: { cooldown: '2m', max_cooldown: '1m' } })), [
    { path: 'providers.p.scheduling.max_cooldown' },
  ]);
  t.match(await issues(withProvider({ kind: 'openai', accounts: [{ name: 'a' }], scheduling: { sticky: '1h' } })), [
    { path: 'providers.p.scheduling' },
  ]);
});
