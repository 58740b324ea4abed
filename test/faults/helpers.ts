/** Shared by the fault tests: a real gateway process (`node bin/gateway.js start`) and its end. */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { ROOT } from '../helpers/gateway.js';

export interface Proc {
  child: ChildProcess;
  url: string;
  /** Everything the process wrote to stderr (its log) so far. */
  stderr: () => string;
}

/** Starts a gateway process; resolves once it listens. */
export function startProcess(file: string): Promise<Proc> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(ROOT, 'bin/gateway.js'), 'start', '--config', file], {
      env: { ...process.env, GATEWAY_WATCH_CONFIG: '0', GATEWAY_LOG_LEVEL: 'info' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`gateway did not start:\n${err}`));
    }, 90_000);
    child.stderr.on('data', (d) => {
      err += d;
      const m = /gateway listening on (http:\/\/[^"\s]+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve({ child, url: m[1], stderr: () => err });
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`gateway exited (${code}):\n${err}`));
    });
  });
}

/** Runs `gateway start` expecting it to fail; resolves with its exit code and stderr. */
export function startFailing(file: string): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(ROOT, 'bin/gateway.js'), 'start', '--config', file], {
      env: { ...process.env, GATEWAY_WATCH_CONFIG: '0', GATEWAY_LOG_LEVEL: 'info' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (d) => {
      err += d;
      if (/gateway listening on/.test(err)) child.kill('SIGKILL');
    });
    child.on('exit', (code) => resolve({ code, stderr: err }));
  });
}

export function killHard(p: Proc): Promise<void> {
  return new Promise((resolve) => {
    if (p.child.exitCode !== null || p.child.signalCode !== null) return resolve();
    p.child.removeAllListeners('exit');
    p.child.once('exit', () => resolve());
    p.child.kill('SIGKILL');
  });
}
