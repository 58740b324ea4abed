/**
 * The journal's line format, both ways: what one line of `journal.jsonl` holds and how it is built
 * and read back. No file I/O, no state (persistence.ts decides when lines are written and replays
 * them; state.ts never sees a line).
 *
 * - One JSON value per line: admissions with their recovery settlement, settlements,
 *   cancellations, window starts, quota resets, each with an increasing `seq`.
 * - Settlements and admissions, two lines per request, are positional arrays built by hand
 *   (`settlementLine`: about a third of the cost of `JSON.stringify` of the keyed object); the
 *   rarer entries are keyed objects, and so is every line of journals written before (read as
 *   ever: an upgrade replays an old journal).
 */
import type { Window } from '../../config/types.js';
import { member, quoted, quotedOnce } from '../../json/quote.js';
import type { AccountKind, AuditEntry, CreditRecord, KeyRecord, Settlement, SettlementDetail, Stored, UserRecord } from '../types.js';

export type JournalEntry =
  | { seq: number; op: 'settle'; t: number; id: string; s: Settlement }
  | { seq: number; op: 'admit'; t: number; id: string; r: Settlement }
  | { seq: number; op: 'cancel'; t: number; id: string }
  | { seq: number; op: 'wstart'; t: number; key: string; w: Window }
  | { seq: number; op: 'reset'; t: number; key: string }
  /** An account record written (null: deleted), with the accounts version it made and its audit entry. */
  | {
      seq: number;
      op: 'acct';
      t: number;
      kind: AccountKind;
      name: string;
      rec: Stored<UserRecord | KeyRecord> | null;
      ver: number;
      audit: AuditEntry;
    }
  /** A wallet credit (top-up or correction) with its Idempotency-Key, if any, and its audit entry. */
  | { seq: number; op: 'credit'; t: number; rec: CreditRecord; idem?: { key: string; fingerprint: string }; audit: AuditEntry }
  | { seq: number; op: 'audit'; t: number; entry: AuditEntry };

type DistributiveOmit<T, K extends keyof T> = T extends unknown ? Omit<T, K> : never;

/** A keyed entry before its `seq` is given (`entryLine` adds it). */
export type KeyedEntry = DistributiveOmit<JournalEntry, 'seq'>;

/**
 * The positional journal line of a settlement (`SETTLE`) or of an admission with its recovery
 * settlement (`ADMIT`):
 *   [op, seq, t, id, keyId, user, group, model, billing, input, output, cacheRead, cacheWrite,
 *    cost, actual, durationMs, windows (comma-separated), flags (1 estimated, 2 recovered), detail?]
 * `detail` (the ledger record's details, an object) is there when the settlement has one.
 * Older journals hold the same entries as keyed objects (`JournalEntry`); both are read.
 */
export const SETTLE = 1;
export const ADMIT = 2;
const LINE_FIELDS = 18;

/** A string as JSON, kept when it repeats (key, user, group, model and window names). */
function q(v: string): string {
  return typeof v === 'string' ? quoted(v) : JSON.stringify(v ?? null); // what JSON.stringify of the object wrote
}

/** A number as JSON writes it (NaN, infinities and a missing value as null): the line always parses. */
function n(v: number): string | number {
  return typeof v === 'number' && Number.isFinite(v) ? v : 'null';
}

/**
 * `JSON.stringify(detail)` for the ledger's details as metering builds them (its fields in
 * `SettlementDetail`'s order, undefined ones left out), without the stringifier's walk: once per
 * settlement. Fields outside `SettlementDetail` are not journaled (nothing reads them).
 */
function detailJson(d: SettlementDetail): string {
  return (
    '{' +
    (
      member(',"requestedModel":', d.requestedModel) +
      member(',"provider":', d.provider) +
      member(',"account":', d.account) +
      member(',"protocolIn":', d.protocolIn) +
      member(',"protocolOut":', d.protocolOut) +
      member(',"stream":', d.stream) +
      member(',"status":', d.status) +
      member(',"reasoning":', d.reasoning) +
      member(',"estimateReason":', d.estimateReason) +
      member(',"ratePpm":', d.ratePpm) +
      member(',"ttftMs":', d.ttftMs) +
      member(',"attempts":', d.attempts)
    ).slice(1) +
    '}'
  );
}

/** The windows of a settlement as the line's comma-separated field, kept per array (a key's list is made once per config). */
const windowTexts = new WeakMap<readonly Window[], string>();
function windowsText(w: readonly Window[]): string {
  let j = windowTexts.get(w);
  if (j === undefined) windowTexts.set(w, (j = q(w.join(','))));
  return j;
}

export function settlementLine(op: number, seq: number, t: number, id: string, s: Settlement): string {
  const u = s.usage;
  return (
    '[' +
    op +
    ',' +
    seq +
    ',' +
    n(t) +
    ',' +
    quotedOnce(id) +
    ',' +
    q(s.keyId) +
    ',' +
    q(s.user) +
    ',' +
    q(s.group) +
    ',' +
    q(s.model) +
    ',' +
    q(s.billing) +
    ',' +
    n(u.input) +
    ',' +
    n(u.output) +
    ',' +
    n(u.cacheRead) +
    ',' +
    n(u.cacheWrite) +
    ',' +
    n(s.cost) +
    ',' +
    n(s.actual) +
    ',' +
    n(s.durationMs) +
    ',' +
    windowsText(s.windows) +
    ',' +
    ((s.estimated ? 1 : 0) | (s.recovered ? 2 : 0)) +
    (s.detail ? ',' + detailJson(s.detail) : '') +
    ']\n'
  );
}

/** The line of a rarer entry (cancel, window start, reset): a keyed object. */
export function entryLine(seq: number, entry: KeyedEntry): string {
  return JSON.stringify({ seq, ...entry }) + '\n';
}

/** A positional line back to its entry; undefined when it is not one this version writes. */
export function fromLine(a: unknown[]): JournalEntry | undefined {
  if (a.length < LINE_FIELDS || (a[0] !== SETTLE && a[0] !== ADMIT)) return undefined;
  const flags = a[17] as number;
  const s: Settlement = {
    keyId: a[4] as string,
    user: a[5] as string,
    group: a[6] as string,
    model: a[7] as string,
    billing: a[8] as Settlement['billing'],
    usage: { input: a[9] as number, output: a[10] as number, cacheRead: a[11] as number, cacheWrite: a[12] as number },
    cost: a[13] as number,
    actual: a[14] as number,
    durationMs: a[15] as number,
    windows: a[16] === '' ? [] : ((a[16] as string).split(',') as Window[]),
  };
  if (flags & 1) s.estimated = true;
  if (flags & 2) s.recovered = true;
  const detail = a[LINE_FIELDS];
  if (detail !== null && typeof detail === 'object') s.detail = detail as SettlementDetail;
  const [, seq, t, id] = a as [number, number, number, string];
  return a[0] === SETTLE ? { seq, op: 'settle', t, id, s } : { seq, op: 'admit', t, id, r: s };
}
