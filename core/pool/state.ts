/**
 * The live state of one upstream account as this instance holds it. The health part (cooldown,
 * failures, disabled, times to first token) is kept in step with the store's by shared.ts, so every
 * instance on a shared store schedules by the same health; the rest is this instance's own.
 */
import { TtftWindow, type OutcomeKind } from './health.js';

export class AccountState {
  // ---- this instance's ----------------------------------------------------------------------------
  /** Requests in flight through this instance (the store's slots count every instance's). */
  inFlight = 0;
  /** Its own RPM is used up until then (learned from the store). */
  blockedUntil = 0;
  lastChosenAt = 0;
  requests = 0;
  readonly outcomes: Partial<Record<OutcomeKind, number>> = {};

  // ---- health, shared through the store (shared.ts) -------------------------------------------
  coolingUntil = 0;
  coolReason?: OutcomeKind;
  failures = 0;
  disabled?: { at: number; status?: number; message: string };
  readonly ttft = new TtftWindow();
  /** Health events of this instance not yet in the store: its own figures win until they are. */
  unsent = 0;
  /** The report round that last took its events to the store (shared.ts). */
  sentIn = 0;

  constructor(readonly fingerprint: string) {}
}
