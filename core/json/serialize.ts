/**
 * An incremental JSON.stringify for a converted large body: the output is what JSON.stringify
 * gives for the same value, produced as parts of an OutgoingBody over as many event-loop turns as
 * it takes (each `step` bounded in time).
 *
 * Short strings, numbers and keys go through JSON.stringify; a long string is written a chunk at a
 * time: one of the body's own long strings (Ropes) by its parts, as they are when it was read
 * without escapes (nothing to escape in it), else each chunk checked and escaped on its own, never
 * splitting a surrogate pair. So a 200 MiB base64 image costs no copy and no single long step.
 */
import { OutgoingBody, ROPE_MIN, type Ropes } from './text.js';

const NEEDS_ESCAPE = /["\\\x00-\x1f\ud800-\udfff]/;
/** Output collected before it becomes a part. */
const FLUSH = 64 * 1024;

type Frame =
  | { kind: 'object'; value: Record<string, unknown>; keys: string[]; next: number; wrote: boolean }
  | { kind: 'array'; value: unknown[]; next: number }
  | { kind: 'string'; parts: string[]; plain: boolean; ascii: boolean; part: number; at: number; carry: string };

export interface WriterOptions {
  /** Strings at least this long are written a chunk at a time (default 4096). */
  longString?: number;
  /** Characters of a long string checked per chunk (default 256 KiB). */
  chunk?: number;
}

export class JsonWriter extends OutgoingBody {
  private readonly stack: Frame[] = [];
  /** Containers being written (JSON.stringify refuses a cycle). */
  private readonly open = new Set<object>();
  private acc = '';
  private done = false;
  private readonly longString: number;
  private readonly chunk: number;

  constructor(
    value: unknown,
    private readonly ropes?: Ropes,
    opts: WriterOptions = {},
  ) {
    super();
    this.longString = Math.max(1, opts.longString ?? ROPE_MIN);
    this.chunk = Math.max(2, opts.chunk ?? 256 * 1024);
    // JSON.stringify of undefined (or a function) is undefined: no body. Converted requests are objects.
    if (!this.value(prepare(value, ''), true)) this.done = true;
  }

  override step(ms = 2, maxOps = Infinity): boolean {
    if (this.done) return true;
    const deadline = performance.now() + ms;
    let ops = 0;
    while (this.stack.length > 0) {
      if (ops >= maxOps) return false;
      ops++;
      const f = this.stack[this.stack.length - 1];
      if (f.kind === 'string') {
        this.stringChunk(f);
        if (performance.now() > deadline) return false;
        continue;
      }
      if (f.kind === 'array') {
        if (f.next >= f.value.length) {
          this.acc += ']';
          this.close(f.value);
          continue;
        }
        const i = f.next++;
        if (i > 0) this.acc += ',';
        if (!this.value(prepare(f.value[i], String(i)), false)) this.acc += 'null';
      } else {
        let wrote = false;
        while (f.next < f.keys.length && !wrote) {
          const k = f.keys[f.next++];
          const v = prepare(f.value[k], k);
          if (!serializable(v)) continue;
          this.acc += (f.wrote ? ',' : '') + JSON.stringify(k) + ':';
          f.wrote = true;
          this.value(v, false);
          wrote = true;
        }
        if (!wrote && f.next >= f.keys.length) {
          this.acc += '}';
          this.close(f.value);
          continue;
        }
      }
      if (this.acc.length >= FLUSH) this.flush();
      if ((ops & 63) === 0 && performance.now() > deadline) return false;
    }
    this.flush();
    this.done = true;
    return true;
  }

  private close(v: object): void {
    this.stack.pop();
    this.open.delete(v);
  }

  private flush(): void {
    if (this.acc) this.push(this.acc);
    this.acc = '';
  }

  /** Writes a value (containers and long strings are opened as frames); false when it is not serializable. */
  private value(v: unknown, root: boolean): boolean {
    switch (typeof v) {
      case 'string':
        if (v.length < this.longString) this.acc += JSON.stringify(v);
        else {
          const long = this.ropes?.get(v);
          this.acc += '"';
          this.flush();
          this.stack.push({
            kind: 'string',
            parts: long ? long.parts : [v],
            plain: long?.plain ?? false,
            ascii: long?.ascii === true,
            part: 0,
            at: 0,
            carry: '',
          });
        }
        return true;
      case 'number':
        this.acc += Number.isFinite(v) ? String(v) : 'null';
        return true;
      case 'boolean':
        this.acc += v ? 'true' : 'false';
        return true;
      case 'bigint':
        throw new TypeError('Do not know how to serialize a BigInt');
      case 'object': {
        if (v === null) {
          this.acc += 'null';
          return true;
        }
        if (this.open.has(v)) throw new TypeError('Converting circular structure to JSON');
        this.open.add(v);
        if (Array.isArray(v)) {
          this.acc += '[';
          this.stack.push({ kind: 'array', value: v, next: 0 });
        } else {
          this.acc += '{';
          this.stack.push({ kind: 'object', value: v as Record<string, unknown>, keys: Object.keys(v), next: 0, wrote: false });
        }
        if (root) this.flush();
        return true;
      }
      default:
        return false; // undefined, function, symbol
    }
  }

  /** One chunk of a long string. */
  private stringChunk(f: Extract<Frame, { kind: 'string' }>): void {
    if (f.part >= f.parts.length) {
      if (f.carry) this.push(JSON.stringify(f.carry).slice(1, -1));
      this.stack.pop();
      this.acc += '"';
      return;
    }
    const p = f.parts[f.part];
    const end = Math.min(p.length, f.at + this.chunk);
    let chunk = p.slice(f.at, end);
    f.at = end;
    if (end >= p.length) {
      f.part++;
      f.at = 0;
    }
    if (f.plain) {
      this.push(chunk, f.ascii);
      return;
    }
    // A high surrogate at the end waits for its pair in the next chunk.
    if (f.carry) chunk = f.carry + chunk;
    f.carry = '';
    const last = chunk.charCodeAt(chunk.length - 1);
    if (last >= 0xd800 && last <= 0xdbff && f.part < f.parts.length) {
      f.carry = chunk.slice(-1);
      chunk = chunk.slice(0, -1);
    }
    if (chunk) this.push(NEEDS_ESCAPE.test(chunk) ? JSON.stringify(chunk).slice(1, -1) : chunk);
  }
}

/** What JSON.stringify serializes in place of a value: `toJSON()`'s result, boxed primitives unboxed. */
function prepare(v: unknown, key: string): unknown {
  if (v !== null && typeof v === 'object') {
    const toJSON = (v as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') v = toJSON.call(v, key);
    if (v instanceof Number) return Number(v);
    if (v instanceof String) return String(v);
    if (v instanceof Boolean) return v.valueOf();
  } else if (typeof v === 'bigint') {
    const toJSON = (Object(v) as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') return toJSON.call(v, key);
  }
  return v;
}

function serializable(v: unknown): boolean {
  return v !== undefined && typeof v !== 'function' && typeof v !== 'symbol';
}
