/**
 * body-rewriter: operator rules that set, default or remove top-level request fields before a body
 * goes upstream, per client protocol and per target model (so each fallback attempt gets the rules
 * of its own model). Edits are byte-preserving splices: every other byte of the client's body is
 * forwarded as it came. `model`, `models` and `stream` are the gateway's and cannot be rewritten.
 * Limits are computed on the body as the client sent it.
 */
import { definePlugin } from '../../core/plugin.js';
import { spliceJson } from '../../core/protocols/splice.js';
import { bodyRewriterSchema, type BodyRewriterOptions } from './schema.js';

const RESERVED = new Set(['model', 'models', 'stream']);

function glob(pattern: string): RegExp {
  return new RegExp(
    '^' +
      pattern
        .split('*')
        .map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
        .join('.*') +
      '$',
  );
}

export default definePlugin<BodyRewriterOptions>({
  name: 'body-rewriter',
  description: 'Set, default or remove request fields per protocol and model',
  schema: bodyRewriterSchema,
  create(options) {
    const rules = options.rules.map((r) => ({
      protocols: r.protocols,
      models: r.models?.map(glob),
      set: Object.fromEntries(Object.entries(r.set ?? {}).filter(([k]) => !RESERVED.has(k))),
      defaults: Object.fromEntries(Object.entries(r.defaults ?? {}).filter(([k]) => !RESERVED.has(k))),
      remove: (r.remove ?? []).filter((k) => !RESERVED.has(k)),
    }));
    return {
      onAttempt(ctx, attempt) {
        for (const r of rules) {
          if (r.protocols && (!ctx.protocol || !r.protocols.includes(ctx.protocol))) continue;
          if (r.models && !r.models.some((g) => g.test(attempt.model.id))) continue;
          const json = attempt.request.json;
          const set: Record<string, unknown> = { ...r.set };
          for (const [k, v] of Object.entries(r.defaults)) {
            if (!Object.prototype.hasOwnProperty.call(json, k) && !(k in set)) set[k] = v;
          }
          if (Object.keys(set).length === 0 && r.remove.length === 0) continue;
          const text = spliceJson(attempt.request.text, { set, remove: r.remove });
          attempt.request = { text, json: JSON.parse(text) };
        }
      },
    };
  },
});
