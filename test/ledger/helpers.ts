/**
 * What the ledger tests share: the gateway's config with a ledger, the day files read as they are
 * on disk (the file sink, independently of the gateway's reader), and waits.
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { baseConfig } from '../helpers/gateway.js';
import { until } from '../helpers/upstream.js';
import type { PostgresServer } from '../helpers/postgres.js';

export const TOKEN = 'ledger-admin-token-123';

/** A gateway on the memory store in `dir` (its day files in `<dir>/ledger`), with PostgreSQL when given. */
export function ledgerConfig(dir: string, pg?: PostgresServer, extra: Record<string, unknown> = {}): Record<string, any> {
  const cfg = baseConfig();
  cfg.server.admin_token = TOKEN;
  cfg.store = { kind: 'memory', path: dir };
  if (pg) cfg.ledger = { postgres: { url: pg.url(), ...extra } };
  cfg.models['fail-model'] = { provider: 'mock', upstream: 'fail-model#status=503', price: { input: 1, output: 2 } };
  cfg.groups.chat.models.push('fail-model');
  return cfg;
}

/** Every record line of the day files in `ledgerDir`, parsed, `seq` removed; torn lines skipped. */
export function fileRecords(ledgerDir: string): Record<string, any>[] {
  const out: Record<string, any>[] = [];
  let names: string[];
  try {
    names = readdirSync(ledgerDir);
  } catch {
    return out;
  }
  for (const f of names.filter((n) => /^\d{4}-\d{2}-\d{2}\.jsonl$/.test(n)).sort()) {
    const text = readFileSync(path.join(ledgerDir, f), 'utf8');
    const end = text.lastIndexOf('\n');
    for (const line of text.slice(0, end + 1).split('\n')) {
      if (!line) continue;
      const { seq: _seq, ...r } = JSON.parse(line) as Record<string, any>;
      out.push(r);
    }
  }
  return out;
}

/** Waits until the table (`ledger_records` in database `db`) holds as many rows as the day files records (true), or `ms` pass (false). */
export async function untilShipped(pg: PostgresServer, db: string, ledgerDir: string, ms = 120_000): Promise<boolean> {
  return until(
    async () => {
      const want = new Set(fileRecords(ledgerDir).map((r) => r.id as string));
      const rows = await pg.query<{ n: string }>(`SELECT count(*) AS n FROM ledger_records`, [], db).catch(() => [{ n: '-1' }]);
      return Number(rows[0].n) === want.size;
    },
    ms,
    200,
  );
}

/** The table's rows as records (bigints as numbers), by id. */
export async function tableRecords(pg: PostgresServer, db: string): Promise<Map<string, Record<string, any>>> {
  const rows = await pg.query(`SELECT * FROM ledger_records`, [], db);
  const out = new Map<string, Record<string, any>>();
  for (const r of rows) {
    for (const k of Object.keys(r)) if (typeof r[k] === 'string' && /^-?\d+$/.test(r[k]) && BIGINT_COLUMNS.has(k)) r[k] = Number(r[k]);
    out.set(r.id, r);
  }
  return out;
}

const BIGINT_COLUMNS = new Set([
  'ts',
  'input_tokens',
  'output_tokens',
  'cache_read_tokens',
  'cache_write_tokens',
  'reasoning_tokens',
  'list_micros',
  'rate_ppm',
  'charged_micros',
  'duration_ms',
  'ttft_ms',
]);

/** Sums of request charges per user (micro-USD), split by billing (the wallet counts `balance` only). */
export function spendByUser(records: Iterable<Record<string, any>>): Map<string, { balance: number; plan: number }> {
  const out = new Map<string, { balance: number; plan: number }>();
  for (const r of records) {
    if (r.type !== 'request') continue;
    const s = out.get(r.user) ?? { balance: 0, plan: 0 };
    if (r.billing === 'plan') s.plan += r.charged_micros;
    else s.balance += r.charged_micros;
    out.set(r.user, s);
  }
  return out;
}

export const today = () => new Date().toISOString().slice(0, 10);
