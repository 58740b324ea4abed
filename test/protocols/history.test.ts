/**
 * 409 `malformed_session_state` for Messages histories the provider would refuse however often
 * they are retried; lenient about everything else (passthrough forwards it).
 */
import t from 'tap';
import { GatewayError, renderError } from '../../core/errors.js';
import { validateHistory } from '../../core/protocols/anthropic-messages/history.js';
import { messagesWire } from '../../core/protocols/anthropic-messages/wire.js';

const user = (content: unknown) => ({ role: 'user', content });
const assistant = (content: unknown) => ({ role: 'assistant', content });
const toolUse = (id: string) => ({ type: 'tool_use', id, name: 'f', input: {} });
const toolResult = (id: string) => ({ type: 'tool_result', tool_use_id: id, content: 'ok' });
const thinking = (signature?: unknown) => ({ type: 'thinking', thinking: 't', ...(signature === undefined ? {} : { signature }) });

const ok: Array<[string, unknown[]]> = [
  ['plain conversation', [user('hi'), assistant('hello'), user('bye')]],
  [
    'a tool loop',
    [user('q'), assistant([thinking('sig'), toolUse('toolu_1')]), user([toolResult('toolu_1'), { type: 'text', text: 'go on' }])],
  ],
  ['parallel calls answered together', [user('q'), assistant([toolUse('a'), toolUse('b')]), user([toolResult('b'), toolResult('a')])]],
  [
    'consecutive assistant messages are one turn',
    [user('q'), assistant([toolUse('a')]), assistant([toolUse('b')]), user([toolResult('a'), toolResult('b')])],
  ],
  [
    'consecutive user messages share the preceding turn',
    [user('q'), assistant([toolUse('a'), toolUse('b')]), user([toolResult('a')]), user([toolResult('b')])],
  ],
  [
    'system messages in between are ignored',
    [user('q'), assistant([toolUse('a')]), { role: 'system', content: 'note' }, user([toolResult('a')])],
  ],
  [
    'redacted thinking with data',
    [
      user('q'),
      assistant([
        { type: 'redacted_thinking', data: 'abc' },
        { type: 'text', text: 'x' },
      ]),
    ],
  ],
  [
    'unknown blocks and shapes are left to the upstream',
    [
      user([{ type: 'mystery', x: 1 }]),
      assistant([
        { type: 'server_tool_use', id: 'srv_1', name: 'web_search', input: {} },
        { type: 'web_search_tool_result', tool_use_id: 'srv_1', content: [] },
        'junk',
      ]),
      7,
      { role: 'user' },
    ],
  ],
  ['a tool_use not yet answered', [user('q'), assistant([toolUse('a')])]],
];

const bad: Array<[string, unknown[], RegExp]> = [
  ['tool_result without any preceding assistant turn', [user([toolResult('a')])], /tool_result for 'a' answers no tool_use/],
  ['tool_result for an unknown id', [user('q'), assistant([toolUse('a')]), user([toolResult('b')])], /'b' answers no tool_use/],
  [
    'tool_result answering an older turn',
    [user('q'), assistant([toolUse('a')]), user([toolResult('a')]), assistant([toolUse('b')]), user([toolResult('a')])],
    /'a' answers no tool_use of the preceding assistant turn/,
  ],
  ['tool_result after plain text turn', [user('q'), assistant('text only'), user([toolResult('a')])], /'a'/],
  [
    'duplicated tool_use ids',
    [user('q'), assistant([toolUse('a')]), user([toolResult('a')]), assistant([toolUse('a')])],
    /tool_use id 'a' is used more than once/,
  ],
  ['duplicated within one turn', [user('q'), assistant([toolUse('a'), toolUse('a')])], /more than once/],
  ['thinking without signature', [user('q'), assistant([thinking(), { type: 'text', text: 'x' }])], /thinking block has no signature/],
  ['thinking with an empty signature', [user('q'), assistant([thinking('')])], /no signature/],
  ['thinking with a non-string signature', [user('q'), assistant([thinking(null)])], /no signature/],
  ['redacted_thinking without data', [user('q'), assistant([{ type: 'redacted_thinking' }])], /redacted_thinking block has no data/],
  ['redacted_thinking with empty data', [user('q'), assistant([{ type: 'redacted_thinking', data: '' }])], /no data/],
];

t.test('valid histories pass', async (t) => {
  for (const [name, messages] of ok) t.doesNotThrow(() => validateHistory({ model: 'm', messages }), name);
});

t.test('malformed histories → 409 malformed_session_state, x-should-retry: false', async (t) => {
  for (const [name, messages, message] of bad) {
    try {
      messagesWire.validate({ model: 'm', max_tokens: 5, messages });
      t.fail(`${name}: accepted`);
    } catch (e) {
      t.ok(e instanceof GatewayError, name);
      const g = e as GatewayError;
      t.equal(g.id, 'MALFORMED_SESSION', `${name}: MALFORMED_SESSION`);
      t.match(g.message, message, `${name}: message names the block`);
      const rendered = renderError(g, 'messages');
      t.equal(rendered.status, 409);
      t.equal(rendered.headers['x-should-retry'], 'false');
      t.match(rendered.body, { type: 'error', error: { type: 'malformed_session_state' } });
    }
  }
});

t.test('messages must still be an array (400 before history checks)', async (t) => {
  t.throws(
    () => messagesWire.validate({ model: 'm' }),
    new GatewayError('INVALID_REQUEST', { message: "'messages' is required and must be an array" }),
  );
});
