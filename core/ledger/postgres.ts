/**
 * The ledger in PostgreSQL (`ledger.postgres`, docs/ledger.md): the day files (files.ts) stay the
 * ledger's first copy and are the outbox; a shipper copies their lines into a table, and ledger
 * queries are answered from that table.
 *
 * - Off the request path: nothing a request does waits for PostgreSQL. The store writes its day
 *   files as always; the shipper reads them in the background (a poll every `pollMs`) and inserts
 *   what is new in batches of `batch_size`.
 * - At least once, never twice: the shipper's position in each day file (the byte offset past the
 *   last line shipped, and the file's inode) is saved in the ledger folder
 *   (`postgres-<table>.position.json`, written to a temporary file then renamed) only after the
 *   batch's INSERT committed; a crash between the two sends the batch again, and
 *   `INSERT … ON CONFLICT (id) DO NOTHING` (the record id is the primary key) keeps one row.
 * - PostgreSQL unreachable: the records stay in the day files, the shipper retries with a backoff
 *   (up to 5 s), logs once when it goes away and once when it is back, and then ships the backlog.
 *   Whatever wrote the files (the memory store's journal, or a Redis store draining its stream
 *   into them with `seq: 0`) is shipped alike: a position is per file, so lines appended to an
 *   older day's file (records replayed at start carry their own time) are found too.
 * - Migrations ship here (`MIGRATIONS`) and run at start, once per table, recorded in
 *   `ledger_migrations` under an advisory lock (several gateways may start at once).
 * - The reader answers from the table: totals with GROUP BY, pages by offset, and the export by
 *   keyset pagination on (ts, id) in batches, so a month of records streams in bounded memory
 *   (`pg-cursor` is not needed). Before answering it lets the shipper catch up with what this
 *   instance wrote (bounded wait), so a query sees this instance's records up to the moment asked.
 */
import { open, readdir, readFile, rename, stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import type { Logger } from '../log.js';
import { GatewayError } from '../errors.js';
import { FIELDS, type LedgerRecord } from './record.js';
import { dayOf, type GroupBy, type LedgerQuery, type LedgerReader, type SummaryRow } from './index.js';
import { lineSeqId } from './files.js';

const DAY = 86_400_000;
const FILE = /^\d{4}-\d{2}-\d{2}\.jsonl$/;
/** The advisory lock migrations take (any constant; the same in every gateway). */
const MIGRATION_LOCK = 7_205_301_125;
/** Bytes read from a day file at a time. */
const CHUNK = 1 << 20;
/**
 * Rows per query of an export: small, so that a batch is consumed before the young generation is
 * collected twice (a batch that lives longer is promoted, and the old generation grows in steps of
 * tens of MiB before it is collected).
 */
const STREAM_BATCH = 250;
/** A full scan of every day file this often (between, only the newest two are looked at). */
const FULL_SCAN_MS = 30_000;
/** How long the shipper's statements (a batch, the migrations) may go unanswered by default. */
const SHIP_TIMEOUT_MS = 60_000;
/** The position is saved at most this often while a backlog drains (and at the end of each pass). */
const SAVE_EVERY_MS = 1_000;
const MAX_BACKOFF_MS = 5_000;

/** A SQL identifier, quoted (the table name is checked by the config schema; `user`, `group` are reserved words). */
const ident = (s: string) => `"${s.replace(/"/g, '""')}"`;

const COLUMNS = FIELDS.map(ident).join(', ');

/**
 * The schema, one step per version; each runs once per table, in a transaction with its entry in
 * `ledger_migrations`. A shipped migration is never edited: a change is the next version.
 *
 * `id` sorts bytewise (COLLATE "C") so the keyset order (ts, id) is the same on every database;
 * the indexes end in `id` so that order is read from the index for a user, a key or a range.
 */
export const MIGRATIONS: readonly { version: number; name: string; sql: (table: string) => string }[] = [
  {
    version: 1,
    name: 'the ledger records table',
    sql: (table) => {
      const t = ident(table);
      const ix = (suffix: string) => ident(`${table}_${suffix}`);
      return `
CREATE TABLE ${t} (
  "id" text COLLATE "C" PRIMARY KEY,
  "type" text NOT NULL,
  "ts" bigint NOT NULL,
  "user" text NOT NULL,
  "key" text,
  "group" text,
  "model_requested" text,
  "model" text,
  "provider" text,
  "account" text,
  "protocol_in" text,
  "protocol_out" text,
  "stream" boolean,
  "status" integer,
  "billing" text,
  "input_tokens" bigint NOT NULL DEFAULT 0,
  "output_tokens" bigint NOT NULL DEFAULT 0,
  "cache_read_tokens" bigint NOT NULL DEFAULT 0,
  "cache_write_tokens" bigint NOT NULL DEFAULT 0,
  "reasoning_tokens" bigint,
  "usage_source" text,
  "estimate_reason" text,
  "list_micros" bigint NOT NULL DEFAULT 0,
  "rate_ppm" bigint,
  "charged_micros" bigint NOT NULL,
  "duration_ms" bigint,
  "ttft_ms" bigint,
  "attempts" integer,
  "reference" text,
  "actor" text
);
CREATE INDEX ${ix('user_ts')} ON ${t} ("user", "ts", "id");
CREATE INDEX ${ix('key_ts')} ON ${t} ("key", "ts", "id");
CREATE INDEX ${ix('ts')} ON ${t} ("ts", "id");
`;
    },
  },
];

/**
 * bigint and numeric (sums) as JavaScript numbers: every value was a safe integer in the gateway
 * (micro-USD, tokens, epoch ms) and sums stay far below 2^53 (9 billion USD in micro-USD).
 */
const TYPES = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === 20 || oid === 1700 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
};

/** What the shipper reports (core/metrics.ts series, wired by the server). */
export interface ShipperMetrics {
  /** Bytes of complete and incomplete lines in the day files not yet shipped. */
  backlog(bytes: number): void;
  shipped(records: number): void;
  /** Lines that are not a ledger record (or that PostgreSQL refused), left out. */
  rejected(records: number): void;
  reachable(up: boolean): void;
}

export interface PostgresLedgerOptions {
  url: string;
  table: string;
  batchSize: number;
  /** The ledger's day files (the outbox). */
  dir: string;
  log: Logger;
  metrics?: ShipperMetrics;
  /** How often the day files are looked at for new lines (default 250 ms). */
  pollMs?: number;
  /** A query waits at most this long for the shipper to catch up (default 5 s). */
  settleMs?: number;
  /** A statement of the shipper unanswered this long fails and is sent again (default 60 s). */
  shipTimeoutMs?: number;
  /** Every day file is looked at this often; between, the newest two (default 30 s). */
  fullScanMs?: number;
}

/** Runs the migrations once per process (again after a failure). */
class Schema {
  private done?: Promise<void>;

  constructor(
    private readonly pool: pg.Pool,
    private readonly table: string,
    private readonly log: Logger,
    private readonly timeoutMs: number,
  ) {}

  ready(): Promise<void> {
    this.done ??= this.migrate().catch((e: unknown) => {
      this.done = undefined;
      throw e;
    });
    return this.done;
  }

  private migrate(): Promise<void> {
    return guarded(this.pool, this.timeoutMs, (c) => this.apply(c));
  }

  private async apply(c: pg.PoolClient): Promise<void> {
    try {
      await c.query('BEGIN');
      await c.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      await c.query(
        'CREATE TABLE IF NOT EXISTS ledger_migrations (table_name text NOT NULL, version integer NOT NULL, name text NOT NULL, ' +
          'applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (table_name, version))',
      );
      const { rows } = await c.query<{ version: number }>('SELECT version FROM ledger_migrations WHERE table_name = $1', [this.table]);
      const have = new Set(rows.map((r) => r.version));
      const applied: number[] = [];
      for (const m of MIGRATIONS) {
        if (have.has(m.version)) continue;
        await c.query(m.sql(this.table));
        await c.query('INSERT INTO ledger_migrations (table_name, version, name) VALUES ($1, $2, $3)', [this.table, m.version, m.name]);
        applied.push(m.version);
      }
      await c.query('COMMIT');
      if (applied.length > 0) this.log.info('ledger: PostgreSQL migrations applied', { table: this.table, versions: applied });
    } catch (e) {
      await c.query('ROLLBACK').catch(() => undefined);
      throw e;
    }
  }
}

interface FilePosition {
  ino: number;
  /** Bytes of the file shipped: the end of the last line sent. */
  offset: number;
  /** The id of the last record before `offset`: checked when a process first resumes the file. */
  last?: string;
}

interface PositionFile {
  v: 1;
  /** Where the records went: host, port, database and table (no credentials). A new target ships everything again. */
  target: string;
  files: Record<string, FilePosition>;
}

/** Where a URL's records go, without its credentials. */
function targetOf(url: string, table: string): string {
  try {
    const u = new URL(url);
    const host = u.searchParams.get('host') ?? u.hostname;
    return `${host}:${u.port || '5432'}${u.pathname}#${table}`;
  } catch {
    return `?#${table}`;
  }
}

/** SQLSTATE classes of a row PostgreSQL refuses (data exception, integrity violation): not a reason to stop shipping. */
const refusedRow = (e: unknown) => {
  const code = (e as { code?: unknown }).code;
  return typeof code === 'string' && (code.startsWith('22') || code.startsWith('23'));
};

/**
 * Runs `fn` on a connection of the pool, giving up when the connection and `fn` have not finished
 * within `ms` (a PostgreSQL that hangs): the connection is then cut and the statement fails (it is
 * run again later). The timer holds the connection only, never a statement's values or results
 * (pg's own query_timeout holds both until the statement ends).
 */
async function guarded<T>(pool: pg.Pool, ms: number, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  let client: pg.PoolClient | undefined;
  let timedOut = false;
  const cut = (c: pg.PoolClient) => {
    // A hung server answers no orderly close either: the socket is destroyed.
    c.release(new Error('abandoned'));
    (c as unknown as { connection?: { stream?: { destroy?(): void } } }).connection?.stream?.destroy?.();
  };
  const work = (async () => {
    const c = await pool.connect();
    if (timedOut) {
      cut(c);
      throw new Error('abandoned');
    }
    client = c;
    return fn(c);
  })();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      reject(new Error(`PostgreSQL did not answer within ${ms / 1000} s`));
      work.catch(() => undefined); // abandoned: its failure, which follows the cut, is expected
      if (client) {
        const c = client;
        client = undefined;
        cut(c);
      }
    }, ms);
  });
  let failed: unknown;
  try {
    return await Promise.race([work, timeout]);
  } catch (e) {
    failed = e;
    throw e;
  } finally {
    clearTimeout(timer);
    if (client) {
      // A statement PostgreSQL refused (an SQLSTATE) leaves its connection usable; anything else
      // discards it: a connection that broke, or the server ending it (class 08, connection
      // exception; class 57, operator intervention: a shutdown, a terminated backend).
      const code = (failed as { code?: unknown } | undefined)?.code;
      const refused = typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && !/^(08|57)/.test(code);
      client.release(failed === undefined || refused ? undefined : (failed as Error));
    }
  }
}

/**
 * Whether the last record line before the position is still the one shipped last. False after the
 * file's lines moved (the memory store writes again, at the end, what a power loss took from the
 * middle): lines never shipped may now lie before the position.
 */
async function lineEndsAt(fh: FileHandle, pos: FilePosition): Promise<boolean> {
  if (pos.last === undefined || pos.offset === 0) return true; // an older position file: nothing to compare
  const len = Math.min(pos.offset, 64 * 1024);
  const buf = Buffer.alloc(len);
  await fh.read(buf, 0, len, pos.offset - len);
  if (buf[len - 1] !== 0x0a) return false;
  const lines = buf.toString('utf8', 0, len - 1).split('\n');
  for (let i = lines.length - 1; i >= (len < pos.offset ? 1 : 0); i--) {
    const r = lineSeqId(lines[i]);
    if (r) return r.id === pos.last;
  }
  return false;
}

/** The id of a line the shipper can send (a JSON object with a record's identifying fields), else undefined. */
function recordLineId(line: string): string | undefined {
  let r: unknown;
  try {
    r = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (typeof r !== 'object' || r === null) return undefined;
  const o = r as Record<string, unknown>;
  const ok =
    typeof o.id === 'string' &&
    typeof o.user === 'string' &&
    Number.isSafeInteger(o.ts) &&
    (o.type === 'request' || o.type === 'topup' || o.type === 'correction') &&
    Number.isSafeInteger(o.charged_micros);
  return ok ? (o.id as string) : undefined;
}

/**
 * Copies the day files' lines into PostgreSQL, in the background (see the file's header).
 */
export class LedgerShipper {
  private readonly positionFile: string;
  private readonly target: string;
  private position: PositionFile;
  /** Sizes last seen, for the backlog. */
  private readonly sizes = new Map<string, number>();
  /** Files whose saved position this process has checked against their content. */
  private readonly checked = new Set<string>();
  private reachable: boolean | undefined;
  private stopping = false;
  /** Set at close: a pass in progress stops after its current batch. */
  private halt = false;
  /** A flush asked for a pass: the loop starts one without waiting for the poll. */
  private kicked = false;
  private loop?: Promise<void>;
  private wake?: () => void;
  private lastFullScan = 0;
  private lastSave = 0;
  private dirty = false;
  private started = 0;
  private completed = 0;
  private readonly flushes = new Set<{ pass: number; resolve: () => void }>();
  private readonly pollMs: number;
  private readonly timeoutMs: number;

  constructor(
    private readonly pool: pg.Pool,
    private readonly schema: Schema,
    private readonly opts: PostgresLedgerOptions,
  ) {
    this.pollMs = opts.pollMs ?? 250;
    this.timeoutMs = opts.shipTimeoutMs ?? SHIP_TIMEOUT_MS;
    this.positionFile = path.join(opts.dir, `postgres-${opts.table}.position.json`);
    this.target = targetOf(opts.url, opts.table);
    this.position = { v: 1, target: this.target, files: {} };
  }

  /** Loads the saved position and starts the loop. */
  async start(): Promise<void> {
    const text = await readFile(this.positionFile, 'utf8').catch((e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT') return undefined;
      throw e;
    });
    if (text !== undefined) {
      let saved: PositionFile | undefined;
      try {
        saved = JSON.parse(text) as PositionFile;
      } catch {
        this.opts.log.warn('ledger: the PostgreSQL position file is unreadable; shipping every day file again (rows are not doubled)', {
          file: this.positionFile,
        });
      }
      if (saved && saved.target !== this.target) {
        this.opts.log.info('ledger: a new PostgreSQL target; shipping every day file to it', { was: saved.target, now: this.target });
      } else if (saved?.files) this.position = { v: 1, target: this.target, files: saved.files };
    }
    this.loop = this.run();
  }

  /**
   * Resolves once a pass that started after this call has ended (everything this instance had
   * written by then is shipped), or at once while PostgreSQL is unreachable, or after `ms`.
   */
  flush(ms: number): Promise<void> {
    if (this.reachable === false || this.stopping || !this.loop) return Promise.resolve();
    return new Promise((resolve) => {
      const w = { pass: this.started + 1, resolve: () => (clearTimeout(timer), this.flushes.delete(w), resolve()) };
      const timer = setTimeout(w.resolve, ms);
      this.flushes.add(w);
      this.kicked = true;
      this.wake?.();
    });
  }

  /**
   * Stops the loop; with PostgreSQL reachable, one last pass ships what the files got last. Both
   * within `drainMs` (a batch still unanswered then is sent again at the next start).
   */
  async close(drainMs = 5_000): Promise<void> {
    this.stopping = true;
    this.halt = true;
    this.wake?.();
    const deadline = Date.now() + drainMs;
    const within = async (p: Promise<unknown>) => {
      let timer: NodeJS.Timeout | undefined;
      const done = await Promise.race([
        p.then(() => true),
        new Promise<false>((r) => {
          timer = setTimeout(() => r(false), Math.max(0, deadline - Date.now()));
        }),
      ]);
      clearTimeout(timer);
      return done;
    };
    if ((await within(this.loop ?? Promise.resolve())) && this.reachable === true) {
      this.halt = false;
      await within(this.pass().catch(() => undefined));
      this.halt = true;
    }
    await this.save(true);
    for (const w of [...this.flushes]) w.resolve();
  }

  private async run(): Promise<void> {
    let failures = 0;
    let delay = 0;
    while (!this.stopping) {
      if (delay > 0 && !this.kicked) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, delay);
          function done() {
            clearTimeout(timer);
            resolve();
          }
          this.wake = done;
        });
        this.wake = undefined;
        if (this.stopping) break;
      }
      this.kicked = false;
      const pass = ++this.started;
      try {
        await this.schema.ready();
        if (this.reachable !== true) {
          await guarded(this.pool, this.timeoutMs, (c) => c.query('SELECT 1'));
          this.up();
        }
        await this.pass();
        failures = 0;
        delay = this.pollMs;
        this.completed = pass;
        for (const w of [...this.flushes]) if (w.pass <= this.completed) w.resolve();
      } catch (e) {
        failures++;
        delay = Math.min(MAX_BACKOFF_MS, 250 * 2 ** failures);
        this.unreachable(e as Error);
        for (const w of [...this.flushes]) w.resolve();
      }
      await this.save(false);
    }
  }

  private up(): void {
    if (this.reachable === true) return;
    if (this.reachable === false) {
      this.opts.log.info('ledger: PostgreSQL reachable again; shipping the records waiting in the day files', {
        table: this.opts.table,
        backlog_bytes: this.backlog(),
      });
    } else this.opts.log.info('ledger: shipping records to PostgreSQL', { table: this.opts.table, target: this.target });
    this.reachable = true;
    this.opts.metrics?.reachable(true);
  }

  private unreachable(e: Error): void {
    if (this.reachable === false) {
      this.opts.log.debug('ledger: PostgreSQL still unavailable', { error: e });
      return;
    }
    this.reachable = false;
    this.opts.metrics?.reachable(false);
    this.opts.log.warn('ledger: PostgreSQL unavailable; records wait in the day files and are shipped when it is back', {
      table: this.opts.table,
      error: e,
    });
  }

  private backlog(): number {
    let bytes = 0;
    for (const [name, size] of this.sizes) bytes += Math.max(0, size - (this.position.files[name]?.offset ?? 0));
    return bytes;
  }

  /** Ships every complete line not shipped yet, file by file. */
  private async pass(): Promise<void> {
    // No folder yet (a store that has written nothing): nothing to ship.
    const all = await readdir(this.opts.dir).catch((e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT') return [] as string[];
      throw e;
    });
    const names = all.filter((f) => FILE.test(f)).sort();
    const full = Date.now() - this.lastFullScan >= (this.opts.fullScanMs ?? FULL_SCAN_MS);
    if (full) this.lastFullScan = Date.now();
    const present = new Set(names);
    for (const name of Object.keys(this.position.files)) {
      if (!present.has(name)) {
        // Deleted (retention): nothing more to ship from it.
        delete this.position.files[name];
        this.sizes.delete(name);
        this.dirty = true;
      }
    }
    for (const name of this.sizes.keys()) if (!present.has(name)) this.sizes.delete(name);
    const look = full ? names : names.filter((n, i) => i >= names.length - 2 || this.position.files[n] === undefined);
    for (const name of look) {
      if (this.halt) break;
      const st = await stat(path.join(this.opts.dir, name)).catch(() => undefined);
      if (!st) continue;
      this.sizes.set(name, st.size);
      const pos = this.position.files[name];
      if (pos && pos.ino === st.ino && pos.offset === st.size && this.checked.has(name)) continue;
      await this.shipFile(name);
    }
    this.opts.metrics?.backlog(this.backlog());
  }

  /** Ships the complete lines of one file past its position, a batch at a time. */
  private async shipFile(name: string): Promise<void> {
    let fh;
    try {
      fh = await open(path.join(this.opts.dir, name), 'r');
    } catch {
      return; // deleted meanwhile
    }
    try {
      const st = await fh.stat();
      let pos: FilePosition | undefined = this.position.files[name];
      // A new file under an old name (deleted by retention, then written again), one cut short, or
      // one whose lines moved under the position: from its start.
      if (pos && !this.checked.has(name) && pos.offset <= st.size && !(await lineEndsAt(fh, pos))) {
        this.opts.log.warn(
          'ledger: a day file changed under the saved position (its lines were written again after a power loss?); shipping it again from its start (rows are not doubled)',
          {
            file: name,
          },
        );
        pos = undefined;
      }
      this.checked.add(name);
      if (!pos || pos.ino !== st.ino || pos.offset > st.size) {
        pos = { ino: st.ino, offset: 0 };
        this.position.files[name] = pos;
        this.dirty = true;
      }
      this.sizes.set(name, st.size);
      const end = st.size;
      const buf = Buffer.alloc(Math.min(CHUNK, Math.max(1, end - pos.offset)));
      let readAt = pos.offset;
      let carry: Buffer = Buffer.alloc(0);
      let batch: string[] = [];
      let bad = 0;
      /** The byte offset past the last line in `batch` (or skipped). */
      let batchEnd = pos.offset;
      let lastId = pos.last;
      while (readAt < end) {
        const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, end - readAt), readAt);
        if (bytesRead === 0) break;
        readAt += bytesRead;
        const data = carry.length > 0 ? Buffer.concat([carry, buf.subarray(0, bytesRead)]) : buf.subarray(0, bytesRead);
        let start = 0;
        const base = readAt - data.length;
        for (let nl = data.indexOf(10, start); nl !== -1; nl = data.indexOf(10, start)) {
          const line = data.toString('utf8', start, nl);
          start = nl + 1;
          batchEnd = base + start;
          if (line === '') continue;
          const id = recordLineId(line);
          if (id !== undefined) {
            batch.push(line);
            lastId = id;
          } else bad++;
          if (batch.length >= this.opts.batchSize) {
            await this.insert(batch, name);
            batch = [];
            this.advance(name, pos, batchEnd, lastId);
            await this.save(false);
            if (this.halt) return;
          }
        }
        // An incomplete last line (being written, or torn) waits for its end.
        carry = Buffer.from(data.subarray(start));
      }
      if (batch.length > 0) await this.insert(batch, name);
      this.advance(name, pos, batchEnd, lastId);
      if (bad > 0) {
        this.opts.metrics?.rejected(bad);
        this.opts.log.warn('ledger: lines of a day file that are not ledger records were not shipped', { file: name, lines: bad });
      }
    } finally {
      await fh.close();
    }
  }

  private advance(name: string, pos: FilePosition, offset: number, last: string | undefined): void {
    if (offset === pos.offset) return;
    pos.offset = offset;
    pos.last = last;
    this.position.files[name] = pos;
    this.dirty = true;
    this.opts.metrics?.backlog(this.backlog());
  }

  /** One INSERT of a batch (idempotent); a row PostgreSQL refuses is logged and left out, the rest go in. */
  private async insert(lines: string[], file: string): Promise<void> {
    const sql =
      `INSERT INTO ${ident(this.opts.table)} (${COLUMNS}) SELECT ${COLUMNS} FROM json_populate_recordset(NULL::${ident(this.opts.table)}, $1::json) ` +
      'ON CONFLICT ("id") DO NOTHING';
    try {
      await guarded(this.pool, this.timeoutMs, (c) => c.query(sql, [`[${lines.join(',')}]`]));
      this.opts.metrics?.shipped(lines.length);
      return;
    } catch (e) {
      if (!refusedRow(e)) throw e;
    }
    // One of the rows is refused: each on its own, so one bad line does not hold the others back.
    let refused = 0;
    for (const line of lines) {
      try {
        await guarded(this.pool, this.timeoutMs, (c) => c.query(sql, [`[${line}]`]));
      } catch (e) {
        if (!refusedRow(e)) throw e;
        refused++;
        this.opts.log.error('ledger: PostgreSQL refused a record; it stays in the day file only', {
          file,
          error: e as Error,
          record: line.slice(0, 300),
        });
      }
    }
    this.opts.metrics?.shipped(lines.length - refused);
    this.opts.metrics?.rejected(refused);
  }

  /**
   * Writes the position (temporary file, fsync, rename): at most every second while a backlog
   * drains, else at once. A failure is logged and retried with the next save: the lines since the
   * last saved position are only shipped again.
   */
  private async save(now: boolean): Promise<void> {
    if (!this.dirty) return;
    if (!now && Date.now() - this.lastSave < SAVE_EVERY_MS && !this.idle()) return;
    this.dirty = false;
    this.lastSave = Date.now();
    const tmp = `${this.positionFile}.${process.pid}.tmp`;
    try {
      const fh = await open(tmp, 'w');
      try {
        await fh.writeFile(JSON.stringify(this.position));
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, this.positionFile);
    } catch (e) {
      this.dirty = true;
      this.opts.log.warn('ledger: could not save the PostgreSQL position (lines since the last one may be shipped again)', {
        file: this.positionFile,
        error: e as Error,
      });
    }
  }

  /** Between passes (the loop saves after each): the position is saved at once. */
  private idle(): boolean {
    return this.started === this.completed || this.reachable === false;
  }
}

const EMPTY = { j: '' };

/** The ledger as PostgreSQL holds it. */
export class PostgresLedgerReader implements LedgerReader {
  readonly source = 'postgres';

  constructor(
    private readonly pool: pg.Pool,
    private readonly table: string,
    private readonly schema: Schema,
    private readonly settle: () => Promise<void>,
    private readonly log: Logger,
  ) {}

  private async query<R extends pg.QueryResultRow>(text: string, values: unknown[]): Promise<R[]> {
    try {
      await this.schema.ready();
      return (await this.pool.query<R>(text, values)).rows;
    } catch (e) {
      this.log.warn('ledger: a query to PostgreSQL failed', { error: e as Error });
      throw new GatewayError('BILLING_SERVICE', { message: 'The ledger database (PostgreSQL) is unreachable', cause: e });
    }
  }

  async *stream(q: LedgerQuery): AsyncGenerator<LedgerRecord> {
    await this.settle();
    let after: [number, string] | undefined;
    for (;;) {
      const values: unknown[] = [];
      const conds = where(q, values);
      if (after) {
        values.push(after[0], after[1]);
        conds.push(`("ts", "id") > ($${values.length - 1}, $${values.length})`);
      }
      values.push(STREAM_BATCH);
      // Each row as its JSON text (one string, parsed here as the day files' lines are) rather than
      // thirty column values: far less garbage per record, so the heap stays small while a month streams.
      const rows = await this.query<{ j: string }>(
        `SELECT row_to_json(r)::text AS j FROM (SELECT ${COLUMNS} FROM ${ident(this.table)} WHERE ${conds.join(' AND ')} ` +
          `ORDER BY "ts", "id" LIMIT $${values.length}) r`,
        values,
      );
      let last: LedgerRecord | undefined;
      for (let i = 0; i < rows.length; i++) {
        last = JSON.parse(rows[i].j) as LedgerRecord;
        rows[i] = EMPTY; // what was written need not stay while the rest of the batch is
        yield last;
      }
      if (rows.length < STREAM_BATCH || !last) return;
      after = [last.ts, last.id];
    }
  }

  async summary(q: LedgerQuery, by: readonly GroupBy[]): Promise<SummaryRow[]> {
    await this.settle();
    const values: unknown[] = [];
    const conds = where(q, values);
    const groups = by.map((b, i) => `${GROUP_EXPR[b]} AS g${i}`);
    const req = `FILTER (WHERE "type" = 'request')`;
    const sum = (c: string) => `coalesce(sum(${ident(c)}) ${req}, 0) AS ${ident(c)}`;
    const rows = await this.query<Record<string, string | number>>(
      `SELECT ${[...groups, 'count(*) AS records', `count(*) FILTER (WHERE "type" = 'request' AND "usage_source" IS DISTINCT FROM 'late') AS requests`].join(', ')}, ` +
        ['input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_write_tokens', 'list_micros', 'charged_micros'].map(sum).join(', ') +
        `, coalesce(sum("charged_micros") FILTER (WHERE "type" <> 'request'), 0) AS credited_micros` +
        `, count(*) FILTER (WHERE "type" = 'request' AND "usage_source" = 'estimated') AS estimated` +
        ` FROM ${ident(this.table)} WHERE ${conds.join(' AND ')}` +
        (by.length > 0 ? ` GROUP BY ${by.map((_, i) => i + 1).join(', ')}` : ''),
      values,
    );
    const out: { id: string; row: SummaryRow }[] = [];
    for (const r of rows) {
      if (Number(r.records) === 0) continue; // no grouping and no records: no row (as the files answer)
      const vals = by.map((b, i) => (b === 'day' ? dayOf(Number(r[`g${i}`]) * DAY) : String(r[`g${i}`])));
      out.push({
        id: vals.join('\u0000'),
        row: {
          group: Object.fromEntries(by.map((b, i) => [b, vals[i]])),
          records: Number(r.records),
          requests: Number(r.requests),
          input_tokens: Number(r.input_tokens),
          output_tokens: Number(r.output_tokens),
          cache_read_tokens: Number(r.cache_read_tokens),
          cache_write_tokens: Number(r.cache_write_tokens),
          list_micros: Number(r.list_micros),
          charged_micros: Number(r.charged_micros),
          credited_micros: Number(r.credited_micros),
          estimated: Number(r.estimated),
        },
      });
    }
    // The order the files' summary gives (JavaScript's, not the database's collation).
    return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)).map((x) => x.row);
  }

  async page(q: LedgerQuery, offset: number, limit: number): Promise<{ records: LedgerRecord[]; more: boolean }> {
    await this.settle();
    const values: unknown[] = [];
    const conds = where(q, values);
    values.push(limit + 1, offset);
    const rows = await this.query<LedgerRecord>(
      `SELECT ${COLUMNS} FROM ${ident(this.table)} WHERE ${conds.join(' AND ')} ORDER BY "ts", "id" LIMIT $${values.length - 1} OFFSET $${values.length}`,
      values,
    );
    return { records: rows.slice(0, limit), more: rows.length > limit };
  }
}

/** The grouping expressions (a missing value groups as '', as in the files' summary). */
const GROUP_EXPR: Record<GroupBy, string> = {
  user: `coalesce("user", '')`,
  key: `coalesce("key", '')`,
  model: `coalesce("model", '')`,
  group: `coalesce("group", '')`,
  type: `"type"`,
  day: `("ts" / ${DAY})`,
};

/** The range (UTC days, both included) and filters as conditions, their values appended to `values`. */
function where(q: LedgerQuery, values: unknown[]): string[] {
  values.push(Date.parse(`${q.fromDay}T00:00:00Z`), Date.parse(`${q.toDay}T00:00:00Z`) + DAY);
  const conds = ['"ts" >= $1', '"ts" < $2'];
  for (const [col, v] of [
    ['user', q.user],
    ['key', q.key],
    ['type', q.type],
  ] as const) {
    if (v === undefined) continue;
    values.push(v);
    conds.push(`${ident(col)} = $${values.length}`);
  }
  return conds;
}

/** The ledger in PostgreSQL: its shipper (started) and its reader; `close()` at shutdown. */
export interface PostgresLedger {
  reader: PostgresLedgerReader;
  shipper: LedgerShipper;
  close(): Promise<void>;
}

/**
 * Connects lazily (nothing here waits for PostgreSQL: the gateway starts while it is away) and
 * starts shipping the day files in `opts.dir`.
 */
export async function openPostgresLedger(opts: PostgresLedgerOptions): Promise<PostgresLedger> {
  const common = {
    connectionString: opts.url,
    idleTimeoutMillis: 30_000,
    connectionTimeoutMillis: 10_000,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    application_name: 'llm-gateway ledger',
    types: TYPES,
  };
  // Not pg's query_timeout: its timer holds each statement's values and result until it ends,
  // which makes them outlive the young generation; measured, the gateway's RSS then grew by
  // 130 MiB over a 1,000,000-record export instead of a few. The shipper's one connection is
  // guarded by a timer of its own (`guarded`); queries are bounded by the server.
  const shipTimeoutMs = opts.shipTimeoutMs ?? SHIP_TIMEOUT_MS;
  const shipping = new pg.Pool({ ...common, max: 1, statement_timeout: shipTimeoutMs });
  const querying = new pg.Pool({ ...common, max: 4, statement_timeout: 300_000 });
  for (const pool of [shipping, querying]) {
    // An idle connection that breaks (PostgreSQL restarted) is reported here; the next query reconnects.
    pool.on('error', (e) => opts.log.debug('ledger: an idle PostgreSQL connection closed', { error: e }));
    // pg-pool listens for a connection's errors only while it is idle. A server that shuts down
    // sends its FATAL right after an answer; when both arrive in one read, the driver emits the
    // error before the code awaiting the answer has run (or has the connection it asked for), and
    // an error event nobody listens to ends the process. This listener stays for the connection's
    // life (an idle connection's error also reaches the pool's listener above); the connection is
    // then unusable, so pg-pool discards it when it is released.
    pool.on('connect', (c) => c.on('error', (e) => opts.log.debug('ledger: a PostgreSQL connection broke', { error: e })));
  }
  const schema = new Schema(shipping, opts.table, opts.log, shipTimeoutMs);
  const shipper = new LedgerShipper(shipping, schema, opts);
  await shipper.start();
  const settleMs = opts.settleMs ?? 5_000;
  const reader = new PostgresLedgerReader(querying, opts.table, schema, () => shipper.flush(settleMs), opts.log);
  return {
    reader,
    shipper,
    async close() {
      await shipper.close();
      // A connection still busy (a statement PostgreSQL does not answer) does not hold the shutdown.
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all([shipping.end().catch(() => undefined), querying.end().catch(() => undefined)]),
        new Promise((r) => (timer = setTimeout(r, 2_000))),
      ]);
      clearTimeout(timer);
    },
  };
}
