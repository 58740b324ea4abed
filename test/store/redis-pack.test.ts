/**
 * The Redis store's ledger records travel packed (core/store/redis/pack.ts): the settlement's
 * record as settle.lua stores it (`ledgerText`), a credit's as accounts.lua stores it
 * (`creditLedgerText` + `credit:<id>`), and back as the record's JSON (`ledgerJson`), which the
 * drain writes into the day files. What comes back is byte for byte the line the memory store
 * writes for the same record (`recordLine`), whatever the names hold; a text that is not a record
 * of this version is refused, never half-read.
 */
import t from 'tap';
import { creditLedgerText, ledgerJson, ledgerText, SEP } from '../../core/store/redis/pack.js';
import { creditRecord, recordLine, requestRecord } from '../../core/ledger/record.js';
import type { Settlement } from '../../core/store/types.js';

const base: Settlement = {
  keyId: 'k1',
  user: 'alice',
  group: 'g',
  model: 'm',
  billing: 'balance',
  usage: { input: 12, output: 34, cacheRead: 5, cacheWrite: 6 },
  cost: 1234,
  actual: 987,
  durationMs: 42,
  windows: ['5h', '1d'],
  detail: {
    requestedModel: 'm-alias',
    provider: 'up',
    account: 'up/a1',
    protocolIn: 'openai-chat',
    protocolOut: 'anthropic-messages',
    stream: true,
    status: 200,
    reasoning: 7,
    ratePpm: 1_500_000,
    ttftMs: 9,
    attempts: 2,
  },
};

const settlements: [string, string, Settlement][] = [
  ['a request with every detail', 'req_0001', base],
  ['no detail (a settlement older than the ledger)', 'req_0002', { ...base, detail: undefined }],
  ['an estimate', 'req_0003', { ...base, estimated: true, detail: { ...base.detail!, estimateReason: 'client_disconnect' } }],
  [
    'a detail without its optional members, an estimate without its reason',
    'req_0007',
    {
      ...base,
      estimated: true,
      detail: {
        requestedModel: 'm',
        provider: 'up',
        protocolIn: 'openai-responses',
        protocolOut: 'openai-chat',
        stream: false,
        status: 499,
        ratePpm: 1_000_000,
        attempts: 1,
      },
    },
  ],
  ['crash recovery', 'req_0004', { ...base, recovered: true }],
  ['a late correction', 'req_0005:late', { ...base, late: true }],
  [
    'plan billing, zero usage',
    'req_0006',
    { ...base, billing: 'plan', usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, cost: 0, actual: 0 },
  ],
  [
    'names with quotes, backslashes, unicode and control characters',
    'req_"q"\\é',
    { ...base, keyId: 'key "one"', user: 'zoë\\x', group: 'g\u2028h', model: 'm\t"1"', detail: { ...base.detail!, account: 'up/ä"b' } },
  ],
];

t.test('a settlement’s record comes back as the memory store’s line', async (t) => {
  for (const [what, id, s] of settlements) {
    const at = 1_764_300_000_123;
    const got = ledgerJson(String(at), ledgerText(id, s));
    t.ok(got, `${what}: read`);
    t.equal(got!.json, recordLine(requestRecord(id, at, s)), `${what}: the same JSON`);
    t.equal(got!.id, id, `${what}: its id`);
    t.equal(got!.ts, at, `${what}: its time`);
    t.same(JSON.parse(got!.json), JSON.parse(recordLine(requestRecord(id, at, s))), `${what}: the same record`);
  }
});

t.test('a credit’s record (the script appends its id) comes back as the memory store’s line', async (t) => {
  for (const c of [
    { user: 'alice', amount: 5_000_000, reference: 'invoice 1', actor: 'admin' },
    { user: 'bob "b"', amount: -250_000, reference: 'fix: "double" \\ charge', actor: 'ops "x"' },
  ]) {
    const at = 1_764_300_000_999;
    const got = ledgerJson(String(at), creditLedgerText(c) + 'credit:c-77');
    const want = recordLine(creditRecord({ ...c, id: 'c-77', at, credit: 0, spent: 0 }));
    t.equal(got?.json, want, `${c.reference}: the same JSON`);
    t.equal(got?.id, 'credit:c-77');
  }
});

t.test('a text that is not a record of this version is refused', async (t) => {
  const text = ledgerText('req_1', base);
  const fields = text.split(SEP);
  t.equal(ledgerJson('not a time', text), undefined, 'a time that is not a number');
  t.equal(ledgerJson('1.5', text), undefined, 'a time that is not an integer');
  t.equal(ledgerJson('1', [fields[0], ...fields.slice(2)].join(SEP)), undefined, 'a field fewer');
  t.equal(ledgerJson('1', [fields[0], '1', ...fields.slice(1)].join(SEP)), undefined, 'a field more');
  t.equal(ledgerJson('1', ''), undefined, 'empty');
  t.equal(ledgerJson('1', ['', ...fields.slice(1)].join(SEP)), undefined, 'no type');
  t.equal(ledgerJson('1', [...fields.slice(0, -1), '"'].join(SEP)), undefined, 'an id that is not the inside of a JSON string');
});
