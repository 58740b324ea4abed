/**
 * One ledger record per billed event: a settled request (its settlement, exactly as the store
 * applied it, with the request's details), or a wallet credit (a top-up or a correction). No prompt
 * or completion text and no secret: names, numbers and times only.
 *
 * The record is made from the very settlement the store applies (the store's persistence writes it
 * in the same step as the counters), never computed a second time, so the ledger's sums equal the
 * counters by construction; `gateway ledger reconcile` checks it.
 *
 * On disk and in exports a record is one JSON object with the snake_case fields of `LedgerRecord`
 * (JSON Lines); money is integer micro-USD (`*_micros`), times epoch ms and ISO.
 */
import type { ProtocolName } from '../config/types.js';
import { member, quotedOnce } from '../json/quote.js';
import type { CreditRecord, EstimateReason, Settlement } from '../store/types.js';

export type { EstimateReason, SettlementDetail } from '../store/types.js';

export type LedgerType = 'request' | 'topup' | 'correction';

/** A ledger record as stored and exported. */
export interface LedgerRecord {
  /** The request id (the store's, `req_…`) or `credit:<id>`: unique, the idempotency key of every sink. */
  id: string;
  type: LedgerType;
  /** Epoch ms (the store's time of the settlement or credit). */
  ts: number;
  user: string;
  /** Requests: the key's name. */
  key: string | null;
  group: string | null;
  model_requested: string | null;
  /** The model that answered. */
  model: string | null;
  provider: string | null;
  account: string | null;
  protocol_in: ProtocolName | null;
  protocol_out: ProtocolName | null;
  stream: boolean | null;
  status: number | null;
  billing: 'balance' | 'plan' | null;
  input_tokens: number;
  output_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
  reasoning_tokens: number | null;
  /**
   * `reported`: the upstream's usage; `estimated`: see `estimate_reason`; `late`: what a request's
   * reported usage had above its crash-recovery estimate, settled after the recovery (the record
   * `<request id>:late`, which counts no request: docs/ledger.md).
   */
  usage_source: 'reported' | 'estimated' | 'late' | null;
  estimate_reason: EstimateReason | null;
  /** micro-USD at list price. */
  list_micros: number;
  rate_ppm: number | null;
  /** micro-USD charged: a request's charge, a credit's amount (negative for a correction). */
  charged_micros: number;
  duration_ms: number | null;
  ttft_ms: number | null;
  attempts: number | null;
  /** Credits: the operator's reference and the admin token that made it. */
  reference: string | null;
  actor: string | null;
}

/** The record of a settled request (`t`: the store's time of the settlement). */
export function requestRecord(id: string, t: number, s: Settlement): LedgerRecord {
  const d = s.detail;
  const u = s.usage;
  const estimated = s.estimated === true || s.recovered === true;
  return {
    id,
    type: 'request',
    ts: t,
    user: s.user,
    key: s.keyId,
    group: s.group,
    model_requested: d?.requestedModel ?? null,
    model: s.model,
    provider: d?.provider ?? null,
    account: d?.account ?? null,
    protocol_in: d?.protocolIn ?? null,
    protocol_out: d?.protocolOut ?? null,
    stream: d?.stream ?? null,
    status: d?.status ?? null,
    billing: s.billing,
    input_tokens: u.input,
    output_tokens: u.output,
    cache_read_tokens: u.cacheRead,
    cache_write_tokens: u.cacheWrite,
    reasoning_tokens: d?.reasoning ?? null,
    usage_source: s.late ? 'late' : estimated ? 'estimated' : 'reported',
    estimate_reason: s.recovered ? 'crash_recovery' : estimated ? (d?.estimateReason ?? 'no_usage_reported') : null,
    list_micros: s.cost,
    rate_ppm: d?.ratePpm ?? null,
    charged_micros: s.actual,
    duration_ms: s.durationMs,
    ttft_ms: d?.ttftMs ?? null,
    attempts: d?.attempts ?? null,
    reference: null,
    actor: null,
  };
}

/**
 * The day-file line of a settled request: exactly `fileLine(seq, requestRecord(id, t, s))` (files.ts),
 * built as text with the names' JSON kept (json/quote.ts), without the record object or its
 * `JSON.stringify`: this runs once per billed request, in the settlement's synchronous step.
 */
export function requestFileLine(seq: number, id: string, t: number, s: Settlement): string {
  const d = s.detail;
  const u = s.usage;
  const estimated = s.estimated === true || s.recovered === true;
  return (
    '{"seq":' +
    seq +
    ',"id":' +
    quotedOnce(id) + // unique: not through json/quote's cache of repeated names
    ',"type":"request"' +
    member(',"ts":', t) +
    member(',"user":', s.user) +
    member(',"key":', s.keyId) +
    member(',"group":', s.group) +
    member(',"model_requested":', d?.requestedModel ?? null) +
    member(',"model":', s.model) +
    member(',"provider":', d?.provider ?? null) +
    member(',"account":', d?.account ?? null) +
    member(',"protocol_in":', d?.protocolIn ?? null) +
    member(',"protocol_out":', d?.protocolOut ?? null) +
    member(',"stream":', d?.stream ?? null) +
    member(',"status":', d?.status ?? null) +
    member(',"billing":', s.billing) +
    member(',"input_tokens":', u.input) +
    member(',"output_tokens":', u.output) +
    member(',"cache_read_tokens":', u.cacheRead) +
    member(',"cache_write_tokens":', u.cacheWrite) +
    member(',"reasoning_tokens":', d?.reasoning ?? null) +
    (s.late ? ',"usage_source":"late"' : estimated ? ',"usage_source":"estimated"' : ',"usage_source":"reported"') +
    member(',"estimate_reason":', s.recovered ? 'crash_recovery' : estimated ? (d?.estimateReason ?? 'no_usage_reported') : null) +
    member(',"list_micros":', s.cost) +
    member(',"rate_ppm":', d?.ratePpm ?? null) +
    member(',"charged_micros":', s.actual) +
    member(',"duration_ms":', s.durationMs) +
    member(',"ttft_ms":', d?.ttftMs ?? null) +
    member(',"attempts":', d?.attempts ?? null) +
    ',"reference":null,"actor":null}\n'
  );
}

/** The record of a wallet credit. */
export function creditRecord(c: CreditRecord): LedgerRecord {
  return {
    id: `credit:${c.id}`,
    type: c.amount >= 0 ? 'topup' : 'correction',
    ts: c.at,
    user: c.user,
    key: null,
    group: null,
    model_requested: null,
    model: null,
    provider: null,
    account: null,
    protocol_in: null,
    protocol_out: null,
    stream: null,
    status: null,
    billing: null,
    input_tokens: 0,
    output_tokens: 0,
    cache_read_tokens: 0,
    cache_write_tokens: 0,
    reasoning_tokens: null,
    usage_source: null,
    estimate_reason: null,
    list_micros: 0,
    rate_ppm: null,
    charged_micros: c.amount,
    duration_ms: null,
    ttft_ms: null,
    attempts: null,
    reference: c.reference,
    actor: c.actor,
  };
}

/** The fields in the order every line and export writes them. */
export const FIELDS: readonly (keyof LedgerRecord)[] = [
  'id',
  'type',
  'ts',
  'user',
  'key',
  'group',
  'model_requested',
  'model',
  'provider',
  'account',
  'protocol_in',
  'protocol_out',
  'stream',
  'status',
  'billing',
  'input_tokens',
  'output_tokens',
  'cache_read_tokens',
  'cache_write_tokens',
  'reasoning_tokens',
  'usage_source',
  'estimate_reason',
  'list_micros',
  'rate_ppm',
  'charged_micros',
  'duration_ms',
  'ttft_ms',
  'attempts',
  'reference',
  'actor',
];

/** One JSON line (no trailing newline) with the fields in `FIELDS` order. */
export function recordLine(r: LedgerRecord): string {
  return JSON.stringify(r, FIELDS as string[]);
}
