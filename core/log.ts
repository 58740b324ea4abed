/**
 * Structured logs on pino: one JSON object per line on stderr (`level` as a word, `time` ISO 8601,
 * `msg`). Lines go to a pipe or terminal asynchronously, so a slow log consumer never blocks the
 * event loop, and pending lines are flushed on exit. To a regular file (stderr redirected, as a
 * service manager or `2>>file` does) the lines of one event-loop turn are written together in one
 * synchronous write at its end (`TurnWriter`): a write call costs about 9 µs in a loaded gateway
 * (2–3 µs alone: the kernel's path runs cold there; bench/results/2026-11-27T05-59-write-costs.md),
 * and a turn under load ends about twenty requests; handing each line to libuv's thread pool
 * instead costs about 18 µs. The price: a process killed (SIGKILL) before its turn ends loses that
 * turn's lines, as the store's journal does; exit, a fatal error's exit included, writes them.
 * Level: `GATEWAY_LOG_LEVEL` (debug, info, warn, error, silent; default info; anything else is
 * refused at start). `info` has one access line per request; `warn` keeps upstream failures and the
 * access lines of 5xx answers; `debug` adds each upstream attempt that answered.
 *
 * What is never logged: keys (only key names), request or response bodies, credential headers,
 * query strings. Errors under `error` or `err` are written with their stack and their causes; a
 * `GatewayError` also with its code and status.
 *
 * Plugins receive a `Logger` (deps.log, ctx.log): the same four methods whatever the backend.
 */
import { fstatSync, writeSync } from 'node:fs';
import { pino, type DestinationStream, type Logger as Pino } from 'pino';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';
const LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error', 'silent'];

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  /** A logger whose lines all carry `fields`. */
  child(fields: Record<string, unknown>): Logger;
  /** Writes out lines still buffered (before exit). */
  flush?(): void;
  /** Whether lines at `level` are written (a caller can skip building a line's fields). */
  enabled?(level: LogLevel): boolean;
  /**
   * Writes the line `info` or `warn` would, from fields serialized already (`"a":1,"b":"x"`: JSON
   * members without braces): for the access line, built in one pass on every request instead of
   * an object for pino to walk. Absent: `logLine` gives the fields to `info` or `warn` instead.
   */
  line?(level: 'info' | 'warn', msg: string, members: string): void;
}

/** `log.line(...)`, or the same line through `info` / `warn` on a logger without it. */
export function logLine(log: Logger, level: 'info' | 'warn', msg: string, members: string): void {
  if (log.line) log.line(level, msg, members);
  else log[level](msg, JSON.parse(`{${members}}`) as Record<string, unknown>);
}

/** Receives each JSON line (without its newline): tests capture logs with one. */
export type LogSink = (line: string) => void;

/** The level `GATEWAY_LOG_LEVEL` names (unset or empty: info); throws for anything else. */
export function logLevel(value: string | undefined = process.env.GATEWAY_LOG_LEVEL): LogLevel {
  if (value === undefined || value === '') return 'info';
  if (LEVELS.includes(value as LogLevel)) return value as LogLevel;
  throw new Error(`GATEWAY_LOG_LEVEL '${value}' is not a log level: use ${LEVELS.join(', ')}`);
}

/**
 * Errors with their type, message, stack and causes; a GatewayError also with its catalogue code,
 * status and the plugin that threw (own serializer: pino's walks every property, and would take
 * the frozen catalogue entry for an error).
 */
function serializeError(v: unknown, depth = 0): unknown {
  if (!(v instanceof Error)) return v;
  const e = v as Error & { code?: unknown; status?: unknown; plugin?: unknown; errors?: unknown };
  const out: Record<string, unknown> = { type: e.constructor?.name || e.name, message: e.message, stack: e.stack };
  if (typeof e.code === 'string' || typeof e.code === 'number') out.code = e.code;
  if (typeof e.status === 'number') out.status = e.status;
  if (typeof e.plugin === 'string') out.plugin = e.plugin;
  if (depth < 5 && Array.isArray(e.errors)) out.errors = e.errors.map((x) => serializeError(x, depth + 1));
  if (depth < 5 && e.cause !== undefined) out.cause = e.cause instanceof Error ? serializeError(e.cause, depth + 1) : describe(e.cause);
  return out;
}

/**
 * A logger at `level` writing to `sink` (default: stderr, asynchronously), every line carrying `base`.
 */
export function createLogger(level: LogLevel = logLevel(), sink?: LogSink, base: Record<string, unknown> = {}): Logger {
  const destination: DestinationStream = sink
    ? { write: (s: string) => sink(s.endsWith('\n') ? s.slice(0, -1) : s) }
    : stderrIsFile()
      ? stderrFile()
      : pino.destination({ dest: 2, sync: false });
  const p = pino(
    {
      level,
      base: Object.keys(base).length > 0 ? base : undefined,
      messageKey: 'msg',
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      serializers: { error: serializeError, err: serializeError },
    },
    destination,
  );
  return wrap(p);
}

/**
 * Lines to a file descriptor of a regular file, one write per event-loop turn (see the header):
 * buffered until the turn's check phase, or until 64 KiB wait; written at once on `flush` and on
 * exit. A failed write drops what it held (there is nowhere to report it).
 */
class TurnWriter implements DestinationStream {
  private buf = '';
  private scheduled = false;
  private readonly onTurn = () => {
    this.scheduled = false;
    this.flushSync();
  };

  constructor(private readonly fd: number) {
    process.on('exit', () => this.flushSync());
  }

  write(line: string): void {
    this.buf += line;
    if (this.buf.length >= 65_536) this.flushSync();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.onTurn);
    }
  }

  flushSync(): void {
    if (this.buf === '') return;
    const text = this.buf;
    this.buf = '';
    try {
      const wrote = writeSync(this.fd, text);
      // A short write (a full disk, a file size limit): the rest as bytes, until it all went or fails.
      if (wrote < Buffer.byteLength(text)) {
        const rest = Buffer.from(text).subarray(wrote);
        // A write of nothing (never expected of a file) ends the attempt rather than spinning.
        for (let off = 0, n = 1; off < rest.length && n > 0; off += n) n = writeSync(this.fd, rest, off);
      }
    } catch {
      // dropped
    }
  }

  /** pino's `flush`: synchronous here, so a fatal error's `process.exit` right after loses nothing. */
  flush(cb?: (err?: Error) => void): void {
    this.flushSync();
    cb?.();
  }
}

/** One writer for stderr, shared by every logger of the process (one exit handler). */
let stderrWriter: TurnWriter | undefined;
const stderrFile = (): TurnWriter => (stderrWriter ??= new TurnWriter(2));

/** Whether stderr is a regular file (not a pipe, terminal or socket). */
function stderrIsFile(): boolean {
  try {
    return fstatSync(2).isFile();
  } catch {
    return false;
  }
}

/** `new Date().toISOString()`, made once per millisecond: a loaded gateway logs several lines in one. */
let isoAt = -1;
let isoText = '';
function isoNow(): string {
  const ms = Date.now();
  if (ms !== isoAt) {
    isoAt = ms;
    isoText = new Date(ms).toISOString();
  }
  return isoText;
}

function wrap(p: Pino): Logger {
  const call = (fn: (this: Pino, obj: object, msg: string) => void) => (msg: string, fields?: Record<string, unknown>) => {
    fn.call(p, fields ?? {}, msg);
  };
  const stream = (p as unknown as Record<symbol, DestinationStream>)[pino.symbols.streamSym];
  const own = (p as unknown as Record<symbol, string>)[pino.symbols.chindingsSym];
  return {
    line: (level, msg, members) => {
      if (!p.isLevelEnabled(level)) return;
      // pino's line: level, time, the logger's own fields, the line's, msg.
      stream.write(`{"level":"${level}","time":"${isoNow()}"${own}${members && ','}${members},"msg":${JSON.stringify(msg)}}\n`);
    },
    debug: call(p.debug),
    info: call(p.info),
    warn: call(p.warn),
    error: call(p.error),
    child: (fields) => wrap(p.child(fields)),
    flush: () => p.flush(),
    enabled: (level) => p.isLevelEnabled(level),
  };
}

const noop = () => undefined;
/** Logs nothing (tests, embedding). */
export const silentLogger: Logger = {
  debug: noop,
  info: noop,
  warn: noop,
  error: noop,
  child: () => silentLogger,
  flush: noop,
  enabled: () => false,
  line: noop,
};

/** A non-Error value as text: objects as JSON (never '[object Object]'). */
function describe(v: unknown): string {
  if (typeof v !== 'object' || v === null) return String(v);
  try {
    return JSON.stringify(v);
  } catch {
    return Object.prototype.toString.call(v);
  }
}
