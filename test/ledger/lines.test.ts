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
import type { Settlement } from '../../core/store/types.js';
import { cases, ledgerCases } from './settlements.js';

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
