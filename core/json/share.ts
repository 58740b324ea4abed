/**
 * The share of each event-loop turn that large-body work may take, all large bodies together:
 * reading and decoding their bytes, parsing them, building converted upstream bodies. Each piece of
 * work measures itself and charges the share; once this turn's share is spent, the bodies wait for
 * the next turn, in order (first come, first served, then round robin). So however many large
 * bodies are in flight, a turn spends at most about `ms` on them plus one step of overshoot, and
 * the small requests waiting behind them move every turn; when nothing else is waiting, turns
 * follow each other at once and the large bodies get the whole CPU.
 */
export class TurnShare {
  private spent = 0;
  private armed = false;
  private readonly waiting: Array<() => void> = [];

  constructor(readonly ms: number) {}

  /** Milliseconds of this turn's share not yet spent (at most `ms`). */
  get left(): number {
    return Math.max(0, this.ms - this.spent);
  }

  /** Records `ms` of large-body work done in this turn. */
  charge(ms: number): void {
    this.spent += ms;
    this.arm();
  }

  /** Runs `fn` in a later turn with room, after those already waiting. */
  later(fn: () => void): void {
    this.waiting.push(fn);
    this.arm();
  }

  /** Resolves in a later turn with room. */
  next(): Promise<void> {
    return new Promise((resolve) => this.later(resolve));
  }

  private arm(): void {
    if (this.armed) return;
    this.armed = true;
    setImmediate(() => this.turn());
  }

  private turn(): void {
    this.armed = false;
    this.spent = 0;
    const now = this.waiting.splice(0);
    let i = 0;
    while (i < now.length && this.spent < this.ms) now[i++]();
    // Those without room this turn go first next turn (those that asked again meanwhile follow).
    if (i < now.length) this.waiting.unshift(...now.slice(i));
    if (this.waiting.length > 0) this.arm();
  }
}

/**
 * The gateway's share: about 2 ms of each turn for all large bodies together. With 3 ms the
 * small-request p99 under eight 200 MiB bodies measured 89–108 ms; with 2 ms 82–89 ms, and the
 * large bodies still completed as many in the bench's 6 s (bench/README.md "Where the time goes").
 */
export const largeWork = new TurnShare(2);
