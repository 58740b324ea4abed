/**
 * The resolved, frozen configuration the runtime works from. `load.ts` turns gateway.yaml into
 * this shape once per load: units parsed (durations in ms, sizes in bytes, money in integer
 * micro-USD, multipliers in ppm), defaults applied, cross-references checked. Nothing mutates it.
 */
import type { Price } from '../money.js';

export type ProtocolName = 'openai-chat' | 'anthropic-messages' | 'openai-responses';
export const PROTOCOLS: readonly ProtocolName[] = ['openai-chat', 'anthropic-messages', 'openai-responses'];

export type ProviderKind = 'openai' | 'anthropic' | 'mock';
export type GroupKind = 'chat' | 'messages' | 'responses';
export type Window = '5h' | '1d' | '7d';
export const WINDOWS: readonly Window[] = ['5h', '1d', '7d'];
export const WINDOW_MS: Readonly<Record<Window, number>> = { '5h': 5 * 3_600_000, '1d': 86_400_000, '7d': 7 * 86_400_000 };

export interface MetricsConfig {
  /** Where the Prometheus text is served; null: nowhere. */
  path: string | null;
  /** A separate `host:port` for metrics (and health); the API port then does not serve them. */
  listen?: { host: string; port: number };
  /** Bearer token a scrape must present. */
  token?: string;
  /** Per-key series (key and user names as labels). */
  keyLabels: boolean;
}

/** `tracing:` (core/config/tracing.ts); absent when tracing is off. */
export interface TracingConfig {
  /** The OTLP/HTTP traces URL; undefined: the OTEL_EXPORTER_OTLP_* environment, else localhost:4318. */
  endpoint?: string;
  protocol: 'http/protobuf' | 'http/json';
  headers: Readonly<Record<string, string>>;
  /** undefined: OTEL_SERVICE_NAME, else `llm-gateway`. */
  serviceName?: string;
  /** Share of root traces recorded (0 to 1); a client's traceparent decides for its own. */
  sampleRatio: number;
  resourceAttributes: Readonly<Record<string, string>>;
  /** undefined: the OTEL_EXPORTER_OTLP_* environment, else 10 s. */
  timeoutMs?: number;
}

export interface ServerConfig {
  host: string;
  port: number;
  bodyLimit: number;
  trustedProxies: readonly string[];
  headersTimeoutMs: number;
  /** A request's body must arrive within this once its headers did. */
  bodyTimeoutMs: number;
  /** Bytes of request bodies held in flight across all requests, at most. */
  bodyMemory: number;
  /** Whole upstream attempt, from request to the last byte. */
  upstreamTimeoutMs: number;
  /** Longest silence allowed from the upstream once it has started answering. */
  upstreamIdleTimeoutMs: number;
  onClientAbort: 'abort';
  workers: number;
  /** Bearer token for /admin endpoints; absent: the admin API is off. */
  adminToken?: string;
  /** Grace period for in-flight requests on shutdown. */
  drainTimeoutMs: number;
  /** On shutdown, how long /readyz answers 503 while everything is still served, before the listener closes. */
  shutdownDelayMs: number;
  /** Longest a stream's preamble is held back waiting for content (fallback stays possible meanwhile). */
  preambleHoldMs: number;
  /** Client-side silence on a committed stream bridged by an SSE comment. */
  streamKeepaliveMs: number;
}

export interface LedgerConfig {
  /** Folder of the day files; undefined: no ledger (memory store without a folder). */
  dir?: string;
  retentionMs: number;
  postgres?: { url: string; table: string; batchSize: number };
}

/** One admin API token: its name (the audit trail's actor) and its SHA-256 digest. */
export interface AdminToken {
  name: string;
  digest: string;
}

export interface AdminConfig {
  /** Every token that opens the admin API (server.admin_token is the one named `admin`); none: off. */
  tokens: readonly AdminToken[];
  auditRetentionMs: number;
  authFailuresPerMinute: number;
}

/** The web console (docs/console.md). */
export interface ConsoleConfig {
  /** Serve it at /console/ (read on every request, so a reload turns it on or off). */
  enabled: boolean;
}

export interface StoreConfig {
  kind: 'memory' | 'redis';
  path?: string;
  /** Redis: `redis://…`; with `cluster`, seed nodes separated by commas. */
  url?: string;
  /** Redis: a Redis Cluster rather than one server. */
  cluster: boolean;
  prefix: string;
  /** Memory store: how often the journal is fsynced (the most that a kill -9 can lose). */
  flushIntervalMs: number;
  /** Redis: gateway instances sharing the Redis; while it is away each serves 1/(this × workers) of each RPM and concurrency limit. */
  instancesHint: number;
  /** Redis: longest wait for one call. */
  timeoutMs: number;
  /** Redis: lease of an instance and of its concurrency slots (≤ 30 s). */
  leaseMs: number;
}

/**
 * One upstream account of a provider (a provider API key, or a relay with its own base URL). A
 * provider configured with a single `api_key` has one implicit account named `default`.
 */
export interface AccountConfig {
  name: string;
  /** `<provider>/<account>`: the name in metrics, logs, the admin view and store scopes. */
  id: string;
  apiKey: string;
  /** Overrides the provider's base URL (never for `mock`). */
  baseUrl?: string;
  /** The provider's headers with the account's own on top. */
  headers: Readonly<Record<string, string>>;
  /** Share of new requests within its priority tier (relative to its peers). */
  weight: number;
  /** Lower is served first; a higher tier only when every lower one is unavailable. */
  priority: number;
  /** Concurrent upstream requests, across instances (store slots); 0 = unlimited. */
  concurrency: number;
  /** Upstream requests per clock minute, across instances (store RPM); 0 = unlimited. */
  rpm: number;
  /** Gateway model ids this account serves; undefined = every model of the provider. */
  models?: readonly string[];
}

/** How a provider's accounts are scheduled (`providers.<p>.scheduling`). */
export interface SchedulingConfig {
  /** How long a conversation stays bound to its account after its last request. */
  stickyTtlMs: number;
  /** First cooldown after a failure without a provider-given delay; doubles per consecutive failure. */
  cooldownMs: number;
  /** Ceiling of every cooldown, provider-given delays included. */
  maxCooldownMs: number;
  /** Accounts tried per model within one request (failover before the fallback list). */
  maxAttempts: number;
  /** A TTFT above `slowFactor` × the fastest peer's (and `slowMarginMs` above it) demotes an account. */
  slowFactor: number;
  slowMarginMs: number;
}

export interface ProviderConfig {
  name: string;
  kind: ProviderKind;
  /** Base URL; for `mock`, filled in when the built-in mock server starts. */
  baseUrl: string;
  /** The implicit account's key (`api_key`); empty when the provider lists `accounts`. */
  apiKey: string;
  /** At least one: the listed accounts, or the implicit `default` account. */
  accounts: readonly AccountConfig[];
  scheduling: Readonly<SchedulingConfig>;
  protocols: readonly ProtocolName[];
  headers: Readonly<Record<string, string>>;
  timeoutMs?: number;
  idleTimeoutMs?: number;
  maxSockets: number;
  /** `mock` only: directory the `replay=` directive may read transcripts from. */
  fixturesDir?: string;
}

export interface ModelConfig {
  id: string;
  provider: string;
  upstream: string;
  ownedBy: string;
  price: Readonly<Price>;
  /** Used to size the admission reservation when a request does not cap its output. */
  maxOutputTokens: number;
}

export interface PlanLimits {
  daily: number;
  weekly: number;
  monthly: number;
}

export interface GroupConfig {
  name: string;
  kind: GroupKind;
  passthrough: boolean;
  allowMessages: boolean;
  /**
   * Provider-side tools (Responses `web_search`, Anthropic server tools…) on a request converted
   * for an upstream of another protocol: map to the target's equivalent where it has one, else drop
   * (`map`); drop all (`drop`); map where possible, else 400 (`reject`). docs/conversion.md.
   */
  builtinTools: 'map' | 'drop' | 'reject';
  /** Model ids served; empty means "every configured model" for routing, the default list for /v1/models. */
  models: readonly string[];
  multiplierPpm: number;
  billing: 'balance' | 'plan';
  /** micro-USD; 0 = no limit. */
  plan: Readonly<PlanLimits>;
  /** Requests per minute for the whole group; 0 = unlimited. */
  rpm: number;
}

export interface SubscriptionConfig {
  group: string;
  expiresAt: number;
  status: 'active' | 'suspended';
}

export interface UserConfig {
  name: string;
  status: 'active' | 'inactive';
  /** micro-USD credited to the wallet by the operator; spend is tracked by the store. */
  balance: number;
  rpm: number;
  concurrency: number;
  queue: Readonly<{ size: number; maxWaitMs: number }>;
  spendCaps: Readonly<{ weekly: number; monthly: number }>;
  /** Personal rate per group (ppm), replacing the group's multiplier. */
  rates: Readonly<Record<string, number>>;
  subscriptions: readonly SubscriptionConfig[];
}

export interface KeyConfig {
  /** Stable identity in the store and in logs: the key's `name`, or `key-` + 12 hex of the digest. */
  id: string;
  name: string;
  /** SHA-256 hex digest of the key. The plain key is never kept after load. */
  digest: string;
  user: string;
  group?: string;
  enabled: boolean;
  /** micro-USD; 0 = unlimited. */
  quota: number;
  windows: Readonly<Record<Window, number>>;
  expiresAt?: number;
  ipAllow: readonly string[];
  ipDeny: readonly string[];
}

export interface PluginInstanceConfig {
  name: string;
  use: string;
  with: Readonly<Record<string, unknown>>;
}

export type RouteHandler = 'models' | 'usage' | 'count-tokens';

export interface RouteConfig {
  path: string;
  method: string;
  protocol?: ProtocolName;
  /** Plugin instance names in the order they run. */
  chain: readonly string[];
  handler?: RouteHandler;
}

export interface GatewayConfig {
  version: 1;
  /** Absolute path of the file this was loaded from (relative paths resolve against its folder). */
  file: string;
  server: Readonly<ServerConfig>;
  store: Readonly<StoreConfig>;
  metrics: Readonly<MetricsConfig>;
  admin: Readonly<AdminConfig>;
  ledger: Readonly<LedgerConfig>;
  console: Readonly<ConsoleConfig>;
  failedRequests: Readonly<{ dir?: string; retentionMs: number; maxSize: number; maxFiles: number }>;
  /** OpenTelemetry traces; undefined: off (read at start). */
  tracing?: Readonly<TracingConfig>;
  limits: Readonly<{ freeRpmAtZeroBalance: number }>;
  providers: Readonly<Record<string, ProviderConfig>>;
  models: Readonly<Record<string, ModelConfig>>;
  groups: Readonly<Record<string, GroupConfig>>;
  users: Readonly<Record<string, UserConfig>>;
  keys: readonly KeyConfig[];
  keysByDigest: ReadonlyMap<string, KeyConfig>;
  plugins: Readonly<Record<string, PluginInstanceConfig>>;
  chains: Readonly<Record<string, readonly string[]>>;
  routes: readonly RouteConfig[];
}
