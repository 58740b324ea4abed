/**
 * The contract with the Lua scripts: how the store's values travel as script arguments. Pure
 * functions and constants, no Redis: the modules that call the scripts build their arguments here.
 *
 * - Separators: SEP between fields, LIST between list items, PARTS between the parts of an
 *   instance-index entry (lib.lua), OP between the fields of one operation of a batch (batch.lua).
 *   Names do not hold them: keys.ts escapes them in hash tags, `field` refuses them in the names
 *   packed as fields.
 * - Numbers travel as decimal integers (`int`); a settlement as one argument (`packSettlement`,
 *   read by position by settle.lua); a claim as one LIST item of admit.lua's claims (its index,
 *   then `claimText`).
 * - The durations of records and markers are given to the scripts as constants (scripts.ts).
 */
import type { Clock } from '../../clock.js';
import { WINDOW_MS, type Window } from '../../config/types.js';
import type { Claim, CreditRecord, Settlement } from '../types.js';
import { creditRecord, FIELDS, type LedgerRecord } from '../../ledger/record.js';
import { quoted } from '../../json/quote.js';
import type { Keys } from './keys.js';

const DAY = 86_400_000;
/** An admission record outlives any request; an instance index lives as long. */
export const RECORD_TTL_MS = 7 * DAY;
/** Done markers make settlement idempotent for a day (as the memory store). */
export const DONE_TTL_MS = DAY;

/** Separators of packed script arguments (lib.lua): fields, list items, parts of an index entry. */
export const SEP = '\x1f';
export const LIST = '\x1e';
export const PARTS = '\x1d';
/** Separates the fields of one operation in a batch (batch.lua). */
export const OP = '\x1c';
const CONTROL = /[\x1c-\x1f]/;

export function int(v: number): string {
  if (!Number.isSafeInteger(v)) throw new TypeError(`expected an integer, got ${v}`);
  return String(v);
}

/** The time argument of the scripts: '0' for Redis TIME, or a test clock's time (index.ts, "Time"). */
export function now(clock: Clock | undefined): string {
  return clock ? int(clock.now()) : '0';
}

/** Names already checked by `field` (config names: bounded; cleared if it ever grows large). */
const checkedNames = new Set<string>();

/** A name packed into a script argument (config names never hold the separators). */
export function field(v: string): string {
  if (checkedNames.has(v)) return v;
  if (CONTROL.test(v)) throw new TypeError(`a store name must not contain the control characters 0x1c-0x1f: ${JSON.stringify(v)}`);
  if (checkedNames.size >= 10_000) checkedNames.clear();
  checkedNames.add(v);
  return v;
}

/**
 * A settlement as one argument (settle.lua reads the fields by position) — also how an admission's
 * recovery settlement is kept in its instance index for the reaper.
 */
export function packSettlement(s: Settlement): string {
  const u = s.usage;
  let windows = '';
  for (const w of s.windows) if (WINDOW_MS[w] !== undefined) windows += (windows ? ',' : '') + w;
  return (
    field(s.keyId) +
    SEP +
    field(s.user) +
    SEP +
    field(s.group) +
    SEP +
    field(s.model) +
    SEP +
    s.billing +
    SEP +
    int(s.actual) +
    SEP +
    int(s.cost) +
    SEP +
    int(u.input) +
    SEP +
    int(u.output) +
    SEP +
    int(u.cacheRead) +
    SEP +
    int(u.cacheWrite) +
    SEP +
    int(Math.max(0, Math.round(s.durationMs))) +
    SEP +
    windows +
    SEP +
    (s.estimated ? '1' : '0')
  );
}

export function unpackSettlement(text: string): Settlement {
  const f = text.split(SEP);
  if (f.length !== 14 || (f[4] !== 'balance' && f[4] !== 'plan')) throw new Error('not a packed settlement');
  const n = (i: number) => {
    const v = Number(f[i]);
    if (!Number.isSafeInteger(v)) throw new Error('not a packed settlement');
    return v;
  };
  return {
    keyId: f[0],
    user: f[1],
    group: f[2],
    model: f[3],
    billing: f[4],
    actual: n(5),
    cost: n(6),
    usage: { input: n(7), output: n(8), cacheRead: n(9), cacheWrite: n(10) },
    durationMs: n(11),
    windows: f[12] ? (f[12].split(',') as Window[]) : [],
    estimated: f[13] === '1' || undefined,
  };
}

/** The hash tag holding a claim's counters (keys.ts). */
export function tagOf(k: Keys, c: Claim): string {
  switch (c.kind) {
    case 'balance':
    case 'plan':
    case 'spend-cap':
      return k.user(c.user);
    case 'key-quota':
    case 'key-window':
      return k.apiKey(c.key);
    case 'rpm':
      return c.scope === 'user' ? k.user(c.id) : c.scope === 'group' ? k.group(c.id) : k.account(c.id);
  }
}

/**
 * One claim for admit.lua, after its index in the request (`<index>SEP<this>`): kind, hash tag,
 * parameters. The same for every request that brings this claim (ops.ts keeps it per frozen claim).
 */
export function claimText(k: Keys, c: Claim): string {
  switch (c.kind) {
    case 'balance':
      return `b${SEP}${k.user(c.user)}${SEP}${int(c.credit)}${SEP}${c.free ? '1' : '0'}${SEP}${int(c.freeRpm)}`;
    case 'plan': {
      const l = c.limits;
      return `p${SEP}${k.user(c.user)}${SEP}${field(c.group)}${SEP}${int(l.daily)}${SEP}${int(l.weekly)}${SEP}${int(l.monthly)}`;
    }
    case 'key-quota':
      return `q${SEP}${k.apiKey(c.key)}${SEP}${int(c.limit)}`;
    case 'key-window':
      return `w${SEP}${k.apiKey(c.key)}${SEP}${c.window}${SEP}${int(c.limit)}${SEP}${int(WINDOW_MS[c.window])}`;
    case 'spend-cap':
      return `c${SEP}${k.user(c.user)}${SEP}${c.period === 'weekly' ? 'w' : 'm'}${SEP}${int(c.limit)}`;
    case 'rpm':
      return `r${SEP}${tagOf(k, c)}${SEP}${int(c.limit)}`;
  }
}

// ---- the ledger's records (ledger.ts) ------------------------------------------------------------
//
// A record is made here, from the very settlement or credit the script applies
// (core/ledger/record.ts), and travels packed: the JSON text of each field's value (null as
// nothing) in PACKED order, SEP-separated; `ts` is left out (the script stores its time beside the
// records, field `t` of the stream entry) and the id comes last, as the inside of its JSON string
// (a credit's id is only known in the script, which appends it). `ledgerJson` makes the record's
// JSON of it, fields in FIELDS order, by concatenation: Lua never encodes JSON, and the stream
// holds no field names.
//
// Why the id last: Lua hashes a long string from a sample of its characters taken from the end;
// strings alike at every sampled place share a bucket of its string table, and every string
// made walks the bucket. Ending with the id's fast-changing digits keeps them apart.

/**
 * The stream entry's field holding packed records. Packing changes (a field added to the
 * records) take another name, so an instance of another version leaves them to one that reads
 * them (ledger.ts) rather than misreading them.
 */
export const LEDGER_FIELD = 'r';

/** The fields packed, in order, before the id. */
const PACKED = FIELDS.filter((f) => f !== 'id' && f !== 'ts');
const TYPE_AT = PACKED.indexOf('type');

/** A packed value: its JSON text, or nothing for null (absent, or a number JSON has no text for). */
function packValue(v: string | number | boolean | null | undefined): string {
  if (v === null || v === undefined) return '';
  if (typeof v === 'number') return Number.isFinite(v) ? '' + v : '';
  return typeof v === 'boolean' ? (v ? 'true' : 'false') : JSON.stringify(v);
}

/** A packed name (config names, repeated on every record): through json/quote's cache. */
function packName(v: string | undefined): string {
  return v === undefined ? '' : quoted(v);
}

function packFields(r: LedgerRecord): string {
  let out = '';
  for (let i = 0; i < PACKED.length; i++) out += packValue(r[PACKED[i]]) + SEP;
  return out;
}

/**
 * A settlement's ledger record as settle.lua stores it: exactly `packFields(requestRecord(id, 0, s))`
 * and the id, without the record object, names through json/quote's cache (as the memory store's
 * `requestFileLine`), joined into one flat string (what ioredis writes): this runs once per billed
 * request. test/store/redis-pack.test.ts holds it to the memory store's line through `ledgerJson`.
 */
export function ledgerText(id: string, s: Settlement): string {
  const d = s.detail;
  const u = s.usage;
  const estimated = s.estimated === true || s.recovered === true;
  return [
    '"request"',
    packName(s.user),
    packName(s.keyId),
    packName(s.group),
    packName(d?.requestedModel),
    packName(s.model),
    packName(d?.provider),
    packName(d?.account),
    packName(d?.protocolIn),
    packName(d?.protocolOut),
    packValue(d?.stream),
    packValue(d?.status),
    packName(s.billing),
    packValue(u.input),
    packValue(u.output),
    packValue(u.cacheRead),
    packValue(u.cacheWrite),
    packValue(d?.reasoning),
    s.late ? '"late"' : estimated ? '"estimated"' : '"reported"',
    s.recovered ? '"crash_recovery"' : estimated ? packName(d?.estimateReason ?? 'no_usage_reported') : '',
    packValue(s.cost),
    packValue(d?.ratePpm),
    packValue(s.actual),
    packValue(s.durationMs),
    packValue(d?.ttftMs),
    packValue(d?.attempts),
    '', // reference and actor: a credit's
    '',
    JSON.stringify(id).slice(1, -1),
  ].join(SEP);
}

/** A credit's ledger record but its id (`credit:<credit id>`, which the script appends). */
export function creditLedgerText(c: Pick<CreditRecord, 'user' | 'amount' | 'reference' | 'actor'>): string {
  return packFields(creditRecord({ ...c, id: '', at: 0, credit: 0, spent: 0 }));
}

/** What precedes each packed value in the record's JSON: `,"<field>":`, in PACKED order. */
const PREFIX = PACKED.map((f) => `,"${f}":`);
/** The packed value `ts` is written before (FIELDS: `id`, `type`, `ts`, …). */
const TS_BEFORE = FIELDS.filter((f) => f !== 'id').indexOf('ts');

/**
 * A packed record (`text`) stored with its time (`t`) as the record's JSON, fields in FIELDS order,
 * and its id; undefined when the text is not one. Read in place (the separators found one by one,
 * each value appended after its constant prefix): the drain runs this for every record.
 */
export function ledgerJson(t: string, text: string): { id: string; ts: number; json: string } | undefined {
  const ts = Number(t);
  const last = text.lastIndexOf(SEP);
  if (!Number.isSafeInteger(ts) || last < 0) return undefined;
  const inner = text.slice(last + 1);
  let id: string;
  try {
    id = inner.includes('\\') || inner.includes('"') ? (JSON.parse(`"${inner}"`) as string) : inner;
  } catch {
    return undefined;
  }
  let json = '{"id":"' + inner + '"';
  let from = 0;
  for (let i = 0; i < PACKED.length; i++) {
    const to = text.indexOf(SEP, from);
    if (to < 0 || (to === from && i === TYPE_AT)) return undefined;
    if (i === TS_BEFORE) json += ',"ts":' + ts;
    json += PREFIX[i] + (to === from ? 'null' : text.slice(from, to));
    from = to + 1;
  }
  // Every separator read, the last one ends the packed values: no field more, none fewer.
  return from === last + 1 ? { id, ts, json: json + '}' } : undefined;
}
