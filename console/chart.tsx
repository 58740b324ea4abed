/**
 * A chart of USD per UTC day, drawn by uPlot (a canvas; made for time series). The chart is for
 * the eye: the same numbers are in the table the caller puts next to it, which is what assistive
 * technology reads (the canvas is hidden from it).
 */
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import { usd } from './format';

export interface DaySeries {
  label: string;
  /** USD by day (YYYY-MM-DD); a day without one has no bar or point. */
  byDay: ReadonlyMap<string, number>;
  bars?: boolean;
}

/** Every UTC day from `from` to `to`, both included. */
export function daysBetween(from: string, to: string): string[] {
  const out: string[] = [];
  for (let t = Date.parse(`${from}T00:00:00Z`), end = Date.parse(`${to}T00:00:00Z`); t <= end && out.length < 400; t += DAY_S * 1000) {
    out.push(new Date(t).toISOString().slice(0, 10));
  }
  return out;
}

/** Colours with at least 3:1 contrast on white, told apart by more than hue where it matters (the bars). */
const COLORS = ['#1d4ed8', '#b45309', '#047857', '#7c3aed', '#be123c', '#0e7490', '#4d7c0f', '#9d174d'];

const DAY_S = 86_400;
const dayLabel = (s: number) => new Date(s * 1000).toISOString().slice(5, 10);

/** USD per day over `from`…`to` (the range asked, so an empty day shows as one). */
export function DayChart({ from, to, series, label }: { from: string; to: string; series: DaySeries[]; label: string }) {
  const box = useRef<HTMLDivElement>(null);
  const empty = series.every((s) => s.byDay.size === 0);
  const key = JSON.stringify(series.map((s) => [s.label, s.bars, [...s.byDay]]));
  useEffect(() => {
    const el = box.current;
    if (!el || empty) return;
    const days = daysBetween(from, to);
    const xs = days.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000);
    const width = () => Math.max(280, el.clientWidth);
    const plot = new uPlot(
      {
        width: width(),
        height: 220,
        tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
        scales: {
          x: { time: true, range: (_u, min, max) => [min - DAY_S * 0.6, max + DAY_S * 0.6] },
          y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.15 : 1] },
        },
        axes: [
          {
            stroke: '#374151',
            grid: { stroke: '#e5e7eb' },
            ticks: { stroke: '#d1d5db' },
            incrs: [DAY_S, 2 * DAY_S, 7 * DAY_S, 14 * DAY_S, 30 * DAY_S],
            values: (_u, splits) => splits.map(dayLabel),
          },
          {
            stroke: '#374151',
            grid: { stroke: '#e5e7eb' },
            ticks: { stroke: '#d1d5db' },
            size: 80,
            values: (_u, splits) => splits.map((v) => usd(v)),
          },
        ],
        series: [
          { label: 'Day', value: (_u, v) => (v === null ? '' : new Date(v * 1000).toISOString().slice(0, 10)) },
          ...series.map((s, i) => ({
            label: s.label,
            stroke: COLORS[i % COLORS.length],
            fill: s.bars ? `${COLORS[i % COLORS.length]}55` : undefined,
            width: s.bars ? 1 : 2,
            paths: s.bars ? uPlot.paths.bars!({ size: [0.7, 40] }) : undefined,
            points: { show: !s.bars, size: 7 },
            value: (_u: uPlot, v: number | null) => (v === null ? '—' : usd(v)),
          })),
        ],
        legend: { show: true, live: true },
        cursor: { drag: { x: false, y: false } },
      },
      [xs, ...series.map((s) => days.map((d) => s.byDay.get(d) ?? null))] as uPlot.AlignedData,
      el,
    );
    const resize = new ResizeObserver(() => plot.setSize({ width: width(), height: 220 }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [from, to, key]);
  if (empty) return <p class="muted">Nothing to chart yet.</p>;
  return <div class="chart" ref={box} aria-hidden="true" title={label} />;
}
