export type MeteringOptions = Record<string, never>;
export const meteringSchema = { type: 'object', additionalProperties: false, properties: {} } as const;
