/**
 * Chains compiled once per config load into per-phase hook arrays (Fastify style: no per-request
 * checks of which plugin has which hook), and the run of one request through them.
 */
import type { PluginInstance } from './plugin.js';
import type { Outcome } from './types.js';
import type { RequestContext } from './context.js';
import { toGatewayError, type GatewayError } from './errors.js';
import type { ChainHooks } from './upstream/types.js';

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
    onRequest: list.filter((p) => p.onRequest !== undefined),
    onAccess: list.filter((p) => p.onAccess !== undefined),
    onAttempt: list.filter((p) => p.onAttempt !== undefined),
    onResponse: reversed.filter((p) => p.onResponse !== undefined),
    onEvent: reversed.filter((p) => p.onEvent !== undefined),
  };
}

export interface ChainRun {
  error?: GatewayError;
  /** How many plugins (in chain order) the request reached in onRequest: they get onFinally. */
  reached: number;
}

/** The route's terminal step (a model call or a handler). */
export type Terminal = (ctx: RequestContext, chain: CompiledChain) => Promise<void>;

/**
 * onRequest → onAccess → admission → the route's terminal step. Throws nothing.
 *
 * Hooks are called one after the other and only a returned promise is awaited (an await costs a
 * turn of the microtask queue); the admission is awaited only when it has claims left to submit.
 */
export async function runChain(ctx: RequestContext, chain: CompiledChain, terminal: Terminal): Promise<ChainRun> {
  const run: ChainRun = { reached: 0 };
  let current: PluginInstance | undefined;
  try {
    for (const p of chain.instances) {
      run.reached++;
      if (p.onRequest) {
        current = p;
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
    const c = ctx.admission.commitIfPending();
    if (c) await c;
    await terminal(ctx, chain);
  } catch (e) {
    // A plugin's own exception names that plugin (upstream hooks name theirs where they run).
    run.error = toGatewayError(e, current && chain.nameOf(current));
  }
  return run;
}

/**
 * onFinally of every reached plugin, in reverse chain order; a failing hook is logged, not fatal.
 * Undefined when no hook returned a promise (nothing to wait for).
 */
export function runFinally(ctx: RequestContext, chain: CompiledChain, reached: number, outcome: Outcome): Promise<void> | undefined {
  for (let i = reached - 1; i >= 0; i--) {
    const p = chain.instances[i];
    if (!p.onFinally) continue;
    let r;
    try {
      r = p.onFinally(ctx, outcome);
    } catch (e) {
      finallyFailed(ctx, chain, i, e);
      continue;
    }
    if (r) return finishFinally(ctx, chain, i, outcome, r);
  }
  return undefined;
}

/** The rest of `runFinally` once a hook returned a promise (hook `i`'s). */
async function finishFinally(
  ctx: RequestContext,
  chain: CompiledChain,
  i: number,
  outcome: Outcome,
  pending: Promise<void> | void,
): Promise<void> {
  try {
    await pending;
  } catch (e) {
    finallyFailed(ctx, chain, i, e);
  }
  for (i--; i >= 0; i--) {
    const p = chain.instances[i];
    if (!p.onFinally) continue;
    try {
      const r = p.onFinally(ctx, outcome);
      if (r) await r;
    } catch (e) {
      finallyFailed(ctx, chain, i, e);
    }
  }
}

function finallyFailed(ctx: RequestContext, chain: CompiledChain, i: number, e: unknown): void {
  ctx.log.error('onFinally hook failed', { plugin: chain.names[i], error: e as Error });
}
