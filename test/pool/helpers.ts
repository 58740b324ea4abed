/**
 * Helpers for the account pool tests: mock providers with several accounts (the mock tells them
 * apart by the credential it receives), a bounded-concurrency runner and the admin view.
 */
import { baseConfig, call, type Reply } from '../helpers/gateway.js';
import type { MockServer } from '../../mock/server.js';
import type { Gateway } from '../../core/server.js';

export const ADMIN_TOKEN = 'admin-token-for-pool-tests';

export interface AccountSpec {
  name: string;
  weight?: number;
  priority?: number;
  concurrency?: number;
  rpm?: number;
  models?: string[];
}

/** The credential of an account in these tests. */
export const cred = (provider: string, account: string): string => `key-${provider}-${account}`;

/**
 * The base config plus, per provider, a mock provider with these accounts and one model named
 * `<provider>-model` served to the chat, messages and responses groups.
 */
export function poolConfig(
  providers: Record<string, { accounts: AccountSpec[]; scheduling?: Record<string, unknown> }>,
): Record<string, any> {
  const cfg = baseConfig();
  cfg.server.admin_token = ADMIN_TOKEN;
  cfg.metrics = { path: '/metrics' };
  for (const [name, p] of Object.entries(providers)) {
    cfg.providers[name] = {
      kind: 'mock',
      accounts: p.accounts.map((a) => ({ ...a, api_key: cred(name, a.name) })),
      ...(p.scheduling ? { scheduling: p.scheduling } : {}),
    };
    const model = `${name}-model`;
    cfg.models[model] = { provider: name, price: { input: 1, output: 2 } };
    cfg.groups.chat.models.push(model);
    cfg.groups.messages.models.push(model);
    cfg.groups.responses.models.push(model);
  }
  return cfg;
}

/** Requests each account of a mock provider received so far. */
export function counts(mock: MockServer, provider: string, accounts: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const a of accounts) out[a] = mock.credential(cred(provider, a)).requests;
  return out;
}

export function delta(after: Record<string, number>, before: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of Object.keys(after)) out[k] = after[k] - (before[k] ?? 0);
  return out;
}

/** Runs `n` tasks with at most `concurrency` at a time. */
export async function runPool<T>(n: number, concurrency: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      out[i] = await task(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, concurrency) }, worker));
  return out;
}

export async function accountsView(gw: Gateway): Promise<Record<string, Record<string, any>>> {
  const r = await call(gw.url + '/admin/accounts', { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  if (r.status !== 200) throw new Error(`/admin/accounts answered ${r.status}: ${r.text}`);
  const out: Record<string, Record<string, any>> = {};
  for (const p of r.json.providers) {
    out[p.name] = {};
    for (const a of p.accounts) out[p.name][a.name] = a;
  }
  return out;
}

/** A chat completion with a distinct conversation (so no two requests share a session). */
export function chatCall(url: string, key: string, model: string, text: string, headers: Record<string, string> = {}): Promise<Reply> {
  return call(url + '/v1/chat/completions', {
    headers: { authorization: `Bearer ${key}`, ...headers },
    json: { model, messages: [{ role: 'user', content: text }] },
  });
}
