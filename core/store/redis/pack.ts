/**
 * The contract with the Lua scripts: how the store's values travel as script arguments. Pure
 * functions and constants, no Redis: the modules that call the scripts build their arguments here.
 *
 * - Separators: SEP between fields, LIST between list items, PARTS between the parts of an
 *   instance-index entry (lib.lua), OP between the fields of one operation of a batch (batch.lua).
 *   Names do not hold them: keys.ts escapes them in hash tags, `field` refuses them in the names
 *   packed as fields.
 * - Numbers travel as decimal integers (`int`); a settlement as one argument (`packSettlement`,
 *   read by position by settle.lua); a claim as one LIST item of admit.lua's claims (`claimSpec`).
 * - The durations of records and markers are given to the scripts as constants (scripts.ts).
 */
import type { Clock } from '../../clock.js';
import { WINDOW_MS, type Window } from '../../config/types.js';
import type { Claim, Settlement } from '../types.js';
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

/** One claim for admit.lua: index, kind, hash tag, parameters. */
export function claimSpec(k: Keys, index: number, c: Claim): string {
  switch (c.kind) {
    case 'balance':
      return `${index}${SEP}b${SEP}${k.user(c.user)}${SEP}${int(c.credit)}${SEP}${c.free ? '1' : '0'}${SEP}${int(c.freeRpm)}`;
    case 'plan': {
      const l = c.limits;
      return `${index}${SEP}p${SEP}${k.user(c.user)}${SEP}${field(c.group)}${SEP}${int(l.daily)}${SEP}${int(l.weekly)}${SEP}${int(l.monthly)}`;
    }
    case 'key-quota':
      return `${index}${SEP}q${SEP}${k.apiKey(c.key)}${SEP}${int(c.limit)}`;
    case 'key-window':
      return `${index}${SEP}w${SEP}${k.apiKey(c.key)}${SEP}${c.window}${SEP}${int(c.limit)}${SEP}${int(WINDOW_MS[c.window])}`;
    case 'spend-cap':
      return `${index}${SEP}c${SEP}${k.user(c.user)}${SEP}${c.period === 'weekly' ? 'w' : 'm'}${SEP}${int(c.limit)}`;
    case 'rpm':
      return `${index}${SEP}r${SEP}${tagOf(k, c)}${SEP}${int(c.limit)}`;
  }
}
