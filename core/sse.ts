/**
 * The only SSE parser and serializer in the gateway (WHATWG "server-sent events" grammar).
 *
 * The parser is incremental: feed it chunks split anywhere (inside a UTF-8 sequence, between CR
 * and LF) and it returns each completed *block* — the lines up to a blank line — with its exact
 * source text in `raw`, so passthrough can forward upstream bytes unchanged while still seeing
 * event names and data. A block with no `data:` line (a keepalive comment, a stray `event:`) is
 * still returned, with `data === undefined`; per the spec it is not an event.
 */

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

export class SseParser {
  private readonly decoder = new TextDecoder('utf-8');
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
    let text = typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true });
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
      let lf = buf.indexOf('\n', pos);
      let cr = buf.indexOf('\r', pos);
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
    const tail = this.decoder.decode();
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
