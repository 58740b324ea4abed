/**
 * The ledger's admin endpoints (docs/ledger.md): totals, records, a streamed export, and the
 * reconciliation with the store's counters. Ranges are UTC days, `from` and `to` included; `to`
 * defaults to today and `from` to 30 days before it.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Store } from '../store/types.js';
import { FIELDS, type LedgerRecord } from '../ledger/record.js';
import { GROUP_BY, dayOf, reconcile, type GroupBy, type LedgerQuery, type LedgerReader, type SummaryRow } from '../ledger/index.js';
import { AdminError, invalid, pageLimit, sendJson, toUsd } from './http.js';

const DATE = /^\d{4}-\d{2}-\d{2}$/;
const DAY = 86_400_000;
/** Days one query may span. */
const MAX_DAYS = 400;

function day(v: string | null, name: string, fallback: string): string {
  if (v === null) return fallback;
  const t = Date.parse(`${v}T00:00:00Z`);
  if (!DATE.test(v) || Number.isNaN(t) || dayOf(t) !== v) throw invalid(name, 'must be a date YYYY-MM-DD');
  return v;
}

/** The range and filters of a ledger call. */
export function ledgerQuery(url: URL, now: number): LedgerQuery {
  const q = url.searchParams;
  const toDay = day(q.get('to'), 'to', dayOf(now));
  const fromDay = day(q.get('from'), 'from', dayOf(Date.parse(`${toDay}T00:00:00Z`) - 30 * DAY));
  if (fromDay > toDay) throw invalid('from', 'must not be after to');
  if ((Date.parse(toDay) - Date.parse(fromDay)) / DAY >= MAX_DAYS) throw invalid('from', `a range spans at most ${MAX_DAYS} days`);
  const type = q.get('type');
  if (type !== null && type !== 'request' && type !== 'topup' && type !== 'correction') {
    throw invalid('type', 'must be request, topup or correction');
  }
  return {
    fromDay,
    toDay,
    user: q.get('user') ?? undefined,
    key: q.get('key') ?? undefined,
    ...(type !== null ? { type } : {}),
  };
}

function rowView(r: SummaryRow) {
  return {
    ...r.group,
    records: r.records,
    requests: r.requests,
    input_tokens: r.input_tokens,
    output_tokens: r.output_tokens,
    cache_read_tokens: r.cache_read_tokens,
    cache_write_tokens: r.cache_write_tokens,
    list_usd: toUsd(r.list_micros),
    charged_usd: toUsd(r.charged_micros),
    credited_usd: toUsd(r.credited_micros),
    estimated: r.estimated,
  };
}

export function need(reader: LedgerReader | undefined): LedgerReader {
  if (!reader) {
    throw new AdminError(
      'not_found',
      'This gateway keeps no ledger: the memory store needs a store folder (store.path), or set ledger.dir (docs/ledger.md)',
    );
  }
  return reader;
}

export async function summary(res: ServerResponse, url: URL, reader: LedgerReader, now: number): Promise<void> {
  const q = ledgerQuery(url, now);
  await refresh(reader);
  const raw = url.searchParams.get('by');
  const by = raw === null || raw === '' ? [] : raw.split(',');
  for (const b of by) if (!(GROUP_BY as readonly string[]).includes(b)) throw invalid('by', `'${b}' is not one of ${GROUP_BY.join(', ')}`);
  const rows = await reader.summary(q, by as GroupBy[]);
  sendJson(res, 200, { from: q.fromDay, to: q.toDay, by, source: reader.source, data: rows.map(rowView) });
}

export async function records(res: ServerResponse, url: URL, reader: LedgerReader, now: number): Promise<void> {
  const q = ledgerQuery(url, now);
  const limit = pageLimit(url.searchParams.get('limit'));
  const cursor = url.searchParams.get('cursor');
  if (cursor !== null && !/^\d+$/.test(cursor)) throw invalid('cursor', 'is not a cursor this API gave');
  const offset = cursor === null ? 0 : Number(cursor);
  await refresh(reader);
  const page = await reader.page(q, offset, limit);
  sendJson(res, 200, { data: page.records, next_cursor: page.more ? String(offset + page.records.length) : null });
}

function csvCell(v: string | number | boolean | null): string {
  if (v === null) return '';
  const s = String(v);
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/**
 * The records of the range as JSON Lines (`format=jsonl`, the default) or CSV (`format=csv`, a
 * header row), written as they are read, waiting for the client between chunks: a month of
 * records streams in bounded memory.
 */
export async function exportRecords(req: IncomingMessage, res: ServerResponse, url: URL, reader: LedgerReader, now: number): Promise<void> {
  const q = ledgerQuery(url, now);
  const format = url.searchParams.get('format') ?? 'jsonl';
  if (format !== 'jsonl' && format !== 'csv') throw invalid('format', 'must be jsonl or csv');
  const name = `ledger-${q.fromDay}_${q.toDay}.${format}`;
  await refresh(reader);
  res.writeHead(200, {
    'content-type': format === 'csv' ? 'text/csv; charset=utf-8' : 'application/x-ndjson',
    'content-disposition': `attachment; filename="${name}"`,
    'cache-control': 'no-store',
  });
  let gone = false;
  req.socket.once('close', () => (gone = true));
  let chunk = format === 'csv' ? FIELDS.join(',') + '\r\n' : '';
  const line =
    format === 'csv'
      ? (r: LedgerRecord) => FIELDS.map((f) => csvCell(r[f])).join(',') + '\r\n'
      : (r: LedgerRecord) => JSON.stringify(r) + '\n';
  for await (const r of reader.stream(q)) {
    if (gone) return;
    chunk += line(r);
    if (chunk.length >= 64 * 1024) {
      const ok = res.write(chunk);
      chunk = '';
      if (!ok) await new Promise<void>((resolve) => res.once('drain', resolve).once('close', resolve));
    }
  }
  res.end(chunk);
}

export async function reconcileRange(
  res: ServerResponse,
  url: URL,
  reader: LedgerReader,
  store: Store,
  keys: string[],
  now: number,
): Promise<void> {
  const q = ledgerQuery(url, now);
  await refresh(reader);
  const differences = await reconcile(reader, store, { fromDay: q.fromDay, toDay: q.toDay }, keys);
  const scope = reader.scope ?? 'ledger';
  sendJson(res, 200, {
    from: q.fromDay,
    to: q.toDay,
    source: reader.source,
    scope,
    ...(scope === 'instance' ? { note: INSTANCE_NOTE } : {}),
    ok: differences.length === 0,
    differences,
  });
}

const INSTANCE_NOTE =
  "This instance's day files hold the records it drained from the shared store: they equal the shared counters only when it is the " +
  "only instance. With several, the others' records show as differences here; PostgreSQL (ledger.postgres) is the whole ledger.";

/** Brings the reader up to date (a failure leaves the records as they are: a query still answers). */
async function refresh(reader: LedgerReader): Promise<void> {
  await reader.refresh?.().catch(() => undefined);
}
