import t from 'tap';
import { spawn } from 'node:child_process';
import { appendFile, cp, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ManualClock } from '../../core/clock.js';
import { createLogger } from '../../core/log.js';
import { MemoryStore } from '../../core/store/memory/index.js';
import { storeSuite, settlement, quota, win, T0, type StoreFactory } from './suite.js';

// The behavioural suite every store passes (test/store/suite.ts), on a store persisted to a folder
// (as shipped). Its death: the folder as a killed process leaves it (journal written, no close),
// opened by the next process, which applies the recovery of every admission left open.
const folders = new Map<MemoryStore, string>();
const made: string[] = [];
process.once('exit', () => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});
const folder = () => {
  const d = mkdtempSync(path.join(tmpdir(), 'memsuite-'));
  made.push(d);
  return d;
};
// Its ledger: day files in the folder (written with the journal), read as the gateway reads them.
const ledger = (dir: string) => ({ dir: path.join(dir, 'ledger'), retentionMs: 100 * 365 * 86_400_000 });
const persisted: StoreFactory = {
  name: 'memory',
  async open(clock) {
    const dir = folder();
    const store = await MemoryStore.open({ path: dir, clock, flushIntervalMs: 1_000_000, ledger: ledger(dir) });
    folders.set(store, dir);
    return store;
  },
  async die(store, clock) {
    await store.flush();
    const copy = folder();
    await cp(folders.get(store as MemoryStore)!, copy, { recursive: true });
    await store.close(); // the original folder only; the copy is what the killed process left
    const after = await MemoryStore.open({ path: copy, clock, ledger: ledger(copy) });
    folders.set(after, copy);
    return after;
  },
  async ledger(store) {
    await store.flush();
    const out = [];
    for await (const { seq: _seq, ...r } of (store as MemoryStore).ledger!.read('0000-01-01', '9999-12-31')) out.push(r);
    return out;
  },
  tick: () => new Promise((r) => setImmediate(r)),
};
storeSuite(t, persisted);

// The same suite through the synchronous forms the request path uses (Store.admitNow, settleNow):
// every admission and settlement of the suite made by them, so both forms keep one contract.
function throughNow(store: MemoryStore): MemoryStore {
  store.admit = async (req) => store.admitNow(req);
  store.settle = async (id, s) => store.settleNow(id, s);
  return store;
}
storeSuite(t, {
  ...persisted,
  name: 'memory-now',
  open: async (clock) => throughNow((await persisted.open(clock)) as MemoryStore),
  die: async (store, clock) => throughNow((await persisted.die!(store, clock)) as MemoryStore),
});

// ---- memory only: persistence to a folder ------------------------------------------------------

type TapTest = Parameters<Parameters<typeof t.test>[0]>[0];

async function tmp(t: TapTest, prefix = 'memstore-') {
  const dir = await mkdtemp(path.join(tmpdir(), prefix));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

async function fillAndCheck(t: TapTest, dir: string, clock: ManualClock) {
  const store = await MemoryStore.open({ path: dir, clock, flushIntervalMs: 1_000_000 });
  const w = await store.admit({ requestId: 'p1', reserve: 50, claims: [win('5h', 1000), quota(1000)] });
  t.ok(w.ok);
  await store.settle('p1', settlement({ actual: 40, windows: ['5h'] }));
  await store.settle('p2', settlement({ actual: 25, billing: 'plan', windows: ['5h', '1d'], model: 'm2' }));
  await store.admit({ requestId: 'p3', reserve: 10, claims: [win('7d', 1000, 'k2')] }); // window start only
  await store.admit({ requestId: 'p4', reserve: 10, claims: [quota(1000)] }); // volatile reservation
  return store;
}

async function expectFilled(t: TapTest, store: MemoryStore, label: string) {
  t.equal(await store.balanceSpent('u1'), 40, `${label}: balance`);
  t.same(await store.spendCapUsage('u1'), { weekly: 40, monthly: 40 }, `${label}: caps`);
  t.same(await store.planUsage('u1', 'g1'), { daily: 25, weekly: 25, monthly: 25 }, `${label}: plan`);
  t.same(
    await store.keyState('k1'),
    {
      used: 65,
      reserved: 0,
      windows: { '5h': { start: T0, used: 65, reserved: 0 }, '1d': { start: T0, used: 25, reserved: 0 }, '7d': { used: 0, reserved: 0 } },
    },
    `${label}: key state (reservations are not persisted)`,
  );
  t.same((await store.keyState('k2')).windows['7d'], { start: T0, used: 0, reserved: 0 }, `${label}: window started by an admission`);
  const stats = await store.keyStats('k1', '2026-01-05', '2026-01-05');
  t.equal(stats.total.requests, 2, `${label}: stats`);
  t.same(Object.keys(stats.byModel).sort(), ['m1', 'm2']);
  t.equal(stats.total.actual, 65);
}

t.test('persistence: close and reopen', async (t) => {
  const dir = await tmp(t);
  const clock = new ManualClock(T0);
  const store = await fillAndCheck(t, dir, clock);
  await store.resetKeyQuota('k3');
  await store.close();
  const files = await readFile(path.join(dir, 'journal.jsonl'), 'utf8');
  t.equal(files, '', 'close compacts: journal empty');
  const again = await MemoryStore.open({ path: dir, clock });
  await expectFilled(t, again, 'reopened');
  await again.settle('p1', settlement({ actual: 40 }));
  t.equal(await again.balanceSpent('u1'), 80, 'settled ids are not kept in the snapshot (documented)');
  await again.resetKeyQuota('k1');
  await again.close();
  const third = await MemoryStore.open({ path: dir, clock });
  t.same(
    await third.keyState('k1'),
    {
      used: 0,
      reserved: 0,
      windows: { '5h': { used: 0, reserved: 0 }, '1d': { used: 0, reserved: 0 }, '7d': { used: 0, reserved: 0 } },
    },
    'quota reset persisted',
  );
  t.equal(await third.balanceSpent('u1'), 80);
  await third.close();
});

t.test('persistence: reopen after a flush without close (crash), torn last line', async (t) => {
  const dir = await tmp(t);
  const clock = new ManualClock(T0);
  const store = await fillAndCheck(t, dir, clock);
  await store.flush();
  const crashed = await tmp(t);
  await cp(dir, crashed, { recursive: true });
  await store.close();

  const copy2 = await tmp(t);
  await cp(crashed, copy2, { recursive: true });

  const s1 = await MemoryStore.open({ path: crashed, clock });
  await expectFilled(t, s1, 'after crash');
  await s1.settle('p1', settlement({ actual: 40 }));
  t.equal(await s1.balanceSpent('u1'), 40, 'ids replayed from the journal stay settled');
  await s1.close();

  await appendFile(path.join(copy2, 'journal.jsonl'), '{"seq":99,"op":"settle","t":1767614400000,"id":"torn","s":{"keyId":"k1","us');
  const s2 = await MemoryStore.open({ path: copy2, clock });
  await expectFilled(t, s2, 'torn tail');
  t.equal((await stat(path.join(copy2, 'journal.jsonl'))).size, 0, 'torn tail compacted away at open');
  await s2.settle('after', settlement({ actual: 1 }));
  await s2.flush();
  const copy3 = await tmp(t);
  await cp(copy2, copy3, { recursive: true });
  const s3 = await MemoryStore.open({ path: copy3, clock, flushIntervalMs: 1_000_000 });
  t.equal(await s3.balanceSpent('u1'), 41, 'appends after a torn tail are readable');
  await s2.close();
  await s3.close();
});

t.test('persistence: journal replay of quota resets; an unreadable middle line is skipped and logged', async (t) => {
  const dir = await tmp(t);
  const clock = new ManualClock(T0);
  const store = await MemoryStore.open({ path: dir, clock, flushIntervalMs: 1_000_000 });
  await store.settle('a', settlement({ keyId: 'k9', actual: 50, windows: ['5h'] }));
  await store.flush();
  await appendFile(path.join(dir, 'journal.jsonl'), 'garbage{\n');
  await store.resetKeyQuota('k9');
  await store.settle('b', settlement({ keyId: 'k9', actual: 7 }));
  await store.flush();
  const crashed = await tmp(t);
  await cp(dir, crashed, { recursive: true });
  await store.close();
  const lines: string[] = [];
  const log = createLogger('warn', (l) => lines.push(l));
  const again = await MemoryStore.open({ path: crashed, clock, log });
  t.same(await again.keyState('k9'), {
    used: 7,
    reserved: 0,
    windows: { '5h': { used: 0, reserved: 0 }, '1d': { used: 0, reserved: 0 }, '7d': { used: 0, reserved: 0 } },
  });
  t.equal(await again.balanceSpent('u1'), 57);
  t.match(lines.join('\n'), /skipping unreadable line/);
  await again.close();
});

t.test('persistence: journal entries already in the snapshot are not replayed twice', async (t) => {
  const dir = await tmp(t);
  const clock = new ManualClock(T0);
  const store = await fillAndCheck(t, dir, clock);
  await store.flush();
  const journal = await readFile(path.join(dir, 'journal.jsonl'), 'utf8');
  t.ok(journal.split('\n').filter(Boolean).length >= 4, 'journal holds the changes');
  await store.close();
  // Crash between writing the snapshot and truncating the journal.
  await writeFile(path.join(dir, 'journal.jsonl'), journal);
  const again = await MemoryStore.open({ path: dir, clock });
  await expectFilled(t, again, 'snapshot + stale journal');
  await again.close();
});

t.test('persistence: compaction by journal size', async (t) => {
  const dir = await tmp(t);
  const clock = new ManualClock(T0);
  const store = await MemoryStore.open({ path: dir, clock, flushIntervalMs: 1_000_000, compactBytes: 2_000 });
  let sum = 0;
  for (let i = 0; i < 50; i++) {
    await store.settle(`c${i}`, settlement({ actual: i }));
    sum += i;
    if (i % 10 === 9) await store.flush();
  }
  await store.flush();
  t.ok((await stat(path.join(dir, 'journal.jsonl'))).size < 2_000, 'journal truncated by compaction');
  t.ok((await stat(path.join(dir, 'snapshot.json'))).size > 0, 'snapshot written');
  const crashed = await tmp(t);
  await cp(dir, crashed, { recursive: true });
  await store.close();
  const again = await MemoryStore.open({ path: crashed, clock });
  t.equal(await again.balanceSpent('u1'), sum);
  t.equal((await again.keyStats('k1', '2026-01-05', '2026-01-05')).total.requests, 50);
  await again.close();
});

/**
 * What a power loss may leave: a copy of `folder` as it is now (journal fsynced by a flush), whose
 * one ledger day file (`<copy>/ledger`) is rewritten by `cut` from its lines. The store is closed.
 */
async function powerLoss(t: TapTest, folder: string, store: MemoryStore, cut: (lines: string[]) => string): Promise<string> {
  const crashed = await tmp(t);
  await cp(folder, crashed, { recursive: true });
  await store.close();
  const ledgerDir = path.join(crashed, 'ledger');
  const [day] = readdirSync(ledgerDir);
  const file = path.join(ledgerDir, day);
  writeFileSync(file, cut(readFileSync(file, 'utf8').trim().split('\n')));
  return crashed;
}

t.test("ledger: the journal is the day files' write-ahead log; after a power loss they get back exactly what they lost", async (t) => {
  const dir = await tmp(t);
  const clock = new ManualClock(T0);
  const store = await MemoryStore.open({ path: dir, clock, flushIntervalMs: 1_000_000, compactBytes: 2_000, ledger: ledger(dir) });
  let syncs = 0;
  const files = store.ledger!;
  const sync = files.sync.bind(files);
  files.sync = () => {
    syncs++;
    return sync();
  };
  let sum = 0;
  for (let i = 0; i < 60; i++) {
    await store.settle(`r${i}`, settlement({ actual: i + 1 }));
    sum += i + 1;
    if (i % 10 === 9) await store.flush();
  }
  await store.flush();
  t.ok(syncs > 0, `the day files are fsynced before the journal is cut (${syncs} times)`);
  const before = syncs;
  for (let i = 0; i < 6; i++) {
    await store.settle(`tail${i}`, settlement({ actual: 1000 + i }));
    sum += 1000 + i;
  }
  await store.flush();
  t.equal(syncs, before, 'a flush fsyncs the journal only');
  const snapSeq = (JSON.parse(await readFile(path.join(dir, 'snapshot.json'), 'utf8')) as { seq: number }).seq;
  t.ok(snapSeq > 0 && snapSeq <= 60, `compacted part-way (snapshot at seq ${snapSeq} of 66)`);

  // What a power loss may leave: the day file without some of what followed the snapshot (a line
  // in the middle, the last three) and a torn last line; the journal intact (it was fsynced).
  const crashed = await powerLoss(t, dir, store, (lines) => {
    const seqOf = (l: string) => (JSON.parse(l) as { seq: number }).seq;
    const after = lines.map((l, i) => [seqOf(l), i] as const).filter(([s]) => s > snapSeq);
    t.ok(after.length >= 5, `${after.length} records past the snapshot`);
    const lost = new Set([after[1][1], ...after.slice(-3).map(([, i]) => i)]);
    const kept = lines.filter((_, i) => !lost.has(i));
    return kept.join('\n') + '\n' + lines[lines.length - 1].slice(0, 40);
  });

  const again = await MemoryStore.open({ path: crashed, clock, ledger: ledger(crashed) });
  t.teardown(() => again.close());
  const ids: string[] = [];
  let charged = 0;
  for await (const r of again.ledger!.read('0000-01-01', '9999-12-31')) {
    ids.push(r.id);
    charged += (r as { charged_micros: number }).charged_micros;
  }
  t.equal(ids.length, 66, 'one record per settlement');
  t.equal(new Set(ids).size, 66, 'none twice');
  t.equal(charged, sum, 'the records sum to the charges');
  t.equal(await again.balanceSpent('u1'), sum, 'and to the counters');
});

t.test(
  'ledger: a store folder started afresh beside an older ledger folder gets back its own lost records, not the old ones of the same seq',
  async (t) => {
    const root = await tmp(t);
    const clock = new ManualClock(T0);
    const led = { dir: path.join(root, 'ledger'), retentionMs: 100 * 365 * 86_400_000 };
    // An older store, its folder since deleted: its records (seq 1–5) stay in the ledger folder.
    const old = await MemoryStore.open({ path: path.join(root, 'old'), clock, flushIntervalMs: 1_000_000, ledger: led });
    for (let i = 0; i < 5; i++) await old.settle(`old${i}`, settlement({ actual: 1 }));
    await old.close();
    // The new store numbers from 1 again; a power loss takes its three lines from the day file.
    const dir = path.join(root, 'new');
    const store = await MemoryStore.open({ path: dir, clock, flushIntervalMs: 1_000_000, ledger: led });
    for (let i = 0; i < 3; i++) await store.settle(`new${i}`, settlement({ actual: 10 }));
    await store.flush();
    const crashed = await powerLoss(t, root, store, (lines) => lines.filter((l) => !l.includes('"new')).join('\n') + '\n');
    const ledgerDir = path.join(crashed, 'ledger');
    const again = await MemoryStore.open({ path: path.join(crashed, 'new'), clock, ledger: { ...led, dir: ledgerDir } });
    t.teardown(() => again.close());
    const ids: string[] = [];
    for await (const r of again.ledger!.read('0000-01-01', '9999-12-31')) ids.push(r.id);
    t.same(
      ids.sort(),
      ['new0', 'new1', 'new2', 'old0', 'old1', 'old2', 'old3', 'old4'],
      "every record once, the new store's written again",
    );
  },
);

t.test('persistence: a settlement reaches the OS by the end of its event-loop turn, without a flush', async (t) => {
  const dir = await tmp(t);
  const store = await MemoryStore.open({ path: dir, flushIntervalMs: 1_000_000 });
  await store.settle('x', settlement({ actual: 3 }));
  await store.settle('y', settlement({ actual: 4 }));
  t.equal(readFileSync(path.join(dir, 'journal.jsonl'), 'utf8'), '', 'batched: not written on the request path');
  await new Promise((r) => setImmediate(r));
  const text = readFileSync(path.join(dir, 'journal.jsonl'), 'utf8');
  t.match(text, /"x"/);
  t.match(text, /"y"/);
  await store.close();
});

t.test('persistence: kill -9 after a flush interval loses nothing', async (t) => {
  const dir = await tmp(t);
  const N = 25;
  const child = spawn(process.execPath, [fileURLToPath(new URL('./memory-crash-child.js', import.meta.url)), dir, String(N)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, sig) => resolve(sig)));
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('ready')) resolve();
    });
    child.on('exit', (code) => reject(new Error(`child exited early (${code})`)));
  });
  child.kill('SIGKILL');
  t.equal(await exited, 'SIGKILL');
  const store = await MemoryStore.open({ path: dir });
  const sum = (N * (N + 1)) / 2;
  t.equal(await store.balanceSpent('u1'), sum + 7, 'every settlement present, and the in-flight request billed by its recovery');
  const st = await store.keyState('k1');
  t.equal(st.used, sum + 7);
  t.equal(st.reserved, 0, 'the in-flight reservation died with the process');
  t.ok(st.windows['5h'].start !== undefined);
  t.equal((await store.keyStats('k1', '2000-01-01', '2100-01-01')).total.requests, N + 1);
  await store.close();
  const again = await MemoryStore.open({ path: dir });
  t.equal(await again.balanceSpent('u1'), sum + 7, 'the recovery is applied once, not again at the next start');
  await again.close();
});

const recovery = (actual: number) => settlement({ actual, cost: actual, usage: { input: actual, output: 0, cacheRead: 0, cacheWrite: 0 } });

t.test('crash recovery: unresolved admissions settle by their recovery; settled and cancelled ones do not', async (t) => {
  const dir = await tmp(t);
  const clock = new ManualClock(T0);
  const store = await MemoryStore.open({ path: dir, clock, flushIntervalMs: 1_000_000, compactBytes: 1_500 });
  const admit = (id: string, actual: number) =>
    store.admit({ requestId: id, reserve: 100, claims: [quota(1_000_000)], recovery: recovery(actual) });
  await admit('settled', 1);
  await admit('cancelled', 2);
  await admit('open-a', 4);
  await store.settle('settled', settlement({ actual: 10 }));
  await store.cancel('cancelled');
  // Enough settlements to compact: open-a is then only in the snapshot.
  for (let i = 0; i < 20; i++) await store.settle(`filler-${i}`, settlement({ actual: 0 }));
  await store.flush();
  await admit('open-b', 8);
  await store.flush(); // also waits for the compaction the fillers started
  const crashed = await tmp(t);
  await cp(dir, crashed, { recursive: true });
  await store.close();
  const lines: string[] = [];
  const again = await MemoryStore.open({ path: crashed, clock, log: createLogger('warn', (l) => lines.push(l)) });
  t.equal(await again.balanceSpent('u1'), 10 + 4 + 8, 'recoveries of open-a (from the snapshot) and open-b (from the journal)');
  t.equal((await again.keyState('k1')).reserved, 0);
  const logged = lines.filter((l) => l.includes('recovery rule'));
  t.equal(logged.length, 2, 'one log line per recovered request');
  t.ok(logged.every((l) => /"recovered":true/.test(l)));
  await again.close();
  const snap = JSON.parse(readFileSync(path.join(dir, 'snapshot.json'), 'utf8'));
  t.same(Object.keys(snap.open).sort(), ['open-a', 'open-b'], 'closed with requests in flight: their recovery is kept for the next start');
});

t.test('store lock: one process per folder; a stale lock is taken over', async (t) => {
  const dir = await tmp(t);
  const first = await MemoryStore.open({ path: dir });
  const err = await MemoryStore.open({ path: dir }).then(
    () => undefined,
    (e: Error) => e,
  );
  t.ok(err, 'a second open of the same folder is refused');
  t.match(err!.message, dir, 'the message names the folder');
  t.match(err!.message, `PID ${process.pid}`, 'and the holder');
  await first.close();
  const second = await MemoryStore.open({ path: dir });
  await second.close();

  // A lock left by a process that was killed.
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  await new Promise((r) => child.once('spawn', r));
  writeFileSync(path.join(dir, 'gateway.lock'), `${child.pid}\n`);
  const busy = await MemoryStore.open({ path: dir }).then(
    () => undefined,
    (e: Error) => e,
  );
  t.match(busy?.message, `PID ${child.pid}`, 'a live holder in another process is named');
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
  const third = await MemoryStore.open({ path: dir });
  t.equal(readFileSync(path.join(dir, 'gateway.lock'), 'utf8').trim(), String(process.pid), 'the stale lock was taken over');
  await third.close();
  t.notOk(existsSync(path.join(dir, 'gateway.lock')), 'close removes the lock');
});

// ---- journal format: today's positional lines, and journals written by earlier versions ---------

const OLD_JOURNAL = fileURLToPath(new URL('../../../test/store/fixtures/journal-v1.jsonl', import.meta.url));

/** What the fixture journal (written by the previous version, keyed objects) holds, once replayed. */
async function expectOldJournal(t: TapTest, store: MemoryStore, label: string) {
  t.equal(await store.balanceSpent('u1'), 40 + 7, `${label}: old-1 settled (40), old-open recovered (7); old-2 is plan, old-3 cancelled`);
  t.same(await store.planUsage('u1', 'g1'), { daily: 25, weekly: 25, monthly: 25 }, `${label}: plan`);
  const k1 = await store.keyState('k1');
  t.equal(k1.used, 40 + 25 + 7, `${label}: key quota`);
  t.same(k1.windows['5h'], { start: T0, used: 40 + 25, reserved: 0 }, `${label}: window started by the journal, recovery has no windows`);
  t.equal(k1.windows['1d'].used, 25);
  const stats = await store.keyStats('k1', '2026-01-05', '2026-01-05');
  t.same(
    stats.byModel.m1,
    { requests: 2, input: 17, output: 20, cacheRead: 3, cacheWrite: 4, cost: 80 + 14, actual: 47, durationMs: 24 },
    `${label}: m1 counters`,
  );
  t.same(
    stats.byModel.m2,
    { requests: 1, input: 10, output: 20, cacheRead: 3, cacheWrite: 4, cost: 50, actual: 25, durationMs: 12 },
    `${label}: m2 counters`,
  );
  t.equal((await store.keyState('k2')).used, 5, `${label}: k2 after its reset`);
  t.equal(await store.balanceSpent('u2'), 5);
}

t.test('upgrade: a journal written by the previous version (keyed objects) replays in full, recovery included', async (t) => {
  const dir = await tmp(t);
  await writeFile(path.join(dir, 'journal.jsonl'), await readFile(OLD_JOURNAL, 'utf8'));
  const clock = new ManualClock(T0 + 60_000);
  const lines: string[] = [];
  const store = await MemoryStore.open({ path: dir, clock, flushIntervalMs: 1_000_000, log: createLogger('warn', (l) => lines.push(l)) });
  await expectOldJournal(t, store, 'after the upgrade');
  t.equal(lines.filter((l) => l.includes('recovery rule')).length, 1, 'old-open, in flight at the crash, settled by its recovery');
  t.notOk(
    lines.some((l) => /unknown entry|unreadable/.test(l)),
    'every old line understood',
  );
  await store.settle('old-1', settlement({ actual: 1000 }));
  t.equal(await store.balanceSpent('u1'), 47, 'ids settled in the old journal stay settled');

  // New lines go after the old state; a kill now (no close) and the next start keep both.
  t.ok((await store.admit({ requestId: 'new-1', reserve: 10, claims: [quota(1_000_000)] })).ok);
  await store.settle(
    'new-1',
    settlement({ actual: 3, usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0 }, windows: ['5h'], estimated: true }),
  );
  await store.admit({
    requestId: 'new-open',
    reserve: 10,
    claims: [quota(1_000_000)],
    recovery: settlement({ actual: 9, cost: 9, windows: [] }),
  });
  await store.flush();
  const crashed = await tmp(t);
  await cp(dir, crashed, { recursive: true });
  await store.close();
  const journal = readFileSync(path.join(crashed, 'journal.jsonl'), 'utf8').trim().split('\n');
  t.same(
    journal.map((l) => JSON.parse(l)[0]),
    [1, 2],
    'the new settlement and admission are positional lines',
  );
  const again = await MemoryStore.open({ path: crashed, clock });
  t.equal(await again.balanceSpent('u1'), 47 + 3 + 9, 'the new settlement and the new recovery on top of the old state');
  t.equal((await again.keyState('k1')).used, 72 + 3 + 9);
  await again.close();
});

t.test('journal: old keyed lines and positional lines in one file replay in seq order; a torn positional tail is dropped', async (t) => {
  const dir = await tmp(t);
  const old = await readFile(OLD_JOURNAL, 'utf8');
  // seq 11: a settlement of k1/u1 (balance, m1, 5h window, estimated); seq 12: an admission whose
  // recovery (3, flagged estimated and recovered) applies at the start; then a torn line.
  const added =
    '[1,11,1767614402000,"mixed-1","k1","u1","g1","m1","balance",2,3,0,0,8,4,5,"5h",1]\n' +
    '[2,12,1767614402000,"mixed-open","k1","u1","g1","m1","balance",3,0,0,0,3,3,0,"",3]\n' +
    '[1,13,1767614402000,"torn","k1","u1","g1","m1","bal';
  await writeFile(path.join(dir, 'journal.jsonl'), old + added);
  const lines: string[] = [];
  const store = await MemoryStore.open({ path: dir, clock: new ManualClock(T0 + 60_000), log: createLogger('warn', (l) => lines.push(l)) });
  t.equal(await store.balanceSpent('u1'), 47 + 4 + 3);
  t.equal((await store.keyState('k1')).windows['5h'].used, 65 + 4);
  t.ok(
    lines.some((l) => l.includes('torn last line')),
    'the torn tail is reported',
  );
  t.equal(lines.filter((l) => l.includes('recovery rule')).length, 2, 'old-open and mixed-open recovered');
  await store.close();
});
