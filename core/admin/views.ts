/**
 * What the admin API shows of a user, a key, a top-up and an audit entry (openapi.ts has their
 * schemas). Never a key's secret or digest; USD numbers; ISO times.
 */
import { WINDOWS, type KeyConfig, type UserConfig } from '../config/types.js';
import type { AuditEntry, CreditRecord, KeyRecord, Stored, UserRecord, Wallet } from '../store/types.js';
import type { Source } from '../accounts/directory.js';
import { iso, toUsd } from './http.js';

export function walletView(baseCredit: number, w: Wallet) {
  const credit = baseCredit + w.credit;
  return { credit_usd: toUsd(credit), spent_usd: toUsd(w.spent), balance_usd: toUsd(credit - w.spent) };
}

export function userView(
  u: UserConfig,
  source: Source,
  record: Stored<UserRecord> | undefined,
  wallet: Wallet,
  keys: string[],
  now: number,
): Record<string, unknown> {
  return {
    name: u.name,
    source,
    status: u.status,
    ...(record?.value.note !== undefined ? { note: record.value.note } : {}),
    rpm: u.rpm,
    concurrency: u.concurrency,
    queue: { size: u.queue.size, max_wait_ms: u.queue.maxWaitMs },
    spend_caps: { weekly_usd: toUsd(u.spendCaps.weekly), monthly_usd: toUsd(u.spendCaps.monthly) },
    rates: Object.fromEntries(Object.entries(u.rates).map(([g, ppm]) => [g, ppm / 1e6])),
    subscriptions: u.subscriptions.map((s) => ({
      group: s.group,
      expires_at: new Date(s.expiresAt).toISOString(),
      status: s.status,
      active: s.status === 'active' && s.expiresAt > now,
    })),
    wallet: walletView(u.balance, wallet),
    keys,
    created_at: iso(record?.value.createdAt),
    updated_at: iso(record?.value.updatedAt),
    revision: record?.rev ?? 0,
  };
}

export function keyView(k: KeyConfig, source: Source, record: Stored<KeyRecord> | undefined): Record<string, unknown> {
  return {
    name: k.name,
    source,
    user: k.user,
    group: k.group ?? null,
    enabled: k.enabled,
    hint: record?.value.hint ?? null,
    quota_usd: toUsd(k.quota),
    windows_usd: Object.fromEntries(WINDOWS.map((w) => [w, toUsd(k.windows[w])])),
    expires_at: iso(k.expiresAt),
    ip_allow: [...k.ipAllow],
    ip_deny: [...k.ipDeny],
    created_at: iso(record?.value.createdAt),
    updated_at: iso(record?.value.updatedAt),
    revision: record?.rev ?? 0,
  };
}

export function topupView(c: CreditRecord, baseCredit: number): Record<string, unknown> {
  return {
    id: c.id,
    user: c.user,
    amount_usd: toUsd(c.amount),
    reference: c.reference,
    actor: c.actor,
    created_at: new Date(c.at).toISOString(),
    wallet: walletView(baseCredit, { credit: c.credit, spent: c.spent }),
  };
}

export function auditView(e: AuditEntry): Record<string, unknown> {
  return {
    id: e.id,
    at: new Date(e.at).toISOString(),
    actor: e.actor,
    ip: e.ip,
    method: e.method,
    path: e.path,
    action: e.action,
    target: e.target,
    before: e.before ?? null,
    after: e.after ?? null,
  };
}

/** A stored record as the audit trail keeps it: a key's digest never (its hint names it). */
export function auditRecord(r: UserRecord | KeyRecord | null | undefined): unknown {
  if (!r) return null;
  if ('digest' in r) {
    const { digest: _digest, ...rest } = r;
    return rest;
  }
  return r;
}
