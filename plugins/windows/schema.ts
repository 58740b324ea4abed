export type WindowsOptions = Record<string, never>;
export const windowsSchema = { type: 'object', additionalProperties: false, properties: {} } as const;
