/**
 * Real PostgreSQL clusters for the tests (Debian's `postgresql`, installed by
 * scripts/ensure-postgres.sh, which `npm test` runs first): each its own `initdb` in a temp folder,
 * on a free loopback port with its Unix socket in that folder, trust authentication, no fsync;
 * `postgres` started directly (its PID is ours) and stopped by PID. Never an imitation.
 *
 * PostgreSQL refuses to run as root: when the tests do (containers, CI), initdb and the server run
 * as the `postgres` user if there is one, else `nobody`, and the folder is theirs.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { accessSync, chownSync, constants, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from './redis.js';

const run = promisify(execFile);

/** A PostgreSQL program: on PATH, else in Debian's /usr/lib/postgresql/<version>/bin (newest first). */
export function pgBin(name: string): string {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const file = path.join(dir, name);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  const root = '/usr/lib/postgresql';
  if (existsSync(root)) {
    const versions = readdirSync(root)
      .filter((v) => /^\d+(\.\d+)?$/.test(v))
      .sort((a, b) => Number(b) - Number(a));
    for (const v of versions) {
      const file = path.join(root, v, 'bin', name);
      if (existsSync(file)) return file;
    }
  }
  throw new Error(`${name} not found on PATH or in /usr/lib/postgresql/*/bin: run scripts/ensure-postgres.sh`);
}

/** Who runs PostgreSQL: ourselves, or (as root) the `postgres` user, else `nobody`. */
function runAs(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const passwd = readFileSync('/etc/passwd', 'utf8').split('\n');
  for (const name of ['postgres', 'nobody']) {
    const f = passwd.find((l) => l.startsWith(`${name}:`))?.split(':');
    if (f) return { uid: Number(f[2]), gid: Number(f[3]) };
  }
  return { uid: 65534, gid: 65534 };
}

/** Servers of this process, stopped at once (immediate shutdown) when it exits however the test ended. */
const running = new Set<ChildProcess>();
let exitHook = false;
function track(p: ChildProcess): void {
  running.add(p);
  p.once('exit', () => running.delete(p));
  if (exitHook) return;
  exitHook = true;
  process.once('exit', () => {
    for (const proc of running) {
      try {
        proc.kill('SIGQUIT');
      } catch {
        // already gone
      }
    }
  });
}

export class PostgresServer {
  proc?: ChildProcess;
  private exited?: Promise<void>;
  private log = '';

  private constructor(
    readonly port: number,
    /** The temp folder: `data/` the cluster, and the Unix socket. */
    readonly dir: string,
    private readonly user: { uid: number; gid: number } | undefined,
  ) {}

  /** initdb, start, and a database `gateway`. */
  static async start(): Promise<PostgresServer> {
    const dir = mkdtempSync(path.join(tmpdir(), 'gw-pg-'));
    const user = runAs();
    if (user) chownSync(dir, user.uid, user.gid);
    const server = new PostgresServer(await freePort(), dir, user);
    try {
      await run(pgBin('initdb'), ['-D', server.dataDir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C', '--no-sync'], {
        ...server.spawnOpts(),
        timeout: 120_000,
      }).catch((e: Error & { stderr?: string }) => {
        throw new Error(`initdb failed: ${e.message} ${e.stderr ?? ''}`);
      });
      await server.launch();
      await server.query('CREATE DATABASE gateway', [], 'postgres');
    } catch (e) {
      await server.destroy();
      throw e;
    }
    return server;
  }

  get dataDir(): string {
    return path.join(this.dir, 'data');
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  /** A connection URL over TCP (the gateway's `ledger.postgres.url`). */
  url(db = 'gateway'): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${db}`;
  }

  private spawnOpts() {
    return { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_ALL: 'C', LANG: 'C' }, cwd: this.dir, ...(this.user ?? {}) };
  }

  private async launch(): Promise<void> {
    const args = ['-D', this.dataDir, '-p', String(this.port), '-k', this.dir];
    for (const c of [
      'listen_addresses=127.0.0.1',
      'fsync=off',
      'synchronous_commit=off',
      'full_page_writes=off',
      'shared_buffers=64MB',
      'max_connections=60',
      'log_min_messages=warning',
      'log_checkpoints=off',
    ])
      args.push('-c', c);
    const proc = spawn(pgBin('postgres'), args, { ...this.spawnOpts(), stdio: ['ignore', 'ignore', 'pipe'] });
    this.log = '';
    proc.stderr.on('data', (d: Buffer) => (this.log = (this.log + d.toString()).slice(-8000)));
    this.proc = proc;
    track(proc);
    this.exited = new Promise((resolve) => proc.once('exit', () => resolve()));
    const failed = new Promise<never>((_, reject) => {
      proc.once('error', (e) => reject(new Error(`cannot start postgres (run scripts/ensure-postgres.sh): ${e.message}`)));
      proc.once('exit', (code) => reject(new Error(`postgres exited (${code}): ${this.log}`)));
    });
    failed.catch(() => undefined);
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        await Promise.race([this.query('SELECT 1', [], 'postgres'), failed]);
        return;
      } catch (e) {
        if (proc.exitCode !== null || Date.now() > deadline) throw e;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** One query on a connection of its own. */
  async query<R extends pg.QueryResultRow = any>(sql: string, values: unknown[] = [], db = 'gateway'): Promise<R[]> {
    const c = new pg.Client({ connectionString: this.url(db), connectionTimeoutMillis: 10_000 });
    c.on('error', () => undefined);
    await c.connect();
    try {
      return (await c.query<R>(sql, values)).rows;
    } finally {
      await c.end().catch(() => undefined);
    }
  }

  /**
   * Stops the server by PID: SIGINT is PostgreSQL's fast shutdown (connections closed, clean);
   * SIGQUIT its immediate shutdown (recovery at the next start, as after a crash).
   */
  async stop(signal: 'SIGINT' | 'SIGQUIT' | 'SIGTERM' = 'SIGINT'): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    p.kill(signal);
    await this.exited;
    this.proc = undefined;
  }

  /** The server's processes: the postmaster and its children (a backend per connection, workers). */
  private processes(): number[] {
    const root = this.proc?.pid;
    if (root === undefined) return [];
    const children: number[] = [];
    for (const d of readdirSync('/proc')) {
      if (!/^\d+$/.test(d)) continue;
      try {
        const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
        // pid (comm) state ppid …: the command may hold spaces and parentheses.
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        if (ppid === root) children.push(Number(d));
      } catch {
        // gone meanwhile
      }
    }
    return [root, ...children];
  }

  /** Freezes / thaws every process of the server (a hung PostgreSQL: connections open, nothing answers). */
  pause(): void {
    for (const pid of this.processes()) signal(pid, 'SIGSTOP');
  }
  resume(): void {
    for (const pid of this.processes()) signal(pid, 'SIGCONT');
  }

  /** Starts again on the same folder and port. */
  async restart(): Promise<void> {
    await this.stop();
    await this.launch();
  }

  async destroy(): Promise<void> {
    await this.stop('SIGQUIT');
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Signals a process that may have exited since it was listed (a backend whose connection closed). */
function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ESRCH') throw e;
  }
}
