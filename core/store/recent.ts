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
 * `idSource`) are held as the number the counter spells, under the prefix the first such id
 * fixed; any other id as its string. A set of small integers holds no object the garbage collector
 * copies or marks, and a lookup compares no strings: with 50,000–100,000 string ids held, the
 * lookup in `admit` and the insert in `settle` were about 2 µs of the memory store's work per
 * request, and every id survived into the old generation (issue 29).
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

/** One generation: ids of the fixed prefix as their counters, every other id as itself. */
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
  /**
   * The prefix whose ids are held as counters, fixed by the first id of that shape seen (so an id
   * maps to one form for the life of this object: before it is fixed, no such id is held).
   */
  private prefix: string | undefined;

  constructor(
    private readonly max: number,
    private readonly maxAgeMs = Infinity,
  ) {}

  /** The counter `id` is held as, or -1 when it is held as itself. */
  private counter(id: string): number {
    const from = id.length - DIGITS;
    if (from < 1) return -1;
    const p = this.prefix;
    if (p === undefined) {
      const n = counterOf(id, from);
      if (n >= 0) this.prefix = id.slice(0, from);
      return n;
    }
    return from === p.length && id.startsWith(p) ? counterOf(id, from) : -1;
  }

  has(id: string): boolean {
    const n = this.counter(id);
    if (n >= 0) return this.current.counters.has(n) || this.previous.counters.has(n);
    return this.current.others.has(id) || this.previous.others.has(id);
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
    const n = this.counter(id);
    if (n >= 0) this.current.counters.add(n);
    else this.current.others.add(id);
  }

  /** Ids held now (at most `max`). */
  get size(): number {
    return this.current.size + this.previous.size;
  }
}
