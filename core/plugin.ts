/**
 * The plugin contract.
 *
 * A plugin is a definition — `definePlugin({ name, schema, requires?, create })` — and gateway.yaml
 * declares named instances of it (`plugins: { my-auth: { use: auth, with: {…} } }`) and puts them
 * in ordered chains (`chains: { model-call: [my-auth, …] }`) that routes run. `create` runs once
 * per config load with the instance's validated options; it does all expensive work up front
 * (compile CIDR tables, resolve store handles) and returns an instance with any of the hooks below.
 *
 * Phases, for one request (the order inside each phase is the chain order, or its reverse):
 *
 * | hook          | order   | when                                                                    | setResponseHeader |
 * |---------------|---------|-------------------------------------------------------------------------|-------------------|
 * | onRequest     | chain   | once; headers only: identify the caller, screen the connection          | yes               |
 * | onAccess      | chain   | once; may read the body and model; authorise, check and claim limits    | yes               |
 * | onAttempt     | chain   | before each upstream attempt (the converter encodes for the target)     | yes               |
 * | onResponse    | reverse | status and headers of each attempt; fallback may ask for a retry        | yes               |
 * | onEvent       | reverse | each stream frame sent to the client (around commit); synchronous       | no (throws once the response started) |
 * | onFinally     | reverse | always, for every plugin the request reached in onRequest               | no (throws)       |
 * | close         | —       | when the config that created the instance is retired (reload, shutdown) | —                 |
 *
 * Response headers: `ctx.setResponseHeader(name, value)` adds a header to the response the client
 * gets, an answer or an error alike, from the hooks that run before the response starts. It
 * refuses hop-by-hop and framing headers (connection, transfer-encoding, content-length,
 * content-type, …) and `x-request-id`, and throws once the status line is written; the gateway's
 * own headers for an answer win over a plugin's of the same name. Never `ctx.res.setHeader`: the
 * response object is the core's.
 *
 * Why two request phases: the spec's check order interleaves plugins (key known → … → user active
 * → IP rules → key expiry → group → …): `auth` identifies in onRequest, `ip-filter` screens in
 * onRequest, and `auth` authorises in onAccess, so the order falls out of the chain order.
 *
 * Stopping a request: throw a `GatewayError` from `core/errors.ts`. The remaining request hooks
 * and the upstream are skipped, `onFinally` still runs, and the route's protocol renders the body.
 * Once the status line is written (commit) nothing can retry; a later failure becomes the
 * protocol's in-stream error event.
 *
 * Limits: plugins never talk to the store to check-then-charge. In onAccess they add claims to
 * `ctx.admission`; the core submits all claims in one atomic `store.admit()` after the phase (or
 * earlier, when a plugin calls `ctx.admission.commit()` because it must act after admission, like
 * the concurrency queue). See `core/store/types.ts`.
 *
 * `requires` names plugin definitions that must appear earlier in every chain using this one; a
 * chain that breaks it fails at config load: `routes[1].chain[3] (quota): requires 'auth' earlier`.
 *
 * Third-party plugins: `use: ./plugins-local/my-plugin.js` loads a module (path relative to
 * gateway.yaml), `use: some-package` (or `some-package/subpath`) the module Node finds for that
 * import from gateway.yaml's folder (node_modules, the package's "exports"; built-in names win);
 * its default export is a `PluginDefinition` and it goes through this same contract
 * (core/plugin-modules.ts). Such a plugin imports the public API by package name (`llm-gateway`,
 * core/public.ts), which resolves to the gateway that loads it; its tests may use their own copy
 * of the package: nothing here may depend on class identity across copies.
 */
import type { RequestContext } from './context.js';
import type { Attempt, Outcome, StreamFrame } from './types.js';
import type { GatewayConfig } from './config/types.js';
import type { Store } from './store/types.js';
import type { AccountView } from './accounts/directory.js';
import type { Clock } from './clock.js';
import type { Logger } from './log.js';
import type { Metrics } from './metrics.js';

export interface PluginDeps {
  /** The frozen config this instance belongs to. */
  config: GatewayConfig;
  store: Store;
  /**
   * Who may call: the users and keys of this config load (the file's) and of the store (the admin
   * API's), looked up synchronously (core/accounts/directory.ts).
   */
  accounts: AccountView;
  clock: Clock;
  log: Logger;
  /**
   * The gateway's metrics. A plugin's own: `metrics.counter({ name, help, labelNames })` (also
   * `gauge`, `histogram`) — the metric already registered under that name when there is one, so
   * creating it in `create()` survives reloads.
   */
  metrics: Metrics;
  /** The instance's name in gateway.yaml. */
  instanceName: string;
}

type Awaitable<T> = T | Promise<T>;

export interface PluginInstance {
  onRequest?(ctx: RequestContext): Awaitable<void>;
  onAccess?(ctx: RequestContext): Awaitable<void>;
  onAttempt?(ctx: RequestContext, attempt: Attempt): Awaitable<void>;
  onResponse?(ctx: RequestContext, attempt: Attempt): Awaitable<void>;
  onEvent?(ctx: RequestContext, frame: StreamFrame): void;
  onFinally?(ctx: RequestContext, outcome: Outcome): Awaitable<void>;
  close?(): Awaitable<void>;
}

export interface PluginDefinition<O = Record<string, unknown>> {
  /** The `use:` name. Built-ins: the folder name under plugins/. */
  name: string;
  description?: string;
  /** JSON Schema (ajv, draft-07) for the instance's `with:` options; defaults are applied. */
  schema: object;
  /** Plugin definition names that must appear earlier in the chain. */
  requires?: readonly string[];
  create(options: O, deps: PluginDeps): Awaitable<PluginInstance>;
}

export function definePlugin<O>(def: PluginDefinition<O>): PluginDefinition<O> {
  return def;
}

export type PluginRegistry = ReadonlyMap<string, PluginDefinition<any>>;

export function isPluginDefinition(v: unknown): v is PluginDefinition<any> {
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof (v as PluginDefinition).name === 'string' &&
    typeof (v as PluginDefinition).create === 'function' &&
    typeof (v as PluginDefinition).schema === 'object'
  );
}
