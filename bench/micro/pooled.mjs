// Per-round ratios of one scenario pooled over several recorded runs: for a goal that one run's
// median puts on either side of its line, the rounds of every run together say where it sits.
// Each run's median of per-round ratios (gateway ÷ bare proxy: requests/s and CPU per request),
// then the median and mean of all rounds, for the scenarios whose two sides are the bare proxy
// and the gateway (`json`, `stream`, `minimal`). `minimal` holds its non-streaming rounds first,
// then as many streaming ones: `--halves` reports the two apart.
//   node bench/micro/pooled.mjs minimal --halves bench/results/2026-11-28T1*.json
// (not a test; a reading aid for bench/README.md; run after `npm run build`)
import fs from 'node:fs';
import path from 'node:path';
// The reports' own median (bench/lib.ts), so a run's figure here is the one its report printed.
import { median } from '../../dist/bench/lib.js';

const args = process.argv.slice(2);
const halves = args.includes('--halves');
const [scenario, ...files] = args.filter((a) => a !== '--halves');
if (!scenario || files.length === 0) {
  console.error('usage: pooled.mjs SCENARIO [--halves] RESULTS.json...');
  process.exit(2);
}

const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
const fmt = (x) => x.toFixed(3);

const parts = halves ? ['non-streaming', 'streaming'] : ['all rounds'];
const pooled = parts.map(() => ({ rps: [], cpu: [] }));
for (const file of files) {
  const run = JSON.parse(fs.readFileSync(file, 'utf8'));
  const sc = run.scenarios?.find((s) => s.name === scenario);
  if (!sc) continue;
  const per = halves ? sc.rounds.length / 2 : sc.rounds.length;
  const line = [];
  parts.forEach((part, i) => {
    const rounds = sc.rounds.slice(i * per, (i + 1) * per);
    const rps = [];
    const cpu = [];
    for (const r of rounds) {
      const proxy = r.sides.find((s) => s.side === 'bare proxy')?.figures;
      const gw = r.sides.find((s) => s.side === 'gateway')?.figures;
      if (!proxy || !gw) continue;
      rps.push(gw['req/s'] / proxy['req/s']);
      cpu.push(gw['CPU µs/req'] / proxy['CPU µs/req']);
    }
    if (rps.length === 0) return;
    pooled[i].rps.push(...rps);
    pooled[i].cpu.push(...cpu);
    line.push(`${part}: ${fmt(median(rps))}× (CPU ${fmt(median(cpu))}×, ${rps.length} rounds)`);
  });
  console.log(`${path.basename(file)} (${run.machine?.commit ?? run.command ?? ''}): ${line.join('; ')}`);
}
parts.forEach((part, i) => {
  const { rps, cpu } = pooled[i];
  if (rps.length === 0) return;
  console.log(
    `pooled ${part}, ${rps.length} rounds: requests/s median ${fmt(median(rps))}×, mean ${fmt(mean(rps))}×; ` +
      `CPU median ${fmt(median(cpu))}×, mean ${fmt(mean(cpu))}×`,
  );
});
