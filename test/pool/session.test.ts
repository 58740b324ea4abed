/**
 * Session keys: from what clients send, stable across the turns of a conversation, different
 * between conversations.
 */
import t from 'tap';
import { sessionKey } from '../../core/pool/session.js';

const none = () => undefined;
const headers = (h: Record<string, string>) => (n: string) => h[n];

t.test('client-sent ids, in order', async (t) => {
  const body = { prompt_cache_key: 'pck-1', metadata: { user_id: 'user_abc_session_1' }, messages: [{ role: 'user', content: 'hi' }] };
  t.equal(sessionKey('anthropic-messages', headers({ 'x-claude-code-session-id': 'cc-1', 'session-id': 's-1' }), body), 'cc:cc-1');
  t.equal(sessionKey('openai-responses', headers({ 'session-id': 's-1' }), body), 'sid:s-1');
  t.equal(sessionKey('openai-responses', none, body), 'pck:pck-1');
  t.equal(sessionKey('anthropic-messages', none, { ...body, prompt_cache_key: undefined }), 'uid:user_abc_session_1');
  t.equal(
    sessionKey('anthropic-messages', headers({ 'x-claude-code-session-id': 'x'.repeat(1000) }), {})!.length < 100,
    true,
    'long ids are hashed',
  );
});

t.test('the conversation opening: stable across turns, distinct between conversations', async (t) => {
  const turn1 = {
    system: [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }],
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Plan a trip', cache_control: { type: 'ephemeral' } }] }],
  };
  const turn2 = {
    system: [{ type: 'text', text: 'You are terse.' }],
    messages: [
      { role: 'user', content: [{ type: 'text', text: 'Plan a trip' }] },
      { role: 'assistant', content: 'Where to?' },
      { role: 'user', content: [{ type: 'text', text: 'Rome', cache_control: { type: 'ephemeral' } }] },
    ],
  };
  const k1 = sessionKey('anthropic-messages', none, turn1);
  t.match(k1, /^h:/);
  t.equal(sessionKey('anthropic-messages', none, turn2), k1, 'a later turn (cache markers moved) keeps the key');
  t.not(sessionKey('anthropic-messages', none, { ...turn1, system: 'Other system' }), k1, 'another system prompt: another conversation');

  const chat = (first: string, more = 0) => ({
    messages: [
      { role: 'system', content: 'sys' },
      { role: 'user', content: first },
      ...Array.from({ length: more }, (_, i) => ({ role: i % 2 ? 'user' : 'assistant', content: `m${i}` })),
    ],
  });
  t.equal(sessionKey('openai-chat', none, chat('a', 4)), sessionKey('openai-chat', none, chat('a')));
  t.not(sessionKey('openai-chat', none, chat('a')), sessionKey('openai-chat', none, chat('b')));

  const resp = (input: unknown) => ({ instructions: 'be brief', input });
  t.equal(
    sessionKey(
      'openai-responses',
      none,
      resp([
        { role: 'user', content: [{ type: 'input_text', text: 'q' }] },
        { type: 'function_call', call_id: 'c' },
      ]),
    ),
    sessionKey('openai-responses', none, resp([{ role: 'user', content: [{ type: 'input_text', text: 'q' }] }])),
    'Responses items: the opening counts',
  );
  t.not(
    sessionKey('openai-responses', none, resp('one')),
    sessionKey('openai-responses', none, resp('two')),
    'Responses input text counts (sub2api #3127)',
  );
  t.equal(sessionKey('openai-chat', none, { messages: [{ role: 'system', content: 'only' }] }), undefined, 'no user turn: no key');
});
