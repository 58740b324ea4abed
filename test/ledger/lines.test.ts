/**
 * The lines written once per billed request, built as text (issue 29: no record object and no
 * `JSON.stringify` of it per request): the ledger's day-file line is byte for byte the line of the
 * record (`fileLine(seq, requestRecord(…))`, what operators read and export), and the journal's
 * settlement line carries the ledger's details as `JSON.stringify` wrote them and reads back to the
 * same settlement.
 */
import t from 'tap';
import { fileLine } from '../../core/ledger/files.js';
import { requestFileLine, requestRecord } from '../../core/ledger/record.js';
import { SETTLE, ADMIT, fromLine, settlementLine } from '../../core/store/memory/journal.js';
import type { Settlement, SettlementDetail } from '../../core/store/types.js';

const detail: SettlementDetail = {
  requestedModel: 'gpt-4o',
  provider: 'openai',
  account: 'openai/main',
  protocolIn: 'anthropic-messages',
  protocolOut: 'openai-chat',
  stream: true,
  status: 200,
  reasoning: 12,
  estimateReason: undefined,
  ratePpm: 1_250_000,
  ttftMs: 431,
  attempts: 2,
};

const base: Settlement = {
  keyId: 'team-key',
  user: 'alice',
  group: 'chat',
  model: 'gpt-4o-mini',
  billing: 'balance',
  usage: { input: 1200, output: 345, cacheRead: 1000, cacheWrite: 0 },
  cost: 987,
  actual: 1234,
  durationMs: 2501,
  windows: ['5h', '1d'],
  detail,
};

/** Settlements of every shape a line meets: estimated, recovered, no details, odd names, odd numbers. */
const cases: [string, Settlement][] = [
  ['reported, with every detail', base],
  [
    'estimated: the reason given',
    { ...base, estimated: true, detail: { ...detail, estimateReason: 'client_disconnect', reasoning: undefined } },
  ],
  ['estimated without a reason', { ...base, estimated: true, detail: { ...detail, estimateReason: undefined } }],
  ['recovered at a restart', { ...base, estimated: true, recovered: true, detail: undefined }],
  ['no details (written before the ledger)', { ...base, detail: undefined, windows: [] }],
  [
    'optional details absent',
    { ...base, detail: { ...detail, account: undefined, ttftMs: undefined, reasoning: undefined, stream: false, status: 499 } },
  ],
  ['names that JSON escapes', { ...base, keyId: 'key "quoted" \\ back', user: 'ünïcødé\u2028\n', group: 'tab\tgroup', model: 'm\u0000' }],
  ['numbers JSON writes as null', { ...base, usage: { ...base.usage, output: NaN }, cost: Infinity, durationMs: -0 }],
  ['plan billing, large numbers', { ...base, billing: 'plan', actual: 9_007_199_254_740_991, cost: 1e21 }],
];

/** Only Redis settles a late correction (the memory store's journal never holds one). */
const ledgerCases: [string, Settlement][] = [...cases, ['a late correction', { ...base, late: true }]];

t.test('the ledger line of a settled request is the line of its record, byte for byte', async (t) => {
  for (const [name, s] of ledgerCases) {
    for (const seq of [1, 42, 123_456_789]) {
      const id = seq === 42 ? 'req_"odd"\\id' : `req_${seq}`;
      const ts = 1_767_614_400_000 + seq;
      const line = requestFileLine(seq, id, ts, s);
      t.equal(line, fileLine(seq, requestRecord(id, ts, s)), `${name} (seq ${seq})`);
      t.same(JSON.parse(line), { seq, ...JSON.parse(JSON.stringify(requestRecord(id, ts, s))) }, `${name}: parses to the record`);
    }
  }
});

t.test('a journal settlement line reads back to the settlement, its details as JSON.stringify wrote them', async (t) => {
  for (const [name, s] of cases) {
    for (const op of [SETTLE, ADMIT]) {
      const line = settlementLine(op, 7, 1_767_614_400_000, 'req_7', s);
      t.ok(line.endsWith(']\n'), `${name}: one line`);
      const a = JSON.parse(line) as unknown[];
      if (s.detail) t.equal(JSON.stringify(a[18]), JSON.stringify(s.detail), `${name}: the details' text`);
      else t.equal(a.length, 18, `${name}: no details field`);
      const e = fromLine(a)!;
      const back = op === SETTLE ? (e as { s: Settlement }).s : (e as { r: Settlement }).r;
      t.same(back, JSON.parse(JSON.stringify(s)), `${name}: read back (op ${op})`);
    }
  }
});
