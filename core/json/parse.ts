/**
 * An incremental JSON parser for large request bodies: it does a bounded amount of work per call
 * (`run`), so a 200 MiB body is parsed over many event-loop turns while other requests move.
 *
 * Its result is what `JSON.parse` gives for the same text: the same values and property order,
 * duplicate keys resolved the same way (the last value wins, at the first key's position),
 * `__proto__` an own property, numbers rounded the same way, any depth of nesting (V8's parser
 * has no depth limit either), and every text `JSON.parse` rejects is rejected.
 *
 * It is built for the bodies that are large in practice, a few huge strings (base64 images and
 * PDFs) in a small structure:
 *  - a string longer than `longString` is not copied: without escapes it is the slice of the text
 *    it occupies (or, across pieces, the concatenation of those slices, remembered in `ropes`),
 *    found with `indexOf` and checked for control characters a chunk at a time (skipped where
 *    decoding found none in the piece); with escapes it is decoded by `JSON.parse` a chunk at a
 *    time, never splitting an escape;
 *  - shorter strings, numbers and literals are read by `JSON.parse` / `Number` on their token;
 *  - a token that crosses from one piece of the text into the next is read from a small window
 *    joining the two, so no piece is ever copied whole.
 * Top-level members of a root object are recorded with their positions (`top`) so passthrough can
 * splice the body without reading it again (core/protocols/splice.ts).
 */
import { LargeText, Ropes } from './text.js';

export interface Member {
  key: string;
  /** Start of the key's opening quote. */
  start: number;
  valueStart: number;
  valueEnd: number;
}

/** A root object's members and braces, by absolute position in the text. */
export interface TopLevel {
  open: number;
  close: number;
  list: Member[];
}

/** A large body as parsed: its text by pieces, its root object's members, its long strings made of parts. */
export interface LargeBody {
  text: LargeText;
  top: TopLevel;
  ropes: Ropes;
}

export class JsonSyntaxError extends Error {
  constructor(
    message: string,
    readonly position: number,
  ) {
    super(message);
    this.name = 'JsonSyntaxError';
  }
}

export interface ParserOptions {
  /** Strings at least this long are kept as views of the text and read in chunks (default 4096). */
  longString?: number;
  /** Number tokens at least this long are read digit by digit (default 4096). */
  longNumber?: number;
  /** Characters of a long string read per chunk (default 256 KiB). */
  chunk?: number;
}

// States of the parser between tokens.
const VALUE = 0; // a value (the root, after ':', after ',' in an array)
const VALUE_OR_CLOSE = 1; // after '['
const KEY_OR_CLOSE = 2; // after '{'
const KEY = 3; // after ',' in an object
const COLON = 4;
const AFTER = 5; // after a value: ',' or a closing bracket (or the end, at the root)
const DONE = 6;
const LONG_STRING = 7;
const LONG_NUMBER = 8;

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const NUMBER_CHARS = /[-+.eE\d]*/y;
const CONTROL = /[\x00-\x1f]/;
const NON_ASCII = /[^\x00-\x7f]/;

function isWs(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/** The reason of a V8 JSON.parse error without its position (which is not ours). */
function reason(e: unknown): string {
  const m = e instanceof Error ? e.message : String(e);
  return m.replace(/,? ?(?:in JSON )?at position \d+.*$/s, '').replace(/ in JSON$/, '');
}

function describe(c: string): string {
  return c === '' ? 'end of input' : `token ${JSON.stringify(c)}`;
}

/** A position after which a chunk of string content can be cut without splitting an escape. */
function safeCut(t: string): number {
  const k = t.length;
  const b = t.lastIndexOf('\\', k - 1);
  if (b < 0 || b < k - 6) return k;
  let r = b;
  while (r > 0 && t.charCodeAt(r - 1) === 0x5c) r--;
  if ((b - r + 1) % 2 === 0) return k; // the last backslash is itself escaped
  const need = t.charCodeAt(b + 1) === 0x75 /* u */ ? 6 : 2;
  return b + need <= k ? k : b;
}

/** Sets a member as JSON.parse does (CreateDataProperty): `__proto__` and friends become own properties. */
function setMember(o: Record<string, unknown>, k: string, v: unknown): void {
  if (k in Object.prototype) Object.defineProperty(o, k, { value: v, writable: true, enumerable: true, configurable: true });
  else o[k] = v;
}

/** Digit-by-digit reading of a very long number, keeping what decides its double (see `value`). */
class LongNumber {
  // 0 start, 1 after '-', 2 after a leading 0, 3 integer digits, 4 after '.', 5 fraction digits,
  // 6 after 'e', 7 after the exponent sign, 8 exponent digits
  phase = 0;
  neg = false;
  /** Significant digits kept (at most 779), then whether a non-zero digit followed. */
  sig = '';
  sticky = false;
  /** Significant digits seen in all (after leading zeros). */
  total = 0;
  frac = 0;
  exp = 0;
  expNeg = false;

  /** Feeds one character; false when it does not belong to the number (which then ends before it). */
  feed(c: number): boolean {
    const digit = c >= 0x30 && c <= 0x39;
    const p = this.phase;
    if (p === 0 && c === 0x2d) {
      this.neg = true;
      this.phase = 1;
      return true;
    }
    if (p <= 1) {
      if (!digit) return false;
      if (c === 0x30) this.phase = 2;
      else {
        this.digit(c);
        this.phase = 3;
      }
      return true;
    }
    if (p <= 3) {
      if (digit && p === 3) this.digit(c);
      else if (c === 0x2e) this.phase = 4;
      else if (c === 0x65 || c === 0x45) this.phase = 6;
      else return false;
      return true;
    }
    if (p <= 5) {
      if (digit) {
        this.frac++;
        this.digit(c);
        this.phase = 5;
      } else if (p === 5 && (c === 0x65 || c === 0x45)) this.phase = 6;
      else return false;
      return true;
    }
    if (p === 6 && (c === 0x2b || c === 0x2d)) {
      this.expNeg = c === 0x2d;
      this.phase = 7;
      return true;
    }
    if (!digit) return false;
    this.exp = Math.min(this.exp * 10 + (c - 0x30), 1e10);
    this.phase = 8;
    return true;
  }

  private digit(c: number): void {
    if (this.total === 0 && c === 0x30) return; // a leading zero
    this.total++;
    if (this.sig.length < 779) this.sig += String.fromCharCode(c);
    else if (c !== 0x30) this.sticky = true;
  }

  get complete(): boolean {
    return this.phase === 2 || this.phase === 3 || this.phase === 5 || this.phase === 8;
  }

  /**
   * The double of the number: past 779 significant digits only whether any later digit is non-zero
   * matters (V8's own strtod keeps 779 digits and a final 1 the same way), so the value is that of
   * a literal of at most 780 digits with the exponent adjusted: exactly what Number() would give.
   */
  value(): number {
    if (this.total === 0) return this.neg ? -0 : 0;
    const e = (this.expNeg ? -this.exp : this.exp) - this.frac + (this.total - this.sig.length);
    const lit = this.sticky ? `${this.sig}1e${e - 1}` : `${this.sig}e${e}`;
    return Number((this.neg ? '-' : '') + lit);
  }
}

export class IncrementalJsonParser {
  /** The parsed value, once `run` returned true. */
  value: unknown;
  /** The root object's members, when the root is an object. */
  top?: TopLevel;
  /** The long strings, with their parts. */
  readonly ropes = new Ropes();

  private readonly longString: number;
  private readonly longNumber: number;
  private readonly chunk: number;

  // Reading position: `cur` is a piece, or a small window joining the end of one piece to what follows.
  private cur = '';
  private i = 0;
  /** Absolute position of cur[0]. */
  private base = 0;
  /** Where the text continues after `cur`: piece `q`, offset `o`. */
  private q = 0;
  private o = 0;
  private clean = true;
  /** `cur` is all ASCII (as decoding found its pieces). */
  private ascii = true;

  private state = VALUE;
  private readonly stack: Array<Record<string, unknown> | unknown[]> = [];
  private readonly keys: Array<string | undefined> = [];
  private rootIsObject = false;
  private keyStart = 0;
  private valueStart = 0;

  // A long string in progress.
  private ls?: {
    parts: string[];
    carry: string;
    escaped: boolean;
    ascii: boolean;
    bs: number;
    start: number;
    isKey: boolean;
    partStart: number;
  };
  // A long number in progress.
  private ln?: { n: LongNumber; start: number };

  constructor(
    private readonly text: LargeText,
    opts: ParserOptions = {},
  ) {
    this.longString = Math.max(1, opts.longString ?? 4096);
    this.longNumber = Math.max(1, opts.longNumber ?? 4096);
    this.chunk = Math.max(8, opts.chunk ?? 256 * 1024);
    if (text.pieces.length > 0) {
      this.cur = text.pieces[0];
      this.clean = text.clean[0];
      this.ascii = text.ascii[0];
      this.q = 1;
    }
  }

  /** After a failure: the text held nothing but whitespace. */
  get empty(): boolean {
    return this.state === VALUE && this.stack.length === 0 && this.i >= this.cur.length && !this.more();
  }

  private pos(i = this.i): number {
    return this.base + i;
  }

  private more(): boolean {
    return this.q < this.text.pieces.length;
  }

  /** Moves to the rest of the text once `cur` is used up; false at the end. */
  private nextPiece(): boolean {
    if (!this.more()) return false;
    const k = this.q;
    this.cur = this.text.pieces[k];
    this.base = this.text.starts[k];
    this.i = this.o;
    this.clean = this.text.clean[k];
    this.ascii = this.text.ascii[k];
    this.q = k + 1;
    this.o = 0;
    return true;
  }

  /** Makes `cur` hold at least `n` characters from `i` when the text has them: a window of the rest and what follows. */
  private fill(n: number): void {
    if (this.cur.length - this.i >= n || !this.more()) return;
    let w = this.cur.slice(this.i);
    let clean = this.clean;
    let ascii = this.ascii;
    const base = this.pos();
    while (w.length < n && this.more()) {
      const p = this.text.pieces[this.q];
      const take = Math.min(p.length - this.o, n - w.length);
      w += p.slice(this.o, this.o + take);
      clean = clean && this.text.clean[this.q];
      ascii = ascii && this.text.ascii[this.q];
      this.o += take;
      if (this.o >= p.length) {
        this.q++;
        this.o = 0;
      }
    }
    this.cur = w;
    this.i = 0;
    this.base = base;
    this.clean = clean;
    this.ascii = ascii;
  }

  private fail(message: string, at = this.pos()): never {
    throw new JsonSyntaxError(`${message} at position ${at}`, at);
  }

  private unexpected(): never {
    if (this.i >= this.cur.length && !this.more()) this.fail('Unexpected end of JSON input');
    this.fail(`Unexpected ${describe(this.cur[this.i] ?? '')}`);
  }

  /** Skips whitespace (across pieces); the next character's code, or -1 at the end of the text. */
  private peek(): number {
    for (;;) {
      const s = this.cur;
      let i = this.i;
      while (i < s.length && isWs(s.charCodeAt(i))) i++;
      this.i = i;
      if (i < s.length) return s.charCodeAt(i);
      if (!this.nextPiece()) return -1;
    }
  }

  /**
   * Parses for at most `ms` milliseconds (checked every few tokens and after each chunk of a long
   * string), or `maxOps` tokens and chunks when given (tests). True once the whole text is parsed;
   * throws JsonSyntaxError where `JSON.parse` would throw.
   */
  run(ms = 2, maxOps = Infinity): boolean {
    const deadline = performance.now() + ms;
    let ops = 0;
    while (this.state !== DONE) {
      if (ops >= maxOps) return false;
      ops++;
      if (this.state === LONG_STRING) {
        // A chunk is up to `chunk` characters of work: the clock is read after each.
        this.longStringStep();
        if (performance.now() > deadline) return false;
        continue;
      }
      if (this.state === LONG_NUMBER) this.longNumberStep();
      else this.token();
      if ((ops & 63) === 0 && performance.now() > deadline) return false;
    }
    return true;
  }

  /** One token (or the start of a long string or number). */
  private token(): void {
    const c = this.peek();
    switch (this.state) {
      case VALUE:
      case VALUE_OR_CLOSE:
        if (c === 0x5d /* ] */ && this.state === VALUE_OR_CLOSE) return this.close(true);
        if (this.stack.length === 1 && this.rootIsObject) this.valueStart = this.pos();
        return this.valueToken(c);
      case KEY_OR_CLOSE:
      case KEY:
        if (c === 0x7d /* } */ && this.state === KEY_OR_CLOSE) return this.close(false);
        if (c !== 0x22) return this.unexpected();
        if (this.stack.length === 1) this.keyStart = this.pos();
        return this.stringToken(true);
      case COLON:
        if (c !== 0x3a) return this.unexpected();
        this.i++;
        this.state = VALUE;
        return;
      case AFTER: {
        if (this.stack.length === 0) {
          if (c === -1) {
            this.state = DONE;
            return;
          }
          return this.unexpected();
        }
        const arr = Array.isArray(this.stack[this.stack.length - 1]);
        if (c === 0x2c /* , */) {
          this.i++;
          this.state = arr ? VALUE : KEY;
          return;
        }
        if (c === (arr ? 0x5d : 0x7d)) return this.close(arr);
        return this.unexpected();
      }
    }
  }

  private valueToken(c: number): void {
    if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      const arr = c === 0x5b;
      if (this.stack.length === 0 && !arr) {
        this.rootIsObject = true;
        this.top = { open: this.pos(), close: -1, list: [] };
      }
      this.i++;
      this.stack.push(arr ? [] : {});
      this.keys.push(undefined);
      this.state = arr ? VALUE_OR_CLOSE : KEY_OR_CLOSE;
      return;
    }
    if (c === 0x22) return this.stringToken(false);
    if (c === 0x2d || (c >= 0x30 && c <= 0x39)) return this.numberToken();
    if (c === 0x74 || c === 0x66 || c === 0x6e) {
      this.fill(5);
      const s = this.cur;
      for (const [word, v] of [
        ['true', true],
        ['false', false],
        ['null', null],
      ] as const) {
        if (s.startsWith(word, this.i)) {
          this.i += word.length;
          return this.deliver(v);
        }
      }
      // Point at the first character that is not the literal's.
      const word = c === 0x74 ? 'true' : c === 0x66 ? 'false' : 'null';
      let k = 0;
      while (k < word.length && this.i + k < s.length && s.charCodeAt(this.i + k) === word.charCodeAt(k)) k++;
      this.i += k;
      return this.unexpected();
    }
    return this.unexpected();
  }

  private close(arr: boolean): void {
    this.i++;
    const v = this.stack.pop()!;
    this.keys.pop();
    if (this.stack.length === 0 && !arr && this.top) this.top.close = this.pos() - 1;
    this.deliver(v);
  }

  /** A value is complete: into its container (or it is the root). */
  private deliver(v: unknown): void {
    const n = this.stack.length;
    if (n === 0) {
      this.value = v;
      this.state = AFTER;
      return;
    }
    const c = this.stack[n - 1];
    if (Array.isArray(c)) c.push(v);
    else {
      const k = this.keys[n - 1]!;
      setMember(c, k, v);
      if (n === 1 && this.top) this.top.list.push({ key: k, start: this.keyStart, valueStart: this.valueStart, valueEnd: this.pos() });
    }
    this.state = AFTER;
  }

  private deliverString(s: string, isKey: boolean): void {
    if (isKey) {
      this.keys[this.keys.length - 1] = s;
      this.state = COLON;
    } else this.deliver(s);
  }

  /** The index of the closing quote of a string whose content starts at `from` in `s`, or -1. */
  private static closeQuote(s: string, from: number): number {
    let at = from;
    for (;;) {
      const q = s.indexOf('"', at);
      if (q < 0) return -1;
      let k = q - 1;
      while (k >= from && s.charCodeAt(k) === 0x5c) k--;
      if ((q - 1 - k) % 2 === 0) return q;
      at = q + 1;
    }
  }

  private stringToken(isKey: boolean): void {
    // cur[i] is the opening quote.
    let q = IncrementalJsonParser.closeQuote(this.cur, this.i + 1);
    if (q < 0 && this.more() && this.cur.length - this.i < this.longString + 2) {
      this.fill(this.longString + 2);
      q = IncrementalJsonParser.closeQuote(this.cur, this.i + 1);
    }
    if (q >= 0 && q - this.i - 1 < this.longString) {
      const start = this.i;
      let s: string;
      try {
        s = JSON.parse(this.cur.slice(start, q + 1)) as string;
      } catch (e) {
        return this.fail(reason(e), this.pos(start));
      }
      this.i = q + 1;
      return this.deliverString(s, isKey);
    }
    if (q < 0 && !this.more()) this.fail('Unterminated string', this.pos());
    this.ls = { parts: [], carry: '', escaped: false, ascii: true, bs: 0, start: this.pos(), isKey, partStart: this.pos() + 1 };
    this.i++;
    this.state = LONG_STRING;
  }

  /** One chunk of a long string; true when the string ended. */
  private longStringStep(): boolean {
    const ls = this.ls!;
    if (this.i >= this.cur.length && !this.nextPiece()) this.fail('Unterminated string', ls.start);
    const s = this.cur;
    const from = this.i;
    const end = Math.min(s.length, from + this.chunk);
    // The first unescaped quote in [from, end): a backslash run before it may begin in an earlier chunk.
    let close = -1;
    for (let at = from; ;) {
      const q = s.indexOf('"', at);
      if (q < 0 || q >= end) break;
      let k = q - 1;
      while (k >= from && s.charCodeAt(k) === 0x5c) k--;
      let run = q - 1 - k;
      if (k < from) run += ls.bs;
      if (run % 2 === 0) {
        close = q;
        break;
      }
      at = q + 1;
    }
    const segEnd = close >= 0 ? close : end;
    const raw = s.slice(from, segEnd);
    const rawStart = this.pos(from);
    // Trailing backslashes of what was read (a quote right after them may be escaped).
    let t = raw.length;
    while (t > 0 && raw.charCodeAt(t - 1) === 0x5c) t--;
    ls.bs = t === 0 ? ls.bs + raw.length : raw.length - t;
    if (!ls.escaped && raw.indexOf('\\') < 0) {
      if (!this.clean) {
        const m = CONTROL.exec(raw);
        if (m) this.fail('Bad control character in string literal', rawStart + m.index);
      }
      if (raw.length > 0) ls.parts.push(raw);
      // Only parts of pieces that are not all ASCII need looking at.
      if (ls.ascii && !this.ascii && NON_ASCII.test(raw)) ls.ascii = false;
    } else {
      if (!ls.escaped) {
        ls.escaped = true;
        ls.partStart = rawStart;
      }
      const all = ls.carry + raw;
      const cut = close >= 0 ? all.length : safeCut(all);
      const piece = all.slice(0, cut);
      ls.carry = all.slice(cut);
      if (piece.length > 0) {
        try {
          ls.parts.push(JSON.parse('"' + piece + '"') as string);
        } catch (e) {
          this.fail(reason(e), ls.partStart);
        }
      }
      ls.partStart = rawStart + raw.length - ls.carry.length;
    }
    this.i = segEnd;
    if (close < 0) return false;
    this.i = close + 1;
    this.ls = undefined;
    this.state = AFTER; // deliverString sets the real next state
    const parts = ls.parts;
    let v = '';
    for (const p of parts) v += p;
    // An ASCII string's parts are written as latin1, byte for byte, with no measuring.
    this.ropes.add(v, { parts, plain: !ls.escaped, ascii: !ls.escaped && ls.ascii });
    this.deliverString(v, ls.isKey);
    return true;
  }

  private numberToken(): void {
    NUMBER_CHARS.lastIndex = this.i;
    NUMBER_CHARS.exec(this.cur);
    if (NUMBER_CHARS.lastIndex >= this.cur.length && this.more()) {
      // The number may go on in the next piece.
      this.fill(this.longNumber + 2);
      NUMBER_CHARS.lastIndex = this.i;
      NUMBER_CHARS.exec(this.cur);
      if (NUMBER_CHARS.lastIndex >= this.cur.length && this.more()) {
        this.ln = { n: new LongNumber(), start: this.pos() };
        this.state = LONG_NUMBER;
        return;
      }
    }
    NUMBER.lastIndex = this.i;
    const m = NUMBER.exec(this.cur);
    if (!m) {
      this.i++; // past the '-'
      return this.unexpected();
    }
    this.i += m[0].length;
    this.deliver(Number(m[0]));
  }

  private longNumberStep(): void {
    const ln = this.ln!;
    for (let budget = this.chunk; ; budget--) {
      if (this.i >= this.cur.length && !this.nextPiece()) break;
      if (budget <= 0) return; // more next time
      if (!ln.n.feed(this.cur.charCodeAt(this.i))) break;
      this.i++;
    }
    if (!ln.n.complete) return this.unexpected();
    this.ln = undefined;
    this.deliver(ln.n.value());
  }
}

/** The text of a small body as the pieces the parser reads (tests; bodies under the large-body size use JSON.parse). */
export function textOf(s: string, pieceLength = s.length || 1): LargeText {
  const t = new LargeText();
  for (let a = 0; a < s.length; a += pieceLength) {
    const p = s.slice(a, a + pieceLength);
    t.push(p, !/[^\x00-\x7f]/.test(p), !CONTROL.test(p), Buffer.byteLength(p, 'utf8'));
  }
  return t;
}

/** Parses `text` to completion in one go (tests). */
export function parseAll(text: LargeText, opts?: ParserOptions, maxOps?: number): IncrementalJsonParser {
  const p = new IncrementalJsonParser(text, opts);
  while (!p.run(Infinity, maxOps)) {
    /* more */
  }
  return p;
}
