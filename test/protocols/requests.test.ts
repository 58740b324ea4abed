/**
 * Table-driven request conversion tests: a client body decoded by its codec and encoded for the
 * upstream's, for each mapping decision in docs/conversion.md.
 */
import t from 'tap';
import type { ProtocolName } from '../../core/config/types.js';
import { GatewayError } from '../../core/errors.js';
import { codec } from './helpers.js';

const A: ProtocolName = 'anthropic-messages';
const C: ProtocolName = 'openai-chat';
const R: ProtocolName = 'openai-responses';

type TT = Pick<typeof t, 'fail' | 'ok' | 'equal' | 'match'>;

function convert(from: ProtocolName, to: ProtocolName, body: Record<string, unknown>, defaultMaxTokens?: number): any {
  const c = codec(from);
  c.validate(body);
  const ir = c.decodeRequest(body);
  return codec(to).encodeRequest(ir, { model: 'up-model', requestId: 'req-1', ...(defaultMaxTokens ? { defaultMaxTokens } : {}) });
}

function rejects400(t: TT, fn: () => unknown, message: RegExp, name: string): void {
  try {
    fn();
    t.fail(`${name}: no error`);
  } catch (e) {
    t.ok(e instanceof GatewayError, `${name}: a GatewayError`);
    t.equal((e as GatewayError).status, 400, `${name}: 400`);
    t.equal((e as GatewayError).type, 'invalid_request_error', `${name}: invalid_request_error`);
    t.match((e as Error).message, message, `${name}: names the problem`);
  }
}

const user = (content: unknown) => ({ role: 'user', content });

t.test('system and developer instructions', async (t) => {
  const chat = {
    model: 'm',
    messages: [{ role: 'developer', content: 'A' }, user('hi'), { role: 'system', content: [{ type: 'text', text: 'B' }] }],
  };
  t.same(
    convert(C, A, chat).system,
    [
      { type: 'text', text: 'A' },
      { type: 'text', text: 'B' },
    ],
    'Chat → Anthropic: several parts → text blocks',
  );
  t.equal(convert(C, A, { model: 'm', messages: [{ role: 'system', content: 'only' }, user('hi')] }).system, 'only', 'one part → a string');
  t.equal(convert(C, R, chat).instructions, 'A\n\nB', 'Chat → Responses: instructions joined with a blank line');

  const msgs = {
    model: 'm',
    max_tokens: 10,
    system: [
      { type: 'text', text: 'S1', cache_control: { type: 'ephemeral' } },
      { type: 'text', text: 'S2' },
    ],
    messages: [user('hi')],
  };
  t.same(
    convert(A, C, msgs).messages.slice(0, 2),
    [
      { role: 'system', content: 'S1' },
      { role: 'system', content: 'S2' },
    ],
    'Anthropic → Chat: one system message per part',
  );
  const ir = codec(A).decodeRequest(msgs);
  t.same(ir.system[0].cacheControl, { type: 'ephemeral' }, 'cache_control kept in the IR');
  t.same(
    (codec(A).encodeRequest(ir, { model: 'x', requestId: 'r' }) as any).system[0],
    { type: 'text', text: 'S1', cache_control: { type: 'ephemeral' } },
    'and back to Anthropic',
  );
  t.same(
    convert(A, C, { model: 'm', max_tokens: 10, messages: [{ role: 'system', content: 'inline' }, user('hi')] }).messages[0],
    { role: 'system', content: 'inline' },
    'Anthropic role:"system" messages are system too',
  );

  const resp = {
    model: 'm',
    instructions: 'I',
    input: [
      { role: 'developer', content: 'D' },
      { role: 'user', content: [{ type: 'input_text', text: 'hi' }] },
    ],
  };
  t.same(
    convert(R, A, resp).system,
    [
      { type: 'text', text: 'I' },
      { type: 'text', text: 'D' },
    ],
    'Responses → Anthropic: instructions then developer items',
  );
  t.same(convert(R, A, resp).messages, [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }]);
  t.same(
    convert(R, C, { model: 'm', input: 'just text' }).messages,
    [{ role: 'user', content: 'just text' }],
    'string input → one user message',
  );
});

t.test('tool calls: ids verbatim, "" arguments, parallel calls, results merged and split', async (t) => {
  const chat = {
    model: 'm',
    messages: [
      user('weather and time?'),
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_A', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
          { id: 'call_B', type: 'function', function: { name: 'clock', arguments: '' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_A', content: 'sunny' },
      { role: 'tool', tool_call_id: 'call_B', content: [{ type: 'text', text: '12:00' }] },
      user('thanks'),
    ],
    tools: [
      { type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
      { type: 'function', function: { name: 'clock' } },
    ],
  };
  const a = convert(C, A, chat);
  t.same(
    a.messages,
    [
      { role: 'user', content: [{ type: 'text', text: 'weather and time?' }] },
      {
        role: 'assistant',
        content: [
          { type: 'tool_use', id: 'call_A', name: 'weather', input: { city: 'Paris' } },
          { type: 'tool_use', id: 'call_B', name: 'clock', input: {} },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'call_A', content: 'sunny' },
          { type: 'tool_result', tool_use_id: 'call_B', content: [{ type: 'text', text: '12:00' }] },
          { type: 'text', text: 'thanks' },
        ],
      },
    ],
    'Chat → Anthropic: one user turn, tool results first, then the user text',
  );
  t.same(a.tools[1], { name: 'clock', input_schema: { type: 'object', properties: {} } }, 'missing parameters → empty object schema');

  const r = convert(C, R, chat);
  t.same(
    r.input.slice(1, 5),
    [
      { type: 'function_call', call_id: 'call_A', name: 'weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call', call_id: 'call_B', name: 'clock', arguments: '{}' },
      { type: 'function_call_output', call_id: 'call_A', output: 'sunny' },
      { type: 'function_call_output', call_id: 'call_B', output: [{ type: 'input_text', text: '12:00' }] },
    ],
    'Chat → Responses: function_call items (call_id = id, "" → "{}") and outputs',
  );

  const msgs = {
    model: 'm',
    max_tokens: 100,
    messages: [
      user('q'),
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'calling' },
          { type: 'tool_use', id: 'toolu_1', name: 'f', input: { x: 1 } },
          { type: 'tool_use', id: 'toolu_2', name: 'g', input: {} },
        ],
      },
      user([
        { type: 'tool_result', tool_use_id: 'toolu_1', content: 'r1' },
        { type: 'text', text: 'and also' },
        { type: 'tool_result', tool_use_id: 'toolu_2', content: [{ type: 'text', text: 'bad' }], is_error: true },
      ]),
    ],
  };
  const c = convert(A, C, msgs);
  t.same(
    c.messages,
    [
      { role: 'user', content: 'q' },
      {
        role: 'assistant',
        content: 'calling',
        tool_calls: [
          { id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '{"x":1}' } },
          { id: 'toolu_2', type: 'function', function: { name: 'g', arguments: '{}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'toolu_1', content: 'r1' },
      { role: 'tool', tool_call_id: 'toolu_2', content: 'bad' },
      { role: 'user', content: 'and also' },
    ],
    "Anthropic → Chat: tool messages before the user's other content",
  );
  const back: any = codec(A).encodeRequest(codec(A).decodeRequest(msgs), { model: 'x', requestId: 'r' });
  t.same(
    back.messages[2].content.map((b: any) => b.type),
    ['tool_result', 'tool_result', 'text'],
    'Anthropic → Anthropic: results first, is_error kept',
  );
  t.equal(back.messages[2].content[1].is_error, true);

  // Consecutive same-role turns merge (Anthropic requires alternation).
  const merged = convert(C, A, {
    model: 'm',
    messages: [user('a'), user('b'), { role: 'assistant', content: 'x' }, { role: 'assistant', content: 'y' }],
  });
  t.same(merged.messages, [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'a' },
        { type: 'text', text: 'b' },
      ],
    },
    {
      role: 'assistant',
      content: [
        { type: 'text', text: 'x' },
        { type: 'text', text: 'y' },
      ],
    },
  ]);
});

t.test('tool result images', async (t) => {
  const msgs = {
    model: 'm',
    max_tokens: 10,
    messages: [
      user('q'),
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'shot', input: {} }] },
      user([
        {
          type: 'tool_result',
          tool_use_id: 'toolu_1',
          content: [
            { type: 'text', text: 'here' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
          ],
        },
      ]),
    ],
  };
  const c = convert(A, C, msgs);
  t.same(
    c.messages.slice(2),
    [
      { role: 'tool', tool_call_id: 'toolu_1', content: 'here' },
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }] },
    ],
    'Chat tool messages hold text: the image follows in a user message',
  );
  const r = convert(A, R, msgs);
  t.same(r.input[2], {
    type: 'function_call_output',
    call_id: 'toolu_1',
    output: [
      { type: 'input_text', text: 'here' },
      { type: 'input_image', image_url: 'data:image/png;base64,AAAA', detail: 'auto' },
    ],
  });
});

t.test('arguments that are not a JSON object → 400 naming the call', async (t) => {
  const body = (args: string) => ({
    model: 'm',
    messages: [
      user('q'),
      { role: 'assistant', tool_calls: [{ id: 'call_X', type: 'function', function: { name: 'f', arguments: args } }] },
      { role: 'tool', tool_call_id: 'call_X', content: 'r' },
    ],
  });
  rejects400(t, () => convert(C, A, body('{not json')), /call_X.*not valid JSON/, 'invalid JSON');
  rejects400(t, () => convert(C, A, body('[1,2]')), /call_X.*JSON object/, 'an array');
  rejects400(t, () => convert(C, A, body('"s"')), /call_X.*JSON object/, 'a string');
  t.same(convert(C, A, body('  ')).messages[1].content[0].input, {}, 'blank → {}');
});

t.test('what cannot cross protocols → 400 naming the type (provider-side tools: test/protocols/tools.test.ts)', async (t) => {
  rejects400(
    t,
    () => convert(C, A, { model: 'm', messages: [user('q')], tools: [{ type: 'custom', custom: { name: 'x' } }] }),
    /custom/,
    'Chat custom tool',
  );
  rejects400(
    t,
    () => convert(R, C, { model: 'm', input: [{ type: 'file_search_call', id: 'fs_1' }] }),
    /file_search_call/,
    'built-in tool calls the gateway never produces, in input',
  );
  rejects400(
    t,
    () => convert(R, C, { model: 'm', input: [{ type: 'item_reference', id: 'x' }] }),
    /item_reference 'x'.*unknown or expired/,
    'item references the converter could not resolve',
  );
  rejects400(
    t,
    () => convert(C, A, { model: 'm', messages: [user([{ type: 'input_audio', input_audio: { data: 'x', format: 'wav' } }])] }),
    /input_audio/,
    'audio parts',
  );
  rejects400(
    t,
    () =>
      convert(A, C, {
        model: 'm',
        max_tokens: 10,
        messages: [user([{ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'x' } }])],
      }),
    /document/,
    'documents',
  );
});

t.test('tool_choice and parallel tool calls', async (t) => {
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
  const chat = (tool_choice: unknown, extra = {}) => ({ model: 'm', messages: [user('q')], tools, tool_choice, ...extra });
  const rows: Array<[unknown, unknown, unknown]> = [
    ['auto', { type: 'auto' }, 'auto'],
    ['none', { type: 'none' }, 'none'],
    ['required', { type: 'any' }, 'required'],
    [
      { type: 'function', function: { name: 'f' } },
      { type: 'tool', name: 'f' },
      { type: 'function', name: 'f' },
    ],
  ];
  for (const [c, a, r] of rows) {
    t.same(convert(C, A, chat(c)).tool_choice, a, `Chat ${JSON.stringify(c)} → Anthropic`);
    t.same(convert(C, R, chat(c)).tool_choice, r, `Chat ${JSON.stringify(c)} → Responses`);
    const back = convert(A, C, {
      model: 'm',
      max_tokens: 5,
      messages: [user('q')],
      tools: [{ name: 'f', input_schema: { type: 'object' } }],
      tool_choice: a,
    });
    t.same(back.tool_choice, c, `Anthropic ${JSON.stringify(a)} → Chat`);
  }
  t.same(
    convert(C, A, chat('auto', { parallel_tool_calls: false })).tool_choice,
    { type: 'auto', disable_parallel_tool_use: true },
    'parallel_tool_calls:false → disable_parallel_tool_use',
  );
  t.same(
    convert(C, A, chat(undefined, { parallel_tool_calls: false })).tool_choice,
    { type: 'auto', disable_parallel_tool_use: true },
    'the flag alone → auto + disable',
  );
  const a2c = convert(A, C, {
    model: 'm',
    max_tokens: 5,
    messages: [user('q')],
    tools: [{ name: 'f', input_schema: { type: 'object' } }],
    tool_choice: { type: 'any', disable_parallel_tool_use: true },
  });
  t.equal(a2c.parallel_tool_calls, false, 'and back');
  t.equal(convert(C, A, chat('auto')).parallel_tool_calls, undefined);
});

t.test('max tokens, temperature, stop', async (t) => {
  t.equal(
    convert(C, A, { model: 'm', messages: [user('q')], max_completion_tokens: 300, max_tokens: 200 }).max_tokens,
    300,
    'max_completion_tokens wins',
  );
  t.equal(convert(C, A, { model: 'm', messages: [user('q')], max_tokens: 200 }).max_tokens, 200, 'else max_tokens');
  t.equal(convert(C, A, { model: 'm', messages: [user('q')] }, 8000).max_tokens, 8000, 'else the model default');
  t.equal(convert(C, A, { model: 'm', messages: [user('q')] }).max_tokens, 4096, 'else 4096');
  t.equal(convert(R, A, { model: 'm', input: 'q', max_output_tokens: 77 }).max_tokens, 77, 'Responses max_output_tokens');
  t.equal(convert(A, R, { model: 'm', max_tokens: 77, messages: [user('q')] }).max_output_tokens, 77);
  t.equal(convert(A, C, { model: 'm', max_tokens: 77, messages: [user('q')] }).max_completion_tokens, 77);
  t.equal(convert(C, A, { model: 'm', messages: [user('q')], temperature: 1.7 }).temperature, 1, 'temperature clamped to 1');
  t.equal(convert(C, A, { model: 'm', messages: [user('q')], temperature: -1 }).temperature, 0, 'and to 0');
  t.equal(convert(C, A, { model: 'm', messages: [user('q')], temperature: 0.3, top_p: 0.9 }).top_p, 0.9);
  t.same(
    convert(C, A, { model: 'm', messages: [user('q')], stop: ['END', ' ', '\n'] }).stop_sequences,
    ['END'],
    'whitespace-only stops dropped',
  );
  t.equal(convert(C, A, { model: 'm', messages: [user('q')], stop: '  ' }).stop_sequences, undefined);
  t.same(convert(A, C, { model: 'm', max_tokens: 5, messages: [user('q')], stop_sequences: ['X'] }).stop, ['X']);
  t.equal(convert(A, C, { model: 'm', max_tokens: 5, messages: [user('q')], top_k: 5 }).top_k, undefined, 'top_k has no Chat counterpart');
});

t.test('reasoning effort ↔ thinking budget', async (t) => {
  const chat = (effort: string, extra = {}) => ({
    model: 'm',
    messages: [user('q')],
    reasoning_effort: effort,
    max_completion_tokens: 40000,
    ...extra,
  });
  for (const [effort, budget] of [
    ['minimal', 1024],
    ['low', 2048],
    ['medium', 8192],
    ['high', 16384],
  ] as const) {
    const a = convert(C, A, chat(effort));
    t.same(a.thinking, { type: 'enabled', budget_tokens: budget }, `${effort} → ${budget}`);
    t.ok(a.max_tokens > budget, 'max_tokens above the budget');
  }
  const small = convert(C, A, chat('high', { max_completion_tokens: 5000 }));
  t.same(small.thinking, { type: 'enabled', budget_tokens: 5000 - 1024 }, 'budget clamped below the client cap');
  t.equal(small.max_tokens, 5000, 'the client cap is kept');
  t.equal(convert(C, A, chat('high', { max_completion_tokens: 1500 })).thinking, undefined, 'no room for thinking → none');
  const noCap = convert(C, A, { model: 'm', messages: [user('q')], reasoning_effort: 'medium' }, 64000);
  t.same(noCap, { ...noCap, max_tokens: 64000, thinking: { type: 'enabled', budget_tokens: 8192 } }, 'model default cap');
  const hot = convert(C, A, chat('low', { temperature: 0.2, top_p: 0.5 }));
  t.equal(hot.temperature, undefined, 'no temperature while thinking');
  t.equal(hot.top_p, undefined, 'no top_p while thinking');
  t.equal(
    convert(C, A, chat('low', { tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: 'required' })).thinking,
    undefined,
    'forced tool use → no thinking',
  );
  t.equal(convert(C, R, chat('high')).reasoning.effort, 'high', 'Chat → Responses effort');
  t.equal(
    convert(R, C, { model: 'm', input: 'q', reasoning: { effort: 'low', summary: 'auto' } }).reasoning_effort,
    'low',
    'Responses → Chat',
  );
  t.same(convert(R, R, { model: 'm', input: 'q', reasoning: { effort: 'low', summary: 'auto' } }).reasoning, {
    effort: 'low',
    summary: 'auto',
  });
  const msgs = (budget: number) => ({
    model: 'm',
    max_tokens: 40000,
    messages: [user('q')],
    thinking: { type: 'enabled', budget_tokens: budget },
  });
  for (const [budget, effort] of [
    [1024, 'low'],
    [4000, 'low'],
    [8192, 'medium'],
    [10000, 'medium'],
    [16384, 'high'],
    [31999, 'high'],
  ] as const) {
    t.equal(convert(A, C, msgs(budget)).reasoning_effort, effort, `budget ${budget} → ${effort}`);
  }
  t.equal(
    convert(A, R, { model: 'm', max_tokens: 100, messages: [user('q')], thinking: { type: 'adaptive' }, output_config: { effort: 'max' } })
      .reasoning.effort,
    'high',
    'adaptive + output_config.effort',
  );
  t.equal(
    convert(A, C, { model: 'm', max_tokens: 100, messages: [user('q')], thinking: { type: 'disabled' } }).reasoning_effort,
    undefined,
  );
});

t.test('thinking in history', async (t) => {
  const sig = 'EqQBCgIYAhIM1gbcDa9GJwZA2b3h+/=';
  const chat: any = {
    model: 'm',
    reasoning_effort: 'low',
    max_completion_tokens: 9000,
    messages: [
      user('q'),
      {
        role: 'assistant',
        content: null,
        reasoning_content: 'ignored when thinking_blocks exist',
        thinking_blocks: [
          { type: 'thinking', thinking: 'step 1', signature: sig },
          { type: 'redacted_thinking', data: 'REDACTED==' },
        ],
        tool_calls: [{ id: 'toolu_9', type: 'function', function: { name: 'f', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: 'toolu_9', content: 'ok' },
    ],
  };
  const a = convert(C, A, chat);
  t.same(
    a.messages[1].content,
    [
      { type: 'thinking', thinking: 'step 1', signature: sig },
      { type: 'redacted_thinking', data: 'REDACTED==' },
      { type: 'tool_use', id: 'toolu_9', name: 'f', input: {} },
    ],
    'Chat thinking_blocks → Anthropic blocks, signature byte-exact',
  );
  t.same(a.thinking, { type: 'enabled', budget_tokens: 2048 }, 'the tool loop keeps its thinking');

  const unsigned = convert(C, A, {
    ...chat,
    messages: [
      chat.messages[0],
      { role: 'assistant', content: 'a', reasoning_content: 'thought', tool_calls: chat.messages[1].tool_calls },
      chat.messages[2],
    ],
  });
  t.same(
    unsigned.messages[1].content.map((b: any) => b.type),
    ['text', 'tool_use'],
    'unsigned reasoning_content is dropped for Anthropic',
  );
  t.equal(unsigned.thinking, undefined, 'and thinking is not enabled for a tool loop without its signed thinking');

  t.same(
    convert(C, C, chat).messages[1],
    { role: 'assistant', content: null, tool_calls: chat.messages[1].tool_calls },
    'Chat upstreams get no thinking',
  );

  const msgs = {
    model: 'm',
    max_tokens: 100,
    messages: [
      user('q'),
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 't', signature: sig },
          { type: 'redacted_thinking', data: 'R' },
          { type: 'text', text: 'a' },
        ],
      },
      user('next'),
    ],
  };
  t.same(
    convert(A, R, msgs).input[1],
    { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'a', annotations: [] }] },
    'Anthropic thinking never goes to OpenAI',
  );

  const resp = (id: string) => ({
    model: 'm',
    input: [
      user('q'),
      {
        type: 'reasoning',
        id,
        summary: [
          { type: 'summary_text', text: 'S1' },
          { type: 'summary_text', text: 'S2' },
        ],
        encrypted_content: sig,
      },
      { type: 'function_call', id: 'fc_1', call_id: 'call_1', name: 'f', arguments: '{}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'r' },
    ],
  });
  t.same(
    convert(R, A, resp('rs_openai123')).messages[1].content,
    [{ type: 'tool_use', id: 'call_1', name: 'f', input: {} }],
    'OpenAI-minted reasoning is not sent to Anthropic',
  );
  t.same(
    convert(R, A, resp('rs_gw_req-0_0')).messages[1].content[0],
    { type: 'thinking', thinking: 'S1\n\nS2', signature: sig },
    'a gateway-minted item carries an Anthropic signature back',
  );
  t.same(
    convert(R, A, {
      ...resp('x'),
      input: [
        user('q'),
        { type: 'reasoning', id: 'rs_gwr_req-0_0', summary: [], encrypted_content: 'DATA' },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'a' }] },
      ],
    }).messages[1].content,
    [
      { type: 'redacted_thinking', data: 'DATA' },
      { type: 'text', text: 'a' },
    ],
    'rs_gwr_ items are redacted thinking',
  );
  const rr = convert(R, R, resp('rs_openai123'));
  t.same(
    rr.input[1],
    { type: 'reasoning', id: 'rs_openai123', summary: [{ type: 'summary_text', text: 'S1\n\nS2' }], encrypted_content: sig },
    'OpenAI reasoning items go back to OpenAI',
  );
  t.same(
    rr.input[2],
    { type: 'function_call', call_id: 'call_1', name: 'f', arguments: '{}', id: 'fc_1' },
    'with the function_call item id',
  );
  t.equal(convert(R, R, resp('rs_gw_req-0_0')).input[1].type, 'function_call', 'gateway-minted reasoning is not sent to OpenAI');
});

t.test('images', async (t) => {
  const chat = {
    model: 'm',
    messages: [
      user([
        { type: 'text', text: 'what?' },
        { type: 'image_url', image_url: { url: 'https://example.com/a.png', detail: 'high' } },
        { type: 'image_url', image_url: { url: 'data:image/jpeg;base64,/9j/4AAQ' } },
      ]),
    ],
  };
  t.same(
    convert(C, A, chat).messages[0].content,
    [
      { type: 'text', text: 'what?' },
      { type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } },
      { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: '/9j/4AAQ' } },
    ],
    'Chat → Anthropic: url and base64 sources',
  );
  t.same(
    convert(C, R, chat).input[0].content.slice(1),
    [
      { type: 'input_image', image_url: 'https://example.com/a.png', detail: 'high' },
      { type: 'input_image', image_url: 'data:image/jpeg;base64,/9j/4AAQ', detail: 'auto' },
    ],
    'Chat → Responses: input_image',
  );
  const msgs = {
    model: 'm',
    max_tokens: 5,
    messages: [
      user([
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBOR' } },
        { type: 'image', source: { type: 'url', url: 'https://x/y.gif' } },
      ]),
    ],
  };
  t.same(
    convert(A, C, msgs).messages[0].content,
    [
      { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBOR' } },
      { type: 'image_url', image_url: { url: 'https://x/y.gif' } },
    ],
    'Anthropic → Chat: data URL / URL',
  );
  t.same(
    convert(R, A, { model: 'm', input: [user([{ type: 'input_image', image_url: 'data:image/webp;base64,UklG', detail: 'low' }])] })
      .messages[0].content,
    [{ type: 'image', source: { type: 'base64', media_type: 'image/webp', data: 'UklG' } }],
    'Responses → Anthropic',
  );
  rejects400(t, () => convert(R, A, { model: 'm', input: [user([{ type: 'input_image', file_id: 'file_1' }])] }), /file_id/, 'file ids');
  rejects400(
    t,
    () => convert(C, A, { model: 'm', messages: [user([{ type: 'image_url', image_url: { url: 'data:text/plain,hello' } }])] }),
    /data URL/,
    'non-base64 data URLs',
  );
  rejects400(
    t,
    () => convert(A, C, { model: 'm', max_tokens: 5, messages: [user([{ type: 'image', source: { type: 'file', file_id: 'f' } }])] }),
    /image sources/,
    'Anthropic file sources',
  );
});

t.test('dropped fields and stream options', async (t) => {
  const chat = convert(C, A, {
    model: 'm',
    messages: [user('q')],
    response_format: { type: 'json_object' },
    n: 2,
    seed: 1,
    user: 'u',
    logprobs: true,
    top_logprobs: 2,
    stream: true,
    metadata: { a: 1 },
  });
  t.same(Object.keys(chat).sort(), ['max_tokens', 'messages', 'model', 'stream'], 'Chat-only fields are dropped');
  t.equal(chat.model, 'up-model');
  const resp = convert(R, C, {
    model: 'm',
    input: 'q',
    text: { format: { type: 'json_object' } },
    store: true,
    include: ['reasoning.encrypted_content'],
    metadata: { a: 1 },
    truncation: 'auto',
    stream: true,
  });
  t.same(
    resp,
    { model: 'up-model', messages: [{ role: 'user', content: 'q' }], stream: true, stream_options: { include_usage: true } },
    'Responses-only fields dropped; Chat streams ask for usage',
  );
  const msgs = convert(A, R, { model: 'm', max_tokens: 5, messages: [user('q')], metadata: { user_id: 'u' }, stream: true });
  t.same(msgs, {
    model: 'up-model',
    input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'q' }] }],
    max_output_tokens: 5,
    stream: true,
  });
});

t.test('malformed requests → 400', async (t) => {
  rejects400(t, () => convert(C, A, { model: 'm', messages: ['x'] }), /messages\[0\]/, 'message not an object');
  rejects400(t, () => convert(C, A, { model: 'm', messages: [{ role: 'tool', content: 'x' }] }), /tool_call_id/, 'tool message without id');
  rejects400(
    t,
    () => convert(C, A, { model: 'm', messages: [{ role: 'function', name: 'f', content: 'x' }] }),
    /function/,
    'legacy function messages',
  );
  rejects400(
    t,
    () => convert(C, A, { model: 'm', messages: [{ role: 'assistant', tool_calls: [{ type: 'function', function: { name: 'f' } }] }] }),
    /id is required/,
    'tool call without id',
  );
  rejects400(t, () => convert(A, C, { model: 'm', max_tokens: 1, messages: [{ role: 'robot', content: 'x' }] }), /role/, 'unknown role');
  rejects400(
    t,
    () => convert(R, C, { model: 'm', input: [{ type: 'function_call_output', output: 'x' }] }),
    /call_id/,
    'output without call_id',
  );
  rejects400(
    t,
    () => convert(C, A, { model: 'm', messages: [user('q')], tool_choice: { type: 'allowed_tools' } }),
    /tool_choice/,
    'unknown tool_choice',
  );
});

t.test('legacy functions map to tools', async (t) => {
  const a = convert(C, A, {
    model: 'm',
    messages: [user('q')],
    functions: [{ name: 'f', parameters: { type: 'object' } }],
    function_call: { name: 'f' },
  });
  t.same(a.tools, [{ name: 'f', input_schema: { type: 'object' } }]);
  t.same(a.tool_choice, { type: 'tool', name: 'f' });
});
