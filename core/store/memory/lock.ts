/**
 * The lock file: one process per store folder.
 *
 * - `gateway.lock` is created exclusively and names the holder's PID; a second open fails with the
 *   folder and the PID, unless that PID no longer runs (stale lock of a killed process), in which
 *   case the lock is taken over.
 * - A lock naming this process's own PID is held only if this process took it (`lockedHere`): a
 *   PID reused after a restart does not lock a folder out.
 * Synchronous file calls only; no state beyond the set of folders locked here.
 */
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../../log.js';

const LOCK = 'gateway.lock';
/** Folders locked by this process (a lock naming our own PID but not listed here is stale). */
const lockedHere = new Set<string>();

/** Takes `gateway.lock` (one process per folder); throws naming the holder when it runs. */
export function takeLock(dir: string, log: Logger): void {
  const file = join(dir, LOCK);
  for (let i = 0; i < 2; i++) {
    try {
      const fd = openSync(file, 'wx');
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      lockedHere.add(dir);
      return;
    } catch (e) {
      if (errCode(e) !== 'EEXIST') throw e;
    }
    let pid = NaN;
    try {
      pid = Number.parseInt(readFileSync(file, 'utf8'), 10);
    } catch {
      /* removed meanwhile, or unreadable */
    }
    const held = pid === process.pid ? lockedHere.has(dir) : Number.isInteger(pid) && pid > 0 && processRuns(pid);
    if (held) {
      throw new Error(
        `store folder ${dir} is in use by another gateway process (PID ${pid}, ${file}); ` +
          'stop that process or give this gateway another store.path',
      );
    }
    if (i === 0) {
      log.warn('store: taking over a stale lock', { path: file, pid: Number.isNaN(pid) ? undefined : pid });
      try {
        unlinkSync(file);
      } catch {
        /* another process took it over first; the retry says so */
      }
    }
  }
  throw new Error(`store folder ${dir} is being taken over by another gateway process (${file})`);
}

/** Gives up a lock taken by `takeLock(dir)`. */
export function releaseLock(dir: string): void {
  lockedHere.delete(dir);
  try {
    unlinkSync(join(dir, LOCK));
  } catch {
    /* already gone */
  }
}

/** Whether a process with this PID exists (EPERM: it does, under another user). */
function processRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return errCode(e) === 'EPERM';
  }
}

function errCode(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException | null)?.code;
}
