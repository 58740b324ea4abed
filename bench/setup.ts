/**
 * The gateway config every bench tool runs: the shipped gateway.yaml with only the deployment data
 * replaced (bench/README.md, "Method"). Shared by `run.ts` (wall-clock) and `instructions.ts`
 * (instruction counts), so both measure the same gateway.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import YAML from 'yaml';

/** The bench's own keys (deployment data, not part of the shipped config). */
export const KEY_CHAT = 'sk-bench000000000000000000000000000000000000000000000000000000000001';
export const KEY_CONVERTED = 'sk-bench000000000000000000000000000000000000000000000000000000000002';
export const AUTH_CHAT = `Bearer ${KEY_CHAT}`;
export const AUTH_CONVERTED = `Bearer ${KEY_CONVERTED}`;
/** Messages clients of the Chat-only sink: the large-body scenario's converted variant. */
export const KEY_LARGE_MESSAGES = 'sk-bench000000000000000000000000000000000000000000000000000000000003';
export const AUTH_LARGE_MESSAGES = `Bearer ${KEY_LARGE_MESSAGES}`;
/** High enough never to reject: the plugins do all their work, nothing is refused. */
const HIGH_RPM = 100_000_000;
const HIGH_USD = 1_000_000;

export function shippedConfig(root: string): Record<string, any> {
  return YAML.parse(fs.readFileSync(path.join(root, 'gateway.yaml'), 'utf8'));
}

export interface BenchConfigOptions {
  root: string;
  port: number;
  dataDir: string;
  upstreams: { mock: string; sink: string };
  /** The user's concurrency limit (above anything the bench opens at once). */
  concurrency: number;
  /** Replaces the shipped store settings (the Redis scenario). */
  store?: Record<string, unknown>;
  /** Top-level sections set last, replacing the shipped ones (the ledger scenario's `ledger: {enabled: false}`). */
  overrides?: Record<string, unknown>;
}

/**
 * The shipped gateway.yaml with only the deployment data replaced: providers at the external mock
 * (kind openai and anthropic, so the gateway speaks to it over the network as to a real provider),
 * a passthrough chat group and a converting one, one user and two keys with every limit on.
 */
export function gatewayConfig(o: BenchConfigOptions): Record<string, any> {
  const mockUrl = o.upstreams.mock;
  const c = shippedConfig(o.root);
  c.server = { ...c.server, host: '127.0.0.1', port: o.port };
  c.store = o.store ?? { ...c.store, path: o.dataDir };
  if (c.failed_requests) c.failed_requests = { ...c.failed_requests, dir: path.join(o.dataDir, 'failed') };
  c.providers = {
    'bench-openai': {
      kind: 'openai',
      base_url: `${mockUrl}/v1`,
      api_key: 'bench',
      protocols: ['openai-chat', 'openai-responses'],
      max_sockets: 4096,
    },
    'bench-anthropic': { kind: 'anthropic', base_url: mockUrl, api_key: 'bench', max_sockets: 4096 },
    'bench-sink': { kind: 'openai', base_url: `${o.upstreams.sink}/v1`, api_key: 'bench', protocols: ['openai-chat'], max_sockets: 4096 },
  };
  c.models = {
    'bench-chat': { provider: 'bench-openai', price: { input: 0.5, output: 1.5 } },
    'bench-claude': { provider: 'bench-anthropic', price: { input: 3, output: 15, cache_read: 0.3, cache_write: 3.75 } },
    'bench-large': { provider: 'bench-sink', price: { input: 0.5, output: 1.5 } },
  };
  c.groups = {
    chat: { kind: 'chat', passthrough: true, models: ['bench-chat', 'bench-large'], multiplier: 1.0, billing: 'balance', rpm: HIGH_RPM },
    converted: { kind: 'chat', models: ['bench-claude'], multiplier: 1.0, billing: 'balance', rpm: HIGH_RPM },
    // Messages clients of the Chat-only sink: the large-body scenario's converted variant.
    'large-messages': { kind: 'messages', models: ['bench-large'], multiplier: 1.0, billing: 'balance', rpm: HIGH_RPM },
  };
  c.users = {
    bench: {
      status: 'active',
      balance: HIGH_USD,
      rpm: HIGH_RPM,
      concurrency: o.concurrency,
      queue: { size: 16, max_wait: '30s' },
      spend_caps: { weekly: HIGH_USD, monthly: HIGH_USD },
    },
  };
  const limits = { quota: HIGH_USD, windows: { '5h': HIGH_USD, '1d': HIGH_USD, '7d': HIGH_USD } };
  c.keys = [
    { key: KEY_CHAT, name: 'bench-chat', user: 'bench', group: 'chat', ...limits },
    { key: KEY_CONVERTED, name: 'bench-converted', user: 'bench', group: 'converted', ...limits },
    { key: KEY_LARGE_MESSAGES, name: 'bench-large-messages', user: 'bench', group: 'large-messages', ...limits },
  ];
  return { ...c, ...o.overrides };
}

/** A Chat Completions request for the mock: `words` words of reply, plus any mock directives and padding. */
export function chatBody(model: string, stream: boolean, words: number, directives = '', pad = 0): string {
  const content = `benchmark [[mock: words=${words}${directives ? ' ' + directives : ''}]]${pad ? ' ' + 'lorem '.repeat(Math.ceil(pad / 6)).slice(0, pad) : ''}`;
  return JSON.stringify({ model, stream, messages: [{ role: 'user', content }] });
}

/** The gateway's environment: the shipped defaults, so no log level or config override from the caller's shell. */
export function gatewayEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('GATEWAY_')) delete env[k];
  return env;
}

/** A TCP port free on loopback right now (the OS picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}
