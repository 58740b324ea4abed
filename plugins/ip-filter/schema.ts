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
    allow: {
      type: 'array',
      items: { type: 'string', minLength: 1 },
      default: [],
      description: "When not empty, only these IPs or CIDRs may call (besides each key's own ip_allow)",
    },
    deny: {
      type: 'array',
      items: { type: 'string', minLength: 1 },
      default: [],
      description: 'These IPs or CIDRs may never call (deny wins over allow)',
    },
  },
} as const;
