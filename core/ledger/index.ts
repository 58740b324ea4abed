/**
 * Reading the ledger: totals over a range by user, key, model, group or day; the records of a user
 * or key, a page at a time; an export streamed as JSON Lines or CSV; and the reconciliation of the
 * ledger with the store's counters. One interface (`LedgerReader`) over the day files (files.ts)
 * and PostgreSQL (postgres.ts): whichever holds the ledger answers.
 *
 * Ranges are UTC days (YYYY-MM-DD, both ends included) — as `/v1/usage` reports usage — so a day's
 * records are read from one file (or one index range).
 */
import type { LedgerRecord } from './record.js';
import type { LedgerFiles } from './files.js';
import type { Store } from '../store/types.js';

export type GroupBy = 'user' | 'key' | 'model' | 'group' | 'day' | 'type';
export const GROUP_BY: readonly GroupBy[] = ['user', 'key', 'model', 'group', 'day', 'type'];

export interface LedgerQuery {
  /** YYYY-MM-DD, inclusive. */
  fromDay: string;
  toDay: string;
  user?: string;
  key?: string;
  type?: LedgerRecord['type'];
}

export interface SummaryRow {
  /** The grouping values (`by`), e.g. `{ user: 'acme', model: 'gpt-4o' }`. */
  group: Partial<Record<GroupBy, string>>;
  records: number;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
  list_micros: number;
  /** Charged for requests (micro-USD). */
  charged_micros: number;
  /** Credited by top-ups and corrections (micro-USD, corrections negative). */
  credited_micros: number;
  /** Requests whose usage was estimated. */
  estimated: number;
}

export interface LedgerReader {
  /** Where the records are read from (`files` or `postgres`). */
  readonly source: string;
  /**
   * What the records read are: `ledger`, all of them (the default: the memory store's files,
   * PostgreSQL); `instance`, those this instance took from a store shared with other instances
   * (the Redis store's files, drain.ts): the whole ledger only while it is the only instance.
   */
  readonly scope?: 'ledger' | 'instance';
  /** Brings the records up to date before a query (the Redis store's: its drainer catches up). */
  refresh?(): Promise<void>;
  /** Every record of the range and filters, in order, one at a time (never all in memory). */
  stream(q: LedgerQuery): AsyncIterable<LedgerRecord>;
  /** Totals grouped by `by` (no grouping: one row for everything). */
  summary(q: LedgerQuery, by: readonly GroupBy[]): Promise<SummaryRow[]>;
  /** Records `offset`… of the range, at most `limit`, and whether there are more. */
  page(q: LedgerQuery, offset: number, limit: number): Promise<{ records: LedgerRecord[]; more: boolean }>;
}

export function dayOf(ts: number): string {
  return new Date(ts).toISOString().slice(0, 10);
}

export function matches(r: LedgerRecord, q: LedgerQuery): boolean {
  if (q.user !== undefined && r.user !== q.user) return false;
  if (q.key !== undefined && r.key !== q.key) return false;
  if (q.type !== undefined && r.type !== q.type) return false;
  const day = dayOf(r.ts);
  return day >= q.fromDay && day <= q.toDay;
}

const zero = (group: SummaryRow['group']): SummaryRow => ({
  group,
  records: 0,
  requests: 0,
  input_tokens: 0,
  output_tokens: 0,
  cache_read_tokens: 0,
  cache_write_tokens: 0,
  list_micros: 0,
  charged_micros: 0,
  credited_micros: 0,
  estimated: 0,
});

/** Adds a record into a row. */
export function accumulate(row: SummaryRow, r: LedgerRecord): void {
  row.records++;
  if (r.type === 'request') {
    if (r.usage_source !== 'late') row.requests++;
    row.input_tokens += r.input_tokens;
    row.output_tokens += r.output_tokens;
    row.cache_read_tokens += r.cache_read_tokens;
    row.cache_write_tokens += r.cache_write_tokens;
    row.list_micros += r.list_micros;
    row.charged_micros += r.charged_micros;
    if (r.usage_source === 'estimated') row.estimated++;
  } else row.credited_micros += r.charged_micros;
}

export function groupValue(r: LedgerRecord, by: GroupBy): string {
  switch (by) {
    case 'day':
      return dayOf(r.ts);
    case 'type':
      return r.type;
    default:
      return r[by] ?? '';
  }
}

/** Totals of a stream of records (the files' summary; any reader may use it). */
export async function summarise(records: AsyncIterable<LedgerRecord>, by: readonly GroupBy[]): Promise<SummaryRow[]> {
  const rows = new Map<string, SummaryRow>();
  for await (const r of records) {
    const values = by.map((b) => groupValue(r, b));
    const id = values.join('\u0000');
    let row = rows.get(id);
    if (!row) rows.set(id, (row = zero(Object.fromEntries(by.map((b, i) => [b, values[i]])))));
    accumulate(row, r);
  }
  return [...rows.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, r]) => r);
}

/** The ledger in day files. */
export class FileLedgerReader implements LedgerReader {
  readonly source = 'files';
  readonly scope: 'ledger' | 'instance';
  readonly refresh?: () => Promise<void>;

  constructor(
    private readonly files: LedgerFiles,
    opts: { scope?: 'ledger' | 'instance'; refresh?: () => Promise<void> } = {},
  ) {
    this.scope = opts.scope ?? 'ledger';
    this.refresh = opts.refresh;
  }

  async *stream(q: LedgerQuery): AsyncGenerator<LedgerRecord> {
    for await (const r of this.files.read(q.fromDay, q.toDay)) {
      if (!matches(r, q)) continue;
      const { seq: _seq, ...record } = r;
      yield record;
    }
  }

  summary(q: LedgerQuery, by: readonly GroupBy[]): Promise<SummaryRow[]> {
    return summarise(this.stream(q), by);
  }

  async page(q: LedgerQuery, offset: number, limit: number): Promise<{ records: LedgerRecord[]; more: boolean }> {
    const records: LedgerRecord[] = [];
    let i = 0;
    for await (const r of this.stream(q)) {
      if (i++ < offset) continue;
      if (records.length === limit) return { records, more: true };
      records.push(r);
    }
    return { records, more: false };
  }
}

// ---- reconciliation -------------------------------------------------------------------------------

export interface Difference {
  /** What was compared: `key <name> on <day>, model <m>`, `wallet of <user>`… */
  what: string;
  field: string;
  ledger: number;
  store: number;
}

/**
 * Compares the ledger with the store's counters: for every key seen in either, day by day over the
 * range, each model's requests, tokens, list price and charge (the store's day records behind
 * `/v1/usage`). Differences are listed; none means every settled request has exactly its record.
 * A reader of scope `instance` holds only what this instance drained: against counters shared by
 * several instances it shows the others' records as missing (the admin API says so).
 */
export async function reconcile(reader: LedgerReader, store: Store, q: LedgerQuery, keys: Iterable<string>): Promise<Difference[]> {
  const rows = await reader.summary({ ...q, type: 'request' }, ['key', 'day', 'model']);
  const ledger = new Map<string, SummaryRow>();
  const allKeys = new Set(keys);
  for (const r of rows) {
    ledger.set(`${r.group.key}\u0000${r.group.day}\u0000${r.group.model}`, r);
    if (r.group.key) allKeys.add(r.group.key);
  }
  const out: Difference[] = [];
  for (const day of days(q.fromDay, q.toDay)) {
    for (const key of [...allKeys].sort()) {
      const stats = await store.keyStats(key, day, day);
      const models = new Set(Object.keys(stats.byModel));
      for (const r of rows) if (r.group.key === key && r.group.day === day) models.add(r.group.model ?? '');
      for (const model of [...models].sort()) {
        const s = stats.byModel[model];
        const l = ledger.get(`${key}\u0000${day}\u0000${model}`);
        const pairs: [string, number, number][] = [
          ['requests', l?.requests ?? 0, s?.requests ?? 0],
          ['input_tokens', l?.input_tokens ?? 0, s?.input ?? 0],
          ['output_tokens', l?.output_tokens ?? 0, s?.output ?? 0],
          ['cache_read_tokens', l?.cache_read_tokens ?? 0, s?.cacheRead ?? 0],
          ['cache_write_tokens', l?.cache_write_tokens ?? 0, s?.cacheWrite ?? 0],
          ['list_micros', l?.list_micros ?? 0, s?.cost ?? 0],
          ['charged_micros', l?.charged_micros ?? 0, s?.actual ?? 0],
        ];
        for (const [field, a, b] of pairs) {
          if (a !== b) out.push({ what: `key ${key} on ${day}, model ${model}`, field, ledger: a, store: b });
        }
      }
    }
  }
  return out;
}

/** The days from `from` to `to` (YYYY-MM-DD, inclusive). */
export function days(from: string, to: string): string[] {
  const out: string[] = [];
  for (let t = Date.parse(`${from}T00:00:00Z`); dayOf(t) <= to; t += 86_400_000) out.push(dayOf(t));
  return out;
}
