/**
 * The mock's scripting directives (docs/mock.md): `call=` / `args=` choose the tool and the exact
 * arguments of the call, then the mock answers after the tool result; `web_search` runs a
 * provider-side search in the Messages and Responses shapes when the request offers the tool.
 */
import t from 'tap';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { parseDirectives } from '../../mock/directives.js';
import { jsonBlocks, post } from './helpers.js';

let mock: MockServer;
t.before(async () => {
  mock = await startMockServer({});
});
t.teardown(() => mock.close());

const args = Buffer.from(JSON.stringify({ cmd: 'echo hi there' })).toString('base64url');
const fn = (name: string) => ({ type: 'function', name, parameters: { type: 'object', properties: { cmd: { type: 'string' } } } });

t.test('directive parsing', async (t) => {
  const d = parseDirectives(undefined, `x [[mock: call=exec_command args=${args} web_search=llm+news]]`);
  t.equal(d.call, 'exec_command');
  t.equal(d.args, '{"cmd":"echo hi there"}');
  t.equal(d.webSearch, 'llm news');
  t.equal(parseDirectives(undefined, '[[mock: args=notbase64json web_search]]').args, undefined, 'bad args ignored');
  t.equal(parseDirectives(undefined, '[[mock: web_search]]').webSearch, true);
});

t.test('call= and args= script the call, then the answer', async (t) => {
  const input = [{ role: 'user', content: `go [[mock: call=second args=${args}]]` }];
  const r = JSON.parse((await post(`${mock.url}/v1/responses`, { model: 'm', input, tools: [fn('first'), fn('second')] })).text);
  t.match(r.output[0], { type: 'function_call', name: 'second', arguments: '{"cmd":"echo hi there"}' });
  const done = JSON.parse(
    (
      await post(`${mock.url}/v1/responses`, {
        model: 'm',
        tools: [fn('first'), fn('second')],
        input: [
          ...input,
          { type: 'function_call', call_id: r.output[0].call_id, name: 'second', arguments: r.output[0].arguments },
          { type: 'function_call_output', call_id: r.output[0].call_id, output: 'hi there' },
        ],
      })
    ).text,
  );
  t.equal(done.output[0].type, 'message', 'after the tool result: text');
  const claude = JSON.parse(
    (
      await post(`${mock.url}/v1/messages`, {
        model: 'm',
        max_tokens: 50,
        messages: [{ role: 'user', content: `go [[mock: call=b args=${args}]]` }],
        tools: [
          { name: 'a', input_schema: { type: 'object' } },
          { name: 'b', input_schema: { type: 'object' } },
        ],
      })
    ).text,
  );
  t.match(claude.content[0], { type: 'tool_use', name: 'b', input: { cmd: 'echo hi there' } }, 'Messages too');
  const missing = JSON.parse(
    (await post(`${mock.url}/v1/responses`, { model: 'm', input: '[[mock: call=nope]]', tools: [fn('first')] })).text,
  );
  t.equal(missing.output[0].name, 'first', 'a tool the request does not offer: the default order');
});

t.test('web_search on Messages: server_tool_use, results, a cited text', async (t) => {
  const body = {
    model: 'm',
    max_tokens: 100,
    messages: [{ role: 'user', content: 'news? [[mock: web_search=llm+news]]' }],
    tools: [{ type: 'web_search_20250305', name: 'web_search' }],
  };
  const m = JSON.parse((await post(`${mock.url}/v1/messages`, body)).text);
  t.same(
    m.content.map((b: any) => b.type),
    ['server_tool_use', 'web_search_tool_result', 'text'],
  );
  t.match(m.content[0], { name: 'web_search', input: { query: 'llm news' } });
  t.equal(m.content[1].tool_use_id, m.content[0].id);
  t.same(
    m.content[1].content.map((r: any) => r.url),
    ['https://example.com/llm-news/1', 'https://example.com/llm-news/2'],
  );
  t.match(m.content[2].citations[0], { type: 'web_search_result_location', url: 'https://example.com/llm-news/1' });
  t.same(m.usage.server_tool_use, { web_search_requests: 1 });
  const bs = jsonBlocks((await post(`${mock.url}/v1/messages`, { ...body, stream: true })).text);
  const starts = bs.filter((b) => b.event === 'content_block_start').map((b) => b.data.content_block.type);
  t.same(starts, ['server_tool_use', 'web_search_tool_result', 'text'], 'streamed in the same order');
  t.ok(
    bs.some((b) => b.data.delta?.type === 'citations_delta'),
    'a citations_delta',
  );
  const plain = JSON.parse((await post(`${mock.url}/v1/messages`, { ...body, tools: undefined })).text);
  t.same(
    plain.content.map((b: any) => b.type),
    ['text'],
    'no search tool offered: no search',
  );
});

t.test('web_search on Responses: web_search_call and an annotated message', async (t) => {
  const body = { model: 'm', input: 'news? [[mock: web_search]]', tools: [{ type: 'web_search' }] };
  const r = JSON.parse((await post(`${mock.url}/v1/responses`, body)).text);
  t.same(
    r.output.map((o: any) => o.type),
    ['web_search_call', 'message'],
  );
  t.match(r.output[0].action, { type: 'search', query: 'news?' });
  t.match(r.output[1].content[0].annotations[0], { type: 'url_citation', url: 'https://example.com/news/1' });
  const bs = jsonBlocks((await post(`${mock.url}/v1/responses`, { ...body, stream: true })).text);
  const names = bs.map((b) => b.event);
  for (const e of [
    'response.web_search_call.in_progress',
    'response.web_search_call.searching',
    'response.web_search_call.completed',
    'response.output_text.annotation.added',
  ])
    t.ok(names.includes(e), e);
});
