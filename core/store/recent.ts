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
 */
export class RecentIds {
  private current = new Set<string>();
  private previous = new Set<string>();
  private currentSince = 0;

  constructor(
    private readonly max: number,
    private readonly maxAgeMs = Infinity,
  ) {}

  has(id: string): boolean {
    return this.current.has(id) || this.previous.has(id);
  }

  /** `now` (epoch ms) only matters with `maxAgeMs`. */
  add(id: string, now = 0): void {
    if (this.current.size === 0) this.currentSince = now;
    else if (this.current.size >= this.max / 2 || now - this.currentSince >= this.maxAgeMs) {
      this.previous = this.current;
      this.current = new Set();
      this.currentSince = now;
    }
    this.current.add(id);
  }

  /** Ids held now (at most `max`). */
  get size(): number {
    return this.current.size + this.previous.size;
  }
}
