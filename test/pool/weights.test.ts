/**
 * Weights and per-account concurrency, against the mock upstream (which tells the accounts apart
 * by the credential it receives): weights 1:4 give about 20 % / 80 % at concurrency 1 and 32; an
 * account's `concurrency` is never exceeded, and when every account is full the client gets the
 * documented 503.
 */
import t from 'tap';
import { KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';
import { chatCall, counts, cred, delta, poolConfig, runPool } from './helpers.js';

let g: TestGateway;

t.before(async () => {
  g = await startGateway(
    poolConfig({
      w: {
        accounts: [
          { name: 'small', weight: 1 },
          { name: 'big', weight: 4 },
        ],
      },
      c: {
        accounts: [
          { name: 'two', concurrency: 2 },
          { name: 'three', concurrency: 3 },
        ],
      },
    }),
  );
});
t.teardown(() => g.close());

for (const concurrency of [1, 32]) {
  t.test(`weights 1:4 over 1,000 requests at concurrency ${concurrency}`, async (t) => {
    const mock = g.gw.mocks.get('w')!;
    const before = counts(mock, 'w', ['small', 'big']);
    const replies = await runPool(1000, concurrency, (i) => chatCall(g.url, KEYS.chat, 'w-model', `request ${concurrency}/${i}`));
    t.equal(replies.filter((r) => r.status === 200).length, 1000, 'every request answered');
    const d = delta(counts(mock, 'w', ['small', 'big']), before);
    t.equal(d.small + d.big, 1000, 'one upstream request each');
    const small = (d.small / 1000) * 100;
    t.ok(Math.abs(small - 20) <= 5, `small ${small.toFixed(1)} % (20 ± 5)`);
    t.ok(Math.abs((d.big / 1000) * 100 - 80) <= 5, `big ${((d.big / 1000) * 100).toFixed(1)} % (80 ± 5)`);
  });
}

t.test('per-account concurrency is never exceeded; every account full → 503 "No available accounts"', async (t) => {
  const mock = g.gw.mocks.get('c')!;
  mock.script(cred('c', 'two'), { always: 'delay=300' });
  mock.script(cred('c', 'three'), { always: 'delay=300' });
  const replies = await runPool(40, 40, (i) => chatCall(g.url, KEYS.chat, 'c-model', `burst ${i}`));
  const ok = replies.filter((r) => r.status === 200);
  const refused = replies.filter((r) => r.status !== 200);
  t.equal(mock.credential(cred('c', 'two')).maxInFlight, 2, 'account "two" reached its limit of 2 and never more');
  t.equal(mock.credential(cred('c', 'three')).maxInFlight, 3, 'account "three" reached its limit of 3 and never more');
  t.ok(ok.length >= 5, `the capacity was used (${ok.length} answered)`);
  t.ok(refused.length > 0, 'the rest were refused');
  for (const r of refused) {
    t.equal(r.status, 503);
    t.equal(r.json.error.type, 'api_error');
    t.equal(r.json.error.code, 'no_available_accounts');
    t.match(r.json.error.message, /^No available accounts for model 'c-model'/);
    t.equal(r.headers.get('x-should-retry'), null, 'retryable: the accounts free up');
  }
  mock.script(cred('c', 'two'), {});
  mock.script(cred('c', 'three'), {});
  const after = await runPool(10, 5, (i) => chatCall(g.url, KEYS.chat, 'c-model', `after ${i}`));
  t.same(
    after.map((r) => r.status),
    Array(10).fill(200),
    'slots come back when the requests end',
  );
  t.ok(mock.credential(cred('c', 'two')).maxInFlight <= 2 && mock.credential(cred('c', 'three')).maxInFlight <= 3);
});
