/**
 * The Lua scripts, read from the `.lua` files next to this module's source at start and run with
 * EVALSHA (ioredis loads a script again by itself when a restarted Redis no longer has it).
 * `lib.lua` is prepended to each: Redis scripts cannot include one another.
 *
 * `npm run build` copies the files next to the compiled module (scripts/build.mjs); a build
 * that did not is served from the source tree (`core/store/redis/`).
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

export const SCRIPT_NAMES = ['admit', 'settle', 'cancel', 'read', 'slots', 'live'] as const;
export type ScriptName = (typeof SCRIPT_NAMES)[number];

function scriptDir(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  // dist/core/store/redis → the project root is four levels up.
  const candidates = [here, path.resolve(here, '../../../../core/store/redis')];
  const dir = candidates.find((d) => existsSync(path.join(d, 'lib.lua')));
  if (!dir) throw new Error(`redis store: Lua scripts not found (looked in ${candidates.join(', ')})`);
  return dir;
}

let cache: Record<ScriptName, string> | undefined;

export function loadScripts(): Record<ScriptName, string> {
  if (cache) return cache;
  const dir = scriptDir();
  const lib = readFileSync(path.join(dir, 'lib.lua'), 'utf8');
  cache = Object.fromEntries(
    SCRIPT_NAMES.map((n) => [n, `${lib}\n${readFileSync(path.join(dir, `${n}.lua`), 'utf8')}`]),
  ) as Record<ScriptName, string>;
  return cache;
}
