// The access line of one non-streaming request, as the gateway writes it (core/server.ts
// accessLine: its members as JSON text, through log.line) against the way it wrote it before
// (an object of the same fields through pino's info), to a sink that keeps the last line: the
// work of building and serializing it, not the write (one write per line either way).
//   MICRO_MODE=object|line node bench/micro/count.mjs bench/micro/access-line.mjs .
// (not a test; a guide for per-request work)
import path from 'node:path';
import { pathToFileURL } from 'node:url';
const root = path.resolve(process.argv[2] ?? '.');
const { createLogger } = await import(pathToFileURL(`${root}/dist/core/log.js`).href);
const { accessLine } = await import(pathToFileURL(`${root}/dist/core/server.js`).href);
let last = '';
const log = createLogger('info', (l) => (last = l));
const mode = process.env.MICRO_MODE ?? 'line';
const model = { id: 'bench-chat', provider: 'bench-openai' };
const attempt = { model, provider: { name: 'bench-openai' }, account: { id: 'bench-openai/default' } };
const route = { name: 'openai-chat', path: '/v1/chat/completions' };
const outcome = { status: 200 };
const clock = { now: () => 1_700_000_000_003 };
const ctx = (i) => ({
  id: `req_214d9442cff5${String(i).padStart(12, '0')}`,
  req: { method: 'POST' },
  clientIp: '127.0.0.1',
  clock,
  startedAt: 1_700_000_000_000,
  ttftMs: undefined,
  key: { id: 'bench-chat', user: 'bench' },
  group: { name: 'chat' },
  answeredModel: model,
  attempts: [attempt],
  usage: { input: 12, output: 20, cacheRead: 0, cacheWrite: 0 },
  usageEstimated: false,
  billed: { actual: 31, cost: 31 },
});
const ua = 'OpenAI/JS 6.9.1';
function asObject(c) {
  const usage = c.usage;
  return {
    requestId: c.id,
    route: route.name,
    method: c.req.method,
    clientIp: c.clientIp || undefined,
    path: route.path,
    userAgent: ua,
    status: outcome.status,
    durationMs: c.clock.now() - c.startedAt,
    ttftMs: c.ttftMs,
    key: c.key?.id,
    user: c.key?.user,
    group: c.group?.name,
    model: c.answeredModel?.id,
    provider: c.answeredModel?.provider,
    account: c.attempts[0].account.id,
    attempts: c.attempts.length,
    errorCode: undefined,
    errorMessage: undefined,
    tokens: { input: usage.input, output: usage.output, cacheRead: usage.cacheRead, cacheWrite: usage.cacheWrite },
    estimated: c.usageEstimated || undefined,
    costMicroUsd: c.billed.actual,
    listCostMicroUsd: c.billed.cost,
    clientAborted: undefined,
  };
}
const one =
  mode === 'object'
    ? (i) => log.info('request', asObject(ctx(i)))
    : (i) => log.line('info', 'request', accessLine(ctx(i), route, outcome, undefined, ua));
for (let i = 0; i < 20_000; i++) one(i);
const n = Number(process.env.MICRO_N ?? 100_000);
for (let i = 0; i < n; i++) one(i);
if (!last.includes('"msg":"request"')) throw new Error('no line written');
