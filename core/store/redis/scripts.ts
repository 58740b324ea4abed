/**
 * The Lua scripts, read from the `.lua` files next to this module's source at start and run with
 * EVALSHA (ioredis loads a script again by itself when a restarted Redis no longer has it).
 * `lib.lua` is prepended to each (Redis scripts cannot include one another), `ops.lua` too to those that
 * act on admissions, and before it the
 * store's settings as constants, so no call carries them (short arguments are cheaper on both ends).
 *
 * `npm run build` copies the files next to the compiled module (scripts/build.mjs); a build
 * that did not is served from the source tree (`core/store/redis/`).
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

export const SCRIPT_NAMES = ['admit', 'settle', 'cancel', 'batch', 'read', 'slots', 'live', 'accounts', 'carry', 'upstreams'] as const;
/** The scripts that run operations on admissions: `ops.lua` (after `lib.lua`) is prepended to them. */
const WITH_OPS: ReadonlySet<string> = new Set(['admit', 'settle', 'cancel', 'batch']);
export type ScriptName = (typeof SCRIPT_NAMES)[number];

function scriptDir(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  // dist/core/store/redis → the project root is four levels up.
  const candidates = [here, path.resolve(here, '../../../../core/store/redis')];
  const dir = candidates.find((d) => existsSync(path.join(d, 'lib.lua')));
  if (!dir) throw new Error(`redis store: Lua scripts not found (looked in ${candidates.join(', ')})`);
  return dir;
}

let cache: Record<ScriptName | 'lib' | 'ops', string> | undefined;

export interface ScriptSettings {
  /** Key prefix. */
  prefix: string;
  /** Where grants of queued slots are published. */
  channel: string;
  /** Slot lease (ms). */
  lease: number;
  /** Admission records and instance indexes (ms). */
  recordTtl: number;
  /** Done markers (ms): the least a marker lives (its hash lives that long after its last marker). */
  doneTtl: number;
  /** Leading characters of a request id that name its done markers' hash (keys.ts DONE_BUCKET). */
  doneBucket: number;
  /** Key window name → duration (ms). */
  windows: Readonly<Record<string, number>>;
  /** The ledger stream entries' field of packed records (pack.ts LEDGER_FIELD). */
  ledgerField: string;
}

/** A Lua string literal holding `s` exactly (every byte escaped as \ddd). */
function luaString(s: string): string {
  return `'${[...Buffer.from(s, 'utf8')].map((b) => `\\${String(b).padStart(3, '0')}`).join('')}'`;
}

export function loadScripts(settings: ScriptSettings): Record<ScriptName, string> {
  if (!cache) {
    const dir = scriptDir();
    cache = Object.fromEntries(['lib', 'ops', ...SCRIPT_NAMES].map((n) => [n, readFileSync(path.join(dir, `${n}.lua`), 'utf8')])) as Record<
      ScriptName | 'lib' | 'ops',
      string
    >;
  }
  const int = (n: number) => String(Math.trunc(n));
  const head = [
    `local P = ${luaString(settings.prefix)}`,
    `local CH = ${luaString(settings.channel)}`,
    `local LEASE = ${int(settings.lease)}`,
    `local RECORD_TTL = ${int(settings.recordTtl)}`,
    `local DONE_TTL = ${int(settings.doneTtl)}`,
    `local DONE_BUCKET = ${int(settings.doneBucket)}`,
    `local LF = ${luaString(settings.ledgerField)}`,
    `local WINDOW_MS = { ${Object.entries(settings.windows)
      .map(([w, ms]) => `[${luaString(w)}] = ${int(ms)}`)
      .join(', ')} }`,
  ].join('\n');
  const lib = cache.lib;
  return Object.fromEntries(
    SCRIPT_NAMES.map((n) => [n, `${head}\n${lib}\n${WITH_OPS.has(n) ? `${cache!.ops}\n` : ''}${cache![n]}`]),
  ) as Record<ScriptName, string>;
}
