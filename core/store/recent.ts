/**
 * Request ids settled lately, so that a settlement sent twice is dropped and a settled id cannot
 * be admitted again. Both stores keep one.
 *
 * Two generations of plain sets: an id is looked up in both and added to the current one; when the
 * current one holds `max / 2` ids (or, with `maxAgeMs`, was started that long ago) it becomes the
 * previous one and the oldest generation is dropped whole. So the last `max / 2` ids (and every id
 * of the last `maxAgeMs`, up to `max`) are always remembered, and never more than `max`.
 *
 * Why not a Map or Set trimmed from its oldest entry: V8's ordered hash tables leave a deleted
 * entry as a hole that every iteration from the start walks over until the table is rehashed, so
 * "insert, then delete the first" costs tens of microseconds per insert once the cap is reached
 * (issue 29: a gateway under unbroken load lost half its throughput after about 25 s). Here an
 * insert is one `Set.add`, whatever the load.
 *
 * Ids of the gateway's own shape (a fixed prefix and a 12-digit lowercase hex counter, core/server.ts
 * `idSource`) are held as numbers: the counter, plus the prefix's place among the first
 * `PREFIXES` prefixes seen times 2^48 (so one process's ids, and those a restart replays from the
 * previous process's journal, all stay numbers); any other id as its string. A set of small
 * integers holds no object the garbage collector copies or marks, and a lookup compares no
 * strings: with 50,000–100,000 string ids held, the lookup in `admit` and the insert in `settle`
 * were about 2 µs of the memory store's work per request, and every id survived into the old
 * generation (issue 29).
 *
 * And a fresh id costs no lookup at all: each prefix remembers the largest counter held under it,
 * and a counter above it was never added. The gateway mints its ids in order, so the id `admit`
 * checks is always above every id settled before it (the two sets, cold in the cache, cost about
 * 1.7 µs per request in the gateway's profile to say no).
 */

/** Digits of the counter at the end of the gateway's ids. */
const DIGITS = 12;

/** The number the characters of `id` from `from` on spell in lowercase hex, or -1 if they do not. */
function counterOf(id: string, from: number): number {
  let n = 0;
  for (let i = from; i < id.length; i++) {
    const c = id.charCodeAt(i);
    const d = c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : -1;
    if (d < 0) return -1;
    n = n * 16 + d;
  }
  return n;
}

/** Prefixes whose ids are held as numbers (a process's own, and the ones its journal replays). */
const PREFIXES = 8;
/** A prefix's place, times this, plus the counter (< 2^48): one safe integer per id. */
const SPAN = 2 ** 48;

/** One generation: ids of a known prefix as numbers, every other id as itself. */
class Generation {
  readonly counters = new Set<number>();
  readonly others = new Set<string>();
  get size(): number {
    return this.counters.size + this.others.size;
  }
}

export class RecentIds {
  private current = new Generation();
  private previous = new Generation();
  private currentSince = 0;
  /** The prefixes held as numbers, in the order first seen; each keeps its ids as numbers for the life of this object. */
  private readonly prefixes: string[] = [];
  /** Per prefix, the largest counter ever added under it (-1: none yet). */
  private readonly highest: number[] = [];
  /** The prefix place `number()` found (valid right after it returned ≥ 0). */
  private place = 0;

  constructor(
    private readonly max: number,
    private readonly maxAgeMs = Infinity,
  ) {}

  /** The counter of `id` (its prefix's place in `this.place`), or -1 when it is held as itself. */
  private number(id: string): number {
    const from = id.length - DIGITS;
    if (from < 1) return -1;
    const ps = this.prefixes;
    for (let i = 0; i < ps.length; i++) {
      const p = ps[i];
      if (from === p.length && id.startsWith(p)) {
        this.place = i;
        return counterOf(id, from);
      }
    }
    if (ps.length === PREFIXES) return -1;
    const n = counterOf(id, from);
    if (n >= 0) {
      this.place = ps.length;
      ps.push(id.slice(0, from));
      this.highest.push(-1);
    }
    return n;
  }

  has(id: string): boolean {
    const n = this.number(id);
    if (n < 0) return this.current.others.has(id) || this.previous.others.has(id);
    if (n > this.highest[this.place]) return false; // newer than every id held under its prefix
    const k = this.place * SPAN + n;
    return this.current.counters.has(k) || this.previous.counters.has(k);
  }

  /** `now` (epoch ms) only matters with `maxAgeMs`. */
  add(id: string, now = 0): void {
    const size = this.current.size;
    if (size === 0) this.currentSince = now;
    else if (size >= this.max / 2 || now - this.currentSince >= this.maxAgeMs) {
      this.previous = this.current;
      this.current = new Generation();
      this.currentSince = now;
    }
    const n = this.number(id);
    if (n < 0) {
      this.current.others.add(id);
      return;
    }
    const i = this.place;
    if (n > this.highest[i]) this.highest[i] = n;
    this.current.counters.add(i * SPAN + n);
  }

  /** Ids held now (at most `max`). */
  get size(): number {
    return this.current.size + this.previous.size;
  }
}
