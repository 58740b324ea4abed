/** Opens the configured store. */
import type { StoreConfig } from '../config/types.js';
import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { Store } from './types.js';
import { MemoryStore } from './memory.js';

export async function openStore(cfg: StoreConfig, clock: Clock, log: Logger): Promise<Store> {
  if (cfg.kind !== 'memory') throw new Error(`store kind '${cfg.kind}' is not available`);
  return MemoryStore.open({ path: cfg.path, flushIntervalMs: cfg.flushIntervalMs, clock, log });
}
