/**
 * The public API — what `import … from 'llm-gateway'` gives a plugin written outside this
 * repository (with TypeScript declarations). Everything a plugin needs to define itself, stop a
 * request, keep per-request state and type its hooks; nothing that ties it to one copy of the
 * package: errors are recognised by a brand, so a plugin with its own copy of `llm-gateway`
 * still gets its GatewayError rendered (not turned into a 500).
 *
 * Contract and phases: core/plugin.ts; guide: docs/plugins.md; test helpers: `llm-gateway/testing`.
 */
export { definePlugin, isPluginDefinition } from './plugin.js';
export type { PluginDefinition, PluginInstance, PluginDeps, PluginRegistry } from './plugin.js';
export { GatewayError, isGatewayError, CATALOGUE, WINDOW_MESSAGES } from './errors.js';
export type { CatalogueEntry, ErrorFormat, ErrorId, GatewayErrorOptions } from './errors.js';
export { createSlot } from './context.js';
export { perObject } from './memo.js';
export type { Admission, RequestContext } from './context.js';
export type { Attempt, Outcome, ParsedBody, ResolvedModel, RouteInfo, Slot, StreamFrame } from './types.js';
export type {
  GatewayConfig,
  GroupConfig,
  KeyConfig,
  ModelConfig,
  ProtocolName,
  ProviderConfig,
  RouteConfig,
  UserConfig,
} from './config/types.js';
export type { Claim, Store, StoreHealth } from './store/types.js';
export type { Logger } from './log.js';
export type { Metrics } from './metrics.js';
export type { Clock } from './clock.js';
export type { Usage } from './money.js';
export { VERSION } from './version.js';
