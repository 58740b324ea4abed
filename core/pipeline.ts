/**
 * Chains compiled once per config load into per-phase hook arrays (Fastify style: no per-request
 * checks of which plugin has which hook), and the run of one request through them.
 */
import type { PluginInstance, Outcome } from './plugin.js';
import type { RequestContext } from './context.js';
import { toGatewayError, type GatewayError } from './errors.js';
import type { ChainHooks } from './upstream.js';

export interface CompiledChain extends ChainHooks {
  names: readonly string[];
  nameOf(p: PluginInstance): string | undefined;
  instances: readonly PluginInstance[];
  onRequest: PluginInstance[];
  onAccess: PluginInstance[];
}

export function compileChain(names: readonly string[], instances: ReadonlyMap<string, PluginInstance>): CompiledChain {
  const list = names.map((n) => {
    const i = instances.get(n);
    if (!i) throw new Error(`plugin instance '${n}' was not created`);
    return i;
  });
  const reversed = [...list].reverse();
  const byInstance = new Map(list.map((p, i) => [p, names[i]]));
  return {
    names,
    nameOf: (p) => byInstance.get(p),
    instances: list,
    onRequest: list.filter((p) => p.onRequest),
    onAccess: list.filter((p) => p.onAccess),
    onAttempt: list.filter((p) => p.onAttempt),
    onResponse: reversed.filter((p) => p.onResponse),
    onEvent: reversed.filter((p) => p.onEvent),
  };
}

export interface ChainRun {
  error?: GatewayError;
  /** How many plugins (in chain order) the request reached in onRequest: they get onFinally. */
  reached: number;
}

/** onRequest → onAccess → admission → the route's terminal step. Throws nothing. */
export async function runChain(ctx: RequestContext, chain: CompiledChain, terminal: () => Promise<void>): Promise<ChainRun> {
  let reached = 0;
  let current: PluginInstance | undefined;
  try {
    // A hook that returns no promise is not awaited: an await costs a turn of the microtask queue.
    for (const p of chain.instances) {
      reached++;
      current = p;
      if (p.onRequest) {
        const r = p.onRequest(ctx);
        if (r) await r;
      }
    }
    for (const p of chain.onAccess) {
      current = p;
      const r = p.onAccess!(ctx);
      if (r) await r;
    }
    current = undefined;
    await ctx.admission.commit();
    await terminal();
    return { reached };
  } catch (e) {
    // A plugin's own exception names that plugin (upstream hooks name theirs where they run).
    return { error: toGatewayError(e, current && chain.nameOf(current)), reached };
  }
}

/** onFinally of every reached plugin, in reverse chain order; a failing hook is logged, not fatal. */
export async function runFinally(ctx: RequestContext, chain: CompiledChain, reached: number, outcome: Outcome): Promise<void> {
  for (let i = reached - 1; i >= 0; i--) {
    const p = chain.instances[i];
    if (!p.onFinally) continue;
    try {
      const r = p.onFinally(ctx, outcome);
      if (r) await r;
    } catch (e) {
      ctx.log.error('onFinally hook failed', { plugin: chain.names[i], error: e as Error });
    }
  }
}
