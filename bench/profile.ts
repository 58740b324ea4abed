/**
 * Reading V8 CPU profiles (`.cpuprofile`, from `--cpu-prof` or the inspector): where a server's
 * time goes, by category (each gateway module and plugin, the store, metrics, logging, Node's
 * http/stream/event internals, writes, GC). Shared by `instructions.ts --cpu-prof` and the soak's
 * per-minute profiles (`run.ts --soak-profile`).
 */

export interface CpuProfile {
  /** When sampling began, µs on the system's monotonic clock; `timeDeltas` follow from it. */
  startTime: number;
  nodes: { id: number; callFrame: { functionName: string; url: string } }[];
  samples: number[];
  timeDeltas: number[];
}

/** Where a profile node's self time goes. */
export function category(fn: string, url: string): string | undefined {
  if (fn === '(idle)' || fn === '(root)') return undefined;
  if (fn === '(garbage collector)') return 'garbage collection';
  if (fn === '(program)') return 'V8 and native, unattributed';
  const dist = /\/dist\/(core|plugins)\/([^/]+)/.exec(url);
  if (url.includes('/node_modules/')) {
    const pkg = /\/node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)![1];
    if (pkg === 'prom-client') return 'metrics: prom-client';
    if (pkg === 'pino' || pkg === 'sonic-boom') return 'logging: pino';
    return `dependency: ${pkg}`;
  }
  if (dist) {
    const [, top, mod] = dist;
    if (top === 'plugins') return `plugins: ${mod}`;
    if (mod === 'store') return 'core: store';
    if (mod === 'protocols') return 'core: protocols (conversion, splice, taps)';
    if (mod === 'metrics.js') return 'metrics: core/metrics';
    if (mod === 'log.js') return 'logging: core/log';
    return `core: ${mod.replace(/\.js$/, '')}`;
  }
  if (url.includes('/dist/bench/')) return 'bench role (proxy, floor)';
  if (url.startsWith('node:internal/streams') || url === 'node:stream') return 'node: streams';
  if (url.startsWith('node:_http') || url === 'node:http') return 'node: http';
  if (url === 'node:events' || url.startsWith('node:internal/event_target') || url.startsWith('node:internal/abort_controller'))
    return 'node: events, AbortSignal';
  if (
    url.startsWith('node:internal/process/task_queues') ||
    url.startsWith('node:internal/timers') ||
    url === 'node:timers' ||
    fn === 'runMicrotasks'
  )
    return 'node: ticks, microtasks, timers';
  if (url.startsWith('node:')) return 'node: other';
  if (url === '')
    return `native: ${fn === 'writev' || fn === 'writeString' || fn === 'writeBuffer' || fn === 'writeUtf8String' ? 'writes (syscalls)' : 'other'}`;
  return 'other';
}

/** Self time per category over the whole profile, in microseconds (idle excluded). */
export function selfTime(p: CpuProfile): Map<string, number> {
  const nodes = new Map(p.nodes.map((n) => [n.id, n]));
  const out = new Map<string, number>();
  for (let i = 0; i < p.samples.length; i++) {
    const n = nodes.get(p.samples[i]);
    if (!n) continue;
    const c = category(n.callFrame.functionName, n.callFrame.url);
    if (c) out.set(c, (out.get(c) ?? 0) + (p.timeDeltas[i + 1] ?? 0));
  }
  return out;
}

/**
 * Self time per category, in microseconds per counted request, for each window of counted requests
 * (`requests` in each): the samples taken from `from` to `to` on the system's monotonic clock,
 * which the profile's `startTime` and `timeDeltas` also follow. (Finding the pauses around them in
 * the samples instead failed when the gateway's own timers woke it during a pause.)
 */
export function categorize(p: CpuProfile, requests: number, windows: [number, number][]): Map<string, number>[] {
  const nodes = new Map(p.nodes.map((n) => [n.id, n]));
  const out = windows.map(() => new Map<string, number>());
  let t = p.startTime;
  let inside = 0;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i] ?? 0;
    const w = windows.findIndex(([from, to]) => t >= from && t <= to);
    if (w < 0) continue;
    inside++;
    const n = nodes.get(p.samples[i])!;
    const c = category(n.callFrame.functionName, n.callFrame.url);
    if (c) out[w].set(c, (out[w].get(c) ?? 0) + (p.timeDeltas[i + 1] ?? 0) / requests);
  }
  if (inside < 100) throw new Error(`profile: ${inside} samples while the counted requests ran (its clock is not the harness's?)`);
  return out;
}
