/**
 * What settles an attempt's outcome, shared by the attempt and both deliveries:
 * - `runOnResponse` runs the onResponse hooks once the outcome is known (an error, or a success
 *   whose first bytes are ready); a hook sets `attempt.retry = true` to move on to the next model.
 *   It returns undefined when no hook returned a promise, so the caller awaits nothing (no
 *   microtask turn) on the common path; `hook` runs one hook (onAttempt or onResponse) the same way.
 * - `writeHead` is the commit: the status line is written once, and `ctx.committed` says so.
 * - `estimateUsage` and `billInput` put a usage on the request when the upstream reported none.
 */
import type { RequestContext } from '../context.js';
import type { Attempt } from '../types.js';
import { toGatewayError } from '../errors.js';
import type { PluginInstance } from '../plugin.js';
import { estimateTokens } from '../protocols/usage.js';
import type { Usage } from '../money.js';
import type { ChainHooks } from './types.js';

/** The onResponse hooks; undefined when none returned a promise (nothing to wait for). */
export function runOnResponse(ctx: RequestContext, attempt: Attempt, hooks: ChainHooks): Promise<void> | undefined {
  const list = hooks.onResponse;
  for (let i = 0; i < list.length; i++) {
    const r = hook(hooks, list[i], 'onResponse', ctx, attempt);
    if (r) return finishOnResponse(ctx, attempt, hooks, i, r);
  }
  return undefined;
}

async function finishOnResponse(
  ctx: RequestContext,
  attempt: Attempt,
  hooks: ChainHooks,
  i: number,
  pending: Promise<void>,
): Promise<void> {
  await pending;
  const list = hooks.onResponse;
  for (i++; i < list.length; i++) {
    const r = hook(hooks, list[i], 'onResponse', ctx, attempt);
    if (r) await r;
  }
}

/**
 * Runs a hook; an exception that is not a GatewayError becomes INTERNAL naming the plugin. A hook
 * that returns no promise is not awaited (`undefined`: nothing to wait for, no microtask turn).
 */
export function hook(
  hooks: ChainHooks,
  p: PluginInstance,
  name: 'onAttempt' | 'onResponse',
  ctx: RequestContext,
  attempt: Attempt,
): Promise<void> | undefined {
  let r: unknown;
  try {
    r = p[name]!(ctx, attempt);
  } catch (e) {
    throw toGatewayError(e, hooks.nameOf?.(p));
  }
  if (!r) return undefined;
  return Promise.resolve(r).then(
    () => undefined,
    (e) => {
      throw toGatewayError(e, hooks.nameOf?.(p));
    },
  );
}

/** The commit: writes the status line once (later calls do nothing) and marks the request committed. */
export function writeHead(ctx: RequestContext, status: number, headers: Record<string, string>): void {
  if (ctx.committed) return;
  ctx.committed = true;
  ctx.committedAt = Date.now();
  ctx.res.writeHead(status, headers);
}

/** Input estimated from the request size, output from generated characters. */
export function estimateUsage(ctx: RequestContext, outputChars: number, fallbackChars = 0): Usage {
  return { input: estimateTokens(ctx.requestChars), output: estimateTokens(outputChars || fallbackChars), cacheRead: 0, cacheWrite: 0 };
}

/**
 * A non-streaming request whose client left once the upstream had the request: no answer to bill
 * from, so the input it processed is billed, estimated from the request (docs/limits.md).
 */
export function billInput(ctx: RequestContext, attempt: Attempt): void {
  ctx.answeredModel = attempt.model;
  ctx.usage = estimateUsage(ctx, 0);
  ctx.usageEstimated = true;
  ctx.estimateReason = 'client_disconnect';
}
