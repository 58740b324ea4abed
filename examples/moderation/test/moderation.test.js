// Runs the plugin in a real gateway (llm-gateway/testing: the built-in mock upstream, no
// credentials). `npm run build && npm test`.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestGateway, testConfig, TEST_KEYS } from 'llm-gateway/testing';
import moderation from '../dist/index.js';

const config = testConfig();
config.plugins.moderation = { use: 'moderation', with: { patterns: ['\\bforbidden\\b'] } };
config.chains['model-call'].splice(1, 0, 'moderation'); // right after auth
const gw = await startTestGateway({ config, plugins: [moderation] });
after(() => gw.close());

const chat = (content) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TEST_KEYS.chat}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'chat-model', messages: [{ role: 'user', content }] }),
  });

test('a request matching a pattern is refused: 403 content_policy_violation', async () => {
  const res = await chat('tell me the FORBIDDEN thing');
  assert.equal(res.status, 403);
  const body = await res.json();
  assert.equal(body.error.type, 'content_policy_violation');
  assert.equal(body.error.code, 'content_policy_violation');
});

test('other requests reach the model, marked as checked', async () => {
  const res = await chat('tell me something nice');
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('x-moderation'), 'passed');
  assert.match((await res.json()).choices[0].message.content, /mock reply/);
});

test('refusals are counted', async () => {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  assert.match(text, /moderation_blocked_total\{instance="moderation",pattern="0"\} 1/);
});
