/**
 * Non-stream responses (finish reasons, usage, ids, content order, thinking) and stream encoder /
 * decoder edge cases the transcripts do not exercise (parallel interleaved calls, unsigned
 * thinking, redacted thinking, errors, fail()).
 */
import t from 'tap';
import type { ProtocolName } from '../../core/config/types.js';
import type { FinishReason, IRResponse, IRStreamEvent } from '../../core/protocols/ir.js';
import { formatJsonEvent, formatEvent } from '../../core/sse.js';
import {
  OPTS,
  PROTOCOLS,
  chatSees,
  codec,
  decode,
  encode,
  frames,
  irProblems,
  sees,
  wireProblems,
  anthropicSees,
  responsesSees,
} from './helpers.js';

const A: ProtocolName = 'anthropic-messages';
const C: ProtocolName = 'openai-chat';
const R: ProtocolName = 'openai-responses';
const U = { input: 100, output: 50, cacheRead: 30, cacheWrite: 20 };

function ir(content: IRResponse['content'], finishReason: FinishReason = 'end_turn', extra: Partial<IRResponse> = {}): IRResponse {
  return { id: 'up-1', model: 'up-model', content, finishReason, stopSequence: null, usage: U, ...extra };
}
const enc = (p: ProtocolName, res: IRResponse): any => codec(p).encodeResponse(res, OPTS);

t.test('finish reasons', async (t) => {
  const rows: Array<[FinishReason, string, string, string | null]> = [
    ['end_turn', 'stop', 'end_turn', null],
    ['stop_sequence', 'stop', 'stop_sequence', null],
    ['pause_turn', 'stop', 'pause_turn', null],
    ['max_tokens', 'length', 'max_tokens', 'max_output_tokens'],
    ['context_window', 'length', 'model_context_window_exceeded', 'max_output_tokens'],
    ['tool_use', 'tool_calls', 'tool_use', null],
    ['refusal', 'content_filter', 'refusal', 'content_filter'],
  ];
  for (const [reason, chat, anthropic, incomplete] of rows) {
    t.equal(enc(C, ir([], reason)).choices[0].finish_reason, chat, `${reason} → Chat ${chat}`);
    t.equal(enc(A, ir([], reason)).stop_reason, anthropic, `${reason} → Anthropic ${anthropic}`);
    const r = enc(R, ir([], reason));
    t.equal(r.status, incomplete ? 'incomplete' : 'completed', `${reason} → Responses ${r.status}`);
    t.same(r.incomplete_details, incomplete ? { reason: incomplete } : null);
    t.equal(codec(A).decodeResponse({ content: [], stop_reason: anthropic }).finishReason, reason, `Anthropic ${anthropic} → ${reason}`);
  }
  const chatBack: Array<[string, FinishReason]> = [
    ['stop', 'end_turn'],
    ['length', 'max_tokens'],
    ['tool_calls', 'tool_use'],
    ['function_call', 'tool_use'],
    ['content_filter', 'refusal'],
    ['weird', 'end_turn'],
  ];
  for (const [fr, reason] of chatBack) {
    t.equal(
      codec(C).decodeResponse({ choices: [{ message: { content: 'x' }, finish_reason: fr }] }).finishReason,
      reason,
      `Chat ${fr} → ${reason}`,
    );
  }
  t.equal(
    codec(C).decodeResponse({
      choices: [
        { message: { tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] }, finish_reason: 'stop' },
      ],
    }).finishReason,
    'tool_use',
    'Chat "stop" with tool calls → tool_use',
  );
  t.equal(
    codec(R).decodeResponse({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, output: [] }).finishReason,
    'max_tokens',
  );
  t.equal(
    codec(R).decodeResponse({ status: 'incomplete', incomplete_details: { reason: 'content_filter' }, output: [] }).finishReason,
    'refusal',
  );
  t.equal(
    codec(R).decodeResponse({ status: 'completed', output: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: '' }] })
      .finishReason,
    'tool_use',
  );
});

t.test('usage: four buckets, never a token twice', async (t) => {
  const chat = enc(C, ir([], 'end_turn', { reasoningTokens: 7 })).usage;
  t.same(
    chat,
    {
      prompt_tokens: 150,
      completion_tokens: 50,
      total_tokens: 200,
      prompt_tokens_details: { cached_tokens: 30, cache_write_tokens: 20 },
      completion_tokens_details: { reasoning_tokens: 7 },
    },
    'Chat prompt includes cache',
  );
  t.same(
    enc(A, ir([])).usage,
    { input_tokens: 100, cache_creation_input_tokens: 20, cache_read_input_tokens: 30, output_tokens: 50 },
    'Anthropic input excludes cache',
  );
  const resp = enc(R, ir([])).usage;
  t.same(
    resp,
    {
      input_tokens: 150,
      input_tokens_details: { cached_tokens: 30, cache_write_tokens: 20 },
      output_tokens: 50,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 200,
    },
    'Responses input includes cache',
  );
  for (const p of PROTOCOLS) {
    const back = codec(p).decodeResponse(enc(p, ir([{ type: 'text', text: 'x' }])));
    t.same(back.usage, U, `${p} round trip keeps the buckets`);
  }
  // Cross-protocol: an Anthropic answer with caching billed the same through Chat and Responses.
  const fromA = codec(A).decodeResponse({
    content: [{ type: 'text', text: 'x' }],
    stop_reason: 'end_turn',
    usage: { input_tokens: 10, cache_read_input_tokens: 1000, cache_creation_input_tokens: 200, output_tokens: 5 },
  });
  const asChat = codec(C).decodeResponse(enc(C, fromA));
  const asResp = codec(R).decodeResponse(enc(R, fromA));
  t.same(asChat.usage, { input: 10, output: 5, cacheRead: 1000, cacheWrite: 200 });
  t.same(asResp.usage, asChat.usage);
  t.equal(enc(C, fromA).usage.prompt_tokens, 1210, 'Chat prompt_tokens = input + cache read + cache write');
  // A LiteLLM proxy's Chat usage: prompt_tokens = input + cache read, cache creation beside it.
  const litellm = {
    prompt_tokens: 1010,
    completion_tokens: 5,
    total_tokens: 1015,
    prompt_tokens_details: { cached_tokens: 1000 },
    cache_creation_input_tokens: 200,
  };
  t.same(
    codec(C).decodeResponse({
      choices: [{ index: 0, message: { role: 'assistant', content: 'x' }, finish_reason: 'stop' }],
      usage: litellm,
    }).usage,
    { input: 10, output: 5, cacheRead: 1000, cacheWrite: 200 },
    'LiteLLM form: cache creation is not inside prompt_tokens',
  );
});

t.test('ids and model come from the request', async (t) => {
  t.equal(enc(C, ir([])).id, 'chatcmpl-req-1');
  t.equal(enc(A, ir([])).id, 'msg_req-1');
  t.equal(enc(R, ir([])).id, 'resp_req-1');
  for (const p of PROTOCOLS) t.equal(enc(p, ir([])).model, 'test-model', `${p} model`);
  const weird = codec(A).encodeResponse(ir([]), { model: 'm', requestId: 'a:b.c' }) as any;
  t.equal(weird.id, 'msg_a_b_c', 'id-safe characters only');
});

t.test('content: text, tool calls, thinking in order', async (t) => {
  const sig = 'c2lnbmF0dXJl+/==';
  const res = ir(
    [
      { type: 'thinking', text: 'hmm', signature: sig },
      { type: 'redacted_thinking', data: 'RED' },
      { type: 'text', text: 'Part one. ' },
      { type: 'text', text: 'Part two.' },
      { type: 'tool_call', id: 'toolu_1', name: 'f', arguments: '{"a":1}' },
      { type: 'tool_call', id: 'toolu_2', name: 'g', arguments: '{}' },
    ],
    'tool_use',
  );
  const chat = enc(C, res);
  t.same(
    chat.choices[0].message,
    {
      role: 'assistant',
      content: 'Part one. Part two.',
      refusal: null,
      tool_calls: [
        { id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } },
        { id: 'toolu_2', type: 'function', function: { name: 'g', arguments: '{}' } },
      ],
      reasoning_content: 'hmm',
      thinking_blocks: [
        { type: 'thinking', thinking: 'hmm', signature: sig },
        { type: 'redacted_thinking', data: 'RED' },
      ],
    },
    'Chat: text joined, tool_calls, reasoning_content, thinking_blocks',
  );
  t.equal(enc(C, ir([{ type: 'tool_call', id: 'c', name: 'f', arguments: '{}' }])).choices[0].message.content, null, 'no text → null');
  t.same(
    codec(C).decodeResponse(chat).content,
    res.content.slice(0, 2).concat([{ type: 'text', text: 'Part one. Part two.' }], res.content.slice(4)),
    'Chat → IR keeps signatures',
  );

  const anth = enc(A, res);
  t.same(
    anth.content,
    [
      { type: 'thinking', thinking: 'hmm', signature: sig },
      { type: 'redacted_thinking', data: 'RED' },
      { type: 'text', text: 'Part one. ' },
      { type: 'text', text: 'Part two.' },
      { type: 'tool_use', id: 'toolu_1', name: 'f', input: { a: 1 } },
      { type: 'tool_use', id: 'toolu_2', name: 'g', input: {} },
    ],
    'Anthropic: IR order',
  );
  t.same(
    enc(
      A,
      ir([
        { type: 'thinking', text: 'unsigned' },
        { type: 'text', text: '' },
        { type: 'tool_call', id: 'c', name: 'f', arguments: '{broken' },
      ]),
    ).content,
    [{ type: 'tool_use', id: 'c', name: 'f', input: {} }],
    'unsigned thinking and empty text dropped; unparseable arguments → {}',
  );

  const resp = enc(R, res);
  t.same(
    resp.output,
    [
      { id: 'rs_gw_req-1_0', type: 'reasoning', summary: [{ type: 'summary_text', text: 'hmm' }], encrypted_content: sig },
      { id: 'rs_gwr_req-1_1', type: 'reasoning', summary: [], encrypted_content: 'RED' },
      {
        id: 'msg_req-1_2',
        type: 'message',
        status: 'completed',
        role: 'assistant',
        content: [
          { type: 'output_text', text: 'Part one. ', annotations: [] },
          { type: 'output_text', text: 'Part two.', annotations: [] },
        ],
      },
      { id: 'fc_gw_req-1_3', type: 'function_call', status: 'completed', arguments: '{"a":1}', call_id: 'toolu_1', name: 'f' },
      { id: 'fc_gw_req-1_4', type: 'function_call', status: 'completed', arguments: '{}', call_id: 'toolu_2', name: 'g' },
    ],
    'Responses: reasoning / message / function_call items',
  );
  const back = codec(R).decodeResponse(resp);
  t.same(
    back.content[0],
    { type: 'thinking', text: 'hmm', signature: sig, itemId: 'rs_gw_req-1_0' },
    'gateway-minted reasoning decodes with its signature',
  );
  t.same(back.content[1], { type: 'redacted_thinking', data: 'RED' }, 'and redacted thinking comes back as such');
  t.same(enc(A, back).content.slice(0, 2), anth.content.slice(0, 2), 'so an Anthropic upstream gets them back byte-exact');

  const openai = codec(R).decodeResponse({
    status: 'completed',
    output: [
      {
        id: 'rs_1',
        type: 'reasoning',
        summary: [
          { type: 'summary_text', text: 'a' },
          { type: 'summary_text', text: 'b' },
        ],
        encrypted_content: 'gAAAA',
      },
      { id: 'msg_1', type: 'message', content: [{ type: 'refusal', refusal: 'no' }] },
    ],
  });
  t.same(
    openai.content,
    [
      { type: 'thinking', text: 'a\n\nb', signature: 'gAAAA', itemId: 'rs_1' },
      { type: 'text', text: 'no' },
    ],
    'summaries joined; refusal as text',
  );
  t.equal(enc(A, openai).content.length, 1, 'OpenAI reasoning is not given to Anthropic clients');
  t.equal(enc(C, openai).choices[0].message.thinking_blocks, undefined, 'nor as Chat thinking_blocks');
  t.equal(enc(C, openai).choices[0].message.reasoning_content, 'a\n\nb', 'but its text is reasoning_content');
});

// ---- streams --------------------------------------------------------------------------------

const chunk = (delta: object, finish: string | null = null) =>
  formatJsonEvent({
    id: 'chatcmpl-x',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'gpt',
    choices: [{ index: 0, delta, finish_reason: finish }],
  });

t.test('Chat parallel tool calls interleaved by index', async (t) => {
  const text =
    chunk({ role: 'assistant', content: null }) +
    chunk({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'weather', arguments: '' } }] }) +
    chunk({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'clock', arguments: '{"tz"' } }] }) +
    chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }) +
    chunk({ tool_calls: [{ index: 1, function: { arguments: ':"UTC"}' } }] }) +
    chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }) +
    chunk({}, 'tool_calls') +
    formatJsonEvent({
      id: 'chatcmpl-x',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'gpt',
      choices: [],
      usage: { prompt_tokens: 20, completion_tokens: 10, total_tokens: 30, prompt_tokens_details: { cached_tokens: 5 } },
    }) +
    formatEvent('[DONE]');
  const events = decode(C, text);
  t.same(irProblems(events), []);
  const calls = [
    { id: 'call_a', name: 'weather', args: { city: 'Paris' } },
    { id: 'call_b', name: 'clock', args: { tz: 'UTC' } },
  ];
  for (const to of PROTOCOLS) {
    const out = encode(to, events);
    t.same(wireProblems(to, out), [], `${to}: well-formed (one block at a time where required)`);
    const seen = await sees(to, out);
    t.same(seen.tools, calls, `${to}: both calls with their arguments`);
    t.equal(seen.finish, 'tool');
    t.same(seen.usage, { input: 15, output: 10, cacheRead: 5, cacheWrite: 0 }, `${to}: usage`);
  }
});

t.test('Chat upstreams that omit tool_calls[].index: a new call id is a new call, fragments continue the latest', async (t) => {
  const text =
    chunk({ role: 'assistant', content: null }) +
    chunk({ tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'weather', arguments: '' } }] }) +
    chunk({ tool_calls: [{ function: { arguments: '{"city":"Paris"}' } }] }) +
    chunk({ tool_calls: [{ id: 'call_b', type: 'function', function: { name: 'clock', arguments: '{"tz":' } }] }) +
    chunk({ tool_calls: [{ function: { arguments: '"UTC"}' } }] }) +
    chunk({}, 'tool_calls') +
    formatEvent('[DONE]');
  const events = decode(C, text);
  t.same(irProblems(events), []);
  const seen = await sees('anthropic-messages', encode('anthropic-messages', events));
  t.same(seen.tools, [
    { id: 'call_a', name: 'weather', args: { city: 'Paris' } },
    { id: 'call_b', name: 'clock', args: { tz: 'UTC' } },
  ]);
});

t.test('Chat encoder counts tool indices over tool blocks only', async (t) => {
  const events: IRStreamEvent[] = [
    { type: 'start', id: 'x', model: 'm' },
    { type: 'block_start', index: 0, block: { type: 'thinking' } },
    { type: 'delta', index: 0, delta: { type: 'thinking', text: 'think' } },
    { type: 'delta', index: 0, delta: { type: 'signature', signature: 'SIG' } },
    { type: 'block_stop', index: 0 },
    { type: 'block_start', index: 1, block: { type: 'text' } },
    { type: 'delta', index: 1, delta: { type: 'text', text: 'calling' } },
    { type: 'block_stop', index: 1 },
    { type: 'block_start', index: 2, block: { type: 'tool_call', id: 'toolu_1', name: 'f' } },
    { type: 'block_stop', index: 2 },
    { type: 'block_start', index: 3, block: { type: 'tool_call', id: 'toolu_2', name: 'g' } },
    { type: 'delta', index: 3, delta: { type: 'tool_args', json: '{"x":1}' } },
    { type: 'block_stop', index: 3 },
    { type: 'usage', usage: { input: 3, output: 4 } },
    { type: 'finish', reason: 'tool_use' },
    { type: 'end' },
  ];
  const out = encode(C, events);
  t.same(wireProblems(C, out), []);
  const { completion, seen } = await chatSees(out);
  t.same(
    completion.choices[0].message.tool_calls.map((c: any) => [c.id, c.function.arguments]),
    [
      ['toolu_1', '{}'],
      ['toolu_2', '{"x":1}'],
    ],
    'indices 0 and 1; a call without arguments ends with "{}", never ""',
  );
  t.same(seen.tools[0].args, {}, 'a no-argument call');
  t.same(
    completion.choices[0].message.thinking_blocks,
    [{ type: 'thinking', thinking: 'think', signature: 'SIG' }],
    'the signature arrives with the whole block',
  );
  t.equal(seen.thinking, 'think');
  const dataFrames = frames(out).map((f) => f.data);
  t.same(dataFrames[0].choices[0].delta, { role: 'assistant', content: '' }, 'first chunk');
  t.same(dataFrames[dataFrames.length - 1].choices, [], 'usage chunk last');
  // Chat → IR: the per-block thinking_blocks chunk gives the signature back without repeating the text.
  const back = decode(C, out);
  t.same(
    back.filter((e) => e.type === 'delta' && e.index === 0).map((e) => (e as any).delta),
    [
      { type: 'thinking', text: 'think' },
      { type: 'signature', signature: 'SIG' },
    ],
  );
});

t.test('Chat round trip keeps consecutive signed thinking blocks apart, each with its own signature', async (t) => {
  const events: IRStreamEvent[] = [
    { type: 'start', id: 'msg_1', model: 'm' },
    { type: 'block_start', index: 0, block: { type: 'thinking' } },
    { type: 'delta', index: 0, delta: { type: 'thinking', text: 'A' } },
    { type: 'delta', index: 0, delta: { type: 'signature', signature: 'S1' } },
    { type: 'block_stop', index: 0 },
    { type: 'block_start', index: 1, block: { type: 'thinking' } },
    { type: 'delta', index: 1, delta: { type: 'thinking', text: 'B' } },
    { type: 'delta', index: 1, delta: { type: 'signature', signature: 'S2' } },
    { type: 'block_stop', index: 1 },
    { type: 'block_start', index: 2, block: { type: 'text' } },
    { type: 'delta', index: 2, delta: { type: 'text', text: 'answer' } },
    { type: 'block_stop', index: 2 },
    { type: 'finish', reason: 'end_turn' },
    { type: 'end' },
  ];
  const back = decode(C, encode(C, events));
  const blocks = new Map<number, { text: string; sig: string }>();
  for (const e of back) {
    if (e.type === 'block_start' && e.block.type === 'thinking') blocks.set(e.index, { text: '', sig: '' });
    if (e.type === 'delta' && blocks.has(e.index)) {
      const b = blocks.get(e.index)!;
      if (e.delta.type === 'thinking') b.text += e.delta.text;
      if (e.delta.type === 'signature') b.sig += e.delta.signature;
    }
  }
  t.same(
    [...blocks.values()],
    [
      { text: 'A', sig: 'S1' },
      { text: 'B', sig: 'S2' },
    ],
  );
});

t.test('unsigned thinking never reaches an Anthropic client; signed thinking does', async (t) => {
  const text =
    chunk({ role: 'assistant', content: '' }) +
    chunk({ reasoning_content: 'let me ' }) +
    chunk({ reasoning_content: 'think' }) +
    chunk({ content: 'Answer.' }) +
    chunk({}, 'stop') +
    formatEvent('[DONE]');
  const events = decode(C, text);
  const out = encode(A, events);
  t.same(wireProblems(A, out), []);
  const { message } = await anthropicSees(out);
  t.same(
    message.content.map((b: any) => b.type),
    ['text'],
    'dropped, indices stay dense',
  );
  t.equal(message.content[0].text, 'Answer.');
  t.equal((await chatSees(encode(C, events))).seen.thinking, 'let me think', 'a Chat client still sees it');
  t.equal((await responsesSees(encode(R, events))).seen.thinking, 'let me think', 'and a Responses client');

  const signed =
    chunk({ role: 'assistant', content: '' }) +
    chunk({ reasoning_content: 'deep', thinking_blocks: [{ type: 'thinking', thinking: 'deep' }] }) +
    chunk({ thinking_blocks: [{ type: 'thinking', thinking: '', signature: 'ABC=' }] }) +
    chunk({ thinking_blocks: [{ type: 'redacted_thinking', data: 'XYZ' }] }) +
    chunk({ content: 'ok' }) +
    chunk({}, 'stop') +
    formatEvent('[DONE]');
  const { message: m2 } = await anthropicSees(encode(A, decode(C, signed)));
  t.same(
    m2.content.slice(0, 2),
    [
      { type: 'thinking', thinking: 'deep', signature: 'ABC=' },
      { type: 'redacted_thinking', data: 'XYZ' },
    ],
    'LiteLLM-style deltas: the text once, the signature, the redacted block',
  );
  t.equal(m2.content[2].text, 'ok');
});

t.test('Responses clients: max_tokens → response.incomplete; refusal → content_filter', async (t) => {
  const events = (reason: FinishReason): IRStreamEvent[] => [
    { type: 'start', id: 'x', model: 'm' },
    { type: 'block_start', index: 0, block: { type: 'text' } },
    { type: 'delta', index: 0, delta: { type: 'text', text: 'cut' } },
    { type: 'block_stop', index: 0 },
    { type: 'usage', usage: { input: 1, output: 2 } },
    { type: 'finish', reason },
    { type: 'end' },
  ];
  const { response } = await responsesSees(encode(R, events('max_tokens')));
  t.equal(response.status, 'incomplete');
  t.same(response.incomplete_details, { reason: 'max_output_tokens' });
  t.equal(response.output_text, 'cut');
  const refused = await responsesSees(encode(R, events('refusal')));
  t.same(refused.response.incomplete_details, { reason: 'content_filter' });
  const back = decode(R, encode(R, events('max_tokens')));
  t.match(
    back.filter((e) => e.type === 'finish'),
    [{ reason: 'max_tokens' }],
    'and back',
  );
});

t.test('Anthropic clients get stop_sequence and the held usage', async (t) => {
  const out = encode(A, [
    { type: 'start', id: 'x', model: 'm', usage: { input: 9 } },
    { type: 'block_start', index: 0, block: { type: 'text' } },
    { type: 'delta', index: 0, delta: { type: 'text', text: 'a' } },
    { type: 'block_stop', index: 0 },
    { type: 'finish', reason: 'stop_sequence', stopSequence: 'END' },
    { type: 'usage', usage: { output: 4, cacheRead: 2 } },
    { type: 'end' },
  ]);
  const { message } = await anthropicSees(out);
  t.equal(message.stop_reason, 'stop_sequence');
  t.equal(message.stop_sequence, 'END');
  t.same(
    message.usage,
    { input_tokens: 9, cache_creation_input_tokens: 0, cache_read_input_tokens: 2, output_tokens: 4 },
    'usage that arrived after the finish is in message_delta',
  );
  t.equal(frames(out)[0].data.message.usage.input_tokens, 9, 'message_start has what was known');
});

t.test('upstream errors and encoder.fail', async (t) => {
  const err = { type: 'overloaded_error', message: 'Overloaded now', code: 'overloaded' };
  const evs = decode(
    C,
    chunk({ role: 'assistant', content: 'hi' }) +
      formatJsonEvent({ error: { message: 'Overloaded now', type: 'overloaded_error', code: 'overloaded' } }),
  );
  t.same(evs[evs.length - 1], { type: 'error', error: err }, 'Chat {"error":…} chunk → error');
  const named = decode(C, formatJsonEvent({ error: { message: 'boom', type: 'server_error' } }, 'error'));
  t.match(named, [{ type: 'error', error: { type: 'server_error', message: 'boom' } }], 'event: error first');
  const flat = decode(R, formatJsonEvent({ type: 'error', code: 'rate_limit', message: 'slow down', sequence_number: 1 }, 'error'));
  t.match(flat, [{ type: 'error', error: { type: 'rate_limit', code: 'rate_limit', message: 'slow down' } }], 'Responses flat error form');
  const failed = decode(
    R,
    formatJsonEvent(
      { type: 'response.failed', sequence_number: 3, response: { status: 'failed', error: { code: 'server_error', message: 'died' } } },
      'response.failed',
    ),
  );
  t.match(failed, [{ type: 'error', error: { type: 'server_error', message: 'died' } }], 'response.failed alone');

  for (const p of PROTOCOLS) {
    const e = codec(p).createStreamEncoder(OPTS);
    let out = e.push({ type: 'start', id: 'x', model: 'm' });
    out += e.push({ type: 'block_start', index: 0, block: { type: 'text' } });
    out += e.push({ type: 'delta', index: 0, delta: { type: 'text', text: 'partial' } });
    const tail = e.fail({ type: 'upstream_error', message: 'The upstream stream ended before completion' });
    out += tail;
    t.equal(e.push({ type: 'end' }), '', `${p}: nothing after fail`);
    if (p === R) {
      t.equal(
        tail,
        codec(R).streamError(
          { type: 'upstream_error', message: 'The upstream stream ended before completion' },
          { id: 'resp_req-1', model: 'test-model', created: frames(out)[0].data.response.created_at, sequence: 4 },
        ),
        'Responses: the wire frames with the tracked meta',
      );
    } else {
      t.equal(
        tail,
        codec(p).streamError({ type: 'upstream_error', message: 'The upstream stream ended before completion' }),
        `${p}: the wire's error frame`,
      );
    }
    t.same(wireProblems(p, out), [], `${p}: well-formed`);
    await t.rejects(sees(p, out), /ended before completion/, `${p}: the SDK throws`);
  }
});

t.test('Responses decoder: refusal parts, reasoning_text, items without added events', async (t) => {
  let seq = 0;
  const ev = (o: any) => formatJsonEvent({ ...o, sequence_number: seq++ }, o.type);
  const text =
    ev({ type: 'response.created', response: { id: 'resp_1', model: 'gpt', output: [] } }) +
    ev({ type: 'response.output_item.added', output_index: 0, item: { id: 'msg_1', type: 'message', content: [] } }) +
    ev({ type: 'response.content_part.added', output_index: 0, content_index: 0, part: { type: 'refusal', refusal: '' } }) +
    ev({ type: 'response.refusal.delta', output_index: 0, content_index: 0, delta: "I can't" }) +
    ev({ type: 'response.refusal.done', output_index: 0, content_index: 0, refusal: "I can't help." }) +
    ev({ type: 'response.content_part.done', output_index: 0, content_index: 0, part: { type: 'refusal', refusal: "I can't help." } }) +
    ev({
      type: 'response.output_item.done',
      output_index: 0,
      item: { id: 'msg_1', type: 'message', content: [{ type: 'refusal', refusal: "I can't help." }] },
    }) +
    ev({
      type: 'response.output_item.done',
      output_index: 1,
      item: { id: 'msg_2', type: 'message', content: [{ type: 'output_text', text: 'Late.' }] },
    }) +
    ev({
      type: 'response.completed',
      response: {
        id: 'resp_1',
        status: 'completed',
        output: [],
        usage: {
          input_tokens: 5,
          output_tokens: 2,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: 7,
        },
      },
    });
  const events = decode(R, text);
  t.same(irProblems(events), []);
  for (const to of PROTOCOLS)
    t.equal(
      (await sees(to, encode(to, events))).text,
      "I can't help.Late.",
      `${to}: refusal text and an item known only from its done event`,
    );
});
