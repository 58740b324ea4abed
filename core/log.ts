/**
 * Structured logs: one JSON object per line on stderr. Keys, bodies and credential headers are
 * never logged; request URLs are logged without their query string (a key may sit there).
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';
const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

export type LogSink = (line: string) => void;

export function createLogger(
  level: LogLevel = (process.env.GATEWAY_LOG_LEVEL as LogLevel) || 'info',
  sink: LogSink = (line) => process.stderr.write(line + '\n'),
  base: Record<string, unknown> = {},
): Logger {
  const min = ORDER[level] ?? ORDER.info;
  const write = (lvl: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (ORDER[lvl] < min) return;
    const rec: Record<string, unknown> = { t: new Date().toISOString(), level: lvl, msg, ...base, ...fields };
    for (const k of Object.keys(rec)) {
      const v = rec[k];
      if (v instanceof Error) rec[k] = { name: v.name, message: v.message };
    }
    sink(JSON.stringify(rec));
  };
  return {
    debug: (m, f) => write('debug', m, f),
    info: (m, f) => write('info', m, f),
    warn: (m, f) => write('warn', m, f),
    error: (m, f) => write('error', m, f),
    child: (f) => createLogger(level, sink, { ...base, ...f }),
  };
}

export const silentLogger: Logger = createLogger('silent');
