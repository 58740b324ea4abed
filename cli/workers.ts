/**
 * `server.workers: N` — N gateway processes behind one listening port (node:cluster). The primary
 * only supervises: it forks the workers, restarts one that dies, and relays what must reach all
 * of them. Each worker is a whole gateway over the shared (Redis) store.
 *
 * - Reload: each worker watches the config file itself; SIGHUP to the primary, or a successful
 *   POST /admin/reload on any worker, reloads every worker.
 * - SIGTERM / SIGINT to the primary: every worker drains (server.drain_timeout) and exits, then the
 *   primary. A worker whose primary is gone drains and exits too.
 * - A worker that dies is replaced; one that keeps dying at start (5 times in a row within 5 s)
 *   stops the whole gateway with exit status 1.
 */
import cluster, { type Worker } from 'node:cluster';
import { ConfigError, loadConfigFile } from '../core/config/load.js';
import { createLogger, type Logger } from '../core/log.js';
import type { Gateway } from '../core/server.js';
import { builtinPlugins } from '../plugins/index.js';
import { logConfigError, serve } from './serve.js';

const RELOAD = 'gateway:reload';
const RELOAD_OTHERS = 'gateway:reload-others';

/** Runs in the primary until every worker has stopped; resolves to the exit status. */
export function runPrimary(count: number, log: Logger): Promise<number> {
  return new Promise<number>((resolve) => {
    let stopping = false;
    let exitCode = 0;
    let quickFailures = 0;
    const startedAt = new Map<number, number>();
    const workers = () => Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);

    const fork = () => {
      const w = cluster.fork();
      startedAt.set(w.id, Date.now());
      w.on('message', (m: { type?: string } | null) => {
        if (m?.type !== RELOAD_OTHERS) return;
        for (const other of workers()) if (other !== w) other.send({ type: RELOAD });
      });
    };

    const stop = (signal: string, code = 0) => {
      if (stopping) return;
      stopping = true;
      exitCode = code;
      log.info('shutting down', { signal, workers: workers().length });
      for (const w of workers()) w.process.kill('SIGTERM');
      if (workers().length === 0) finish();
    };
    const onTerm = () => stop('SIGTERM');
    const onInt = () => stop('SIGINT');
    const onHup = () => {
      log.info('reloading every worker', { signal: 'SIGHUP' });
      for (const w of workers()) w.send({ type: RELOAD });
    };
    const finish = () => {
      process.off('SIGTERM', onTerm);
      process.off('SIGINT', onInt);
      process.off('SIGHUP', onHup);
      cluster.off('exit', onExit);
      resolve(exitCode);
    };
    const onExit = (w: Worker, code: number | null, signal: string | null) => {
      if (stopping) {
        if (workers().length === 0) finish();
        return;
      }
      const lived = Date.now() - (startedAt.get(w.id) ?? 0);
      startedAt.delete(w.id);
      quickFailures = lived < 5_000 ? quickFailures + 1 : 0;
      if (quickFailures >= 5) {
        log.error('workers keep failing at start; stopping', { code, signal });
        return stop('worker failures', 1);
      }
      log.error('worker exited; starting another', { worker: w.id, pid: w.process.pid, code, signal });
      setTimeout(() => !stopping && fork(), Math.min(5_000, 200 * quickFailures)).unref();
    };

    process.on('SIGTERM', onTerm);
    process.on('SIGINT', onInt);
    process.on('SIGHUP', onHup);
    cluster.on('exit', onExit);
    log.info('starting workers', { workers: count });
    for (let i = 0; i < count; i++) fork();
  });
}

/** In a worker: reload when the primary says so; drain and leave when the primary is gone. */
function workerHooks(reload: () => void, stop: (reason: string) => void): { reloadOthers: () => void } {
  process.on('message', (m: { type?: string } | null) => {
    if (m?.type === RELOAD) reload();
  });
  process.on('disconnect', () => stop('primary gone'));
  return { reloadOthers: () => process.send?.({ type: RELOAD_OTHERS }) };
}

/**
 * `gateway start`: one gateway process, or with `server.workers` > 1 a supervisor and its workers
 * (this same command, run again by node:cluster in each worker).
 */
export async function start(file: string): Promise<number> {
  let log: Logger;
  try {
    log = createLogger();
  } catch (e) {
    // An unknown GATEWAY_LOG_LEVEL: refused like a config error, in a JSON line at the default level.
    const fallback = createLogger('info');
    fallback.error('the gateway cannot start', { error: (e as Error).message });
    fallback.flush?.();
    return 1;
  }
  if (!cluster.isWorker) {
    let workers: number;
    try {
      workers = (await loadConfigFile(file, { registry: builtinPlugins })).config.server.workers;
    } catch (e) {
      if (e instanceof ConfigError) {
        logConfigError(log, e);
        log.flush?.();
        return 1;
      }
      throw e;
    }
    if (workers <= 1) return serve(file, { log });
    const code = await runPrimary(workers, log);
    log.flush?.();
    return code;
  }
  let gw: Gateway | undefined;
  let stop: ((reason: string) => void) | undefined;
  const peers = workerHooks(
    () => void gw?.reload(),
    (reason) => stop?.(reason),
  );
  const code = await serve(file, {
    log: log.child({ worker: cluster.worker?.id }),
    onListening: (g) => (gw = g),
    onAdminReload: peers.reloadOthers,
    onStopHandle: (s) => (stop = s),
  });
  // The channel to the supervisor would keep this process alive.
  process.disconnect?.();
  return code;
}
