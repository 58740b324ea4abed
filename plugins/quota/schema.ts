export type QuotaOptions = Record<string, never>;
export const quotaSchema = { type: 'object', additionalProperties: false, properties: {} } as const;
