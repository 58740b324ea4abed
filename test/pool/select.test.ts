/**
 * Account selection as a pure function: tiers, weights with load, sticky bindings that yield,
 * demoted accounts, and why nothing is usable.
 */
import t from 'tap';
import { selectAccount, type Candidate } from '../../core/pool/select.js';

const NOW = 1_000_000;

function acc(name: string, over: Partial<Candidate> = {}): Candidate {
  return {
    name,
    priority: 0,
    weight: 1,
    limit: 0,
    inFlight: 0,
    serves: true,
    disabled: false,
    coolingUntil: 0,
    blockedUntil: 0,
    demoted: false,
    probeDue: false,
    ...over,
  };
}

/** Deterministic uniform sequence (a linear congruential generator). */
function lcg(seed = 42): () => number {
  let x = seed;
  return () => {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    return x / 2 ** 31;
  };
}

function shares(cands: Candidate[], n: number, over: { bound?: string; exclude?: Set<string> } = {}): Record<string, number> {
  const rnd = lcg();
  const out: Record<string, number> = {};
  for (let i = 0; i < n; i++) {
    const s = selectAccount(cands, { now: NOW, random: rnd(), ...over });
    if (!s.ok) throw new Error('nothing selected');
    out[s.account] = (out[s.account] ?? 0) + 1;
  }
  return out;
}

t.test('weights set the shares when the accounts are idle', async (t) => {
  const s = shares([acc('a', { weight: 1 }), acc('b', { weight: 4 })], 10_000);
  t.ok(Math.abs(s.a / 10_000 - 0.2) < 0.02, `a ≈ 20 % (${s.a})`);
  t.ok(Math.abs(s.b / 10_000 - 0.8) < 0.02, `b ≈ 80 % (${s.b})`);
});

t.test('load proportional to the limits keeps the ratio; a fuller account gets less', async (t) => {
  const even = shares([acc('a', { weight: 1, limit: 8, inFlight: 4 }), acc('b', { weight: 4, limit: 32, inFlight: 16 })], 10_000);
  t.ok(Math.abs(even.a / 10_000 - 0.2) < 0.02, `same headroom: still 1:4 (${even.a})`);
  const skew = shares([acc('a', { weight: 1, limit: 10 }), acc('b', { weight: 1, limit: 10, inFlight: 9 })], 10_000);
  t.ok(skew.a > 8 * skew.b, `b nearly full gets far less (${JSON.stringify(skew)})`);
});

t.test('full, cooling, blocked, disabled and excluded accounts are skipped', async (t) => {
  const cands = [
    acc('full', { limit: 2, inFlight: 2 }),
    acc('cool', { coolingUntil: NOW + 1 }),
    acc('rpm', { blockedUntil: NOW + 1 }),
    acc('off', { disabled: true }),
    acc('tried'),
    acc('other-model', { serves: false }),
    acc('ok'),
  ];
  t.same(shares(cands, 200, { exclude: new Set(['tried']) }), { ok: 200 });
  const s = selectAccount(cands, { now: NOW, random: 0.5, exclude: new Set(['tried']) });
  t.same(s, { ok: true, account: 'ok', sticky: false, probe: false });
  t.same(
    shares([acc('past', { coolingUntil: NOW }), acc('x', { disabled: true })], 10),
    { past: 10 },
    'a cooldown that ended counts as ended',
  );
});

t.test('priority tiers: a higher tier only when every lower one is unavailable', async (t) => {
  t.same(shares([acc('p0'), acc('p1', { priority: 1, weight: 100 })], 500), { p0: 500 });
  t.same(shares([acc('p0', { coolingUntil: NOW + 5 }), acc('p1', { priority: 1 }), acc('p2', { priority: 2 })], 100), { p1: 100 });
});

t.test('sticky: the bound account wins while usable in the best tier and not demoted', async (t) => {
  const base = [acc('a', { weight: 100 }), acc('b')];
  t.same(shares(base, 100, { bound: 'b' }), { b: 100 });
  const sel = selectAccount(base, { now: NOW, random: 0.99, bound: 'b' });
  t.equal(sel.ok && sel.sticky, true);
  for (const [why, b] of [
    ['cooling', acc('b', { coolingUntil: NOW + 10 })],
    ['full', acc('b', { limit: 1, inFlight: 1 })],
    ['demoted', acc('b', { demoted: true })],
    ['disabled', acc('b', { disabled: true })],
    ['a worse tier than an available account', acc('b', { priority: 1 })],
  ] as const) {
    t.same(shares([acc('a'), b], 50, { bound: 'b' }), { a: 50 }, `yields when ${why}`);
  }
  t.same(shares(base, 20, { bound: 'gone' }), shares(base, 20), 'an unknown bound account is ignored');
});

t.test('demoted accounts: only when nothing else is usable, or for a due probe', async (t) => {
  t.same(shares([acc('slow', { demoted: true, weight: 50 }), acc('fast')], 300), { fast: 300 });
  t.same(shares([acc('slow', { demoted: true }), acc('fast', { coolingUntil: NOW + 1 })], 10), { slow: 10 }, 'alone: still used');
  const probe = selectAccount([acc('slow', { demoted: true, probeDue: true }), acc('fast')], { now: NOW, random: 0.5 });
  t.same(probe, { ok: true, account: 'slow', sticky: false, probe: true });
});

t.test('why nothing is usable decides the error', async (t) => {
  t.same(
    selectAccount([acc('a', { coolingUntil: NOW + 2000 }), acc('b', { blockedUntil: NOW + 700 })], { now: NOW, random: 0 }),
    { ok: false, reason: 'cooling', waitMs: 700 },
    'every account only waits: the shortest wait',
  );
  t.same(
    selectAccount([acc('a', { coolingUntil: NOW + 2000 }), acc('b', { disabled: true })], { now: NOW, random: 0 }),
    { ok: false, reason: 'cooling', waitMs: 2000 },
    'cooling and disabled: cooling',
  );
  t.same(
    selectAccount([acc('a', { coolingUntil: NOW + 2000 }), acc('b', { limit: 1, inFlight: 1 })], { now: NOW, random: 0 }),
    { ok: false, reason: 'busy' },
    'any account at its limit: busy',
  );
  t.same(selectAccount([acc('a', { disabled: true }), acc('b', { disabled: true })], { now: NOW, random: 0 }), {
    ok: false,
    reason: 'disabled',
  });
  t.same(selectAccount([acc('a', { serves: false })], { now: NOW, random: 0 }), { ok: false, reason: 'none' });
});
