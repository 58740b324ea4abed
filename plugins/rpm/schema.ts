export type RpmOptions = Record<string, never>;
export const rpmSchema = { type: 'object', additionalProperties: false, properties: {} } as const;
