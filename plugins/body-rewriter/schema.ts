export interface RewriteRule {
  /** Client protocols the rule applies to (all when absent). */
  protocols?: Array<'openai-chat' | 'anthropic-messages' | 'openai-responses'>;
  /** Model ids (the attempt's model) the rule applies to; `*` matches any run of characters. */
  models?: string[];
  /** Top-level fields forced to these values. */
  set?: Record<string, unknown>;
  /** Top-level fields given these values when the client did not send them. */
  defaults?: Record<string, unknown>;
  /** Top-level fields removed. */
  remove?: string[];
}

export interface BodyRewriterOptions {
  rules: RewriteRule[];
}

export const bodyRewriterSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    rules: {
      type: 'array',
      default: [],
      description: "Rules applied in order to each upstream attempt's body; top-level fields only, the rest of the body byte for byte",
      items: {
        type: 'object',
        additionalProperties: false,
        properties: {
          protocols: {
            type: 'array',
            items: { enum: ['openai-chat', 'anthropic-messages', 'openai-responses'] },
            description: 'Client protocols the rule applies to (all when absent)',
          },
          models: {
            type: 'array',
            items: { type: 'string', minLength: 1 },
            description: "Model ids (the attempt's model) the rule applies to; * matches any run of characters (all when absent)",
          },
          set: { type: 'object', description: 'Top-level fields forced to these values' },
          defaults: { type: 'object', description: 'Top-level fields given these values when the client did not send them' },
          remove: { type: 'array', items: { type: 'string', minLength: 1 }, description: 'Top-level fields removed' },
        },
      },
    },
  },
} as const;
