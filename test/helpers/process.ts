/**
 * A gateway run as its own process by the real CLI (`bin/gateway.js start`), for tests with
 * several processes on one Redis, workers, signals and kill -9. Its JSON log lines are collected.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { ROOT } from './gateway.js';

export interface GatewayProcess {
  proc: ChildProcess;
  pid: number;
  url: string;
  /** Parsed JSON log lines so far (stderr). */
  logs: Record<string, any>[];
  /** Resolves with the first log line (past or future) matching `pred`. */
  waitForLog(pred: (l: Record<string, any>) => boolean, ms?: number): Promise<Record<string, any>>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM and wait for the exit (SIGKILL after `ms`). */
  stop(ms?: number): Promise<void>;
}

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of running) p.kill('SIGKILL');
});

export async function startGatewayProcess(
  configFile: string,
  opts: { env?: NodeJS.ProcessEnv; listening?: number } = {},
): Promise<GatewayProcess> {
  const proc = spawn(process.execPath, [path.join(ROOT, 'bin/gateway.js'), 'start', '--config', configFile], {
    env: { ...process.env, GATEWAY_LOG_LEVEL: 'info', ...opts.env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  running.add(proc);
  const logs: Record<string, any>[] = [];
  const waiters = new Set<{ pred: (l: Record<string, any>) => boolean; resolve: (l: Record<string, any>) => void }>();
  let buf = '';
  let stderr = '';
  proc.stderr.on('data', (d: Buffer) => {
    buf += d.toString();
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      let rec: Record<string, any>;
      try {
        rec = JSON.parse(line) as Record<string, any>;
      } catch {
        stderr += line + '\n';
        continue;
      }
      logs.push(rec);
      for (const w of [...waiters]) {
        if (w.pred(rec)) {
          waiters.delete(w);
          w.resolve(rec);
        }
      }
    }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    proc.once('exit', (code, signal) => {
      running.delete(proc);
      resolve({ code, signal });
    });
  });
  // Generous bounds: they only matter when the line never comes, and a start on a loaded machine takes seconds.
  const waitForLog = (pred: (l: Record<string, any>) => boolean, ms = 60_000) => {
    const found = logs.find(pred);
    if (found) return Promise.resolve(found);
    return new Promise<Record<string, any>>((resolve, reject) => {
      const w = { pred, resolve: (l: Record<string, any>) => (clearTimeout(timer), resolve(l)) };
      const timer = setTimeout(() => {
        waiters.delete(w);
        reject(new Error(`no such log line within ${ms} ms; stderr: ${stderr.slice(-2000)}`));
      }, ms);
      waiters.add(w);
      void exited.then(({ code, signal }) => {
        if (!waiters.has(w)) return;
        waiters.delete(w);
        clearTimeout(timer);
        // Its last JSON lines too: a fatal error (serve's uncaught-exception handler) is logged as one.
        const last = logs.slice(-5).map((l) => JSON.stringify(l).slice(0, 1000));
        reject(
          new Error(
            `gateway exited (${code ?? signal}) before the log line; stderr: ${stderr.slice(-2000)}; last log lines: ${last.join('\n')}`,
          ),
        );
      });
    });
  };
  const listening = opts.listening ?? 1;
  let url = '';
  const deadline = Date.now() + 90_000;
  while (logs.filter((l) => typeof l.msg === 'string' && l.msg.startsWith('gateway listening on ')).length < listening) {
    await waitForLog((l) => typeof l.msg === 'string' && l.msg.startsWith('gateway listening on '), Math.max(1, deadline - Date.now()));
    if (listening > 1) await new Promise((r) => setTimeout(r, 20));
  }
  url = logs.find((l) => typeof l.msg === 'string' && l.msg.startsWith('gateway listening on '))!.msg.slice('gateway listening on '.length);
  return {
    proc,
    pid: proc.pid!,
    url,
    logs,
    waitForLog,
    exited,
    async stop(ms = 30_000) {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), ms);
      await exited;
      clearTimeout(t);
    },
  };
}

export interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  json: any;
}

/** One request on a connection of its own (no keep-alive), so node:cluster spreads them over workers. */
export function request(url: string, opts: { method?: string; headers?: Record<string, string>; body?: unknown } = {}): Promise<Answer> {
  const u = new URL(url);
  const body = opts.body === undefined ? undefined : typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname + u.search,
        method: opts.method ?? (body ? 'POST' : 'GET'),
        agent: false,
        headers: { ...(body ? { 'content-type': 'application/json' } : {}), ...opts.headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: any;
          try {
            json = JSON.parse(text);
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}
