/**
 * Reading CPU profiles (bench/profile.ts): what `bench:instructions --cpu-prof` reports per
 * category is the self time of the samples taken while each slice of counted requests ran, per
 * request of the slice; samples between slices (warm-up, pauses, the other sides' turns) count
 * nowhere.
 */
import t from 'tap';
import { categorize, selfTime, type CpuProfile } from '../../bench/profile.js';

const STORE = 1;
const WRITEV = 2;
const IDLE = 3;
const nodes = [
  { id: STORE, callFrame: { functionName: 'admit', url: 'file:///srv/gw/dist/core/store/memory/state.js' } },
  { id: WRITEV, callFrame: { functionName: 'writev', url: '' } },
  { id: IDLE, callFrame: { functionName: '(idle)', url: '' } },
];
/**
 * 400 samples 10 µs apart from t = 1000 (sample i at 1010 + 10 i; its self time is the next delta,
 * so 10 µs, and 0 for the last): 0–99 the store (warm-up), 100–149 the store and 150–199 writev
 * (slice 1), 200–299 the store (another side's turn), 300–349 the store, 350–359 idle, 360–399
 * the store (slice 2).
 */
const samples = Array.from({ length: 400 }, (_, i) => (i >= 150 && i < 200 ? WRITEV : i >= 350 && i < 360 ? IDLE : STORE));
const profile: CpuProfile = { startTime: 1000, nodes, samples, timeDeltas: samples.map(() => 10) };
const slice1: [number, number] = [1010 + 10 * 100, 1010 + 10 * 199];
const slice2: [number, number] = [1010 + 10 * 300, 1010 + 10 * 399];

t.test('categorize: each slice of counted requests apart, per request, nothing outside the slices', async (t) => {
  const [w1, w2] = categorize(profile, 10, [slice1, slice2]);
  t.same(
    [...w1],
    [
      ['core: store', 50],
      ['native: writes (syscalls)', 50],
    ],
  );
  t.same([...w2], [['core: store', 89]], 'idle samples count nowhere; the last sample has no time');
  t.throws(() => categorize(profile, 10, [[0, 500]]), /0 samples while the counted requests ran/, 'a window the profile does not cover');
});

t.test('selfTime: the whole profile by category, idle left out', async (t) => {
  t.same(
    [...selfTime(profile)],
    [
      ['core: store', 3390],
      ['native: writes (syscalls)', 500],
    ],
  );
});
