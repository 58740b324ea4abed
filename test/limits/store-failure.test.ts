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

// Each form of the admission the request path may take: the promise a store that must be waited
// for answers (Redis), and the synchronous one of a store that answers at once (the embedded store).
for (const form of ['promise', 'synchronous'] as const) {
  t.test(`admission that cannot reach the store (${form}): 503 billing_service_error, retryable, in the protocol format`, async (t) => {
    const store = (g.gw.store as InstrumentedStore).inner as unknown as {
      admit: (...a: unknown[]) => Promise<unknown>;
      admitNow?: (...a: unknown[]) => unknown;
    };
    const fail = () => {
      throw new Error('store unavailable');
    };
    if (form === 'promise') {
      store.admit = async () => fail();
      store.admitNow = undefined; // the gateway then waits for the promise form
    } else store.admitNow = fail;
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
      // Own properties removed: the store's own methods serve again.
      delete (store as { admit?: unknown }).admit;
      delete store.admitNow;
    }
    t.equal((await modelCall(g, KEYS.chat, 'chat', 'chat-model')).status, 200, 'serving again once the store answers');
  });
}

// A settlement the store refuses, in either form: the client keeps the answer it already has, the
// failure is logged and counted (gateway_store_errors_total), the request's reservation is given
// back, nothing is charged, and the gateway keeps serving.
for (const form of ['promise', 'synchronous'] as const) {
  t.test(`a settlement the store refuses (${form}): the answer stands, the hold is released, nothing charged`, async (t) => {
    const store = (g.gw.store as InstrumentedStore).inner as unknown as {
      settle: (...a: unknown[]) => Promise<unknown>;
      settleNow?: (...a: unknown[]) => unknown;
    };
    const fail = () => {
      throw new Error('store unavailable');
    };
    const errors = async () =>
      (await g.gw.metrics.storeErrors.get()).values.find((v) => v.labels.op === 'settle' && v.labels.store === 'memory')?.value ?? 0;
    const before = { used: (await g.gw.store.keyState('chat')).used, errors: await errors() };
    if (form === 'promise') {
      store.settle = async () => fail();
      store.settleNow = undefined; // the gateway then waits for the promise form
    } else store.settleNow = fail;
    let chat;
    try {
      chat = await modelCall(g, KEYS.chat, 'chat', 'chat-model');
    } finally {
      delete (store as { settle?: unknown }).settle;
      delete store.settleNow;
    }
    t.equal(chat.status, 200, 'the answer was sent before the settlement');
    t.ok(chat.json.choices, 'a whole answer');
    t.equal(await errors(), before.errors + 1, 'the failure is counted');
    const after = await g.gw.store.keyState('chat');
    t.equal(after.reserved, 0, 'the reservation is released');
    t.equal(after.used, before.used, 'nothing charged');
    t.equal((await modelCall(g, KEYS.chat, 'chat', 'chat-model')).status, 200, 'serving as before');
    t.ok((await g.gw.store.keyState('chat')).used > after.used, 'and charging again');
  });
}
