/**
 * fallback: the request's `models` list, tried in order after `model`, at most `max_attempts` in
 * total, and only while nothing has been sent to the client. It moves on after a connection error,
 * a timeout, 429, 5xx or 529 — never after a 4xx such as 400 (the next model would refuse the same
 * request). The answer names the model that answered and is billed once, for it.
 */
import { definePlugin } from '../../core/plugin.js';
import type { ParsedBody } from '../../core/types.js';
import { fallbackSchema, type FallbackOptions } from './schema.js';

export default definePlugin<FallbackOptions>({
  name: 'fallback',
  description: "Try the request's fallback models on retryable upstream failures",
  schema: fallbackSchema,
  create(options) {
    return {
      onAccess(ctx) {
        if (ctx.route.handler) return;
        const use = (body: ParsedBody) => {
          ctx.fallback = { models: body.fallback, maxAttempts: options.max_attempts };
        };
        // Read by then in the shipped chain (quota reads it first): no await needed.
        if (ctx.parsed) return use(ctx.parsed);
        return ctx.body().then(use);
      },
      onResponse(ctx, attempt) {
        if (!attempt.error || ctx.committed || ctx.clientGone.aborted) return;
        // An error event streamed before commit counts by what it means (overloaded → 503, rate
        // limit → 429, invalid request → 400), not by the stream's HTTP 200.
        const s = attempt.failure === 'event' ? attempt.error.status : (attempt.status ?? 0);
        const retryable = attempt.failure === 'connect' || attempt.failure === 'timeout' || s === 429 || s >= 500;
        if (retryable) attempt.retry = true;
      },
    };
  },
});
