/** Opens the configured store. */
import type { StoreConfig } from '../config/types.js';
import { systemClock, type Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { Store, StoreHealth } from './types.js';
import { MemoryStore } from './memory/index.js';
import { RedisStore } from './redis/index.js';

export interface OpenStoreOptions {
  /** Processes of this instance (server.workers): the per-process share while Redis is away. */
  workers?: number;
  /** Told when the store's health changes (Redis away / back). */
  onHealth?: (h: StoreHealth) => void;
  /** How long admin audit entries are kept (admin.audit_retention). */
  auditRetentionMs?: number;
  /** The ledger's day files (ledger.dir): the memory store writes them with its journal. */
  ledger?: { dir: string; retentionMs: number };
}

export async function openStore(cfg: StoreConfig, clock: Clock, log: Logger, opts: OpenStoreOptions = {}): Promise<Store> {
  if (cfg.kind === 'redis') {
    return RedisStore.open({
      url: cfg.url!,
      cluster: cfg.cluster,
      prefix: cfg.prefix,
      instancesHint: cfg.instancesHint * Math.max(1, opts.workers ?? 1),
      timeoutMs: cfg.timeoutMs,
      leaseMs: cfg.leaseMs,
      // Periods follow Redis TIME; only a test clock replaces it.
      clock: clock === systemClock ? undefined : clock,
      log,
      onHealth: opts.onHealth,
      auditRetentionMs: opts.auditRetentionMs,
    });
  }
  return MemoryStore.open({
    path: cfg.path,
    flushIntervalMs: cfg.flushIntervalMs,
    clock,
    log,
    auditRetentionMs: opts.auditRetentionMs,
    ledger: opts.ledger,
  });
}
