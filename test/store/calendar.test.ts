/**
 * The calendar helpers both stores use for day, week and month periods keep the answer for the
 * last day asked about (core/store/types.ts). A clock that crosses a boundary — forward, or back as
 * a test clock may — must get the new day's answers at once: every result equals the one computed
 * from scratch, for times around each kind of boundary, asked in an order that moves between days.
 */
import t from 'tap';
import { ManualClock } from '../../core/clock.js';
import { MemoryStore } from '../../core/store/memory/index.js';
import { dayKey, dayStart, monthStart, nextMonthStart, weekStart, type Settlement } from '../../core/store/types.js';

const DAY = 86_400_000;
const fresh = {
  dayKey: (x: number) => new Date(x).toISOString().slice(0, 10),
  weekStart: (x: number) => {
    const d = Math.floor(x / DAY) * DAY;
    return d - ((new Date(d).getUTCDay() + 6) % 7) * DAY;
  },
  monthStart: (x: number) => Date.UTC(new Date(x).getUTCFullYear(), new Date(x).getUTCMonth(), 1),
  nextMonthStart: (x: number) => Date.UTC(new Date(x).getUTCFullYear(), new Date(x).getUTCMonth() + 1, 1),
};

t.test('every answer equals the one computed from scratch, across day, week, month and year boundaries', async (t) => {
  const boundaries = [
    Date.UTC(2026, 0, 6), // a day
    Date.UTC(2026, 0, 12), // Monday: a week
    Date.UTC(2026, 1, 1), // a month
    Date.UTC(2028, 1, 29),
    Date.UTC(2028, 2, 1), // leap day
    Date.UTC(2027, 0, 1), // a year
    Date.UTC(1970, 0, 1), // the epoch, and before it
  ];
  const times: number[] = [];
  for (const b of boundaries) for (const d of [-DAY, -1, 0, 1, 12 * 3_600_000]) times.push(b + d);
  // Forward, backward, and alternating between far-apart days.
  const orders = [times, [...times].reverse(), times.flatMap((x, i) => [x, times[times.length - 1 - i]])];
  let checked = 0;
  for (const order of orders) {
    for (const x of order) {
      const got = [dayKey(x), dayStart(x), weekStart(x), monthStart(x), nextMonthStart(x)];
      const want = [fresh.dayKey(x), Math.floor(x / DAY) * DAY, fresh.weekStart(x), fresh.monthStart(x), fresh.nextMonthStart(x)];
      if (JSON.stringify(got) !== JSON.stringify(want))
        t.fail(`at ${new Date(x).toISOString()}: ${JSON.stringify(got)} != ${JSON.stringify(want)}`);
      checked++;
    }
  }
  t.equal(
    checked,
    orders.reduce((a, o) => a + o.length, 0),
  );
  t.equal(dayKey(Date.UTC(2026, 0, 5, 23, 59, 59, 999)), '2026-01-05');
  t.equal(dayKey(Date.UTC(2026, 0, 6)), '2026-01-06', 'the next millisecond is the next day');
  t.equal(weekStart(Date.UTC(2026, 0, 11, 23, 59, 59, 999)), Date.UTC(2026, 0, 5), 'Sunday belongs to the week from Monday');
  t.equal(weekStart(Date.UTC(2026, 0, 12)), Date.UTC(2026, 0, 12));
  t.throws(() => dayKey(NaN), RangeError, 'an invalid time is refused, as Date refuses it');
  t.equal(dayKey(Date.UTC(2026, 0, 6)), '2026-01-06', 'and leaves nothing wrong behind');
});

t.test('usage recorded just before and just after midnight lands on each day (memory store, test clock)', async (t) => {
  const clock = new ManualClock(Date.UTC(2026, 2, 31, 23, 59, 59, 900)); // the last day of a month, a Tuesday
  const store = await MemoryStore.open({ clock });
  t.teardown(() => store.close());
  const s: Settlement = {
    keyId: 'k',
    user: 'u',
    group: 'g',
    model: 'm',
    billing: 'plan',
    usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0 },
    cost: 10,
    actual: 10,
    durationMs: 1,
    windows: [],
  };
  await store.settle('r1', s);
  clock.advance(200); // 2026-04-01 00:00:00.100: a new day and a new month
  await store.settle('r2', { ...s, actual: 7, cost: 7 });
  t.equal((await store.keyStats('k', '2026-03-31', '2026-03-31')).byModel.m.actual, 10, 'the day before');
  const after = await store.keyStats('k', '2026-04-01', '2026-04-01');
  t.equal(after.byModel.m.actual, 7, 'the day after');
  t.equal(after.today.actual, 7, 'today is the new day');
  t.same(await store.planUsage('u', 'g'), { daily: 7, weekly: 17, monthly: 7 }, 'the new day and month start from 0; the week goes on');
  clock.set(Date.UTC(2026, 2, 31, 12)); // a test clock going back: the earlier day's periods again
  t.same(await store.planUsage('u', 'g'), { daily: 0, weekly: 17, monthly: 0 }, 'counters belong to the later periods');
});
