/**
 * Every call the console makes: the admin API with the operator's token, `/v1/usage` with a key
 * holder's key — the same endpoints any client uses, on the origin that served the page. An answer
 * that is not 2xx becomes an ApiError carrying what the gateway said (message, code, HTTP status,
 * field details), which the page shows as it is.
 */

export interface FieldDetail {
  path: string;
  message: string;
}

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
    readonly details: FieldDetail[] = [],
    readonly requestId?: string,
  ) {
    super(message);
  }
}

export interface Answer<T> {
  status: number;
  headers: Headers;
  data: T;
}

/** The gateway's error bodies: the admin API's `{error:{type,code,message,details}}`, the protocols' and the flat `{code,message}`. */
function errorOf(status: number, body: any, text: string, requestId: string | undefined): ApiError {
  const e = body && typeof body === 'object' ? (typeof body.error === 'object' && body.error ? body.error : body) : undefined;
  const message = typeof e?.message === 'string' && e.message ? e.message : text.trim().slice(0, 500) || `HTTP ${status}`;
  const code = typeof e?.code === 'string' ? e.code : typeof e?.type === 'string' ? e.type : `http_${status}`;
  const details = Array.isArray(e?.details)
    ? e.details.filter((d: any) => d && typeof d.path === 'string' && typeof d.message === 'string')
    : [];
  return new ApiError(message, status, code, details, requestId);
}

export async function request<T>(
  path: string,
  opts: { method?: string; bearer: string; body?: unknown; headers?: Record<string, string> },
): Promise<Answer<T>> {
  const headers: Record<string, string> = { authorization: `Bearer ${opts.bearer}`, ...opts.headers };
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(path, {
      method: opts.method ?? 'GET',
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      cache: 'no-store',
      credentials: 'omit',
      redirect: 'error',
    });
  } catch (e) {
    throw new ApiError(`The gateway did not answer (${(e as Error).message})`, 0, 'network_error');
  }
  const text = await res.text();
  let body: any;
  try {
    body = text === '' ? undefined : JSON.parse(text);
  } catch {
    body = undefined;
  }
  const requestId = res.headers.get('x-request-id') ?? undefined;
  if (!res.ok) throw errorOf(res.status, body, text, requestId);
  return { status: res.status, headers: res.headers, data: body as T };
}

const seg = (s: string) => encodeURIComponent(s);

/** The admin API (docs/accounts.md; the contract at /admin/openapi.json). */
export class Admin {
  constructor(readonly token: string) {}

  private call<T>(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<T> {
    return request<T>(path, { method, bearer: this.token, body, headers }).then((a) => a.data);
  }

  users(q: { q?: string; status?: string; cursor?: string | null; limit?: number }) {
    return this.call<Page<User>>('GET', `/admin/users?${query(q)}`);
  }
  user(name: string) {
    return this.call<User>('GET', `/admin/users/${seg(name)}`);
  }
  createUser(body: Record<string, unknown>) {
    return this.call<User>('POST', '/admin/users', body);
  }
  updateUser(name: string, body: Record<string, unknown>) {
    return this.call<User>('PATCH', `/admin/users/${seg(name)}`, body);
  }
  topups(name: string, limit = 10) {
    return this.call<Page<Topup>>('GET', `/admin/users/${seg(name)}/topups?limit=${limit}`);
  }
  /** `idempotencyKey`: one per submission of the form, so a repeated submission credits once. */
  topup(name: string, body: { amount_usd: string; reference: string }, idempotencyKey: string) {
    return request<Topup>(`/admin/users/${seg(name)}/topups`, {
      method: 'POST',
      bearer: this.token,
      body,
      headers: { 'idempotency-key': idempotencyKey },
    });
  }
  grant(name: string, body: { group: string; days: number }) {
    return this.call<User>('POST', `/admin/users/${seg(name)}/subscriptions`, body);
  }
  updatePlan(name: string, group: string, body: Record<string, unknown>) {
    return this.call<User>('PATCH', `/admin/users/${seg(name)}/subscriptions/${seg(group)}`, body);
  }
  removePlan(name: string, group: string) {
    return this.call<User>('DELETE', `/admin/users/${seg(name)}/subscriptions/${seg(group)}`);
  }
  keys(q: { user?: string; group?: string; enabled?: string; cursor?: string | null; limit?: number }) {
    return this.call<Page<Key>>('GET', `/admin/keys?${query(q)}`);
  }
  createKey(body: Record<string, unknown>) {
    return this.call<Key & { key: string }>('POST', '/admin/keys', body);
  }
  updateKey(name: string, body: Record<string, unknown>) {
    return this.call<Key>('PATCH', `/admin/keys/${seg(name)}`, body);
  }
  rotateKey(name: string) {
    return this.call<Key & { key: string }>('POST', `/admin/keys/${seg(name)}/rotate`);
  }
  keyUsage(name: string) {
    return this.call<KeyAdminUsage>('GET', `/admin/keys/${seg(name)}/usage`);
  }
  deleteKey(name: string) {
    return this.call<undefined>('DELETE', `/admin/keys/${seg(name)}`);
  }
  audit(q: { actor?: string; target?: string; cursor?: string | null; limit?: number }) {
    return this.call<Page<AuditEntry>>('GET', `/admin/audit?${query(q)}`);
  }
  accounts() {
    return this.call<Accounts>('GET', '/admin/accounts');
  }
  ledgerSummary(q: { by: string; user?: string; key?: string; type?: string; from?: string; to?: string }) {
    return this.call<LedgerSummary>('GET', `/admin/ledger/summary?${query(q)}`);
  }
}

/** What `/v1/usage` says about the key it is called with (spec §2.9). */
export function usage(key: string): Promise<KeyUsage> {
  return request<KeyUsage>('/v1/usage', { bearer: key }).then((a) => a.data);
}

function query(q: Record<string, string | number | null | undefined>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== null && v !== '') p.set(k, String(v));
  return p.toString();
}

// ---- the shapes read (openapi.ts; spec §2.9) ------------------------------------------------------

export interface Page<T> {
  data: T[];
  next_cursor: string | null;
}

export interface Wallet {
  credit_usd: number;
  spent_usd: number;
  balance_usd: number;
}

export interface User {
  name: string;
  source: 'file' | 'store';
  status: 'active' | 'inactive';
  note?: string;
  rpm: number;
  concurrency: number;
  queue: { size: number; max_wait_ms: number };
  spend_caps: { weekly_usd: number; monthly_usd: number };
  rates: Record<string, number>;
  subscriptions: { group: string; expires_at: string; status: 'active' | 'suspended'; active: boolean }[];
  wallet: Wallet;
  keys: string[];
  created_at: string | null;
  updated_at: string | null;
  revision: number;
}

export interface Key {
  name: string;
  source: 'file' | 'store';
  user: string;
  group: string | null;
  enabled: boolean;
  hint: string | null;
  quota_usd: number;
  windows_usd: Record<'5h' | '1d' | '7d', number>;
  expires_at: string | null;
  ip_allow: string[];
  ip_deny: string[];
  created_at: string | null;
  updated_at: string | null;
  revision: number;
}

export interface KeyAdminUsage {
  key: string;
  quota: { limit: number; used: number; reserved: number };
  windows: Record<string, { limit: number; used: number; reset_at: string | null }>;
  balance?: { credit: number; spent: number; remaining: number };
  plan?: { group: string };
  usage: { today: Counters; total: Counters };
}

export interface Topup {
  id: string;
  user: string;
  amount_usd: number;
  reference: string;
  actor: string;
  created_at: string;
  wallet: Wallet;
}

export interface AuditEntry {
  id: string;
  at: string;
  actor: string;
  ip: string;
  method: string;
  path: string;
  action: string;
  target: string;
  before: unknown;
  after: unknown;
}

export interface UpstreamAccount {
  name: string;
  state: string;
  available: boolean;
  cooling_until: string | null;
  cooldown_reason: string | null;
  rpm_blocked_until: string | null;
  disabled: { since: string; status: number | null; message: string } | null;
  demoted: boolean;
  in_flight: number;
  ttft_ms: number | null;
  consecutive_failures: number;
  weight: number;
  priority: number;
  concurrency: number;
  rpm: number;
  models: string[] | null;
  requests: number;
  outcomes: Record<string, number>;
  [more: string]: unknown;
}

export interface Accounts {
  providers: { name: string; accounts: UpstreamAccount[]; [more: string]: unknown }[];
  [more: string]: unknown;
}

export interface LedgerRow {
  day?: string;
  model?: string;
  records: number;
  requests: number;
  input_tokens?: number;
  output_tokens?: number;
  list_usd: number;
  charged_usd: number;
  credited_usd: number;
}

export interface LedgerSummary {
  from: string;
  to: string;
  by: string[];
  source: string;
  data: LedgerRow[];
}

export interface Counters {
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cache_creation_tokens: number;
  cache_read_tokens: number;
  total_tokens: number;
  cost: number;
  actual_cost: number;
}

export interface KeyUsage {
  mode: 'quota_limited' | 'unrestricted';
  isValid: boolean;
  status?: string;
  planName?: string;
  remaining?: number;
  unit?: string;
  balance?: number;
  quota?: { limit: number; used: number; remaining: number };
  rate_limits?: { window: string; limit: number; used: number; remaining: number; window_start: string | null; reset_at: string | null }[];
  subscription?: {
    daily_usage_usd: number;
    weekly_usage_usd: number;
    monthly_usage_usd: number;
    daily_limit_usd: number;
    weekly_limit_usd: number;
    monthly_limit_usd: number;
    expires_at: string | null;
    weekly_window_start?: string | null;
  };
  expires_at?: string;
  days_until_expiry?: number;
  usage?: { today: Counters; total: Counters; average_duration_ms: number; rpm: number; tpm: number };
  model_stats?: (Counters & { model: string })[];
  daily_usage?: { date: string; requests: number; total_tokens?: number; cost: number; actual_cost: number }[];
}
