/**
 * The upstream attempt loop: one attempt per model (the requested one, then the fallback list),
 * each through the provider transport; the first success is delivered to the client.
 *
 * Commit — the moment the status line is written — happens only when the answering attempt has
 * produced its first client bytes (for streams: the first translated event). Until then a failed
 * attempt can still fall back to the next model; after it, a failure becomes the client protocol's
 * in-stream error event, never a silent close.
 *
 * `onResponse` hooks run once an attempt's outcome is known: an error (status ≥ 400, connection
 * failure, timeout, a stream that died before its first event) or a success whose first bytes are
 * ready. A hook sets `attempt.retry = true` to move on to the next model.
 *
 * The folder, each file with its own contract at its top:
 * - index.ts (this file): `runModelCall`, the attempt loop over models and accounts;
 * - attempt.ts: one attempt, from encoding the request to handing the answer to its delivery;
 * - json.ts, stream.ts: delivery of a non-streaming answer, of a stream;
 * - outcome.ts: the onResponse hooks, the commit (`writeHead`) and estimated usage, shared by those;
 * - http.ts: upstream URLs and headers, upstream failures as the client's errors, `readAll`;
 * - transport.ts: the HTTP transport (one `http.request` per attempt);
 * - types.ts: `UpstreamDeps` and `ChainHooks`, the contract with the server and the pipeline.
 */
import type { RequestContext } from '../context.js';
import type { Attempt, ResolvedModel } from '../types.js';
import { GatewayError } from '../errors.js';
import type { ProtocolName } from '../config/types.js';
import { passthrough } from '../protocols/passthrough.js';
import type { Conversion } from '../protocols/types.js';
import { resolveModel } from '../routing.js';
import { newAttempt, tryAttempt } from './attempt.js';
import { hook } from './outcome.js';
import { accountBaseUrl } from './http.js';
import type { ChainHooks, UpstreamDeps } from './types.js';

export type { ChainHooks, UpstreamDeps } from './types.js';

/**
 * Runs the attempts of a model call and delivers the answer. Each model (the requested one, then
 * the fallback list) is tried on up to `scheduling.max_attempts` of its provider's accounts: a
 * failure that is the account's (429, 5xx, 401/403, timeouts, connection errors) moves to another
 * account transparently before the next model is considered.
 */
export async function runModelCall(ctx: RequestContext, hooks: ChainHooks, deps: UpstreamDeps): Promise<void> {
  // Read and resolved by the chain already on a metered route: no await (a microtask turn) then.
  const body = ctx.parsed ?? (await ctx.body());
  const primary = ctx.requested ?? (await ctx.model());
  const candidates: ResolvedModel[] = [primary];
  for (const name of ctx.fallback.models) {
    const r = resolveModel(ctx.config, ctx.group, name);
    if (r && !candidates.some((c) => c.model.id === r.model.id)) candidates.push(r);
    else if (!r) ctx.log.debug('fallback model not served, skipped', { model: name });
  }
  const max = Math.max(1, Math.min(ctx.fallback.maxAttempts, candidates.length));
  let lastError: GatewayError | undefined;
  /** Why a model had no account at all (reported when no attempt failed for a better reason). */
  let noAccount: GatewayError | undefined;
  for (let i = 0; i < max; i++) {
    if (ctx.clientGone.aborted) throw new GatewayError('UPSTREAM_ERROR', { message: 'client went away', status: 499 });
    throwIfStopped(ctx);
    const cand = candidates[i];
    const pool = deps.pools.of(cand.provider);
    const choose = pool.chooser(ctx, cand.model);
    let attempt: Attempt | undefined;
    for (;;) {
      const chosen = choose();
      const pick = chosen instanceof Promise ? await chosen : chosen; // at once unless the store was asked
      if (!pick.ok) {
        if (pick.error?.status === 499) throw pick.error;
        if (!attempt) noAccount = pick.error;
        break;
      }
      if (attempt) {
        ctx.metrics?.accountFailovers.inc({ provider: cand.provider.name });
        ctx.log.info('upstream account failed, trying another account', {
          model: cand.model.id,
          account: attempt.account?.id,
          status: attempt.status,
          error: attempt.error?.message,
        });
      }
      attempt = newAttempt(ctx, cand, pick.lease.account, body);
      ctx.attempts.push(attempt);
      // Its span, and its traceparent in attempt.headers (before the onAttempt hooks, which may see it).
      const span = ctx.trace?.attempt(attempt, accountBaseUrl(deps, cand.provider, pick.lease.account));
      /** The attempt, once it went upstream and came back (a hook or converter that threw leaves it unset). */
      let outcome: Attempt | undefined;
      let ok = false;
      let failover = false;
      try {
        for (const p of hooks.onAttempt) {
          const r = hook(hooks, p, 'onAttempt', ctx, attempt);
          if (r) await r;
        }
        if (!attempt.conversion) {
          if (attempt.upstreamProtocol !== ctx.protocol) {
            throw new GatewayError('NO_CHANNELS', {
              message: `No available channels: model '${cand.model.id}' needs protocol conversion and no converter is configured on this route`,
            });
          }
          attempt.conversion = passthroughOf(attempt.upstreamProtocol);
        }
        ok = await tryAttempt(ctx, attempt, body.stream, hooks, deps);
        outcome = attempt;
      } catch (e) {
        span?.threw(e);
        throw e;
      } finally {
        span?.end(ok);
        // No outcome (the request was refused before or while it was sent): the account's slot is
        // released and nothing is held against it.
        failover = pick.lease.done(outcome, ctx)?.failover ?? false;
      }
      if (ok) {
        if (ctx.logs('debug')) ctx.log.debug('upstream attempt answered', attemptFields(attempt));
        return;
      }
      // The gateway ended the request (shutdown): no other account or model is tried.
      throwIfStopped(ctx);
      lastError = attempt.error;
      // An upstream failure is a warning (`warn` shows them); what follows is logged when it happens.
      if (!ctx.clientGone.aborted && outcome)
        ctx.log.warn('upstream attempt failed', { ...attemptFields(attempt), failure: attempt.failure, error: attempt.error?.message });
      if (ctx.committed || ctx.clientGone.aborted || !failover) break;
    }
    if (!attempt) continue; // no account for this model: the next one in the list, if any
    if (!attempt.retry || ctx.committed) break;
    ctx.log.info('upstream attempt failed, falling back', { model: cand.model.id, status: attempt.status, error: attempt.error?.message });
  }
  throw lastError ?? noAccount ?? new GatewayError('UPSTREAM_ERROR');
}

/** Once the gateway ended the request itself (`ctx.stop()`), its error ends the attempt loop. */
function throwIfStopped(ctx: RequestContext): void {
  if (ctx.stopped) throw ctx.stopped;
}

/** An attempt as log lines show it: which model, provider and account (never its key), and the upstream status. */
function attemptFields(a: Attempt): Record<string, unknown> {
  return {
    attempt: a.index,
    model: a.model.id,
    provider: a.provider.name,
    account: a.account?.id,
    upstreamProtocol: a.upstreamProtocol,
    status: a.status,
  };
}

/** A passthrough conversion holds no per-request state (its stream translators do): one per protocol. */
const passthroughs = new Map<ProtocolName, Conversion>();
function passthroughOf(protocol: ProtocolName): Conversion {
  let c = passthroughs.get(protocol);
  if (!c) passthroughs.set(protocol, (c = passthrough(protocol)));
  return c;
}
