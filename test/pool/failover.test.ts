/**
 * Failover inside a request is invisible to the official SDKs: the first account fails before
 * anything reached the client, the next one answers; the client sees one 200, one usage record,
 * one RPM count. It happens before the `models` fallback list is consulted, within the per-model
 * attempt limit. The access log names the account (never its key); metrics count per account.
 */
import t from 'tap';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { KEYS, bearer, call, startGateway, type TestGateway } from '../helpers/gateway.js';
import { ManualClock } from '../../core/clock.js';
import { createLogger } from '../../core/log.js';
import { counts, cred, poolConfig } from './helpers.js';

let g: TestGateway;
const clock = new ManualClock(Date.UTC(2026, 5, 1, 10, 0, 5));
const lines: string[] = [];

t.before(async () => {
  const cfg = poolConfig({
    // `first` is always tried first (priority 0), `second` only when it is unavailable.
    fo: { accounts: [{ name: 'first' }, { name: 'second', priority: 1 }] },
    three: { accounts: [{ name: 'x' }, { name: 'y' }, { name: 'z' }], scheduling: { max_attempts: 2 } },
    alt: { accounts: [{ name: 'only-1' }, { name: 'only-2' }] },
  });
  cfg.users.alice.rpm = 3;
  g = await startGateway(cfg, { clock, log: createLogger('info', (l) => lines.push(l)) });
});
t.teardown(() => g.close());

const usage = async (key: string) => (await call(g.url + '/v1/usage', { headers: bearer(key) })).json;
const mock = (p: string) => g.gw.mocks.get(p)!;

async function rpmLeft(key: string, model: string): Promise<number> {
  // Fills the rest of the minute: how many more requests the user's RPM (3) let through.
  let n = 0;
  for (let i = 0; i < 5; i++) {
    const r = await call(g.url + '/v1/chat/completions', {
      headers: bearer(key),
      json: { model, messages: [{ role: 'user', content: `fill ${i}` }] },
    });
    if (r.status === 429) break;
    n++;
  }
  return n;
}

t.test('OpenAI SDK (non-streaming): one 200, one usage record, RPM counted once', async (t) => {
  clock.advance(60_000);
  const before = await usage(KEYS.chat);
  mock('fo').script(cred('fo', 'first'), { next: ['status=529'] });
  const client = new OpenAI({ baseURL: g.url + '/v1', apiKey: KEYS.chat, maxRetries: 0 });
  const c = await client.chat.completions.create({ model: 'fo-model', messages: [{ role: 'user', content: 'hello failover' }] });
  t.equal(c.model, 'fo-model');
  t.match(c.choices[0].message.content, /mock reply/);
  t.same(counts(mock('fo'), 'fo', ['first', 'second']), { first: 1, second: 1 }, 'the first account failed, the second answered');
  const after = await usage(KEYS.chat);
  t.equal(after.usage.total.requests, before.usage.total.requests + 1, 'one usage record');
  t.equal(await rpmLeft(KEYS.chat, 'fo-model'), 2, 'RPM 3: the failover request counted once');
  const log = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request' && l.attempts === 2);
  t.equal(log.length, 1, 'one access log line for the request');
  t.equal(log[0].account, 'fo/second', 'naming the account that answered');
  t.notOk(
    lines.some((l) => l.includes(cred('fo', 'first')) || l.includes(cred('fo', 'second'))),
    'no account key in the logs',
  );
});

t.test('Anthropic SDK (streaming): one 200, one usage record, RPM counted once', async (t) => {
  clock.advance(60_000); // the first account's cooldown (30 s) is over, and a new minute begins
  const before = await usage(KEYS.messages);
  const n = counts(mock('fo'), 'fo', ['first', 'second']);
  mock('fo').script(cred('fo', 'first'), { next: ['status=500'] });
  const client = new Anthropic({ baseURL: g.url, apiKey: KEYS.messages, maxRetries: 0 });
  const m = await client.messages
    .stream({ model: 'fo-model', max_tokens: 100, messages: [{ role: 'user', content: 'stream through failover' }] })
    .finalMessage();
  t.equal(m.stop_reason, 'end_turn');
  t.ok(m.usage.output_tokens > 0);
  const d = counts(mock('fo'), 'fo', ['first', 'second']);
  t.same({ first: d.first - n.first, second: d.second - n.second }, { first: 1, second: 1 });
  const after = await usage(KEYS.messages);
  t.equal(after.usage.total.requests, before.usage.total.requests + 1, 'one usage record');
  const metrics = (await call(g.url + '/metrics')).text;
  t.match(metrics, /gateway_account_requests_total\{provider="fo",account="first",outcome="server_error"\} 1/);
  t.match(metrics, /gateway_account_requests_total\{provider="fo",account="first",outcome="overloaded"\} 1/);
  t.match(metrics, /gateway_account_requests_total\{provider="fo",account="second",outcome="ok"\} [2-9]/);
  t.match(metrics, /gateway_account_failovers_total\{provider="fo"\} 2/);
  t.match(metrics, /gateway_account_state\{provider="fo",account="first",state="cooling"\} 1/);
  t.match(metrics, /gateway_account_cooldowns_total\{provider="fo",account="first",reason="server_error"\} 1/);
});

t.test('failover stops at max_attempts accounts per model, then the fallback list takes over', async (t) => {
  clock.advance(60_000);
  for (const a of ['x', 'y', 'z']) mock('three').script(cred('three', a), { next: ['status=503'] });
  const n = counts(mock('three'), 'three', ['x', 'y', 'z']);
  const nAlt = counts(mock('alt'), 'alt', ['only-1', 'only-2']);
  const r = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: { model: 'three-model', models: ['alt-model'], messages: [{ role: 'user', content: 'fall back' }] },
  });
  t.equal(r.status, 200);
  t.equal(r.json.model, 'alt-model', 'answered by the fallback model');
  const d = counts(mock('three'), 'three', ['x', 'y', 'z']);
  t.equal(d.x + d.y + d.z - (n.x + n.y + n.z), 2, 'two accounts of the first model (max_attempts: 2), not three');
  const dAlt = counts(mock('alt'), 'alt', ['only-1', 'only-2']);
  t.equal(dAlt['only-1'] + dAlt['only-2'] - (nAlt['only-1'] + nAlt['only-2']), 1);
});

t.test('a request the upstream refuses as invalid (400) is not retried on another account', async (t) => {
  clock.advance(60_000);
  mock('alt').script(cred('alt', 'only-1'), { next: ['status=400'] });
  mock('alt').script(cred('alt', 'only-2'), { next: ['status=400'] });
  const n = counts(mock('alt'), 'alt', ['only-1', 'only-2']);
  const r = await call(g.url + '/v1/chat/completions', {
    headers: bearer(KEYS.chat),
    json: { model: 'alt-model', messages: [{ role: 'user', content: 'bad' }] },
  });
  t.equal(r.status, 400);
  const d = counts(mock('alt'), 'alt', ['only-1', 'only-2']);
  t.equal(d['only-1'] + d['only-2'] - (n['only-1'] + n['only-2']), 1, 'one attempt');
  mock('alt').script(cred('alt', 'only-1'), {});
  mock('alt').script(cred('alt', 'only-2'), {});
});

t.test('count_tokens goes to an account of the pool, with its credential', async (t) => {
  const before = counts(mock('alt'), 'alt', ['only-1', 'only-2']);
  const r = await call(g.url + '/v1/messages/count_tokens', {
    headers: { 'x-api-key': KEYS.messages, 'anthropic-version': '2023-06-01' },
    json: { model: 'alt-model', messages: [{ role: 'user', content: 'count these words please' }] },
  });
  t.equal(r.status, 200);
  t.equal(typeof r.json.input_tokens, 'number');
  const after = counts(mock('alt'), 'alt', ['only-1', 'only-2']);
  t.equal(after['only-1'] + after['only-2'] - before['only-1'] - before['only-2'], 1);
});
