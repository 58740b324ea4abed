/** auth has no options: its rules are the spec's, and keys live under `keys:` in gateway.yaml. */
export type AuthOptions = Record<string, never>;

export const authSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {},
} as const;
