// One bench request as the stores see it: the nine claims the bench configures (balance, key
// quota, three key windows, two spend caps, group and user RPM), a concurrency slot, a recovery
// settlement, then its settlement (with the details of its ledger record). Shared by the store micro-benchmarks.
const BIG = 1e15;
export const claims = [
  { kind: 'balance', user: 'bench', credit: BIG, free: false, freeRpm: 0 },
  { kind: 'key-quota', key: 'bench-chat', limit: BIG },
  { kind: 'key-window', key: 'bench-chat', window: '5h', limit: BIG },
  { kind: 'key-window', key: 'bench-chat', window: '1d', limit: BIG },
  { kind: 'key-window', key: 'bench-chat', window: '7d', limit: BIG },
  { kind: 'spend-cap', user: 'bench', period: 'weekly', limit: BIG },
  { kind: 'spend-cap', user: 'bench', period: 'monthly', limit: BIG },
  { kind: 'rpm', scope: 'group', id: 'chat', limit: 1e9 },
  { kind: 'rpm', scope: 'user', id: 'bench', limit: 1e9 },
];
/** What metering attaches for the ledger record (core/store/types.ts SettlementDetail). */
const detail = (actual) => ({
  requestedModel: 'bench-chat',
  provider: 'bench-openai',
  account: 'bench-openai/default',
  protocolIn: 'openai-chat',
  protocolOut: 'openai-chat',
  stream: false,
  status: 200,
  reasoning: undefined,
  estimateReason: undefined,
  ratePpm: 1_000_000,
  ttftMs: actual,
  attempts: 1,
});
const WINDOWS = Object.freeze(['5h', '1d', '7d']);
export const settlement = (actual, withDetail = false) => ({
  keyId: 'bench-chat',
  user: 'bench',
  group: 'chat',
  model: 'bench-chat',
  billing: 'balance',
  usage: { input: 12, output: 20, cacheRead: 0, cacheWrite: 0 },
  cost: actual,
  actual,
  durationMs: 3,
  windows: WINDOWS, // one list per key (core/billing.ts keyWindows)
  ...(withDetail ? { detail: detail(actual) } : {}),
});
const signal = new AbortController().signal;
let seq = 0;
/** Ids shaped as the gateway makes them (core/server.ts): the Redis store groups their done markers. */
const ID_PREFIX = `req_${Math.floor(Math.random() * 2 ** 48)
  .toString(16)
  .padStart(12, '0')}`;
/** Admits one request (slot included), waits for its slot, settles it. */
export async function oneRequest(store) {
  const id = `${ID_PREFIX}${(++seq).toString(16).padStart(12, '0')}`;
  const r = await store.admit({
    requestId: id,
    reserve: 5000,
    claims,
    recovery: settlement(4),
    slot: { scope: 'user:bench', limit: 10000, queueSize: 16, maxWaitMs: 30000, signal },
  });
  await r.slot;
  await store.settle(id, settlement(31, true));
}
