/**
 * Real redis-server processes for the tests (installed by scripts/ensure-redis.sh, which `npm test`
 * runs first): each on a free loopback port with its own temp folder, no RDB snapshots, no config
 * file; stopped by PID. Never an imitation of Redis.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Servers of this process, killed when it exits however the test ended (a timeout, a throw). */
const running = new Set<ChildProcess>();
let exitHook = false;
function track(p: ChildProcess): void {
  running.add(p);
  p.once('exit', () => running.delete(p));
  if (exitHook) return;
  exitHook = true;
  const killAll = () => {
    for (const proc of running) {
      try {
        proc.kill('SIGKILL');
      } catch {
        // already gone
      }
    }
  };
  process.once('exit', killAll);
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.once(sig, () => {
      killAll();
      process.exit(1);
    });
  }
}

export interface RedisServerOptions {
  /** appendonly yes, appendfsync always: what the operations guide asks for (survives a restart). */
  persist?: boolean;
  cluster?: boolean;
  port?: number;
  dir?: string;
}

export class RedisServer {
  proc?: ChildProcess;
  private exited?: Promise<void>;

  private constructor(
    readonly port: number,
    readonly dir: string,
    private readonly opts: RedisServerOptions,
    private readonly ownDir: boolean,
  ) {}

  static async start(opts: RedisServerOptions = {}): Promise<RedisServer> {
    const port = opts.port ?? (await freePort());
    const dir = opts.dir ?? mkdtempSync(path.join(tmpdir(), 'gw-redis-'));
    const server = new RedisServer(port, dir, opts, opts.dir === undefined);
    await server.launch();
    return server;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  private async launch(): Promise<void> {
    const args = [
      '--port',
      String(this.port),
      '--bind',
      '127.0.0.1',
      '--dir',
      this.dir,
      '--save',
      '',
      '--daemonize',
      'no',
      '--protected-mode',
      'no',
      '--loglevel',
      'warning',
      '--maxmemory-policy',
      'noeviction',
      '--appendonly',
      this.opts.persist ? 'yes' : 'no',
    ];
    if (this.opts.persist) args.push('--appendfsync', 'always');
    // Announcing the address at once: a new node otherwise reports an empty one in CLUSTER SLOTS
    // until its peers tell it, and clients then find no slot table.
    if (this.opts.cluster)
      args.push(
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        'nodes.conf',
        '--cluster-node-timeout',
        '2000',
        '--cluster-announce-ip',
        '127.0.0.1',
      );
    const proc = spawn('redis-server', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    this.proc = proc;
    track(proc);
    this.exited = new Promise((resolve) => proc.once('exit', () => resolve()));
    const failed = new Promise<never>((_, reject) => {
      proc.once('error', (e) => reject(new Error(`cannot start redis-server (run scripts/ensure-redis.sh): ${e.message}`)));
      proc.once('exit', (code) => reject(new Error(`redis-server exited (${code}): ${stderr}`)));
    });
    failed.catch(() => undefined);
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        const { stdout } = await Promise.race([this.cli('PING'), failed]);
        if (stdout.trim() === 'PONG') return;
      } catch (e) {
        if (proc.exitCode !== null || Date.now() > deadline) throw e;
      }
      await new Promise((r) => setTimeout(r, 30));
    }
  }

  /** redis-cli against this server. */
  cli(...args: string[]): Promise<{ stdout: string }> {
    return run('redis-cli', ['-h', '127.0.0.1', '-p', String(this.port), ...args], { timeout: 10_000 });
  }

  /** Stops the server by PID (SIGTERM: with persistence it writes what it has first). */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    p.kill(signal);
    await this.exited;
    this.proc = undefined;
  }

  /** Freezes / thaws the server (a hung Redis: connections stay open, nothing answers). */
  pause(): void {
    this.proc?.kill('SIGSTOP');
  }
  resume(): void {
    this.proc?.kill('SIGCONT');
  }

  /** Starts again on the same port and folder. */
  async restart(): Promise<void> {
    await this.stop();
    await this.launch();
  }

  async destroy(): Promise<void> {
    this.resume();
    await this.stop('SIGKILL');
    if (this.ownDir) rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Three masters joined by `redis-cli --cluster create`, no replicas. */
export class RedisCluster {
  private constructor(readonly nodes: RedisServer[]) {}

  static async start(): Promise<RedisCluster> {
    const nodes = await Promise.all([0, 1, 2].map(() => RedisServer.start({ cluster: true })));
    const cluster = new RedisCluster(nodes);
    try {
      await run(
        'redis-cli',
        ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'],
        { timeout: 30_000 },
      );
      const deadline = Date.now() + 20_000;
      for (;;) {
        const infos = await Promise.all(nodes.map((n) => n.cli('CLUSTER', 'INFO')));
        const slots = await Promise.all(nodes.map((n) => n.cli('CLUSTER', 'SLOTS')));
        if (
          infos.every((i) => /cluster_state:ok/.test(i.stdout) && /cluster_known_nodes:3/.test(i.stdout)) &&
          slots.every((s) => (s.stdout.match(/^127\.0\.0\.1$/gm) ?? []).length === 3)
        )
          break;
        if (Date.now() > deadline) throw new Error('redis cluster did not become ready');
        await new Promise((r) => setTimeout(r, 100));
      }
    } catch (e) {
      await cluster.destroy();
      throw e;
    }
    return cluster;
  }

  /** Seed list for the store's url. */
  get url(): string {
    return this.nodes.map((n) => n.url).join(',');
  }

  async destroy(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.destroy()));
  }
}
