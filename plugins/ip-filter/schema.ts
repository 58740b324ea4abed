export interface IpFilterOptions {
  /** When not empty, only these IPs / CIDRs may call (in addition to each key's own ip_allow). */
  allow: string[];
  /** Never these IPs / CIDRs (deny wins over allow). */
  deny: string[];
}

export const ipFilterSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    allow: { type: 'array', items: { type: 'string', minLength: 1 }, default: [] },
    deny: { type: 'array', items: { type: 'string', minLength: 1 }, default: [] },
  },
} as const;
