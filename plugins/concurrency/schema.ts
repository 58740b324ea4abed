export type ConcurrencyOptions = Record<string, never>;
export const concurrencySchema = { type: 'object', additionalProperties: false, properties: {} } as const;
