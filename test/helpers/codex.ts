/**
 * Runs the real Codex CLI (`@openai/codex`, the npm package's native binary) against a gateway:
 * `codex exec --json` in a fresh temporary CODEX_HOME whose config.toml is Codex's defaults plus a
 * custom model provider pointing at the gateway. Offline by construction: the only other settings
 * turn off what would reach the internet (update checks, analytics, the curated-plugin sync).
 * Each run is bounded in time and its whole process group is killed on timeout and on teardown.
 *
 * Codex runs tool commands in its own sandbox (bubblewrap, bundled), which needs unprivileged user
 * namespaces. Where the machine forbids them (some CI containers), a probe (`codex sandbox --
 * echo`) finds out once and the runs use `sandbox_mode = "danger-full-access"` instead, so the
 * tool round trip still executes; `sandboxed()` tells the tests which it was.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { tmpDir } from './gateway.js';

const require = createRequire(import.meta.url);
const CODEX_JS = path.join(path.dirname(require.resolve('@openai/codex/package.json')), 'bin', 'codex.js');

export interface CodexRun {
  code: number | null;
  /** `--json` events, one per stdout line. */
  events: any[];
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

const running = new Set<ChildProcess>();
// However the test process ends (a tap timeout included), no Codex is left behind.
process.once('exit', () => killCodex());

/** Kills every Codex process group still running (tests call it on teardown). */
export function killCodex(): void {
  for (const p of running) killGroup(p);
  running.clear();
}

function killGroup(p: ChildProcess): void {
  if (p.pid === undefined) return;
  // The group (detached: its own) holds Codex and whatever it spawned; ESRCH once all are gone.
  try {
    process.kill(-p.pid, 'SIGKILL');
  } catch {
    /* already gone */
  }
}

/** A base64url string for the mock's `args=` directive. */
export const b64 = (v: unknown): string => Buffer.from(JSON.stringify(v)).toString('base64url');

export interface CodexOptions {
  /** The gateway's base URL (no `/v1`). */
  gatewayUrl: string;
  apiKey: string;
  model: string;
  prompt: string;
  /** Hard limit for the whole run (default 90 s: generous for a loaded 2-core machine). */
  timeoutMs?: number;
}

interface Home {
  root: string;
  work: string;
  env: NodeJS.ProcessEnv;
}

/** A fresh temporary CODEX_HOME with the config, a work directory and the environment to run in. */
function makeHome(o: Pick<CodexOptions, 'gatewayUrl' | 'apiKey' | 'model'>, fullAccess: boolean): Home {
  const root = tmpDir('gw-codex-');
  const home = path.join(root, 'codex-home');
  const work = path.join(root, 'work');
  // Codex refuses to put its helper binaries (the sandbox launcher) under the temporary
  // directory; pointing TMPDIR elsewhere lets a CODEX_HOME in /tmp work as a normal one.
  const tmp = path.join(root, 'tmp');
  for (const d of [home, work, tmp]) mkdirSync(d, { recursive: true });
  writeFileSync(
    path.join(home, 'config.toml'),
    [
      `model = ${JSON.stringify(o.model)}`,
      'model_provider = "gateway"',
      'check_for_update_on_startup = false',
      ...(fullAccess ? ['sandbox_mode = "danger-full-access"'] : []),
      '',
      '[model_providers.gateway]',
      'name = "llm-gateway"',
      `base_url = ${JSON.stringify(o.gatewayUrl + '/v1')}`,
      'env_key = "GATEWAY_API_KEY"',
      'wire_api = "responses"',
      '',
      '[analytics]',
      'enabled = false',
      '',
      '[features]',
      'plugins = false',
      'in_app_updates = false',
      '',
    ].join('\n'),
  );
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: root,
    TMPDIR: tmp,
    CODEX_HOME: home,
    GATEWAY_API_KEY: o.apiKey,
    LANG: 'C.UTF-8',
  };
  return { root, work, env };
}

/** Runs the Codex CLI with `args`; bounded, its process group killed when done. */
async function codex(h: Home, args: string[], timeoutMs: number): Promise<Omit<CodexRun, 'events'>> {
  const child = spawn(process.execPath, [CODEX_JS, ...args], {
    cwd: h.work,
    env: h.env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  running.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => {
    stdout += s;
  });
  child.stderr.setEncoding('utf8').on('data', (s: string) => {
    stderr += s;
  });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup(child);
  }, timeoutMs);
  const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)));
  clearTimeout(timer);
  killGroup(child); // helpers it left behind, if any
  running.delete(child);
  return { code, stdout, stderr, timedOut };
}

let sandbox: Promise<boolean> | undefined;

/** Whether Codex's own sandbox can run commands on this machine (probed once). */
export function sandboxed(): Promise<boolean> {
  return (sandbox ??= (async () => {
    const h = makeHome({ gatewayUrl: 'http://127.0.0.1:9', apiKey: 'unused', model: 'unused' }, false);
    try {
      const r = await codex(h, ['sandbox', '--', 'echo', 'sandbox-probe'], 60_000);
      return r.code === 0 && r.stdout.includes('sandbox-probe');
    } finally {
      rmSync(h.root, { recursive: true, force: true });
    }
  })());
}

export async function runCodex(o: CodexOptions): Promise<CodexRun> {
  const h = makeHome(o, !(await sandboxed()));
  try {
    const r = await codex(h, ['exec', '--json', '--skip-git-repo-check', o.prompt], o.timeoutMs ?? 90_000);
    const events = r.stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => {
        try {
          return JSON.parse(l);
        } catch {
          return { unparsed: l };
        }
      });
    return { ...r, events };
  } finally {
    rmSync(h.root, { recursive: true, force: true });
  }
}

/** The completed items of a run, by type. */
export function items(run: CodexRun, type: string): any[] {
  return run.events.filter((e) => e.type === 'item.completed' && e.item?.type === type).map((e) => e.item);
}
