/**
 * Reading a stream event's JSON data in place, as bytes, without decoding or parsing it: the
 * passthrough taps find what they need (usage, the finish, the length of generated text) with
 * these, and JSON-parse only the few events that carry usage or metadata.
 *
 * Each works on `buf[start, end)` and reads keys the way the taps' text patterns did (their
 * oracle in test/protocols/scan.test.ts): a key is its quoted name followed by a colon, JSON
 * whitespace may surround the colon, and the first matching occurrence wins. One JavaScript pass
 * per event: a native `Buffer.indexOf` per key cost more than the whole pass (its call overhead
 * dominates on events of a few hundred bytes).
 */

const isSpace = (c: number): boolean => c === 32 || c === 9 || c === 10 || c === 13;

/**
 * What `KeyScan` looks for about a key:
 *  - `text`: the length of its first string value written `"key": "…"` (no space before the colon,
 *    only spaces after it), in UTF-16 code units as the text form counts them (an escape counts once,
 *    a character outside the BMP twice);
 *  - `number`: its first value written as digits (`"key"\s*:\s*(\d+)`), plus one;
 *  - a string of characters: whether some occurrence is followed by `:` and then those characters
 *    in turn, JSON whitespace allowed between them (`'{'` is `"key"\s*:\s*\{`): 1 or 0.
 */
export type KeyRule = 'text' | 'number' | string;

/**
 * One pass over an event's JSON data, in place, for a fixed set of keys. A key is a string
 * followed by `:` (at any depth); string values are skipped whole, so text that merely contains a
 * key's name never matches. Built once per protocol; `run` resets it per event (one stream at a
 * time per call: the results are read right after `run`).
 */
export class KeyScan {
  private readonly names: Buffer[];
  private readonly rules: KeyRule[];
  /** Per key, by its rule: the text length found (-1: none), the number plus one (0: none), or 1 when matched (0: no). */
  readonly found: Int32Array;

  constructor(keys: Record<string, KeyRule>) {
    this.names = Object.keys(keys).map((k) => Buffer.from(k, 'latin1'));
    this.rules = Object.values(keys);
    this.found = new Int32Array(this.names.length);
  }

  run(buf: Buffer, start: number, end: number): this {
    const found = this.found;
    for (let n = 0; n < found.length; n++) found[n] = this.rules[n] === 'text' ? -1 : 0;
    let i = start;
    while (i < end) {
      if (buf[i] !== 34) {
        i++;
        continue;
      }
      let j = i + 1;
      while (j < end) {
        const d = buf[j];
        if (d === 92) j += 2;
        else if (d === 34) break;
        else j++;
      }
      if (j >= end) break;
      let k = j + 1;
      while (k < end && isSpace(buf[k])) k++;
      if (k < end && buf[k] === 58) {
        const n = this.match(buf, i + 1, j);
        if (n >= 0) this.visit(n, buf, j, k, end);
      }
      i = j + 1;
    }
    return this;
  }

  /** The key at `buf[a, b)`: its index, or -1. */
  private match(buf: Buffer, a: number, b: number): number {
    const len = b - a;
    const names = this.names;
    for (let n = 0; n < names.length; n++) {
      const name = names[n];
      if (name.length !== len) continue;
      let x = 0;
      while (x < len && name[x] === buf[a + x]) x++;
      if (x === len) return n;
    }
    return -1;
  }

  /** Key `n` closed at `quote`, its colon at `colon`. */
  private visit(n: number, buf: Buffer, quote: number, colon: number, end: number): void {
    const rule = this.rules[n];
    if (rule === 'text') {
      if (this.found[n] >= 0 || colon !== quote + 1) return;
      let v = colon + 1;
      while (v < end && buf[v] === 32) v++;
      if (v < end && buf[v] === 34) this.found[n] = utf16Length(buf, v + 1, end);
      return;
    }
    if (rule === 'number') {
      if (this.found[n] > 0) return;
      let v = colon + 1;
      while (v < end && isSpace(buf[v])) v++;
      let x = 0;
      const d0 = v;
      while (v < end && buf[v] >= 48 && buf[v] <= 57) x = x * 10 + (buf[v++] - 48);
      if (v > d0) this.found[n] = x + 1;
      return;
    }
    if (this.found[n] === 1) return;
    let v = colon;
    for (let r = 0; r < rule.length; r++) {
      v++;
      while (v < end && isSpace(buf[v])) v++;
      if (v >= end || buf[v] !== rule.charCodeAt(r)) return;
    }
    this.found[n] = 1;
  }

  /** The first text length found among keys `from`, in order (0 when none has a string value). */
  firstText(...keys: number[]): number {
    for (const n of keys) if (this.found[n] >= 0) return this.found[n];
    return 0;
  }
}

/** Whether the data begins (after whitespace) with `{` and the key `"name"` followed by `:`. */
export function startsWithKey(buf: Buffer, start: number, end: number, name: Buffer): boolean {
  let i = start;
  while (i < end && isSpace(buf[i])) i++;
  if (i >= end || buf[i] !== 123) return false;
  i++;
  while (i < end && isSpace(buf[i])) i++;
  if (buf[i] !== 34 || !startsWith(buf, i + 1, end, name) || buf[i + 1 + name.length] !== 34) return false;
  i += name.length + 2;
  while (i < end && isSpace(buf[i])) i++;
  return i < end && buf[i] === 58;
}

/** Whether the bytes at `start` begin with `prefix`. */
export function startsWith(buf: Buffer, start: number, end: number, prefix: Buffer): boolean {
  if (end - start < prefix.length) return false;
  for (let x = 0; x < prefix.length; x++) if (buf[start + x] !== prefix[x]) return false;
  return true;
}

/** UTF-16 code units of the JSON string whose first byte is at `i` (up to its closing quote). */
function utf16Length(buf: Buffer, i: number, end: number): number {
  let len = 0;
  while (i < end) {
    const c = buf[i];
    if (c === 92 /* \ */) {
      i += buf[i + 1] === 117 /* u */ ? 6 : 2;
      len++;
    } else if (c === 34) {
      break;
    } else {
      // A lead or ASCII byte starts a character (continuation bytes, 0x80–0xBF, do not); a 4-byte
      // sequence is a surrogate pair in UTF-16.
      if (c < 0x80) len++;
      else if (c >= 0xc0) len += c >= 0xf0 ? 2 : 1;
      i++;
    }
  }
  return len;
}
