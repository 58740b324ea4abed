/**
 * JSON texts of single values, for lines built by hand (the store's journal, the ledger's day
 * files) instead of `JSON.stringify` of an object made only to be serialized: the same text
 * `JSON.stringify` writes for a property's value, with the texts of strings that repeat on every
 * line (key, user, group, model and provider names, protocols) kept.
 */

const texts = new Map<string, string>();
/** Distinct strings kept; past it the cache starts over (names are few, ids never enter it). */
const MAX = 4096;

/** `JSON.stringify(v)` of a string, kept for the next time (for names, not for unique ids). */
export function quoted(v: string): string {
  let j = texts.get(v);
  if (j === undefined) {
    if (texts.size >= MAX) texts.clear();
    j = JSON.stringify(v);
    texts.set(v, j);
  }
  return j;
}

/**
 * `JSON.stringify(v)` of a string that is not kept (a request's id): printable ASCII without a
 * quote or a backslash (what ids are) is quoted as it is; anything else goes to `JSON.stringify`,
 * a call into V8's runtime (about 0.9 µs in place, twice per request in the store's journal).
 */
export function quotedOnce(v: string): string {
  for (let i = 0; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return JSON.stringify(v);
  }
  return '"' + v + '"';
}

/**
 * `JSON.stringify(v)` of a property's value (strings through `quoted`), or undefined where
 * `JSON.stringify` of the object leaves the property out (undefined, functions, symbols).
 */
export function jsonValue(v: unknown): string | undefined {
  switch (typeof v) {
    case 'string':
      return quoted(v);
    case 'number':
      return Number.isFinite(v) ? '' + v : 'null';
    case 'boolean':
      return v ? 'true' : 'false';
    case 'undefined':
    case 'function':
    case 'symbol':
      return undefined;
    default:
      return v === null ? 'null' : JSON.stringify(v);
  }
}

/** `,"name":value` as `JSON.stringify` writes a property after the first (`prefix` is `,"name":`); '' where it leaves it out. */
export function member(prefix: string, v: unknown): string {
  const j = jsonValue(v);
  return j === undefined ? '' : prefix + j;
}
