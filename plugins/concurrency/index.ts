/**
 * concurrency: per-user slots (`users.<u>.concurrency`, 0 = unlimited) with a wait queue
 * (`queue: {size, max_wait}`). Last in the check order: the request is admitted first (money held,
 * RPM counted), then waits for a slot — asked for in the same store call as the admission, so a free
 * slot costs no round trip of its own, and the settlement gives it back. A full queue rejects at once ("Too many pending requests…");
 * waiting past max_wait fails ("Concurrency limit exceeded…"); both 429 rate_limit_error. A stream
 * holds its slot until it ends; a client that goes away frees its slot or its queue place at once.
 */
import { definePlugin } from '../../core/plugin.js';
import { GatewayError } from '../../core/errors.js';
import { createSlot, type RequestContext } from '../../core/context.js';
import type { SlotResult } from '../../core/store/types.js';
import { isModelCall } from '../../core/billing.js';
import { concurrencySchema, type ConcurrencyOptions } from './schema.js';

const RELEASE = createSlot<() => void>('concurrency.release');

/** The slot's outcome: kept for onFinally to give back, or the refusal thrown. */
function granted(ctx: RequestContext, r: SlotResult): void {
  if (r.ok) {
    ctx.set(RELEASE, r.release);
    // Fencing (a shared store): the slot went to another request while this instance could not renew it.
    r.onLost?.(() => ctx.stop(new GatewayError('SLOT_LOST')));
    return;
  }
  if (r.reason === 'queue_full') throw new GatewayError('QUEUE_FULL');
  if (r.reason === 'timeout') throw new GatewayError('QUEUE_TIMEOUT');
  throw new GatewayError('QUEUE_TIMEOUT', { message: 'client went away', status: 499 });
}

export default definePlugin<ConcurrencyOptions>({
  name: 'concurrency',
  description: 'Per-user concurrent request slots with a wait queue',
  schema: concurrencySchema,
  requires: ['auth'],
  create(_options, { metrics }) {
    return {
      onAccess(ctx) {
        const user = ctx.user;
        if (!user || user.concurrency <= 0 || !isModelCall(ctx)) return;
        // With the admission, in one store call: the settlement (or cancel) releases the slot too.
        const r = ctx.admission.commitWithSlot({
          scope: `user:${user.name}`,
          limit: user.concurrency,
          queueSize: user.queue.size,
          maxWaitMs: user.queue.maxWaitMs,
          signal: ctx.clientGone,
        });
        if (!(r instanceof Promise)) return granted(ctx, r); // decided at once: no wait, no promise
        metrics.queueWaiting.inc();
        return r.then(
          (x) => {
            metrics.queueWaiting.dec();
            granted(ctx, x);
          },
          (e: unknown) => {
            metrics.queueWaiting.dec();
            throw e;
          },
        );
      },
      onFinally(ctx) {
        ctx.get(RELEASE)?.();
      },
    };
  },
});
