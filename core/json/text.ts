/**
 * A large request body held as text without ever building it as one flat string.
 *
 * V8 cannot make a flat string of 200 MiB without copying all of it in one go (about 0.7 ms a MiB
 * on fresh memory, so 140 ms and more during which no other request moves), and once a string is
 * a concatenation ("rope"), nearly every operation that reads its characters (slice, indexOf,
 * startsWith, a regular expression, charCodeAt) flattens it, paying that copy at once. So a large
 * body is kept as the pieces it was decoded in (each at most BLOCK bytes, each flat), and the code
 * on its path reads it through these pieces:
 *
 *  - `LargeText` is the body's text as pieces with what decoding learnt of each (ASCII, free of
 *    control characters, byte length), and slices by absolute position without flattening;
 *  - `Ropes` remembers, for the strings of a parsed body that span several pieces, the flat parts
 *    they are made of, so a serializer or a codec can read them a part at a time;
 *  - `OutgoingBody` is an upstream body as flat parts with its byte length, written to the socket a
 *    part at a time (core/upstream/transport.ts).
 *
 * Whoever reads a long string of a large body's JSON directly (a plugin's regular expression on a
 * 200 MiB text) still works, and pays the one flattening copy itself.
 */

/** Bytes decoded into one piece (and the most any one step touches). */
export const BLOCK = 1024 * 1024;

export class LargeText {
  readonly pieces: string[] = [];
  /** Absolute position (in UTF-16 units) of each piece's first character. */
  readonly starts: number[] = [];
  /** The piece is ASCII: its characters are its bytes. */
  readonly ascii: boolean[] = [];
  /** The piece has no character below U+0020 (so its string content needs no control-character check). */
  readonly clean: boolean[] = [];
  readonly byteLengths: number[] = [];
  length = 0;
  bytes = 0;
  private whole?: string;

  push(piece: string, ascii: boolean, clean: boolean, bytes: number): void {
    this.pieces.push(piece);
    this.starts.push(this.length);
    this.ascii.push(ascii);
    this.clean.push(clean);
    this.byteLengths.push(bytes);
    this.length += piece.length;
    this.bytes += bytes;
    this.whole = undefined;
  }

  /** The piece holding absolute position `pos` (the last piece for `pos === length`). */
  pieceAt(pos: number): number {
    const s = this.starts;
    let lo = 0;
    let hi = s.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (s[mid] <= pos) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /** Flat strings covering [a, b), one per piece touched, appended to `out` with their ASCII-ness and bytes. */
  partsOf(a: number, b: number, out: OutgoingBody): void {
    if (b <= a) return;
    for (let k = this.pieceAt(a); k < this.pieces.length && this.starts[k] < b; k++) {
      const p = this.pieces[k];
      const from = Math.max(0, a - this.starts[k]);
      const to = Math.min(p.length, b - this.starts[k]);
      if (to <= from) continue;
      const whole = from === 0 && to === p.length;
      out.push(whole ? p : p.slice(from, to), this.ascii[k], whole ? this.byteLengths[k] : undefined);
    }
  }

  /** Characters [a, b) as one string: a slice of one piece, else a concatenation (not flattened here). */
  slice(a: number, b: number): string {
    let s = '';
    if (b <= a) return s;
    for (let k = this.pieceAt(a); k < this.pieces.length && this.starts[k] < b; k++) {
      const p = this.pieces[k];
      const from = Math.max(0, a - this.starts[k]);
      const to = Math.min(p.length, b - this.starts[k]);
      if (to > from) s += from === 0 && to === p.length ? p : p.slice(from, to);
    }
    return s;
  }

  /**
   * The whole text as one string value. It is a concatenation of the pieces: its length is free,
   * reading its characters flattens it (a copy of the whole body in one go), which the core's own
   * paths never do.
   */
  toString(): string {
    if (this.whole === undefined) {
      let s = '';
      for (const p of this.pieces) s += p;
      this.whole = s;
    }
    return this.whole;
  }

  /** A flat copy of the first `n` characters (at most a piece or two are copied). */
  head(n: number): string {
    return flatCopy(this.slice(0, Math.min(n, this.length)));
  }
}

/** A flat string of its own (not a view that keeps a larger string alive). Only for small heads. */
export function flatCopy(s: string): string {
  if (s.length < 13) return s; // V8 copies substrings this short anyway
  return /[^\x00-\xff]/.test(s) ? Buffer.from(s, 'utf16le').toString('utf16le') : Buffer.from(s, 'latin1').toString('latin1');
}

/**
 * A long string as the flat parts it is made of; `plain` when no character of it needs escaping in
 * JSON; `ascii` when every character is ASCII (its parts are written as latin1, byte for byte).
 */
export interface LongString {
  parts: string[];
  plain: boolean;
  ascii?: boolean;
}

/**
 * The long strings of one parsed body, with the flat parts each is made of: a serializer writes
 * them a part at a time, and `plain` ones (read from the body without escapes or control
 * characters) need no escaping check. Looked up by the string value itself: `===` on the same
 * string object is a pointer comparison, and a string is only compared with those of its length
 * (a different string of the same length differs somewhere; the comparison walks the parts
 * without flattening and stops there).
 */
export class Ropes {
  private readonly byLength = new Map<number, Array<{ s: string; long: LongString }>>();

  add(s: string, long: LongString): void {
    let list = this.byLength.get(s.length);
    if (!list) this.byLength.set(s.length, (list = []));
    list.push({ s, long });
  }

  get(s: string): LongString | undefined {
    const list = this.byLength.get(s.length);
    if (!list) return undefined;
    for (const e of list) if (e.s === s) return e.long;
    return undefined;
  }

  clear(): void {
    this.byLength.clear();
  }
}

/** The ropes of the body being converted (set by the caller around a synchronous codec run). */
let current: Ropes | undefined;

export function withRopes<T>(ropes: Ropes | undefined, run: () => T): T {
  const prev = current;
  current = ropes;
  try {
    return run();
  } finally {
    current = prev;
  }
}

/** Strings shorter than this are never looked up (nor registered). */
export const ROPE_MIN = 4096;

/** A long string of the body being converted, as its parts. */
function longOf(s: string): LongString | undefined {
  return current && s.length >= ROPE_MIN ? current.get(s) : undefined;
}

const NEEDS_ESCAPE = /["\\\x00-\x1f\ud800-\udfff]/;
const NON_ASCII = /[^\x00-\x7f]/;

/**
 * `s.slice(from)` for a long string of the body being converted, without flattening it when it is
 * made of parts (a codec taking the base64 payload out of a data URL).
 */
export function sliceLong(s: string, from: number): string {
  const long = longOf(s);
  if (!long || from <= 0) return s.slice(from);
  const out: string[] = [];
  let skip = from;
  for (const p of long.parts) {
    if (skip >= p.length) {
      skip -= p.length;
      continue;
    }
    out.push(skip > 0 ? p.slice(skip) : p);
    skip = 0;
  }
  return register(out, long.plain, long.ascii);
}

/** `a + b` where either may be a long string of the body being converted (kept readable by parts). */
export function concatLong(a: string, b: string): string {
  if (!current || a.length + b.length < ROPE_MIN) return a + b;
  const la = longOf(a);
  const lb = longOf(b);
  const parts = [...(la?.parts ?? [a]), ...(lb?.parts ?? [b])].filter((p) => p.length > 0);
  const plain = (la ? la.plain : !NEEDS_ESCAPE.test(a)) && (lb ? lb.plain : !NEEDS_ESCAPE.test(b));
  const ascii = (la ? la.ascii === true : !NON_ASCII.test(a)) && (lb ? lb.ascii === true : !NON_ASCII.test(b));
  return register(parts, plain, ascii);
}

/** The first `n` characters of a string, read from its first parts when it is made of parts. */
export function headOf(s: string, n: number): string {
  const long = longOf(s);
  if (!long) return s.slice(0, n);
  let out = '';
  for (const p of long.parts) {
    if (out.length >= n) break;
    out += p.slice(0, n - out.length);
  }
  return out;
}

function register(parts: string[], plain: boolean, ascii?: boolean): string {
  let s = '';
  for (const p of parts) s += p;
  if (current && s.length >= ROPE_MIN) current.add(s, { parts, plain, ascii });
  return s;
}

/**
 * An upstream body as flat string parts and its UTF-8 byte length. A part marked ASCII is written
 * as latin1 (a copy); the others are encoded as UTF-8.
 */
export class OutgoingBody {
  readonly parts: string[] = [];
  readonly asciiParts: boolean[] = [];
  bytes = 0;

  /** Appends a flat string; `bytes` when known (else measured: bounded by the part's size). */
  push(s: string, ascii = false, bytes?: number): void {
    if (s.length === 0) return;
    this.parts.push(s);
    this.asciiParts.push(ascii);
    this.bytes += ascii ? s.length : (bytes ?? Buffer.byteLength(s, 'utf8'));
  }

  /**
   * Advances building the body by about `budget` units of work; true once complete. A body made
   * of parts up front is complete at once; a serializer (core/json/serialize.ts) takes turns.
   */
  step(_budget: number): boolean {
    return true;
  }

  /** The body as one string (tests and small bodies; flattens). */
  toString(): string {
    return this.parts.join('');
  }
}
