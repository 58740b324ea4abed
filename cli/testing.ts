/**
 * `llm-gateway/testing`: a real gateway for a plugin's tests — the built-in plugins plus the ones
 * given, a config written to a temporary folder, the built-in mock upstream as the provider (no
 * credentials, deterministic replies: docs/mock.md), an ephemeral port, nothing kept on disk.
 *
 *   const gw = await startTestGateway({ config, plugins: [myPlugin] });
 *   await fetch(`${gw.url}/v1/chat/completions`, { headers: { authorization: `Bearer ${TEST_KEYS.chat}` }, … });
 *   await gw.close();
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { Gateway } from '../core/server.js';
import { startMockServer, type MockServer } from '../mock/server.js';
import { silentLogger, type Logger } from '../core/log.js';
import type { PluginDefinition } from '../core/plugin.js';
import { builtinPlugins } from '../plugins/index.js';

export type { Gateway, MockServer };

/** Keys of testConfig(), one per group kind (all owned by user `alice`, $100 balance). */
export const TEST_KEYS = Object.freeze({
  chat: `sk-${'c'.repeat(64)}`,
  messages: `sk-${'a'.repeat(64)}`,
  responses: `sk-${'b'.repeat(64)}`,
});

/** The full built-in chain, in the order gateway.yaml uses. */
export const DEFAULT_CHAIN: readonly string[] = Object.freeze([
  'auth',
  'ip-filter',
  'quota',
  'windows',
  'rpm',
  'concurrency',
  'body-rewriter',
  'converter',
  'fallback',
  'metering',
]);

/**
 * A complete config to patch: provider `mock`; models `chat-model`, `claude-model`, `gpt-model`;
 * groups `chat` (Chat Completions), `messages` (Messages; Chat and Responses converted) and
 * `responses` (Responses and Chat); chain `model-call` with every built-in; the four model routes.
 */
export function testConfig(): Record<string, any> {
  return {
    version: 1,
    server: { host: '127.0.0.1', port: 0 },
    store: { kind: 'memory', path: '' },
    providers: { mock: { kind: 'mock' } },
    models: {
      'chat-model': { provider: 'mock', price: { input: 1, output: 2 } },
      'claude-model': { provider: 'mock', price: { input: 3, output: 15 } },
      'gpt-model': { provider: 'mock', price: { input: 0.25, output: 2 } },
    },
    groups: {
      chat: { kind: 'chat', models: ['chat-model'] },
      messages: { kind: 'messages', models: ['claude-model'] },
      responses: { kind: 'responses', models: ['gpt-model', 'chat-model'] },
    },
    users: { alice: { balance: 100 } },
    keys: [
      { key: TEST_KEYS.chat, name: 'chat', user: 'alice', group: 'chat' },
      { key: TEST_KEYS.messages, name: 'messages', user: 'alice', group: 'messages' },
      { key: TEST_KEYS.responses, name: 'responses', user: 'alice', group: 'responses' },
    ],
    plugins: Object.fromEntries(DEFAULT_CHAIN.map((name) => [name, { use: name }])),
    chains: { 'model-call': [...DEFAULT_CHAIN] },
    routes: [
      { path: '/v1/chat/completions', protocol: 'openai-chat', chain: 'model-call' },
      { path: '/v1/messages', protocol: 'anthropic-messages', chain: 'model-call' },
      { path: '/v1/responses', protocol: 'openai-responses', chain: 'model-call' },
      { path: '/v1/models', method: 'GET', chain: ['auth'], handler: 'models' },
    ],
  };
}

export interface TestGatewayOptions {
  /** A config object (see testConfig) or YAML text; default testConfig(). */
  config?: Record<string, unknown> | string;
  /** Plugin definitions usable by name in `use:`, besides the built-ins. */
  plugins?: readonly PluginDefinition<any>[];
  /** Environment for `${VAR}` in the config (default: process.env). */
  env?: NodeJS.ProcessEnv;
  /** Default: a logger that logs nothing. */
  log?: Logger;
}

export interface TestGateway {
  /** http://127.0.0.1:<port> */
  url: string;
  gateway: Gateway<MockServer>;
  /** The config file written (edit it and call gateway.reload()). */
  file: string;
  close(): Promise<void>;
}

export async function startTestGateway(opts: TestGatewayOptions = {}): Promise<TestGateway> {
  const dir = mkdtempSync(path.join(tmpdir(), 'llm-gateway-test-'));
  const file = path.join(dir, 'gateway.yaml');
  const config = opts.config ?? testConfig();
  writeFileSync(file, typeof config === 'string' ? config : YAML.stringify(config));
  const registry = new Map(builtinPlugins);
  for (const p of opts.plugins ?? []) registry.set(p.name, p);
  let gateway: Gateway<MockServer>;
  try {
    gateway = await Gateway.start({
      configFile: file,
      registry,
      mockUpstream: startMockServer,
      log: opts.log ?? silentLogger,
      watch: false,
      env: opts.env,
    });
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    url: gateway.url,
    gateway,
    file,
    close: async () => {
      await gateway.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
