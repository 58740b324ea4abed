/**
 * moderation: refuses a request whose text matches one of the configured patterns, before any
 * upstream sees it — 403 `content_policy_violation`, rendered by the gateway in the client's
 * protocol; a request it lets through gets `x-moderation: passed` on its response. Written only
 * against the public API of `llm-gateway`.
 *
 *   plugins:
 *     moderation:
 *       use: llm-gateway-moderation
 *       with: { patterns: ["\\bforbidden\\b", "secret\\s+plan"] }
 *   chains:
 *     model-call: [auth, moderation, ip-filter, quota, …]
 */
import { definePlugin, GatewayError, type ParsedBody } from 'llm-gateway';

export interface ModerationOptions {
  /** Regular expressions (JavaScript syntax, matched case-insensitively) a request must not match. */
  patterns: string[];
  /** The message clients get (default: the gateway's "Request blocked by content policy"). */
  message?: string;
}

/** Every string of the request except the model name: message text, system prompt, tool arguments. */
function requestText(body: ParsedBody): string {
  const parts: string[] = [];
  const walk = (v: unknown, key: string): void => {
    if (typeof v === 'string') {
      if (key !== 'model') parts.push(v);
    } else if (Array.isArray(v)) {
      for (const x of v) walk(x, key);
    } else if (v !== null && typeof v === 'object') {
      for (const [k, x] of Object.entries(v)) walk(x, k);
    }
  };
  walk(body.json, '');
  return parts.join('\n');
}

export default definePlugin<ModerationOptions>({
  name: 'moderation',
  description: 'Refuses requests whose text matches a configured pattern (403 content_policy_violation)',
  schema: {
    type: 'object',
    additionalProperties: false,
    required: ['patterns'],
    properties: {
      patterns: {
        type: 'array',
        minItems: 1,
        items: { type: 'string', minLength: 1 },
        description: 'Regular expressions, case-insensitive',
      },
      message: { type: 'string', minLength: 1, description: 'The message clients get' },
    },
  },
  requires: ['auth'],
  create(options, { metrics, instanceName }) {
    // Compiled once per config load: a bad pattern rejects the config, not a request.
    const patterns = options.patterns.map((p, i) => {
      try {
        return new RegExp(p, 'iu');
      } catch (e) {
        throw new Error(`${instanceName}: patterns[${i}] is not a valid regular expression: ${(e as Error).message}`);
      }
    });
    // Created in every config load; the registry hands back the same counter, so reloads keep it.
    const blocked = metrics.counter({
      name: 'moderation_blocked_total',
      help: 'Requests refused by the moderation plugin, by instance and pattern index',
      labelNames: ['instance', 'pattern'],
    });
    return {
      async onAccess(ctx) {
        const text = requestText(await ctx.body());
        const hit = patterns.findIndex((re) => re.test(text));
        if (hit === -1) {
          // On the answer, or on whatever error a later step gives: the check itself passed.
          ctx.setResponseHeader('x-moderation', 'passed');
          return;
        }
        blocked.inc({ instance: instanceName, pattern: String(hit) });
        ctx.log.info('request refused by moderation', { pattern: hit });
        throw new GatewayError('CONTENT_POLICY', { message: options.message });
      },
    };
  },
});
