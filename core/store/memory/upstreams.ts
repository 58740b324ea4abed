/**
 * The health of upstream accounts in the memory store (the rules are at ../types.ts
 * AccountHealthEvent; the Redis store applies the same ones in upstreams.lua). One process reads
 * and writes it, so it is kept in memory only, not journaled: after a restart the pools learn
 * again, as they always did.
 */
import { ACCOUNT_TTFT_SAMPLES, type AccountHealth, type AccountHealthEvent, type AccountHealthSnapshot } from '../types.js';

export class UpstreamHealth {
  private version = 0;
  private readonly accounts = new Map<string, AccountHealth>();
  private readonly listeners = new Set<() => void>();

  /** Applies `events` in order; a cooldown, disable or enable calls the listeners (in this turn). */
  report(events: readonly AccountHealthEvent[]): number {
    let announce = false;
    for (const e of events) {
      let h = this.accounts.get(e.account);
      if (!h || h.fp !== e.fp) this.accounts.set(e.account, (h = { fp: e.fp, coolingUntil: 0, failures: 0, ttft: [] }));
      switch (e.kind) {
        case 'failure':
          h.failures++;
          if (e.until >= h.coolingUntil) {
            h.coolingUntil = e.until;
            h.coolReason = e.reason || undefined;
          }
          announce = true;
          break;
        case 'success':
          h.failures = 0;
          break;
        case 'disable':
          h.disabled ??= { at: e.at, message: e.message, ...(e.status === undefined ? {} : { status: e.status }) };
          announce = true;
          break;
        case 'enable':
          h.disabled = undefined;
          announce = true;
          break;
        case 'ttft':
          h.ttft.push([e.at, Math.max(0, Math.round(e.ms))]);
          if (h.ttft.length > ACCOUNT_TTFT_SAMPLES) h.ttft.splice(0, h.ttft.length - ACCOUNT_TTFT_SAMPLES);
          break;
      }
    }
    this.version++;
    if (announce) {
      for (const l of this.listeners) {
        try {
          l();
        } catch {
          // a listener's failure is its own
        }
      }
    }
    return this.version;
  }

  snapshot(version?: number): AccountHealthSnapshot | undefined {
    if (version === this.version) return undefined;
    const accounts: Record<string, AccountHealth> = {};
    for (const [id, h] of this.accounts) {
      accounts[id] = {
        ...h,
        ...(h.disabled ? { disabled: { ...h.disabled } } : {}),
        ttft: h.ttft.map(([at, ms]) => [at, ms] as [number, number]),
      };
      if (!h.disabled) delete accounts[id].disabled;
      if (h.coolReason === undefined) delete accounts[id].coolReason;
    }
    return { version: this.version, accounts };
  }

  onChanged(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
