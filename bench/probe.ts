/**
 * A preload for a server under soak (`node --import <dist/bench/probe.js> …`; bench/run.ts adds it
 * with `--soak-profile DIR`): what the process does over minutes of unbroken load, from inside it,
 * without changing it.
 *
 * - A CPU profile per period (`BENCH_PROBE_PROFILE_S`, default 60 s) through the in-process
 *   inspector: `DIR/cpu-<n>.cpuprofile` (n from 1), each covering one period, and beside it
 *   `DIR/cpu-<n>.json`: the HTTP requests the process received in that period and its span.
 * - Every `BENCH_PROBE_EVERY_S` (default 15 s) one JSON line in `DIR/probe.jsonl`: seconds since
 *   start, event-loop utilisation over the interval, garbage collections by kind (count and ms, from
 *   the `gc` performance entries), heap used and total, external memory, libuv handles and requests
 *   active (sockets, timers, fs requests).
 *
 * Written with synchronous writes at each period's end and at exit, so the files are whole when the
 * harness stops the server. It costs the server something (a request counter on Node's diagnostics
 * channel, the profiler's sampling, a profile serialized per period): a probed soak explains a
 * curve; the figures to quote come from a soak without it.
 */
import dc from 'node:diagnostics_channel';
import fs from 'node:fs';
import inspector from 'node:inspector';
import path from 'node:path';
import { PerformanceObserver, constants, performance } from 'node:perf_hooks';

const dir = process.env.BENCH_PROBE_DIR;
if (dir) start(dir);

function start(out: string): void {
  fs.mkdirSync(out, { recursive: true });
  const profileS = Number(process.env.BENCH_PROBE_PROFILE_S) || 60;
  const everyS = Number(process.env.BENCH_PROBE_EVERY_S) || 15;
  const t0 = performance.now();

  const KINDS: Record<number, string> = {
    [constants.NODE_PERFORMANCE_GC_MINOR]: 'scavenge',
    [constants.NODE_PERFORMANCE_GC_MAJOR]: 'mark-compact',
    [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
    [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak callbacks',
  };
  let gc: Record<string, { count: number; ms: number }> = {};
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind = KINDS[(e as unknown as { detail?: { kind?: number } }).detail?.kind ?? -1] ?? 'other';
      const g = (gc[kind] ??= { count: 0, ms: 0 });
      g.count++;
      g.ms += e.duration;
    }
  }).observe({ entryTypes: ['gc'] });

  let requests = 0;
  dc.subscribe('http.server.request.start', () => requests++);

  let elu = performance.eventLoopUtilization();
  const sample = (): void => {
    const now = performance.eventLoopUtilization();
    const d = performance.eventLoopUtilization(now, elu);
    elu = now;
    const m = process.memoryUsage();
    const p = process as unknown as { _getActiveHandles?: () => unknown[]; _getActiveRequests?: () => unknown[] };
    const line = {
      t: Math.round((performance.now() - t0) / 1000),
      elu: Number(d.utilization.toFixed(4)),
      gc: Object.fromEntries(Object.entries(gc).map(([k, v]) => [k, { count: v.count, ms: Number(v.ms.toFixed(1)) }])),
      heapUsed: m.heapUsed,
      heapTotal: m.heapTotal,
      external: m.external,
      rss: m.rss,
      requests: requests,
      handles: p._getActiveHandles?.().length,
      libuvRequests: p._getActiveRequests?.().length,
    };
    gc = {};
    fs.appendFileSync(path.join(out, 'probe.jsonl'), JSON.stringify(line) + '\n');
  };
  setInterval(sample, everyS * 1000).unref();

  const session = new inspector.Session();
  session.connect();
  let n = 0;
  let periodStart = performance.now();
  let periodRequests = 0;
  const post = (method: string, params?: object): Promise<any> =>
    new Promise((resolve, reject) => session.post(method, params ?? {}, (e, r) => (e ? reject(e) : resolve(r))));
  const begin = async (): Promise<void> => {
    await post('Profiler.enable');
    await post('Profiler.setSamplingInterval', { interval: 1000 });
    await post('Profiler.start');
  };
  /** Ends the current profile and writes it; synchronous inside the callback, so it works at exit. */
  const finish = (then?: () => void): void => {
    const now = performance.now();
    const meta = { requests: requests - periodRequests, fromS: (periodStart - t0) / 1000, toS: (now - t0) / 1000 };
    periodRequests = requests;
    periodStart = now;
    session.post('Profiler.stop', (e, r) => {
      if (!e && r?.profile) {
        fs.writeFileSync(path.join(out, `cpu-${++n}.cpuprofile`), JSON.stringify(r.profile));
        fs.writeFileSync(path.join(out, `cpu-${n}.json`), JSON.stringify(meta));
      }
      then?.();
    });
  };
  void begin();
  setInterval(() => finish(() => void post('Profiler.start')), profileS * 1000).unref();
  // The gateway exits on SIGTERM after draining: the last (partial) period is written at exit.
  process.once('exit', () => {
    sample();
    finish();
  });
}
