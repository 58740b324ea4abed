/**
 * Everything built from one config load: plugin instances, compiled routes. A reload builds a new
 * Runtime and swaps it in atomically; requests in flight keep the one they started with, and the
 * old one's plugins are closed when its last request leaves.
 */
import type { GatewayConfig, RouteConfig } from './config/types.js';
import type { LoadedConfig } from './config/load.js';
import type { PluginDeps, PluginInstance } from './plugin.js';
import type { Store } from './store/types.js';
import type { Clock } from './clock.js';
import type { Logger } from './log.js';
import type { Metrics } from './metrics.js';
import { compileChain, type CompiledChain } from './pipeline.js';
import type { RouteInfo } from './types.js';
import type { AccountDirectory, AccountView } from './accounts/directory.js';

export interface CompiledRoute {
  info: RouteInfo;
  chain: CompiledChain;
}

export interface RuntimeDeps {
  store: Store;
  accounts: AccountDirectory;
  clock: Clock;
  log: Logger;
  metrics: Metrics;
}

export class Runtime {
  private inFlight = 0;
  private retired = false;
  private closed = false;
  private drained?: () => void;

  private constructor(
    readonly config: GatewayConfig,
    /** The users and keys this config load serves (its file's and the store's). */
    readonly accounts: AccountView,
    private readonly instances: ReadonlyMap<string, PluginInstance>,
    /** path → method → route: no string made per request to look one up. */
    private readonly routes: ReadonlyMap<string, ReadonlyMap<string, CompiledRoute>>,
    private readonly log: Logger,
  ) {}

  static async create(loaded: LoadedConfig, deps: RuntimeDeps): Promise<Runtime> {
    const { config } = loaded;
    const accounts = deps.accounts.view(config);
    const instances = new Map<string, PluginInstance>();
    try {
      for (const [name, plan] of loaded.plugins) {
        const pdeps: PluginDeps = {
          store: deps.store,
          clock: deps.clock,
          metrics: deps.metrics,
          accounts,
          config,
          instanceName: name,
          log: deps.log.child({ plugin: name }),
        };
        instances.set(name, await plan.definition.create(plan.options, pdeps));
      }
    } catch (e) {
      for (const i of instances.values()) await i.close?.();
      throw e;
    }
    const routes = new Map<string, Map<string, CompiledRoute>>();
    for (const r of config.routes) {
      let byMethod = routes.get(r.path);
      if (!byMethod) routes.set(r.path, (byMethod = new Map()));
      byMethod.set(r.method, { info: routeInfo(r), chain: compileChain(r.chain, instances) });
    }
    return new Runtime(config, accounts, instances, routes, deps.log);
  }

  /** The route for a method and path (the query string is not part of matching). */
  match(method: string, path: string): CompiledRoute | undefined {
    const byMethod = this.routes.get(path);
    return byMethod?.get(method) ?? (method === 'HEAD' ? byMethod?.get('GET') : undefined);
  }

  hasPath(path: string): boolean {
    return this.routes.has(path);
  }

  enter(): void {
    this.inFlight++;
  }

  leave(): void {
    this.inFlight--;
    if (this.retired && this.inFlight === 0) this.drained?.();
  }

  get active(): number {
    return this.inFlight;
  }

  /** Stops taking part in new requests; closes the plugins once the last request in flight leaves. */
  async retire(): Promise<void> {
    if (this.retired) return;
    this.retired = true;
    if (this.inFlight > 0)
      await new Promise<void>((resolve) => {
        this.drained = resolve;
      });
    await this.close();
  }

  private async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const [name, i] of this.instances) {
      try {
        await i.close?.();
      } catch (e) {
        this.log.error('plugin close failed', { plugin: name, error: e as Error });
      }
    }
  }
}

function routeInfo(r: RouteConfig): RouteInfo {
  return { ...r, name: r.handler ? `${r.handler}` : (r.protocol ?? r.path) };
}
