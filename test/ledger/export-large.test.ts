/**
 * A month of records streams: 1,000,000 records written straight into the day files (a generator,
 * not requests), exported through /admin/ledger/export from the day files and, once the shipper
 * has copied them all, from PostgreSQL. The gateway runs as its own process and its resident memory
 * (/proc/<pid>/status VmRSS) grows by less than 50 MiB while each export streams; every record
 * arrives once (count and sum of charges).
 */
import t from 'tap';
import { closeSync, mkdirSync, openSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import YAML from 'yaml';
import { tmpDir } from '../helpers/gateway.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/process.js';
import { PostgresServer } from '../helpers/postgres.js';
import { until } from '../helpers/upstream.js';
import { FIELDS } from '../../core/ledger/record.js';
import { TOKEN, ledgerConfig } from './helpers.js';

t.setTimeout(900_000);

const RECORDS = 1_000_000;
const DAYS = 30;
const DAY = 86_400_000;
const MIB = 1024 * 1024;

/**
 * Writes `RECORDS` request records over the `DAYS` days before today, as the store writes them
 * (`{"seq":0,…}` lines, fields in FIELDS order); returns the range and the sum of their charges.
 */
function generate(ledgerDir: string): { from: string; to: string; charged: number } {
  mkdirSync(ledgerDir, { recursive: true });
  const first = Math.floor(Date.now() / DAY) * DAY - DAYS * DAY;
  const perDay = Math.ceil(RECORDS / DAYS);
  let charged = 0;
  let n = 0;
  for (let d = 0; d < DAYS && n < RECORDS; d++) {
    const dayStart = first + d * DAY;
    const fd = openSync(path.join(ledgerDir, `${new Date(dayStart).toISOString().slice(0, 10)}.jsonl`), 'w');
    let chunk = '';
    for (let i = 0; i < perDay && n < RECORDS; i++, n++) {
      const input = 100 + (n % 900);
      const output = 10 + (n % 190);
      const cost = input * 3 + output * 15;
      charged += cost;
      // The line as the store writes it (FIELDS order), built directly: JSON.stringify per record is slow.
      chunk +=
        `{"seq":0,"id":"req_big${n.toString(16).padStart(12, '0')}","type":"request","ts":${dayStart + Math.floor((i * DAY) / perDay)},` +
        `"user":"user-${n % 50}","key":"key-${n % 200}","group":"chat","model_requested":"claude-model","model":"claude-model",` +
        `"provider":"mock","account":null,"protocol_in":"${n % 3 === 0 ? 'openai-chat' : 'anthropic-messages'}",` +
        `"protocol_out":"anthropic-messages","stream":${n % 2 === 0},"status":200,"billing":"balance","input_tokens":${input},` +
        `"output_tokens":${output},"cache_read_tokens":0,"cache_write_tokens":0,"reasoning_tokens":null,"usage_source":"reported",` +
        `"estimate_reason":null,"list_micros":${cost},"rate_ppm":1000000,"charged_micros":${cost},"duration_ms":${800 + (n % 400)},` +
        `"ttft_ms":${200 + (n % 100)},"attempts":1,"reference":null,"actor":null}\n`;
      if (chunk.length > 4 * MIB) {
        writeSync(fd, chunk);
        chunk = '';
      }
    }
    writeSync(fd, chunk);
    closeSync(fd);
  }
  const day = (ms: number) => new Date(ms).toISOString().slice(0, 10);
  return { from: day(first), to: day(first + (DAYS - 1) * DAY), charged };
}

/**
 * The gateway as production runs it: without the coverage tap collects from the processes it
 * starts (NODE_V8_COVERAGE and tap's --import in NODE_OPTIONS), which keeps every function's
 * counters in the child: not what an operator's gateway runs.
 */
const PRODUCTION_ENV = { NODE_V8_COVERAGE: undefined, NODE_OPTIONS: undefined };

const rss = (pid: number) => Number(/^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;

/**
 * Streams the export and reads it as it comes (count and sum, nothing kept), sampling the
 * gateway's RSS; returns what arrived and the largest growth over the RSS before the call.
 */
async function exportAndMeasure(gw: GatewayProcess, from: string, to: string, format: 'jsonl' | 'csv') {
  const before = rss(gw.pid);
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, rss(gw.pid))), 50);
  const started = Date.now();
  const u = new URL(`${gw.url}/admin/ledger/export?from=${from}&to=${to}&format=${format}`);
  let lines = 0;
  let charged = 0;
  let status = 0;
  const chargedAt = FIELDS.indexOf('charged_micros');
  await new Promise<void>((resolve, reject) => {
    const req = http.get(
      { host: u.hostname, port: u.port, path: u.pathname + u.search, headers: { authorization: `Bearer ${TOKEN}` } },
      (res) => {
        status = res.statusCode ?? 0;
        let rest = '';
        res.setEncoding('utf8');
        res.on('data', (s: string) => {
          const text = rest + s;
          const end = text.lastIndexOf('\n');
          rest = text.slice(end + 1);
          if (end < 0) return;
          for (const line of text.slice(0, end).split('\n')) {
            if (!line || line.startsWith('id,')) continue;
            lines++;
            charged +=
              format === 'jsonl' ? Number(/"charged_micros":(\d+)/.exec(line)![1]) : Number(line.replace(/\r$/, '').split(',')[chargedAt]);
          }
        });
        res.on('end', () => resolve());
        res.on('error', reject);
      },
    );
    req.on('error', reject);
  });
  clearInterval(sampler);
  peak = Math.max(peak, rss(gw.pid));
  return { status, lines, charged, growth: peak - before, before, ms: Date.now() - started };
}

/**
 * One day's export (a thirtieth of the month) before the measured ones: a fresh process's heap
 * grows to its working size under its first sustained allocation (measured: up to 135 MiB for a
 * first export of 33,334 records on a loaded machine, then about 1 MiB for the next), whatever
 * allocates. What is measured after it is what the month adds: 30 times the records, and the RSS
 * must still grow by less than 50 MiB — an export that held its records would grow by hundreds.
 */
async function warmUp(t: Tap, gw: GatewayProcess, day: string): Promise<void> {
  for (const format of ['jsonl', 'csv'] as const) {
    const w = await exportAndMeasure(gw, day, day, format);
    t.equal(w.status, 200, `warm-up: one day's ${format} export`);
    t.comment(`warm-up ${format} (${w.lines} records): RSS ${Math.round(w.before / MIB)} MiB + ${(w.growth / MIB).toFixed(1)} MiB`);
  }
}

type Tap = Parameters<Parameters<typeof t.test>[0]>[0];

t.test(
  `an export of ${RECORDS.toLocaleString('en')} records streams from the day files and from PostgreSQL in bounded memory`,
  async (t) => {
    const dir = tmpDir('ledger-big-');
    const data = path.join(dir, 'data');
    const ledgerDir = path.join(data, 'ledger');
    let at = Date.now();
    const { from, to, charged } = generate(ledgerDir);
    t.comment(`generated ${RECORDS} records in ${Date.now() - at} ms`);
    const firstLine = readFileSync(path.join(ledgerDir, `${from}.jsonl`), 'utf8')
      .slice(0, 2000)
      .split('\n')[0];
    t.same(Object.keys(JSON.parse(firstLine)), ['seq', ...FIELDS], 'the generated lines are records as the store writes them');

    // The file sink: the gateway's reader streams the day files.
    const file = path.join(dir, 'gateway.yaml');
    writeFileSync(file, YAML.stringify(ledgerConfig(data)));
    let gw = await startGatewayProcess(file, { env: PRODUCTION_ENV });
    try {
      await warmUp(t, gw, from);
      for (const format of ['jsonl', 'csv'] as const) {
        const files = await exportAndMeasure(gw, from, to, format);
        t.comment(
          `file ${format} export: ${files.ms} ms, RSS ${Math.round(files.before / MIB)} MiB + ${(files.growth / MIB).toFixed(1)} MiB`,
        );
        t.equal(files.status, 200);
        t.equal(files.lines, RECORDS, `${format}: every record from the day files`);
        t.equal(files.charged, charged, `${format}: each once (the sum of charges)`);
        t.ok(files.growth < 50 * MIB, `${format}: the gateway's RSS grew by ${(files.growth / MIB).toFixed(1)} MiB (< 50 MiB)`);
      }
    } finally {
      await gw.stop();
    }

    // PostgreSQL: the shipper copies the backlog (the whole month) in batches, then the export
    // streams from the table by keyset pages.
    const pg = await PostgresServer.start();
    t.teardown(() => pg.destroy());
    writeFileSync(file, YAML.stringify(ledgerConfig(data, pg, { batch_size: 5000 })));
    at = Date.now();
    gw = await startGatewayProcess(file, { env: PRODUCTION_ENV });
    try {
      t.ok(
        await until(
          async () =>
            Number((await pg.query<{ n: string }>('SELECT count(*) AS n FROM ledger_records').catch(() => [{ n: '0' }]))[0].n) === RECORDS,
          600_000,
          1_000,
        ),
        'the shipper copies every record',
      );
      t.comment(`shipped ${RECORDS} records in ${Date.now() - at} ms`);
      await warmUp(t, gw, from);
      for (const format of ['jsonl', 'csv'] as const) {
        const fromPg = await exportAndMeasure(gw, from, to, format);
        t.comment(
          `PostgreSQL ${format} export: ${fromPg.ms} ms, RSS ${Math.round(fromPg.before / MIB)} MiB + ${(fromPg.growth / MIB).toFixed(1)} MiB`,
        );
        t.equal(fromPg.status, 200);
        t.equal(fromPg.lines, RECORDS, `${format}: every record from PostgreSQL`);
        t.equal(fromPg.charged, charged, `${format}: each once (the sum of charges)`);
        t.ok(fromPg.growth < 50 * MIB, `${format}: the gateway's RSS grew by ${(fromPg.growth / MIB).toFixed(1)} MiB (< 50 MiB)`);
      }
    } finally {
      await gw.stop();
    }
  },
);
