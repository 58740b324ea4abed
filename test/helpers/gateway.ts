/**
 * Test harness: a base config (mock provider, one group of each kind, a user, keys) that tests
 * patch, written to a temp file and started as a real gateway on an ephemeral port.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { Gateway, type GatewayOptions } from '../../core/server.js';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { builtinPlugins } from '../../plugins/index.js';
import { silentLogger, createLogger } from '../../core/log.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const CONFORMANCE = path.resolve(ROOT, 'test/fixtures/conformance');

const hex = (n: number) => n.toString(16).padStart(64, '0');
/** Deterministic test keys. */
export const KEYS = {
  chat: `sk-${hex(0xc1)}`,
  messages: `sk-${hex(0xa1)}`,
  responses: `sk-${hex(0xb1)}`,
  responsesNoMsg: `sk-${hex(0xb2)}`,
  plan: `sk-${hex(0xd1)}`,
  custom: 'custom_key-ABCDEFGH12345',
};

export function baseConfig(): Record<string, any> {
  return {
    version: 1,
    server: { host: '127.0.0.1', port: 0, body_limit: '1MiB' },
    store: { kind: 'memory', path: '' },
    limits: { free_rpm_at_zero_balance: 10 },
    providers: { mock: { kind: 'mock', fixtures_dir: CONFORMANCE } },
    models: {
      'chat-model': { provider: 'mock', price: { input: 1, output: 2 } },
      'claude-model': { provider: 'mock', price: { input: 3, output: 15, cache_read: 0.3, cache_write: 3.75 } },
      'gpt-model': { provider: 'mock', price: { input: 0.25, output: 2, cache_read: 0.025 } },
      'free-model': { provider: 'mock', price: { input: 0, output: 0 } },
    },
    groups: {
      chat: { kind: 'chat', passthrough: true, models: ['chat-model', 'free-model'] },
      messages: { kind: 'messages', models: ['claude-model', 'free-model'] },
      responses: { kind: 'responses', allow_messages: true, models: ['gpt-model', 'chat-model'] },
      'responses-no-msg': { kind: 'responses', allow_messages: false, models: ['gpt-model'] },
      plan: { kind: 'messages', billing: 'plan', models: ['claude-model'], plan: { daily: 10, weekly: 50, monthly: 150 } },
    },
    users: {
      alice: {
        balance: 100,
        subscriptions: [{ group: 'plan', expires_at: '2099-01-01T00:00:00Z' }],
      },
    },
    keys: [
      { key: KEYS.chat, name: 'chat', user: 'alice', group: 'chat' },
      { key: KEYS.messages, name: 'messages', user: 'alice', group: 'messages' },
      { key: KEYS.responses, name: 'responses', user: 'alice', group: 'responses' },
      { key: KEYS.responsesNoMsg, name: 'responses-no-msg', user: 'alice', group: 'responses-no-msg' },
      { key: KEYS.plan, name: 'plan', user: 'alice', group: 'plan' },
      { key: KEYS.custom, name: 'custom', user: 'alice', group: 'chat' },
    ],
    plugins: {
      auth: { use: 'auth' },
      'ip-filter': { use: 'ip-filter' },
      quota: { use: 'quota' },
      windows: { use: 'windows' },
      rpm: { use: 'rpm' },
      concurrency: { use: 'concurrency' },
      'body-rewriter': { use: 'body-rewriter' },
      converter: { use: 'converter' },
      fallback: { use: 'fallback', with: { max_attempts: 5 } },
      metering: { use: 'metering' },
    },
    chains: {
      'model-call': ['auth', 'ip-filter', 'quota', 'windows', 'rpm', 'concurrency', 'body-rewriter', 'converter', 'fallback', 'metering'],
      'key-check': ['auth', 'ip-filter', 'quota'],
      'key-only': ['auth', 'ip-filter'],
    },
    routes: [
      { path: '/v1/chat/completions', protocol: 'openai-chat', chain: 'model-call' },
      { path: '/v1/messages', protocol: 'anthropic-messages', chain: 'model-call' },
      { path: '/v1/messages/count_tokens', protocol: 'anthropic-messages', chain: 'key-check', handler: 'count-tokens' },
      { path: '/v1/responses', protocol: 'openai-responses', chain: 'model-call' },
      { path: '/v1/models', method: 'GET', chain: 'key-check', handler: 'models' },
      { path: '/v1/usage', method: 'GET', chain: 'key-only', handler: 'usage' },
    ],
  };
}

/** Folders made by `tmpDir`, removed when the test process exits (the large ledger test's is 600 MB). */
const made: string[] = [];

export function tmpDir(prefix = 'gw-test-'): string {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  if (made.length === 0) process.once('exit', removeMade);
  made.push(dir);
  return dir;
}

function removeMade(): void {
  for (const dir of made) {
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // A child process still writing into it: left behind, never a failed test.
    }
  }
}

export function writeConfig(config: Record<string, any> | string, dir = tmpDir()): string {
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, typeof config === 'string' ? config : YAML.stringify(config));
  return file;
}

export interface TestGateway {
  gw: Gateway<MockServer>;
  url: string;
  file: string;
  close(): Promise<void>;
}

export async function startGateway(
  config: Record<string, any> | string = baseConfig(),
  opts: Partial<GatewayOptions<MockServer>> = {},
): Promise<TestGateway> {
  const file = writeConfig(config);
  const gw = await Gateway.start<MockServer>({
    mockUpstream: startMockServer,
    configFile: file,
    registry: builtinPlugins,
    log: process.env.TEST_LOG ? createLogger('debug') : silentLogger,
    watch: false,
    ...opts,
  });
  return { gw, url: gw.url, file, close: () => gw.close() };
}

export interface Reply {
  status: number;
  headers: Headers;
  text: string;
  json: any;
}

/** A raw HTTP call (fetch) returning status, headers and the parsed body when it is JSON. */
export async function call(url: string, init: RequestInit & { json?: unknown } = {}): Promise<Reply> {
  const headers = new Headers(init.headers);
  let body = init.body;
  if (init.json !== undefined) {
    body = JSON.stringify(init.json);
    if (!headers.has('content-type')) headers.set('content-type', 'application/json');
  }
  const res = await fetch(url, { ...init, headers, body, method: init.method ?? (body !== undefined ? 'POST' : 'GET') });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

export const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

export function chatBody(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'chat-model', messages: [{ role: 'user', content: 'Hello there' }], ...extra };
}

export function messagesBody(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'claude-model', max_tokens: 256, messages: [{ role: 'user', content: 'Hello there' }], ...extra };
}

export function responsesBody(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'gpt-model', input: 'Hello there', ...extra };
}

import type tapT from 'tap';
/** The type of a tap subtest's `t`. */
export type TapTest = Parameters<Parameters<typeof tapT.test>[0]>[0];
