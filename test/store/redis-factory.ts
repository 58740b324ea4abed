/**
 * The suite's factory for the Redis store (single node or cluster): every store opened gets its
 * own key prefix on one shared server, so tests start empty and never see one another.
 */
import type { ManualClock } from '../../core/clock.js';
import { RedisStore } from '../../core/store/redis/index.js';
import { createLogger, silentLogger } from '../../core/log.js';

const log = process.env.TEST_LOG ? createLogger('debug') : silentLogger;
import type { Store } from '../../core/store/types.js';
import type { LedgerRecord } from '../../core/ledger/record.js';
import type { StoreFactory } from './suite.js';

/** Short leases keep the crash case quick; the default is 15 s. */
export const TEST_LEASE_MS = 1_000;
/** The suite tests behaviour, not faults: a loaded test machine must not look like an outage. */
const TIMEOUT_MS = 5_000;

export function redisFactory(name: string, url: () => string, cluster: boolean): StoreFactory {
  let n = 0;
  const prefixes = new WeakMap<Store, string>();
  /** Ledger records taken so far, by key prefix (the stores of one prefix share them). */
  const taken = new Map<string, LedgerRecord[]>();
  return {
    name,
    async open(clock: ManualClock) {
      const prefix = `t${process.pid}-${++n}:`;
      const store = await RedisStore.open({ url: url(), cluster, prefix, clock, leaseMs: TEST_LEASE_MS, timeoutMs: TIMEOUT_MS, log });
      prefixes.set(store, prefix);
      return store;
    },
    async ledger(store: Store) {
      const prefix = prefixes.get(store)!;
      const list = taken.get(prefix) ?? [];
      taken.set(prefix, list);
      for (;;) {
        const batch = await store.takeLedger!(1_000);
        list.push(...batch.records.map((r) => JSON.parse(r.json) as LedgerRecord));
        await batch.ack();
        if (!batch.more) return [...list];
      }
    },
    async die(store: Store, clock: ManualClock) {
      const prefix = prefixes.get(store)!;
      (store as RedisStore).crash();
      // Another instance over the same keys: its reaper resolves the dead one's admissions once
      // the lease has run out.
      const other = await RedisStore.open({ url: url(), cluster, prefix, clock, leaseMs: TEST_LEASE_MS, timeoutMs: TIMEOUT_MS, log });
      prefixes.set(other, prefix);
      const deadline = Date.now() + 30 * TEST_LEASE_MS;
      while ((await other.keyState('k1')).reserved !== 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      return other;
    },
    tick: () => new Promise((r) => setTimeout(r, 1)),
  };
}
