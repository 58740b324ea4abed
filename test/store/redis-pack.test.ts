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
import { ledgerCases } from '../ledger/settlements.js';

t.test('a settlement’s record comes back as the memory store’s line', async (t) => {
  for (const [what, s] of ledgerCases) {
    for (const id of ['req_0001', 'req_"odd"\\id\u00e9', 'req_0002:late']) {
      const at = 1_764_300_000_123;
      const got = ledgerJson(String(at), ledgerText(id, s));
      t.equal(got?.json, recordLine(requestRecord(id, at, s)), `${what} (${id}): the same JSON`);
      t.equal(got?.id, id, `${what} (${id}): its id`);
      t.equal(got?.ts, at, `${what} (${id}): its time`);
    }
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
  const text = ledgerText('req_1', ledgerCases[0][1]);
  const fields = text.split(SEP);
  t.equal(ledgerJson('not a time', text), undefined, 'a time that is not a number');
  t.equal(ledgerJson('1.5', text), undefined, 'a time that is not an integer');
  t.equal(ledgerJson('1', [fields[0], ...fields.slice(2)].join(SEP)), undefined, 'a field fewer');
  t.equal(ledgerJson('1', [fields[0], '1', ...fields.slice(1)].join(SEP)), undefined, 'a field more');
  t.equal(ledgerJson('1', ''), undefined, 'empty');
  t.equal(ledgerJson('1', ['', ...fields.slice(1)].join(SEP)), undefined, 'no type');
  t.equal(ledgerJson('1', [...fields.slice(0, -1), '"'].join(SEP)), undefined, 'an id that is not the inside of a JSON string');
});
