/**
 * Settlements of every shape a ledger line meets (test/ledger/lines.test.ts for the memory store's
 * lines, test/store/redis-pack.test.ts for the Redis store's packed records).
 */
import type { Settlement, SettlementDetail } from '../../core/store/types.js';

const detail: SettlementDetail = {
  requestedModel: 'gpt-4o',
  provider: 'openai',
  account: 'openai/main',
  protocolIn: 'anthropic-messages',
  protocolOut: 'openai-chat',
  stream: true,
  status: 200,
  reasoning: 12,
  estimateReason: undefined,
  ratePpm: 1_250_000,
  ttftMs: 431,
  attempts: 2,
};

const base: Settlement = {
  keyId: 'team-key',
  user: 'alice',
  group: 'chat',
  model: 'gpt-4o-mini',
  billing: 'balance',
  usage: { input: 1200, output: 345, cacheRead: 1000, cacheWrite: 0 },
  cost: 987,
  actual: 1234,
  durationMs: 2501,
  windows: ['5h', '1d'],
  detail,
};

/** Settlements of every shape a line meets: estimated, recovered, no details, odd names, odd numbers. */
export const cases: [string, Settlement][] = [
  ['reported, with every detail', base],
  [
    'estimated: the reason given',
    { ...base, estimated: true, detail: { ...detail, estimateReason: 'client_disconnect', reasoning: undefined } },
  ],
  ['estimated without a reason', { ...base, estimated: true, detail: { ...detail, estimateReason: undefined } }],
  ['recovered at a restart', { ...base, estimated: true, recovered: true, detail: undefined }],
  ['no details (written before the ledger)', { ...base, detail: undefined, windows: [] }],
  [
    'optional details absent',
    { ...base, detail: { ...detail, account: undefined, ttftMs: undefined, reasoning: undefined, stream: false, status: 499 } },
  ],
  ['names that JSON escapes', { ...base, keyId: 'key "quoted" \\ back', user: 'ünïcødé\u2028\n', group: 'tab\tgroup', model: 'm\u0000' }],
  ['numbers JSON writes as null', { ...base, usage: { ...base.usage, output: NaN }, cost: Infinity, durationMs: -0 }],
  ['plan billing, large numbers', { ...base, billing: 'plan', actual: 9_007_199_254_740_991, cost: 1e21 }],
];

/** Only Redis settles a late correction (the memory store's journal never holds one). */
export const ledgerCases: [string, Settlement][] = [...cases, ['a late correction', { ...base, late: true }]];
