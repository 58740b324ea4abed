/**
 * The only SSE parser and serializer in the gateway (WHATWG "server-sent events" grammar).
 *
 * The parser is incremental: feed it chunks split anywhere (inside a UTF-8 sequence, between CR
 * and LF) and it returns each completed *block* — the lines up to a blank line — with its exact
 * source text in `raw`, so passthrough can forward upstream bytes unchanged while still seeing
 * event names and data. A block with no `data:` line (a keepalive comment, a stray `event:`) is
 * still returned, with `data === undefined`; per the spec it is not an event.
 *
 * Two modes, one grammar: `feed` works on text (bytes are decoded first); `feedBytes` works on the
 * bytes themselves and returns `SseBytesBlock`s — views of the chunk they arrived in, with only
 * the `event`/`id`/`retry` values decoded and `data` decoded when first read. The stream path
 * uses the byte mode: a passthrough stream forwards the upstream's bytes as they came and scans
 * them for the few things it needs, and a converted one decodes each event's data once. One
 * parser instance is used in one mode.
 */

import { isAscii } from 'node:buffer';

export interface SseBlock {
  /** The `event:` field, when present. */
  event?: string;
  /** `data:` lines joined with "\n"; undefined when the block has no data line. */
  data?: string;
  id?: string;
  retry?: number;
  /** The block's source text, line terminators and the closing blank line included. */
  raw: string;
}

const LF = 10;
const COLON = 58;
const SPACE = 32;
const NEWLINE = Buffer.from('\n');

/**
 * A block read in byte mode: its source is `buf[start, end)`, line terminators and the closing
 * blank line included (`buf` is the chunk it came in when it fits in one, else the parser's own
 * buffer; never written again). `data` and `raw` are decoded when first read. The data is
 * `dataBuf[dataStart, dataEnd)`: `buf` itself for one `data:` line, a joined copy for several;
 * `dataBuf` is undefined when the block has no data.
 */
export class SseBytesBlock implements SseBlock {
  id?: string;
  retry?: number;
  readonly dataBuf: Buffer | undefined;
  readonly dataStart: number = 0;
  readonly dataEnd: number = 0;
  private text: string | undefined;

  /** `data`: the first data line's [start, end) in `buf`, then any further lines' (or undefined: no data). */
  constructor(
    readonly buf: Buffer,
    readonly start: number,
    readonly end: number,
    readonly event: string | undefined,
    d0: number,
    d1: number,
    more: number[] | undefined,
    text?: string,
  ) {
    this.text = text;
    if (d0 < 0) return;
    if (more === undefined) {
      this.dataBuf = buf;
      this.dataStart = d0;
      this.dataEnd = d1;
    } else {
      const parts: Buffer[] = [buf.subarray(d0, d1)];
      for (let i = 0; i < more.length; i += 2) parts.push(NEWLINE, buf.subarray(more[i], more[i + 1]));
      this.dataBuf = Buffer.concat(parts);
      this.dataEnd = this.dataBuf.length;
    }
  }

  /** The block's source bytes (a view). */
  get bytes(): Buffer {
    return this.buf.subarray(this.start, this.end);
  }

  get data(): string | undefined {
    if (this.dataBuf === undefined) return undefined;
    return (this.text ??= this.dataBuf.toString('utf8', this.dataStart, this.dataEnd));
  }

  get raw(): string {
    return this.buf.toString('utf8', this.start, this.end);
  }
}

export class SseParser {
  /** Text mode's decoder, made on its first bytes: byte mode (every passthrough stream) never needs one. */
  private decoder: InstanceType<typeof TextDecoder> | undefined;
  private buf = '';
  private raw = '';
  private event: string | undefined;
  private dataLines: string[] | undefined;
  private id: string | undefined;
  private retry: number | undefined;
  private started = false;
  /** A chunk ended in CR: a following LF belongs to the same terminator. */
  private pendingCR = false;

  /** Feed bytes or text; returns the blocks completed by this chunk. */
  feed(chunk: Uint8Array | string): SseBlock[] {
    let text = typeof chunk === 'string' ? chunk : (this.decoder ??= new TextDecoder('utf-8')).decode(chunk, { stream: true });
    if (!this.started && text.length > 0) {
      this.started = true;
      if (text.charCodeAt(0) === 0xfeff) {
        this.raw += '\ufeff';
        text = text.slice(1);
      }
    }
    if (this.pendingCR && text.length > 0) {
      this.pendingCR = false;
      if (text.charCodeAt(0) === 10) {
        this.raw += '\n';
        text = text.slice(1);
      }
    }
    this.buf += text;
    const out: SseBlock[] = [];
    let pos = 0;
    const buf = this.buf;
    const len = buf.length;
    while (pos < len) {
      const lf = buf.indexOf('\n', pos);
      const cr = buf.indexOf('\r', pos);
      if (lf === -1 && cr === -1) break;
      let end: number;
      let next: number;
      if (cr !== -1 && (lf === -1 || cr < lf)) {
        end = cr;
        if (cr + 1 < len) {
          next = buf.charCodeAt(cr + 1) === 10 ? cr + 2 : cr + 1;
        } else {
          // CR at the end of what we have: the line is complete; a LF may follow in the next chunk.
          next = cr + 1;
          this.pendingCR = true;
        }
      } else {
        end = lf;
        next = lf + 1;
      }
      const line = buf.slice(pos, end);
      this.raw += buf.slice(pos, next);
      pos = next;
      const block = this.line(line);
      if (block) out.push(block);
    }
    this.buf = pos === 0 ? buf : buf.slice(pos);
    return out;
  }

  /**
   * End of input. Per the spec an unterminated block is discarded; with `flushIncomplete` it is
   * returned instead (some servers omit the final blank line).
   */
  end(flushIncomplete = false): SseBlock[] {
    const tail = this.decoder?.decode() ?? '';
    const out = tail ? this.feed(tail) : [];
    if (flushIncomplete) {
      if (this.buf.length > 0) {
        const line = this.buf;
        this.raw += line;
        this.buf = '';
        this.line(line);
      }
      if (this.raw.length > 0 && (this.dataLines || this.event !== undefined)) out.push(this.take());
    }
    return out;
  }

  /**
   * Byte mode: returns the blocks completed by this chunk, each a view of the bytes it came in
   * (a block split across chunks is copied once into the parser's own buffer). A UTF-8 sequence
   * split across chunks needs no care here: nothing is decoded before its line is complete.
   */
  feedBytes(chunk: Uint8Array): SseBytesBlock[] {
    const c = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    let buf: Buffer;
    let blockStart: number;
    let pos: number;
    const inAcc = this.accLen > this.accStart;
    if (inAcc) {
      this.append(c);
      buf = this.acc!.subarray(0, this.accLen);
      blockStart = this.accStart;
      pos = blockStart + this.scanFrom;
    } else {
      if (c.length === 0) return [];
      buf = c;
      blockStart = 0;
      pos = 0;
    }
    const len = buf.length;
    if (!this.started) {
      // A leading BOM is not part of any block (the text mode's decoder drops it the same way).
      if (len - pos < 3 && buf[pos] === 0xef && (len - pos < 2 || buf[pos + 1] === 0xbb)) {
        this.carry(buf, blockStart, pos, inAcc);
        return [];
      }
      this.started = true;
      if (buf[pos] === 0xef && buf[pos + 1] === 0xbb && buf[pos + 2] === 0xbf) blockStart = pos += 3;
    }
    if (this.pendingCR && pos < len) {
      this.pendingCR = false;
      if (buf[pos] === LF) pos++; // the LF of a CRLF split across chunks: it leads the next block's bytes
    }
    const out: SseBytesBlock[] = [];
    // Line ends are found in a latin1 copy of the bytes not yet read (one character per byte, so
    // its offsets are byte offsets less `base`): V8's string search is much cheaper per call than
    // Buffer#indexOf, which crosses into C++ each time.
    // When the bytes are ASCII (the usual case) that copy is also their text: field values and data
    // are taken from it without decoding each one (a C++ call apiece).
    const base = pos;
    const str = buf.toString('latin1', pos, len);
    this.lat = isAscii(buf) ? str : undefined;
    this.latBase = base;
    let cr = -2; // the next CR at or after `pos` (-1: none left; -2: not looked for yet)
    while (pos < len) {
      let lf = str.indexOf('\n', pos - base);
      if (lf !== -1) lf += base;
      if (cr !== -1 && cr < pos) {
        cr = str.indexOf('\r', pos - base);
        if (cr !== -1) cr += base;
      }
      let end: number;
      let next: number;
      if (cr !== -1 && (lf === -1 || cr < lf)) {
        end = cr;
        if (cr + 1 < len) next = buf[cr + 1] === LF ? cr + 2 : cr + 1;
        else {
          next = cr + 1;
          this.pendingCR = true;
        }
      } else if (lf !== -1) {
        end = lf;
        next = lf + 1;
      } else break;
      if (end === pos) {
        out.push(this.takeBytes(buf, blockStart, next));
        blockStart = next;
      } else {
        this.lineBytes(buf, pos, end, blockStart);
      }
      pos = next;
    }
    this.carry(buf, blockStart, pos, inAcc);
    return out;
  }

  /** Byte mode's `end`: an unterminated block is discarded, or returned with `flushIncomplete`. */
  endBytes(flushIncomplete = false): SseBytesBlock[] {
    this.lat = undefined; // offsets of the last feed's copy may not be this buffer's
    if (!flushIncomplete || this.accLen <= this.accStart) return [];
    const buf = this.acc!.subarray(0, this.accLen);
    const start = this.accStart;
    const line = start + this.scanFrom;
    if (line < buf.length) this.lineBytes(buf, line, buf.length, start);
    this.accStart = this.accLen;
    if (this.d0 >= 0 || this.event !== undefined) return [this.takeBytes(buf, start, buf.length)];
    return [];
  }

  // Byte mode: the unfinished block is acc[accStart, accLen); its unfinished line starts scanFrom
  // bytes into it. Bytes are only ever appended past accLen, so views handed out stay valid.
  private acc: Buffer | undefined;
  private accStart = 0;
  private accLen = 0;
  private scanFrom = 0;
  /**
   * Data values of the block being read, relative to its first byte: the first line's [d0, d1)
   * (d0 < 0: none yet), further lines' pairs in `moreData`.
   */
  private d0 = -1;
  private d1 = -1;
  private moreData: number[] | undefined;
  /** The first data line's text when it was read from an ASCII chunk's copy (no decoding needed later). */
  private d0Text: string | undefined;
  /** The current chunk's latin1 copy when its bytes are all ASCII (so it is their text), from byte `latBase`. */
  private lat: string | undefined;
  private latBase = 0;

  /** `buf[s, e)` as text: a slice of the ASCII copy when there is one, else decoded. */
  private textOf(buf: Buffer, s: number, e: number): string {
    return this.lat !== undefined ? this.lat.slice(s - this.latBase, e - this.latBase) : buf.toString('utf8', s, e);
  }

  private carry(buf: Buffer, blockStart: number, pos: number, inAcc: boolean): void {
    const left = buf.length - blockStart;
    this.scanFrom = pos - blockStart;
    if (left === 0) {
      this.acc = undefined;
      this.accStart = this.accLen = 0;
    } else if (inAcc) {
      this.accStart = blockStart; // already in our buffer
    } else {
      this.acc = Buffer.allocUnsafe(Math.max(256, left * 2));
      buf.copy(this.acc, 0, blockStart);
      this.accStart = 0;
      this.accLen = left;
    }
  }

  private append(c: Buffer): void {
    const acc = this.acc!;
    if (this.accLen + c.length > acc.length) {
      const keep = this.accLen - this.accStart;
      const grown = Buffer.allocUnsafe(Math.max(256, (keep + c.length) * 2));
      acc.copy(grown, 0, this.accStart, this.accLen);
      this.acc = grown;
      this.accStart = 0;
      this.accLen = keep;
    }
    c.copy(this.acc!, this.accLen);
    this.accLen += c.length;
  }

  private lineBytes(buf: Buffer, s: number, e: number, blockStart: number): void {
    const c0 = buf[s];
    if (c0 === COLON) return; // comment
    let colon = s;
    while (colon < e && buf[colon] !== COLON) colon++;
    const nameLen = colon - s;
    const v = colon === e ? e : colon + 1 < e && buf[colon + 1] === SPACE ? colon + 2 : colon + 1;
    if (nameLen === 4 && c0 === 0x64 && buf[s + 1] === 0x61 && buf[s + 2] === 0x74 && buf[s + 3] === 0x61) {
      if (this.d0 < 0) {
        this.d0 = v - blockStart;
        this.d1 = e - blockStart;
        if (this.lat !== undefined) this.d0Text = this.textOf(buf, v, e);
      } else (this.moreData ??= []).push(v - blockStart, e - blockStart);
    } else if (nameLen === 5 && c0 === 0x65 && buf[s + 1] === 0x76 && buf[s + 2] === 0x65 && buf[s + 3] === 0x6e && buf[s + 4] === 0x74) {
      this.event = this.textOf(buf, v, e);
    } else if (nameLen === 2 && c0 === 0x69 && buf[s + 1] === 0x64) {
      const value = this.textOf(buf, v, e); // id
      if (!value.includes('\0')) this.id = value;
    } else if (nameLen === 5 && c0 === 0x72 && buf[s + 1] === 0x65 && buf[s + 2] === 0x74 && buf[s + 3] === 0x72 && buf[s + 4] === 0x79) {
      const value = buf.toString('latin1', v, e);
      if (/^\d+$/.test(value)) this.retry = Number(value);
    }
  }

  private takeBytes(buf: Buffer, start: number, end: number): SseBytesBlock {
    let more = this.moreData;
    if (more) for (let i = 0; i < more.length; i++) more[i] += start;
    const block = new SseBytesBlock(
      buf,
      start,
      end,
      this.event,
      this.d0 < 0 ? -1 : this.d0 + start,
      this.d1 + start,
      more,
      more ? undefined : this.d0Text,
    );
    if (this.id !== undefined) block.id = this.id;
    if (this.retry !== undefined) block.retry = this.retry;
    this.event = undefined;
    this.d0 = this.d1 = -1;
    this.d0Text = undefined;
    this.moreData = more = undefined;
    this.id = undefined;
    this.retry = undefined;
    return block;
  }

  /** Bytes received but not yet part of a completed block. */
  get pending(): string {
    return this.raw + this.buf;
  }

  private line(line: string): SseBlock | undefined {
    if (line.length === 0) return this.take();
    if (line.charCodeAt(0) === 58 /* : */) return undefined; // comment
    const colon = line.indexOf(':');
    let field: string;
    let value: string;
    if (colon === -1) {
      field = line;
      value = '';
    } else {
      field = line.slice(0, colon);
      value = line.charCodeAt(colon + 1) === 32 ? line.slice(colon + 2) : line.slice(colon + 1);
    }
    switch (field) {
      case 'data':
        (this.dataLines ??= []).push(value);
        break;
      case 'event':
        this.event = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.id = value;
        break;
      case 'retry':
        if (/^\d+$/.test(value)) this.retry = Number(value);
        break;
      default:
        break; // unknown fields are ignored
    }
    return undefined;
  }

  private take(): SseBlock {
    const block: SseBlock = { raw: this.raw };
    if (this.event !== undefined) block.event = this.event;
    if (this.dataLines) block.data = this.dataLines.join('\n');
    if (this.id !== undefined) block.id = this.id;
    if (this.retry !== undefined) block.retry = this.retry;
    this.raw = '';
    this.event = undefined;
    this.dataLines = undefined;
    this.id = undefined;
    this.retry = undefined;
    return block;
  }
}

/** One SSE frame: `event: <name>\n` (when named) and one `data:` line per line of `data`, then a blank line. */
export function formatEvent(data: string, event?: string): string {
  let out = event !== undefined ? `event: ${event}\n` : '';
  if (data.indexOf('\n') === -1 && data.indexOf('\r') === -1) return `${out}data: ${data}\n\n`;
  for (const line of data.split(/\r\n|\r|\n/)) out += `data: ${line}\n`;
  return out + '\n';
}

/** A frame whose data is `value` as JSON. */
export function formatJsonEvent(value: unknown, event?: string): string {
  return formatEvent(JSON.stringify(value), event);
}

/** An SSE comment line: ignored by every client, keeps idle connections open. */
export const KEEPALIVE = ': keepalive\n\n';
