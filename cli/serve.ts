/**
 * Running one gateway process until a signal: the `gateway start` command's body, kept apart so a
 * supervisor (several worker processes) can call it per worker.
 *
 * SIGTERM / SIGINT: shut down (readiness off, `server.shutdown_delay`, then drain up to
 * `server.drain_timeout`) and resolve 0; a second signal cuts the shutdown delay short.
 * SIGHUP reloads the config. `npm start` execs node, so these signals reach this process.
 */
import { Gateway } from '../core/server.js';
import { ConfigError, formatIssue } from '../core/config/load.js';
import { createLogger, type Logger } from '../core/log.js';
import { builtinPlugins } from '../plugins/index.js';
import { startMockServer } from '../mock/server.js';

export interface ServeOptions {
  log?: Logger;
  /** Reload when the file changes (default: unless GATEWAY_WATCH_CONFIG=0). */
  watch?: boolean;
  /** Called once listening (a supervisor learns the address). */
  onListening?(gw: Gateway): void;
  /** After a successful reload through the admin API (a worker tells the others). */
  onAdminReload?: () => void;
  /** Receives the function that shuts this gateway down as a signal would (a worker whose supervisor is gone). */
  onStopHandle?(stop: (reason: string) => void): void;
}

/** A rejected config as one JSON line: every problem with its place (`gateway.yaml:3:9 server.port: …`). */
export function logConfigError(log: Logger, e: ConfigError): void {
  log.error('config rejected', { config: e.file, errors: e.issues.map((i) => formatIssue(e.file, i)) });
}

/** Starts a gateway on `file` and serves until SIGTERM or SIGINT; resolves with the exit code. */
export async function serve(file: string, opts: ServeOptions = {}): Promise<number> {
  const log = opts.log ?? createLogger();
  const fatal = (what: string) => (e: unknown) => {
    log.error(what, { error: e });
    log.flush?.();
    process.exit(1);
  };
  const onUncaught = fatal('uncaught exception');
  const onUnhandled = fatal('unhandled promise rejection');
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onUnhandled);
  let gw: Gateway;
  try {
    gw = await Gateway.start({
      configFile: file,
      registry: builtinPlugins,
      mockUpstream: startMockServer,
      log,
      sighup: true,
      watch: opts.watch ?? process.env.GATEWAY_WATCH_CONFIG !== '0',
      onAdminReload: opts.onAdminReload,
    });
  } catch (e) {
    process.off('uncaughtException', onUncaught);
    process.off('unhandledRejection', onUnhandled);
    // Refused at start (a bad config, a store folder another gateway holds, a port in use): a JSON
    // line like every other, then exit status 1.
    if (e instanceof ConfigError) logConfigError(log, e);
    else log.error('the gateway cannot start', { config: file, error: e });
    log.flush?.();
    return 1;
  }
  log.info(`gateway listening on ${gw.url}`, {
    url: gw.url,
    metricsUrl: gw.metricsUrl,
    config: file,
    store: gw.config.store.kind,
    storePath: gw.config.store.path ?? null,
    pid: process.pid,
  });
  opts.onListening?.(gw);
  await new Promise<void>((resolve) => {
    // A second call (a second SIGTERM) cuts the shutdown delay short (Gateway.close).
    const stop = (signal: string) => {
      log.info(gw.config.server.shutdownDelayMs > 0 ? 'shutting down: not ready, then draining' : 'shutting down: draining', { signal });
      void gw.close().then(() => {
        process.off('SIGTERM', stop);
        process.off('SIGINT', stop);
        resolve();
      });
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    opts.onStopHandle?.(stop);
  });
  log.info('gateway stopped');
  log.flush?.();
  process.off('uncaughtException', onUncaught);
  process.off('unhandledRejection', onUnhandled);
  return 0;
}
