/**
 * The contract between the gateway and its upstream path (core/upstream/): what the server hands
 * it (`UpstreamDeps`: the transport, where each provider is, its account pools) and which plugin
 * hooks a model call runs (`ChainHooks`, compiled once per config load by core/pipeline.ts).
 *
 * Types only, importing no other file of the folder but the transport's types: every part of the
 * upstream path, and the pipeline, may import them without a cycle.
 */
import type { ProviderConfig } from '../config/types.js';
import type { AccountPools } from '../pool/index.js';
import type { PluginInstance } from '../plugin.js';
import type { Transport } from './transport.js';

export interface UpstreamDeps {
  transport: Transport;
  /** Base URL of a provider (mock providers get theirs when their server starts). */
  baseUrl(provider: ProviderConfig): string;
  /** The providers' account pools (core/pool). */
  pools: AccountPools;
}

export interface ChainHooks {
  onAttempt: PluginInstance[];
  /** Reverse chain order. */
  onResponse: PluginInstance[];
  /** Reverse chain order. */
  onEvent: PluginInstance[];
  /** The instance name of a plugin in the chain (for logs). */
  nameOf?(p: PluginInstance): string | undefined;
}
