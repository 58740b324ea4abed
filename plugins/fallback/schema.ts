export interface FallbackOptions {
  /** Attempts in total, the requested model included (the spec's ceiling is 5). */
  max_attempts: number;
}
export const fallbackSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    max_attempts: {
      type: 'integer',
      minimum: 1,
      maximum: 5,
      default: 5,
      description: "Attempts in total, the requested model included, over the request's `models` list",
    },
  },
} as const;
