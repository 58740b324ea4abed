/**
 * The PostgreSQL shipper on its own (core/ledger/postgres.ts), against a real PostgreSQL: it ships
 * day files whatever wrote them (the memory store's `seq` lines, a Redis store's `seq: 0` lines,
 * lines appended to an older day's file), never a line before its end, never a line that is not a
 * record, one row per record across restarts and a lost position, and it waits out a PostgreSQL
 * that hangs or ends a connection in the same packet as an answer.
 */
import t from 'tap';
import { appendFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { tmpDir } from '../helpers/gateway.js';
import { PostgresServer } from '../helpers/postgres.js';
import { until } from '../helpers/upstream.js';
import { createLogger } from '../../core/log.js';
import { openPostgresLedger, type PostgresLedger, type ShipperMetrics } from '../../core/ledger/postgres.js';
import { fileLine } from '../../core/ledger/files.js';
import type { LedgerRecord } from '../../core/ledger/record.js';

t.setTimeout(300_000);

let pg: PostgresServer;
t.before(async () => {
  pg = await PostgresServer.start();
});
t.teardown(() => pg?.destroy());

const DAY = 86_400_000;
const day0 = Date.UTC(2026, 0, 10);
const dayName = (ts: number) => `${new Date(ts).toISOString().slice(0, 10)}.jsonl`;

function rec(id: string, ts: number, extra: Partial<LedgerRecord> = {}): LedgerRecord {
  return {
    id,
    type: 'request',
    ts,
    user: 'alice',
    key: 'k1',
    group: 'chat',
    model_requested: 'm',
    model: 'm',
    provider: 'mock',
    account: null,
    protocol_in: 'openai-chat',
    protocol_out: 'openai-chat',
    stream: false,
    status: 200,
    billing: 'balance',
    input_tokens: 10,
    output_tokens: 5,
    cache_read_tokens: 0,
    cache_write_tokens: 0,
    reasoning_tokens: null,
    usage_source: 'reported',
    estimate_reason: null,
    list_micros: 25,
    rate_ppm: 1_000_000,
    charged_micros: 25,
    duration_ms: 100,
    ttft_ms: null,
    attempts: 1,
    reference: null,
    actor: null,
    ...extra,
  };
}

interface Harness {
  ledger: PostgresLedger;
  logs: Record<string, any>[];
  shipped: number;
  rejected: number;
  up?: boolean;
}

let dbs = 0;
async function open(dir: string, db: string, opts: { shipTimeoutMs?: number; url?: string } = {}): Promise<Harness> {
  const h = { logs: [] as Record<string, any>[], shipped: 0, rejected: 0 } as Harness;
  const metrics: ShipperMetrics = {
    backlog: () => undefined,
    shipped: (n) => (h.shipped += n),
    rejected: (n) => (h.rejected += n),
    reachable: (up) => (h.up = up),
  };
  h.ledger = await openPostgresLedger({
    url: opts.url ?? pg.url(db),
    table: 'ledger_records',
    batchSize: 3,
    dir,
    log: createLogger('debug', (l) => h.logs.push(JSON.parse(l) as Record<string, any>)),
    metrics,
    pollMs: 50,
    fullScanMs: 100,
    ...opts,
  });
  return h;
}

async function newDb(): Promise<string> {
  const name = `ship${++dbs}`;
  await pg.query(`CREATE DATABASE ${name}`, [], 'postgres');
  return name;
}

const ids = async (db: string) => (await pg.query<{ id: string }>('SELECT id FROM ledger_records ORDER BY id', [], db)).map((r) => r.id);
const rowCount = async (db: string) =>
  Number((await pg.query<{ n: string }>('SELECT count(*) AS n FROM ledger_records', [], db).catch(() => [{ n: '-1' }]))[0].n);

t.test('day files from any writer: each complete record line shipped once, torn and foreign lines never', async (t) => {
  const dir = tmpDir('ship-');
  const db = await newDb();
  // The memory store's lines (seq) and a Redis store's drained lines (seq 0) in one day's file.
  writeFileSync(
    path.join(dir, dayName(day0)),
    fileLine(1, rec('req_a', day0 + 1)) + fileLine(2, rec('req_b', day0 + 2)) + fileLine(0, rec('req_c', day0 + 3)),
  );
  const h = await open(dir, db);
  t.teardown(() => h.ledger.close());
  t.ok(await until(async () => (await rowCount(db)) === 3), 'the first file is shipped');
  t.equal(h.up, true);

  // A line being written (no newline yet) waits for its end.
  const next = path.join(dir, dayName(day0 + DAY));
  const line = fileLine(3, rec('req_d', day0 + DAY + 1));
  appendFileSync(next, line.slice(0, 40));
  await h.ledger.shipper.flush(10_000);
  await h.ledger.shipper.flush(10_000);
  t.same(await ids(db), ['req_a', 'req_b', 'req_c'], 'not before its end');
  appendFileSync(next, line.slice(40));
  t.ok(await until(async () => (await rowCount(db)) === 4), 'shipped once complete');

  // A line that is no record (hand-edited, garbage) is left out and counted; the rest go on.
  appendFileSync(next, 'this is not json\n{"seq":4,"id":"x"}\n' + fileLine(0, rec('req_e', day0 + DAY + 2)));
  t.ok(await until(async () => (await rowCount(db)) === 5), 'the record after them is shipped');
  t.equal(h.rejected, 2, 'two lines rejected');
  t.ok(h.logs.some((l) => l.msg === 'ledger: lines of a day file that are not ledger records were not shipped' && l.lines === 2));

  // A record replayed into an older day's file (the store writes a record in the day of its time).
  appendFileSync(path.join(dir, dayName(day0)), fileLine(0, rec('req_old', day0 + 5)));
  t.ok(await until(async () => (await rowCount(db)) === 6), "a line appended to an older day's file is found");

  // A record PostgreSQL refuses (an integer out of its column's range): logged, the others of its batch go in.
  appendFileSync(
    next,
    fileLine(5, rec('req_f', day0 + DAY + 3)) +
      fileLine(6, rec('req_bad', day0 + DAY + 4, { status: 3e9 })) +
      fileLine(7, rec('req_g', day0 + DAY + 5)),
  );
  t.ok(await until(async () => (await rowCount(db)) === 8), 'the batch around the refused record is shipped');
  t.notOk((await ids(db)).includes('req_bad'));
  t.equal(h.rejected, 3);
  t.ok(h.logs.some((l) => l.msg === 'ledger: PostgreSQL refused a record; it stays in the day file only' && /req_bad/.test(l.record)));
  t.same(await ids(db), ['req_a', 'req_b', 'req_c', 'req_d', 'req_e', 'req_f', 'req_g', 'req_old']);
  const row = (await pg.query('SELECT * FROM ledger_records WHERE id = $1', ['req_d'], db))[0];
  t.match(row, { type: 'request', user: 'alice', key: 'k1', stream: false, status: 200, usage_source: 'reported', ttft_ms: null });
  t.equal(Number(row.charged_micros), 25, 'money as an integer of micro-USD');
});

t.test('across restarts: shipping resumes at the saved position; a lost position sends again without doubling', async (t) => {
  const dir = tmpDir('ship-restart-');
  const db = await newDb();
  const file = path.join(dir, dayName(day0));
  writeFileSync(file, [1, 2, 3, 4, 5].map((i) => fileLine(i, rec(`req_${i}`, day0 + i))).join(''));
  let h = await open(dir, db);
  t.ok(await until(async () => (await rowCount(db)) === 5));
  await h.ledger.close();
  const position = JSON.parse(readFileSync(path.join(dir, 'postgres-ledger_records.position.json'), 'utf8'));
  t.match(position, {
    v: 1,
    target: `127.0.0.1:${pg.port}/${db}#ledger_records`,
    files: { [dayName(day0)]: { offset: readFileSync(file).length } },
  });
  t.notOk(JSON.stringify(position).includes('postgres@'), 'no credentials in the position file');

  appendFileSync(file, fileLine(6, rec('req_6', day0 + 6)) + fileLine(7, rec('req_7', day0 + 7)));
  h = await open(dir, db);
  t.ok(await until(async () => (await rowCount(db)) === 7));
  t.equal(h.shipped, 2, 'only the lines past the position are sent');
  await h.ledger.close();

  // The position lost (or older than the table): everything is sent again, and the table keeps one row each.
  rmSync(path.join(dir, 'postgres-ledger_records.position.json'));
  h = await open(dir, db);
  t.teardown(() => h.ledger.close());
  t.ok(await until(() => h.shipped === 7), 'all seven sent again');
  t.equal(await rowCount(db), 7, 'no row twice');
  t.ok(existsSync(path.join(dir, 'postgres-ledger_records.position.json')), 'the position is saved again');
});

t.test(
  'a day file whose lines moved under the saved position (a power loss, then the journal wrote them again) is shipped again in full',
  async (t) => {
    const dir = tmpDir('ship-moved-');
    const db = await newDb();
    const file = path.join(dir, dayName(day0));
    const line = (i: number) => fileLine(i, rec(`req_${i}`, day0 + i));
    writeFileSync(file, [1, 2, 3, 4].map(line).join(''));
    let h = await open(dir, db);
    t.ok(await until(async () => (await rowCount(db)) === 4));
    await h.ledger.close();
    // Before the loss the file held 1–6 (5 and 6 not shipped yet); the loss took 3 from the middle,
    // and the store wrote it again at the end. Line 5 now ends where the position says 4 ended.
    writeFileSync(file, [1, 2, 4, 5, 6, 3].map(line).join(''));
    h = await open(dir, db);
    t.teardown(() => h.ledger.close());
    t.ok(await until(async () => (await rowCount(db)) === 6), 'every record in the table, 5 included');
    t.same(await ids(db), ['req_1', 'req_2', 'req_3', 'req_4', 'req_5', 'req_6']);
    t.ok(
      h.logs.some((l) => String(l.msg).includes('changed under the saved position')),
      'the operator is told why the file is sent again',
    );
  },
);

t.test('a PostgreSQL that hangs (SIGSTOP): its statements time out, the records wait, and arrive once it answers', async (t) => {
  const dir = tmpDir('ship-hang-');
  mkdirSync(dir, { recursive: true });
  const db = await newDb();
  const file = path.join(dir, dayName(day0));
  writeFileSync(file, fileLine(1, rec('req_1', day0 + 1)));
  const h = await open(dir, db, { shipTimeoutMs: 1_500 });
  t.teardown(() => h.ledger.close());
  t.ok(await until(async () => (await rowCount(db)) === 1));
  pg.pause();
  try {
    appendFileSync(file, fileLine(2, rec('req_2', day0 + 2)) + fileLine(3, rec('req_3', day0 + 3)));
    t.ok(await until(() => h.up === false), 'the shipper sees it is unavailable');
    t.ok(h.logs.some((l) => l.msg === 'ledger: PostgreSQL unavailable; records wait in the day files and are shipped when it is back'));
  } finally {
    pg.resume();
  }
  t.ok(await until(async () => (await rowCount(db)) === 3, 60_000), 'the waiting records arrive');
  t.same(await ids(db), ['req_1', 'req_2', 'req_3']);
  t.ok(await until(() => h.up === true));
  t.equal(h.logs.filter((l) => l.msg === 'ledger: PostgreSQL reachable again; shipping the records waiting in the day files').length, 1);
});

/**
 * A TCP relay in front of PostgreSQL that can end connections the way a shutting-down server does
 * on a busy client: the answer's ReadyForQuery and the FATAL 57P01 that follows it arrive in one
 * read, so the driver sees the error before the code awaiting the answer has run.
 */
async function terminatingRelay(port: number) {
  const fatal = (() => {
    const fields = Buffer.from('SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0\0');
    const head = Buffer.alloc(5);
    head.write('E');
    head.writeInt32BE(fields.length + 4, 1);
    return Buffer.concat([head, fields]);
  })();
  let cuts = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(port, '127.0.0.1');
    sockets.add(client).add(upstream);
    client.on('close', () => sockets.delete(client)).on('error', () => upstream.destroy());
    upstream.on('close', () => sockets.delete(upstream)).on('error', () => client.destroy());
    client.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => {
      // An answer ends with ReadyForQuery: 'Z', length 5, the transaction status.
      const answered = chunk.length >= 6 && chunk[chunk.length - 6] === 0x5a && chunk.readInt32BE(chunk.length - 5) === 5;
      if (answered && cuts > 0) {
        cuts--;
        client.end(Buffer.concat([chunk, fatal]));
        upstream.destroy();
      } else client.write(chunk);
    });
    upstream.on('end', () => client.end());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: (db: string) => `postgres://postgres@127.0.0.1:${(server.address() as net.AddressInfo).port}/${db}`,
    /** The next `n` answers, whatever connection they are on, are followed by the FATAL and the end. */
    cut(n: number) {
      cuts = n;
    },
    get pending() {
      return cuts;
    },
    close() {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

t.test(
  'a PostgreSQL that ends connections in the same packet as its answers: the process lives on, every record arrives once',
  async (t) => {
    const dir = tmpDir('ship-terminated-');
    mkdirSync(dir, { recursive: true });
    const db = await newDb();
    const relay = await terminatingRelay(pg.port);
    t.teardown(() => relay.close());
    const file = path.join(dir, dayName(day0));
    writeFileSync(file, fileLine(1, rec('req_1', day0 + 1)));
    const h = await open(dir, db, { url: relay.url(db) });
    t.teardown(() => h.ledger.close());
    t.ok(await until(async () => (await rowCount(db)) === 1));
    // The shipping connection's next answers: an INSERT's, then each new connection's first (its
    // startup), then a SELECT 1's.
    relay.cut(4);
    for (let i = 2; i <= 6; i++) {
      appendFileSync(file, fileLine(i, rec(`req_${i}`, day0 + i)));
      await until(async () => (await rowCount(db)) >= i || relay.pending === 0, 10_000);
    }
    t.equal(relay.pending, 0, 'every planned cut happened');
    t.ok(await until(async () => (await rowCount(db)) === 6, 60_000), 'every record arrives');
    t.same(await ids(db), ['req_1', 'req_2', 'req_3', 'req_4', 'req_5', 'req_6'], 'each once');
    t.ok(await until(() => h.up === true), 'the shipper is up again');
  },
);
