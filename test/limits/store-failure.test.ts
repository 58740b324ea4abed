/**
 * The store failing on a money path fails closed (design: "money paths fail closed"): the client
 * gets 503 `billing_service_error` in its protocol's format, nothing is forwarded upstream, and the
 * gateway keeps serving once the store answers again.
 */
import t from 'tap';
import { baseConfig, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';
import { assertError, modelCall, usageOf } from './helpers.js';
import type { InstrumentedStore } from '../../core/metrics.js';

let g: TestGateway;
t.before(async () => {
  g = await startGateway(baseConfig());
});
t.teardown(() => g.close());

t.test('admission that cannot reach the store: 503 billing_service_error, retryable, in the protocol format', async (t) => {
  const store = (g.gw.store as InstrumentedStore).inner as unknown as { admit: (...a: unknown[]) => Promise<unknown> };
  const admit = store.admit;
  store.admit = async () => {
    throw new Error('store unavailable');
  };
  try {
    const before = (await usageOf(g, KEYS.chat)).usage.total.requests;
    const chat = await modelCall(g, KEYS.chat, 'chat', 'chat-model');
    assertError(
      t,
      chat,
      { status: 503, type: 'billing_service_error', message: 'Billing check failed, please retry later', shouldRetryFalse: false },
      'chat',
    );
    t.equal(chat.json.error.code, 'billing_service_error');
    const msg = await modelCall(g, KEYS.messages, 'messages', 'claude-model');
    assertError(t, msg, { status: 503, type: 'billing_service_error' }, 'messages');
    t.same(Object.keys(msg.json).sort(), ['error', 'type'], 'Messages-style body');
    t.notMatch(chat.text + msg.text, /store unavailable/, 'the internal cause is not leaked');
    t.equal((await usageOf(g, KEYS.chat)).usage.total.requests, before, 'nothing billed');
  } finally {
    store.admit = admit;
  }
  t.equal((await modelCall(g, KEYS.chat, 'chat', 'chat-model')).status, 200, 'serving again once the store answers');
});
