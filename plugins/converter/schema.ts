export type ConverterOptions = Record<string, never>;
export const converterSchema = { type: 'object', additionalProperties: false, properties: {} } as const;
