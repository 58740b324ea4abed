/**
 * Account health shared through the store, so that every instance on a shared store schedules by
 * the same health: an account cooled down, disabled or demoted (slow) by one is by all, sticky
 * sessions do not move between instances that see an account differently, and /admin/accounts on
 * any instance tells the same.
 *
 * - What this instance learns (index.ts Pool.record: a cooldown, a disable, a success after
 *   failures, a time to first token) applies to its own AccountState at once and is reported to the
 *   store (Store.reportAccountHealth), in batches: REPORT_SOON_MS after a state change, REPORT_MS
 *   after a TTFT sample; kept for the next round while the store cannot take it.
 * - What every instance reported is read back (Store.accountHealth, one version check when nothing
 *   changed): at once when the store announces a cooldown, disable or enable, after each report,
 *   and every POLL_MS — so the request path never waits on the store for health. An account's own
 *   unsent events win over the store's record until they are in it.
 * - Only pools of several accounts: a single account has no health actions (index.ts).
 */
import type { Logger } from '../log.js';
import type { AccountHealthEvent, AccountHealthSnapshot, Store } from '../store/types.js';
import type { OutcomeKind } from './health.js';
import type { AccountState } from './state.js';

export const POLL_MS = 1_000;
const REPORT_SOON_MS = 50;
const REPORT_MS = 1_000;
const OUTBOX_MAX = 10_000;

type EventBody = AccountHealthEvent extends infer E ? (E extends AccountHealthEvent ? Omit<E, 'account' | 'fp'> : never) : never;

interface Queued {
  event: AccountHealthEvent;
  state: AccountState;
}

export class SharedHealth {
  private outbox: Queued[] = [];
  private timer: NodeJS.Timeout | undefined;
  private timerDue = Infinity;
  private poller: NodeJS.Timeout | undefined;
  private stopListening: (() => void) | undefined;
  private version: number | undefined;
  private reading: Promise<void> | undefined;
  private again = false;
  private reporting = false;
  /** Report rounds that reached the store. */
  private rounds = 0;
  private closed = false;
  private failing = false;

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    /** Every account of the current config: id → state. */
    private readonly states: () => ReadonlyMap<string, AccountState>,
  ) {}

  start(): void {
    this.stopListening = this.store.onAccountHealthChanged(() => void this.sync());
    this.poller = setInterval(() => void this.sync(), POLL_MS);
    this.poller.unref();
    void this.sync();
  }

  close(): void {
    this.closed = true;
    clearInterval(this.poller);
    clearTimeout(this.timer);
    this.stopListening?.();
  }

  /** An event of this instance about account `id` (already applied to `state`). */
  report(id: string, state: AccountState, body: EventBody): void {
    if (this.closed) return;
    if (this.outbox.length >= OUTBOX_MAX) {
      const dropped = this.outbox.shift()!;
      dropped.state.unsent--;
    }
    this.outbox.push({ event: { account: id, fp: state.fingerprint, ...body }, state });
    state.unsent++;
    this.arm(body.kind === 'ttft' ? REPORT_MS : REPORT_SOON_MS);
  }

  private arm(ms: number): void {
    const due = Date.now() + ms;
    if (this.timer && this.timerDue <= due) return;
    clearTimeout(this.timer);
    this.timerDue = due;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerDue = Infinity;
      void this.flush();
    }, ms);
    this.timer.unref();
  }

  private async flush(): Promise<void> {
    if (this.reporting || this.outbox.length === 0) return;
    this.reporting = true;
    const batch = this.outbox;
    this.outbox = [];
    try {
      await this.store.reportAccountHealth(batch.map((q) => q.event));
      this.rounds++;
      for (const q of batch) {
        q.state.unsent--;
        q.state.sentIn = this.rounds;
      }
      if (this.failing) this.log.info('accounts: upstream account health reaches the store again');
      this.failing = false;
      void this.sync();
    } catch (e) {
      this.outbox = batch.concat(this.outbox);
      if (!this.failing) this.log.warn('accounts: upstream account health cannot reach the store; kept for later', { error: e as Error });
      this.failing = true;
      this.arm(REPORT_MS);
    } finally {
      this.reporting = false;
    }
    if (this.outbox.length > 0) this.arm(REPORT_SOON_MS);
  }

  /** Reads the store's health (one at a time; a call meanwhile runs another right after). */
  sync(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.reading) {
      this.again = true;
      return this.reading;
    }
    const p = (async () => {
      try {
        do {
          this.again = false;
          const round = this.rounds;
          const snap = await this.store.accountHealth(this.version);
          if (snap) this.apply(snap, round);
        } while (this.again && !this.closed);
      } catch (e) {
        this.log.debug('accounts: upstream account health unavailable from the store', { error: e as Error });
      } finally {
        this.reading = undefined;
      }
    })();
    this.reading = p;
    return p;
  }

  /** The store's records onto the accounts they describe; `round`: report rounds done when the read began. */
  private apply(snap: AccountHealthSnapshot, round: number): void {
    this.version = snap.version;
    for (const [id, st] of this.states()) {
      const h = snap.accounts[id];
      // Another fingerprint: other credentials under the name. Unsent events, or events sent after
      // this read began: this instance's figures are newer.
      if (!h || h.fp !== st.fingerprint || st.unsent > 0 || st.sentIn > round) continue;
      st.coolingUntil = h.coolingUntil;
      st.coolReason = h.coolReason as OutcomeKind | undefined;
      st.failures = h.failures;
      st.disabled = h.disabled ? { ...h.disabled } : undefined;
      st.ttft.set(h.ttft);
    }
  }
}
