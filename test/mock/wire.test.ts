import t from 'tap';
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import http from 'node:http';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { CONFORMANCE, blocks, jsonBlocks, post, readRaw } from './helpers.js';

let mock: MockServer;
t.before(async () => {
  mock = await startMockServer({ fixturesDir: CONFORMANCE, keepRequests: 5 });
});
t.teardown(() => mock.close());

const chatReq = (extra: Record<string, unknown> = {}) => ({
  model: 'chat-model',
  messages: [{ role: 'user', content: 'Hello there' }],
  ...extra,
});
const msgReq = (extra: Record<string, unknown> = {}) => ({
  model: 'claude-model',
  max_tokens: 256,
  messages: [{ role: 'user', content: 'Hello there' }],
  ...extra,
});
const respReq = (extra: Record<string, unknown> = {}) => ({ model: 'gpt-model', input: 'Hello there', ...extra });

t.test('url, port, health', async (t) => {
  t.match(mock.url, /^http:\/\/127\.0\.0\.1:\d+$/);
  t.equal(mock.url, `http://127.0.0.1:${mock.port}`);
  const r = await fetch(mock.url + '/');
  t.equal(r.status, 200);
  await r.text();
});

t.test('chat non-stream: chat.completion object, model echo, usage', async (t) => {
  const r = await post(`${mock.url}/v1/chat/completions`, chatReq({ model: 'chat-model#words=6' }));
  t.equal(r.status, 200);
  t.match(r.headers.get('x-request-id'), /^req_/);
  const b = JSON.parse(r.text);
  t.equal(b.object, 'chat.completion');
  t.equal(b.model, 'chat-model', 'model echoed without the directive suffix');
  t.equal(b.choices[0].message.content, 'This is a mock reply. You');
  t.equal(b.choices[0].finish_reason, 'stop');
  t.same(b.usage, {
    prompt_tokens: 2,
    completion_tokens: 6,
    total_tokens: 8,
    prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
  });
});

t.test('chat stream framing: no event lines, role first, usage chunk, [DONE]', async (t) => {
  const r = await post(`${mock.url}/chat/completions`, chatReq({ stream: true, stream_options: { include_usage: true } }));
  t.equal(r.status, 200, 'path without /v1 works');
  t.match(r.headers.get('content-type'), /^text\/event-stream/);
  const bs = blocks(r.text);
  t.ok(
    bs.every((b) => b.event === undefined),
    'no event: lines',
  );
  t.equal(bs[bs.length - 1].data, '[DONE]');
  const chunks = bs.slice(0, -1).map((b) => JSON.parse(b.data as string));
  t.same(chunks[0].choices[0].delta, { role: 'assistant', content: '', refusal: null });
  t.ok(
    chunks.every((c) => 'usage' in c),
    'every chunk carries usage',
  );
  t.ok(
    chunks.slice(0, -1).every((c) => c.usage === null),
    'usage null until the last chunk',
  );
  const last = chunks[chunks.length - 1];
  t.same(last.choices, []);
  t.same(last.usage.prompt_tokens, 2);
  const fin = chunks[chunks.length - 2];
  t.same(fin.choices[0].delta, {});
  t.equal(fin.choices[0].finish_reason, 'stop');
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  t.equal(text, 'This is a mock reply. You said: Hello there');
  t.equal(last.usage.completion_tokens, 9, 'output tokens = words streamed');
  t.ok(chunks.length > 5, 'several chunks');
});

t.test('chat stream without include_usage has no usage key; no_usage and no_done', async (t) => {
  let bs = blocks((await post(`${mock.url}/v1/chat/completions`, chatReq({ stream: true }))).text);
  t.equal(bs[bs.length - 1].data, '[DONE]');
  t.notOk(bs.slice(0, -1).some((b) => 'usage' in JSON.parse(b.data as string)));
  bs = blocks(
    (
      await post(
        `${mock.url}/v1/chat/completions`,
        chatReq({ stream: true, stream_options: { include_usage: true }, model: 'm#no_usage,no_done' }),
      )
    ).text,
  );
  t.not(bs[bs.length - 1].data, '[DONE]');
  t.notOk(
    bs.some((b) => b.data !== '[DONE]' && JSON.parse(b.data as string).choices.length === 0),
    'no usage chunk',
  );
});

t.test('chat tool calls stream: first delta carries id/type/name/"" then fragments', async (t) => {
  const tools = [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
  ];
  const r = await post(
    `${mock.url}/v1/chat/completions`,
    chatReq({ stream: true, tools, messages: [{ role: 'user', content: 'weather? [[mock: tool_calls=3]]' }] }),
  );
  const chunks = jsonBlocks(r.text).map((b) => b.data);
  const first = chunks[0].choices[0].delta;
  t.equal(first.role, 'assistant');
  t.equal(first.content, null);
  t.match(first.tool_calls[0], { index: 0, type: 'function', function: { name: 'get_weather', arguments: '' } });
  t.match(first.tool_calls[0].id, /^call_/);
  const args: Record<number, string> = {};
  const names: Record<number, string> = {};
  for (const c of chunks) {
    for (const tc of c.choices[0]?.delta?.tool_calls ?? []) {
      args[tc.index] = (args[tc.index] ?? '') + (tc.function?.arguments ?? '');
      if (tc.function?.name) names[tc.index] = tc.function.name;
    }
  }
  t.same(names, { 0: 'get_weather', 1: 'get_time', 2: 'get_weather' }, 'N calls to the first tools, cycling');
  t.same(args, { 0: '{"city":"mock"}', 1: '{}', 2: '{"city":"mock"}' });
  t.equal(chunks[chunks.length - 1].choices[0].finish_reason, 'tool_calls');
  // After a tool result the mock answers with text.
  const after = JSON.parse(
    (
      await post(
        `${mock.url}/v1/chat/completions`,
        chatReq({
          tools,
          messages: [
            { role: 'user', content: 'weather?' },
            {
              role: 'assistant',
              content: null,
              tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"x"}' } }],
            },
            { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
          ],
        }),
      )
    ).text,
  );
  t.equal(after.choices[0].finish_reason, 'stop');
  t.equal(after.usage.prompt_tokens, 3, 'input counts user text, tool args and tool result');
});

t.test('anthropic stream framing: event lines everywhere, ping, dense indices, usage in start and delta', async (t) => {
  const r = await post(
    `${mock.url}/v1/messages`,
    msgReq({ stream: true, model: 'claude-model#thinking,cache_read=10,cache_write=4,input_tokens=7' }),
    {
      'anthropic-version': '2023-06-01',
    },
  );
  t.equal(r.status, 200);
  t.match(r.headers.get('request-id'), /^req_/);
  const bs = jsonBlocks(r.text);
  t.ok(
    bs.every((b) => b.event === b.data.type),
    'every frame named after its type',
  );
  t.same(
    bs.map((b) => b.event).filter((e, i, a) => e !== 'content_block_delta' || a[i - 1] !== 'content_block_delta'),
    [
      'message_start',
      'content_block_start',
      'ping',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ],
  );
  const start = bs[0].data.message;
  t.equal(start.model, 'claude-model');
  t.match(start.id, /^msg_/);
  t.match(start.usage, { input_tokens: 7, cache_read_input_tokens: 10, cache_creation_input_tokens: 4, output_tokens: 1 });
  t.same(bs[1].data.content_block, { type: 'thinking', thinking: '', signature: '' });
  const sig = bs.find((b) => b.data.delta?.type === 'signature_delta');
  t.ok(sig && sig.data.delta.signature.length > 20);
  t.same(
    bs.filter((b) => b.event === 'content_block_start').map((b) => b.data.index),
    [0, 1],
  );
  const delta = bs.find((b) => b.event === 'message_delta')!.data;
  t.same(delta.delta, { stop_reason: 'end_turn', stop_sequence: null });
  t.same(delta.usage, { input_tokens: 7, cache_creation_input_tokens: 4, cache_read_input_tokens: 10, output_tokens: 9 + 12 });
});

t.test('anthropic tool_use stream: input_json_delta starts with ""', async (t) => {
  const tools = [{ name: 'lookup', input_schema: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } }];
  const r = await post(`${mock.url}/v1/messages`, msgReq({ stream: true, tools }));
  const bs = jsonBlocks(r.text);
  const start = bs.find((b) => b.event === 'content_block_start')!.data;
  t.match(start.content_block, { type: 'tool_use', name: 'lookup', input: {} });
  t.match(start.content_block.id, /^toolu_/);
  const deltas = bs.filter((b) => b.event === 'content_block_delta').map((b) => b.data.delta);
  t.same(deltas[0], { type: 'input_json_delta', partial_json: '' });
  t.equal(deltas.map((d) => d.partial_json).join(''), '{"q":"mock"}');
  t.equal(bs.find((b) => b.event === 'message_delta')!.data.delta.stop_reason, 'tool_use');
});

t.test('anthropic max_tokens truncates and reports max_tokens', async (t) => {
  const b = JSON.parse((await post(`${mock.url}/v1/messages`, msgReq({ max_tokens: 3 }))).text);
  t.equal(b.content[0].text, 'This is a');
  t.equal(b.stop_reason, 'max_tokens');
  t.equal(b.usage.output_tokens, 3);
});

t.test('responses stream framing: events, sequence numbers, no [DONE]', async (t) => {
  const r = await post(`${mock.url}/v1/responses`, respReq({ stream: true, model: 'gpt-model#cache_read=5' }));
  const raw = blocks(r.text);
  t.notOk(raw.some((b) => b.data === '[DONE]'));
  const bs = jsonBlocks(r.text);
  t.ok(bs.every((b) => b.event === b.data.type));
  t.same(
    bs.map((b) => b.data.sequence_number),
    bs.map((_, i) => i),
  );
  t.same(
    bs.map((b) => b.event).filter((e) => e !== 'response.output_text.delta'),
    [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ],
  );
  const done = bs[bs.length - 1].data.response;
  t.equal(done.status, 'completed');
  t.equal(done.model, 'gpt-model');
  t.match(done.output[0].id, /^msg_/);
  t.same(done.usage, {
    input_tokens: 7,
    input_tokens_details: { cached_tokens: 5 },
    output_tokens: 9,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 16,
  });
});

t.test('count_tokens and input_tokens', async (t) => {
  const body = {
    model: 'claude-model',
    system: 'Be brief.',
    messages: [{ role: 'user', content: [{ type: 'text', text: 'one two three' }] }],
  };
  t.same(JSON.parse((await post(`${mock.url}/v1/messages/count_tokens`, body)).text), { input_tokens: 5 });
  t.same(JSON.parse((await post(`${mock.url}/v1/messages/count_tokens`, { ...body, model: 'c#input_tokens=99' })).text), {
    input_tokens: 99,
  });
  // The same function as /v1/messages.
  const m = JSON.parse((await post(`${mock.url}/v1/messages`, { ...body, max_tokens: 100 })).text);
  t.equal(m.usage.input_tokens, 5);
  t.same(JSON.parse((await post(`${mock.url}/v1/responses/input_tokens`, { model: 'g', input: 'a b c' })).text), {
    object: 'response.input_tokens',
    input_tokens: 3,
  });
});

t.test('status directive: real error bodies and headers per protocol', async (t) => {
  let r = await post(`${mock.url}/v1/chat/completions`, chatReq({ model: 'chat-model#status=429,retry_after=7' }));
  t.equal(r.status, 429);
  t.equal(r.headers.get('retry-after'), '7');
  t.equal(r.headers.get('x-ratelimit-remaining-requests'), '0');
  t.equal(r.headers.get('x-ratelimit-reset-requests'), '7s');
  t.ok(r.headers.get('x-ratelimit-limit-requests'));
  t.match(JSON.parse(r.text), { error: { type: 'requests', code: 'rate_limit_exceeded', param: null, message: String } });
  r = await post(`${mock.url}/v1/responses`, respReq({ input: 'x [[mock: status=401]]' }));
  t.same(Object.keys(JSON.parse(r.text).error).sort(), ['code', 'message', 'param', 'type']);
  t.equal(JSON.parse(r.text).error.code, 'invalid_api_key');
  r = await post(`${mock.url}/v1/responses`, respReq({ input: 'x [[mock: status=500]]' }));
  t.equal(JSON.parse(r.text).error.type, 'server_error');
  r = await post(`${mock.url}/v1/chat/completions`, chatReq({ model: 'x#status=429,error_type=insufficient_quota,should_retry=false' }));
  t.match(JSON.parse(r.text).error, { type: 'insufficient_quota', code: 'insufficient_quota' });
  t.equal(r.headers.get('x-should-retry'), 'false');
  const cases: [number, string][] = [
    [400, 'invalid_request_error'],
    [401, 'authentication_error'],
    [413, 'request_too_large'],
    [429, 'rate_limit_error'],
    [500, 'api_error'],
    [529, 'overloaded_error'],
  ];
  for (const [status, type] of cases) {
    r = await post(`${mock.url}/v1/messages`, msgReq({ model: `claude-model#status=${status}` }));
    t.equal(r.status, status);
    const b = JSON.parse(r.text);
    t.equal(b.type, 'error');
    t.equal(b.error.type, type, `${status} ${type}`);
    t.equal(b.request_id, r.headers.get('request-id'));
  }
  r = await post(`${mock.url}/v1/messages`, msgReq({ model: 'claude-model#status=429' }));
  t.equal(r.headers.get('retry-after'), '1', 'default retry-after on 429');
  t.equal(r.headers.get('anthropic-ratelimit-requests-remaining'), '0');
  t.ok(r.headers.get('anthropic-ratelimit-requests-reset'));
  r = await post(`${mock.url}/v1/messages`, msgReq({ model: 'claude-model#status=529,retry_after=3' }));
  t.equal(r.headers.get('retry-after'), '3');
  r = await post(`${mock.url}/v1/messages`, msgReq({ model: 'claude-model#status=500' }));
  t.equal(r.headers.get('retry-after'), null);
  // A plain 503 is not "overloaded"; error_type makes it so.
  r = await post(`${mock.url}/v1/chat/completions`, chatReq({ model: 'x#status=503' }));
  t.notMatch(r.text, /overload/i);
  r = await post(`${mock.url}/v1/chat/completions`, chatReq({ model: 'x#status=503,error_type=overloaded_error' }));
  t.match(JSON.parse(r.text).error, { type: 'overloaded_error', message: 'Overloaded' });
  r = await post(`${mock.url}/v1/messages`, msgReq({ model: 'x#status=503' }));
  t.equal(JSON.parse(r.text).error.type, 'api_error');
  r = await post(`${mock.url}/v1/messages`, msgReq({ model: 'x#status=503,error_type=overloaded_error' }));
  t.same(JSON.parse(r.text).error, { type: 'overloaded_error', message: 'Overloaded' });
});

t.test('malformed input never crashes: 400 in the protocol shape', async (t) => {
  let r = await post(`${mock.url}/v1/chat/completions`, '{"model": ');
  t.equal(r.status, 400);
  t.equal(JSON.parse(r.text).error.type, 'invalid_request_error');
  r = await post(`${mock.url}/v1/messages`, 'not json at all');
  t.equal(r.status, 400);
  t.match(JSON.parse(r.text), { type: 'error', error: { type: 'invalid_request_error' } });
  r = await post(`${mock.url}/v1/responses`, '[1,2]');
  t.equal(r.status, 400);
  r = await post(`${mock.url}/v1/messages`, { model: 'c', messages: [{ role: 'user', content: 'x' }] });
  t.equal(r.status, 400, 'max_tokens required');
  t.match(JSON.parse(r.text).error.message, /max_tokens/);
  r = await post(`${mock.url}/v1/chat/completions`, { model: 'c', messages: 'nope' });
  t.equal(r.status, 400);
  r = await post(`${mock.url}/v1/chat/completions`, {
    model: 'c',
    messages: [null, 5, { role: 'user', content: [{ type: 'image_url' }, 7] }],
  });
  t.equal(r.status, 200, 'odd message entries tolerated');
  r = await post(`${mock.url}/v1/nowhere`, {});
  t.equal(r.status, 404);
  r = await post(`${mock.url}/v1/chat/completions`, '[[mock: status=503]] not json');
  t.equal(r.status, 503, 'body directives work even when the body is not JSON');
  const g = await fetch(`${mock.url}/v1/chat/completions`);
  t.equal(g.status, 405);
  await g.text();
  // Garbage on the socket: the server answers 400 and keeps serving.
  await new Promise<void>((resolve) => {
    const s = http.request(mock.url, { method: 'POST', path: '/v1/messages', headers: { 'content-length': 'abc' } });
    s.on('error', () => resolve());
    s.on('response', (res) => {
      res.resume();
      res.on('end', resolve);
    });
    s.end();
  });
  t.equal((await post(`${mock.url}/v1/chat/completions`, chatReq())).status, 200, 'still alive');
});

t.test('requests records method, path, headers, body (last keepRequests)', async (t) => {
  const body = JSON.stringify(chatReq({ user: 'record-me' }));
  await post(`${mock.url}/v1/chat/completions?x=1`, body, {
    'x-api-key': 'sk-up',
    'anthropic-version': '2023-06-01',
    authorization: 'Bearer up',
  });
  const last = mock.requests[mock.requests.length - 1];
  t.equal(last.method, 'POST');
  t.equal(last.path, '/v1/chat/completions?x=1');
  t.equal(last.body, body, 'exact body text');
  t.equal(last.headers['x-api-key'], 'sk-up');
  t.equal(last.headers['authorization'], 'Bearer up');
  t.equal(last.headers['anthropic-version'], '2023-06-01');
  for (let i = 0; i < 7; i++) await post(`${mock.url}/v1/chat/completions`, chatReq());
  t.equal(mock.requests.length, 5, 'bounded by keepRequests');
});

t.test('replay serves the file bytes exactly; path rules', async (t) => {
  const rel = 'sse/anthropic/prism.tests-Fixtures-anthropic.stream-with-tools-1.sse';
  const file = readFileSync(path.join(CONFORMANCE, rel));
  const r = await fetch(`${mock.url}/v1/messages`, {
    method: 'POST',
    body: JSON.stringify(msgReq({ stream: true, messages: [{ role: 'user', content: `[[mock: replay=${rel}]]` }] })),
  });
  t.equal(r.status, 200);
  t.match(r.headers.get('content-type'), /^text\/event-stream/);
  t.ok(Buffer.from(await r.arrayBuffer()).equals(file), 'byte for byte');
  const j = await fetch(`${mock.url}/v1/chat/completions`, {
    method: 'POST',
    body: JSON.stringify(chatReq({ model: 'x#replay=json/openai-openapi.createChatCompletion.x-oaiMeta.Default.response.json' })),
  });
  t.equal(j.headers.get('content-type'), 'application/json');
  t.ok(
    Buffer.from(await j.arrayBuffer()).equals(
      readFileSync(path.join(CONFORMANCE, 'json/openai-openapi.createChatCompletion.x-oaiMeta.Default.response.json')),
    ),
  );
  // chunk_delay / cut_after on a replay: frame by frame, same bytes up to the cut.
  const frames = await readRaw(
    `${mock.url}/v1/messages`,
    msgReq({ messages: [{ role: 'user', content: `[[mock: replay=${rel} chunk_delay=1]]` }] }),
  );
  t.equal(frames.text, file.toString('utf8'));
  const cut = await readRaw(
    `${mock.url}/v1/messages`,
    msgReq({ messages: [{ role: 'user', content: `[[mock: replay=${rel} cut_after=3]]` }] }),
  );
  t.ok(cut.error, 'cut replay errors on the client');
  t.equal(blocks(cut.text).length, 3);
  t.ok(file.toString('utf8').startsWith(cut.text));
  // Refusals.
  for (const bad of ['../README.md', '/etc/passwd', 'sse/../../x', '..\\x']) {
    const x = await post(`${mock.url}/v1/messages`, msgReq({ messages: [{ role: 'user', content: `[[mock: replay=${bad}]]` }] }));
    t.equal(x.status, 400, `refused ${bad}`);
    t.equal(JSON.parse(x.text).type, 'error');
  }
  const missing = await post(`${mock.url}/v1/messages`, msgReq({ messages: [{ role: 'user', content: '[[mock: replay=sse/nope.sse]]' }] }));
  t.equal(missing.status, 404);
  const other = await startMockServer();
  t.teardown(() => other.close());
  const none = await post(`${other.url}/v1/chat/completions`, chatReq({ model: `x#replay=${rel}` }));
  t.equal(none.status, 400, 'no fixturesDir');
  t.equal(JSON.parse(none.text).error.type, 'invalid_request_error');
});

t.test('replay refuses symlinks out of the fixtures dir; status with replay', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'mock-fx-'));
  mkdirSync(path.join(dir, 'fx'));
  writeFileSync(path.join(dir, 'secret.json'), '{"secret":true}');
  writeFileSync(path.join(dir, 'fx', 'err.json'), '{"error":{"message":"boom","type":"server_error","param":null,"code":null}}');
  symlinkSync(path.join(dir, 'secret.json'), path.join(dir, 'fx', 'link.json'));
  const m = await startMockServer({ fixturesDir: path.join(dir, 'fx') });
  t.teardown(() => m.close());
  const r = await post(`${m.url}/v1/chat/completions`, chatReq({ model: 'x#replay=link.json' }));
  t.equal(r.status, 400);
  const e = await post(`${m.url}/v1/chat/completions`, chatReq({ model: 'x#replay=err.json,status=502' }));
  t.equal(e.status, 502);
  t.equal(e.text, '{"error":{"message":"boom","type":"server_error","param":null,"code":null}}');
});

t.test('cut_after, stream_error, hang_after on raw streams', async (t) => {
  const cut = await readRaw(`${mock.url}/v1/chat/completions`, chatReq({ stream: true, model: 'm#cut_after=2' }));
  t.ok(cut.error, 'socket destroyed mid-stream');
  t.equal(blocks(cut.text).length, 2);
  const cutBody = await readRaw(`${mock.url}/v1/chat/completions`, chatReq({ model: 'm#cut_after=10' }));
  t.ok(cutBody.error, 'non-stream body cut');
  t.equal(cutBody.text.length, 10);
  const se = await readRaw(`${mock.url}/v1/chat/completions`, chatReq({ stream: true, model: 'm#stream_error=2' }));
  t.notOk(se.error, 'ends cleanly');
  const sb = blocks(se.text);
  t.equal(sb.length, 3);
  t.match(JSON.parse(sb[2].data as string), { error: { type: 'server_error', message: String } });
  const ae = await readRaw(`${mock.url}/v1/messages`, msgReq({ stream: true, model: 'c#stream_error=1' }));
  const ab = blocks(ae.text);
  t.equal(ab[1].event, 'error');
  t.same(JSON.parse(ab[1].data as string), { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
  t.equal(ab.length, 2);
  const re = await readRaw(`${mock.url}/v1/responses`, respReq({ stream: true, model: 'g#stream_error=3' }));
  const rb = blocks(re.text);
  t.same(
    rb.map((b) => b.event),
    ['response.created', 'response.in_progress', 'response.output_item.added', 'error', 'response.failed'],
  );
  t.match(JSON.parse(rb[3].data as string), { type: 'error', sequence_number: 3, error: { type: 'server_error', code: 'server_error' } });
  t.match(JSON.parse(rb[4].data as string), { sequence_number: 4, response: { status: 'failed', error: { code: 'server_error' } } });
  // hang_after: frames then silence; the client gives up.
  const ac = new AbortController();
  const r = await fetch(`${mock.url}/v1/chat/completions`, {
    method: 'POST',
    body: JSON.stringify(chatReq({ stream: true, model: 'm#hang_after=1' })),
    signal: ac.signal,
  });
  const reader = (r.body as ReadableStream<Uint8Array>).getReader();
  const first = await reader.read();
  t.match(new TextDecoder().decode(first.value), /^data: /);
  ac.abort();
  await reader.read().catch(() => undefined);
});

t.test('hang never answers; close() ends hanging requests', async (t) => {
  const m = await startMockServer();
  const p = fetch(`${m.url}/v1/messages`, { method: 'POST', body: JSON.stringify(msgReq({ model: 'c#hang' })) }).then(
    () => 'answered',
    () => 'failed',
  );
  const early = await Promise.race([p, new Promise((r) => setTimeout(() => r('pending'), 150))]);
  t.equal(early, 'pending');
  t.equal(m.requests.length, 1, 'recorded even though never answered');
  await m.close();
  t.equal(await p, 'failed');
});

t.test('delay and chunk_delay still produce the full answer', async (t) => {
  const r = await readRaw(`${mock.url}/v1/responses`, respReq({ stream: true, model: 'g#delay=20,chunk_delay=2,words=3' }));
  t.notOk(r.error);
  const bs = jsonBlocks(r.text);
  t.equal(bs[bs.length - 1].event, 'response.completed');
  t.equal(bs[bs.length - 1].data.response.output[0].content[0].text, 'This is a');
});

t.test('keep-alive: sequential requests reuse one connection', async (t) => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.teardown(() => agent.destroy());
  const sockets = new Set<unknown>();
  for (let i = 0; i < 3; i++) {
    await new Promise<void>((resolve, reject) => {
      const req = http.request(
        `${mock.url}/v1/chat/completions`,
        { method: 'POST', agent, headers: { 'content-type': 'application/json' } },
        (res) => {
          sockets.add(res.socket);
          res.resume();
          res.on('end', resolve);
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify(chatReq({ stream: i % 2 === 0 })));
    });
  }
  t.equal(sockets.size, 1);
});

t.test('ids are unique per request, content deterministic', async (t) => {
  const a = JSON.parse((await post(`${mock.url}/v1/messages`, msgReq({ model: 'c#created=1700000000' }))).text);
  const b = JSON.parse((await post(`${mock.url}/v1/messages`, msgReq())).text);
  t.not(a.id, b.id);
  t.same(a.content, b.content);
  t.same(a.usage, b.usage);
  const c = JSON.parse((await post(`${mock.url}/v1/chat/completions`, chatReq({ model: 'c#created=1700000000' }))).text);
  t.equal(c.created, 1700000000);
});

t.test('in-flight gauge: requests being answered now, the peak, a client that leaves', async (t) => {
  const m = await startMockServer();
  t.teardown(() => m.close());
  t.same([m.inFlight, m.peakInFlight], [0, 0]);
  const slow = (i: number) => post(`${m.url}/v1/chat/completions`, chatReq({ model: 'chat-model#delay=300', n: i }));
  const running = [slow(1), slow(2), slow(3)];
  while (m.inFlight < 3) await new Promise((r) => setTimeout(r, 5));
  t.equal(m.inFlight, 3, 'three answered at once');
  await Promise.all(running);
  t.same([m.inFlight, m.peakInFlight], [0, 3], 'back to 0; the peak stays');
  await fetch(`${m.url}/`).then((r) => r.text());
  t.equal(m.peakInFlight, 3, 'GET / is not a model call');
  m.resetPeak();
  t.equal(m.peakInFlight, 0);
  const ac = new AbortController();
  const gone = fetch(`${m.url}/v1/chat/completions`, {
    method: 'POST',
    body: JSON.stringify(chatReq({ model: 'chat-model#hang' })),
    signal: ac.signal,
  }).catch(() => undefined);
  while (m.inFlight < 1) await new Promise((r) => setTimeout(r, 5));
  ac.abort();
  await gone;
  while (m.inFlight > 0) await new Promise((r) => setTimeout(r, 5));
  t.same([m.inFlight, m.peakInFlight], [0, 1], 'a client that went away no longer counts');
});
