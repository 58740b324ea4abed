/**
 * Reading a stream event's JSON data in place, as bytes, without decoding or parsing it: the
 * passthrough taps find what they need (usage, the finish, the length of generated text) with
 * these, and JSON-parse only the few events that carry usage or metadata.
 *
 * Each works on `buf[start, end)`. They read keys the way the taps' patterns always have: a key is
 * its quoted name (an escaped quote inside a string value never matches one), JSON whitespace may
 * surround the colon, and the first matching occurrence wins.
 */

/** A needle for `key`: its quoted name. */
export function keyNeedle(key: string): Buffer {
  return Buffer.from(`"${key}"`, 'latin1');
}

const isSpace = (c: number): boolean => c === 32 || c === 9 || c === 10 || c === 13;

/** After `i`, skipping JSON whitespace: the offset of `expect` if it comes next, else -1. */
function next(buf: Buffer, i: number, end: number, expect: number): number {
  while (i < end && isSpace(buf[i])) i++;
  return i < end && buf[i] === expect ? i : -1;
}

/**
 * Whether `needle` (a quoted key) occurs followed by `:` and then by `after`'s characters in turn
 * (whitespace allowed between them): `"usage"\s*:\s*\{` is `hasKey(…, keyNeedle('usage'), '{')`.
 */
export function hasKey(buf: Buffer, start: number, end: number, needle: Buffer, after: string): boolean {
  let k = buf.indexOf(needle, start);
  while (k !== -1 && k + needle.length <= end) {
    let i = next(buf, k + needle.length, end, 58 /* : */);
    for (let j = 0; i !== -1 && j < after.length; j++) i = next(buf, i + 1, end, after.charCodeAt(j));
    if (i !== -1) return true;
    k = buf.indexOf(needle, k + 1);
  }
  return false;
}

/** Whether the data begins (after whitespace) with `{` and the key `needle` followed by `:`. */
export function startsWithKey(buf: Buffer, start: number, end: number, needle: Buffer): boolean {
  let i = next(buf, start, end, 123 /* { */);
  if (i === -1) return false;
  i++;
  while (i < end && isSpace(buf[i])) i++;
  if (end - i < needle.length || buf.compare(needle, 0, needle.length, i, i + needle.length) !== 0) return false;
  return next(buf, i + needle.length, end, 58) !== -1;
}

/** Whether the bytes at `start` begin with `prefix`. */
export function startsWith(buf: Buffer, start: number, end: number, prefix: Buffer): boolean {
  return end - start >= prefix.length && buf.compare(prefix, 0, prefix.length, start, start + prefix.length) === 0;
}

/** Needles for `stringValueLength`: each key as `"key":`. */
export function valueNeedles(keys: readonly string[]): Buffer[] {
  return keys.map((k) => Buffer.from(`"${k}":`, 'latin1'));
}

/**
 * The byte form of `stringValueLength` (usage.ts): the length, in UTF-16 code units as the text
 * form counts them, of the JSON string value of the first of the keys present (`"key":`, spaces,
 * then a string). An escape counts once; a character outside the BMP counts twice.
 */
export function bytesValueLength(buf: Buffer, start: number, end: number, needles: readonly Buffer[]): number {
  for (const needle of needles) {
    let k = buf.indexOf(needle, start);
    while (k !== -1 && k + needle.length <= end) {
      let i = k + needle.length;
      while (i < end && buf[i] === 32) i++;
      if (i < end && buf[i] === 34) return utf16Length(buf, i + 1, end);
      k = buf.indexOf(needle, i);
    }
  }
  return 0;
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

/** The first `"sequence_number": <digits>` value in the range (Responses events), or undefined. */
export function sequenceNumber(buf: Buffer, start: number, end: number): number | undefined {
  let k = buf.indexOf(SEQUENCE, start);
  while (k !== -1 && k + SEQUENCE.length <= end) {
    const i = next(buf, k + SEQUENCE.length, end, 58);
    if (i !== -1) {
      let j = i + 1;
      while (j < end && isSpace(buf[j])) j++;
      let n = 0;
      const d0 = j;
      while (j < end && buf[j] >= 48 && buf[j] <= 57) n = n * 10 + (buf[j++] - 48);
      if (j > d0) return n;
    }
    k = buf.indexOf(SEQUENCE, k + 1);
  }
  return undefined;
}
const SEQUENCE = keyNeedle('sequence_number');
