/**
 * Non-stream golden tests over the OpenAPI examples (json/*.response.json and the request
 * examples), through the hub conversion the core uses, consumed by each SDK's non-stream call.
 * Also the hub's stream translator over the transcripts: usage reported once, completeness and
 * upstream errors as the core needs them.
 */
import t from 'tap';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import type { ProtocolName } from '../../core/config/types.js';
import { hubConversion } from '../../core/protocols/convert.js';
import { SseParser } from '../../core/sse.js';
import { fromAnthropicUsage, fromChatUsage } from '../../core/protocols/usage.js';
import { buckets, OPTS, PROTOCOLS, curlBody, parseArgs, readJson, responseSeen, sees, text, transcripts, type Seen } from './helpers.js';

const ZERO = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };
const jsonFetch = (body: string) => async () => new Response(body, { status: 200, headers: { 'content-type': 'application/json' } });

/** What a user of `p`'s SDK sees for a non-stream body. */
async function seesJson(p: ProtocolName, body: string): Promise<Seen> {
  if (p === 'anthropic-messages') {
    const client = new Anthropic({ apiKey: 'k', baseURL: 'http://sdk.test', maxRetries: 0, fetch: jsonFetch(body) });
    const m: any = await client.messages.create({ model: 'm', max_tokens: 1000, messages: [{ role: 'user', content: 'hi' }] });
    return {
      text: m.content
        .filter((b: any) => b.type === 'text')
        .map((b: any) => b.text)
        .join(''),
      tools: m.content.filter((b: any) => b.type === 'tool_use').map((b: any) => ({ id: b.id, name: b.name, args: b.input })),
      thinking: m.content
        .filter((b: any) => b.type === 'thinking')
        .map((b: any) => b.thinking)
        .join(''),
      signatures: m.content.filter((b: any) => b.type === 'thinking').map((b: any) => b.signature),
      finish:
        m.stop_reason === 'max_tokens'
          ? 'length'
          : m.stop_reason === 'tool_use'
            ? 'tool'
            : m.stop_reason === 'refusal'
              ? 'refusal'
              : 'stop',
      usage: buckets(fromAnthropicUsage(m.usage)) ?? ZERO,
    };
  }
  const client = new OpenAI({ apiKey: 'k', baseURL: 'http://sdk.test', maxRetries: 0, fetch: jsonFetch(body) });
  if (p === 'openai-chat') {
    const c: any = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    const msg = c.choices[0].message;
    const fr = c.choices[0].finish_reason;
    return {
      text: (msg.content ?? '') + (msg.refusal ?? ''),
      tools: (msg.tool_calls ?? []).map((x: any) => ({ id: x.id, name: x.function.name, args: parseArgs(x.function.arguments) })),
      thinking: msg.reasoning_content ?? '',
      signatures: (msg.thinking_blocks ?? []).map((b: any) => b.signature),
      finish: fr === 'length' ? 'length' : fr === 'tool_calls' ? 'tool' : fr === 'content_filter' ? 'refusal' : 'stop',
      usage: buckets(fromChatUsage(c.usage)) ?? ZERO,
    };
  }
  return responseSeen(await client.responses.create({ model: 'm', input: 'hi' }));
}

const RESPONSES: Array<[ProtocolName, string]> = [
  ['openai-chat', 'json/openai-openapi.createChatCompletion.x-oaiMeta.Default.response.json'],
  ['openai-chat', 'json/openai-openapi.createChatCompletion.x-oaiMeta.Functions.response.json'],
  ['openai-chat', 'json/openai-openapi.createChatCompletion.x-oaiMeta.Image-input.response.json'],
  ['openai-responses', 'json/openai-openapi.createResponse.x-oaiMeta.Functions.response.json'],
  ['openai-responses', 'json/openai-openapi.createResponse.x-oaiMeta.Reasoning.response.json'],
  ['openai-responses', 'json/openai-openapi.createResponse.x-oaiMeta.Text-input.response.json'],
];

for (const [from, rel] of RESPONSES) {
  t.test(`response ${rel}`, async (t) => {
    const text = JSON.stringify(readJson(rel));
    const src = await seesJson(from, text);
    t.ok(src.text.length > 0 || src.tools.length > 0, 'the example says something');
    for (const to of PROTOCOLS) {
      const conv = hubConversion(to, from)!;
      const out = conv.response(text, OPTS);
      t.same(buckets(out.usage), src.usage, `${from} → ${to}: usage reported to billing = the upstream's buckets`);
      t.same(await seesJson(to, out.body), src, `${from} → ${to}: the user sees the same answer`);
    }
  });
}

t.test('an Anthropic answer with thinking and cache, through each protocol', async (t) => {
  const body = JSON.stringify({
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    model: 'claude',
    content: [
      { type: 'thinking', thinking: 'First, ', signature: 'Sig+/=' },
      { type: 'text', text: 'Here you go.', citations: null },
      { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} },
      { type: 'tool_use', id: 'toolu_1', name: 'save', input: { path: 'a.txt' } },
    ],
    stop_reason: 'tool_use',
    stop_sequence: null,
    usage: { input_tokens: 12, cache_creation_input_tokens: 100, cache_read_input_tokens: 2000, output_tokens: 40 },
  });
  const src = await seesJson('anthropic-messages', body);
  for (const to of PROTOCOLS) {
    const out = hubConversion(to, 'anthropic-messages')!.response(body, OPTS);
    t.same(out.usage, { input: 12, output: 40, cacheRead: 2000, cacheWrite: 100 }, `${to}: billed buckets`);
    t.same(await seesJson(to, out.body), src, `${to}: same answer, thinking and signature included`);
  }
});

const REQUESTS: Array<[ProtocolName, string, 'curl' | 'json']> = [
  ['openai-chat', 'json/openai-openapi.createChatCompletion.x-oaiMeta.Default.request.curl.txt', 'curl'],
  ['openai-chat', 'json/openai-openapi.createChatCompletion.x-oaiMeta.Functions.request.curl.txt', 'curl'],
  ['openai-chat', 'json/openai-openapi.createChatCompletion.x-oaiMeta.Image-input.request.curl.txt', 'curl'],
  ['openai-chat', 'sse/openai-chat/openai-openapi.createChatCompletion.x-oaiMeta.Streaming.request.curl.txt', 'curl'],
  ['openai-chat', 'json/dotnet-extensions.FunctionCallContent_Streaming.request.json', 'json'],
  ['openai-responses', 'json/openai-openapi.createResponse.x-oaiMeta.Functions.request.curl.txt', 'curl'],
  ['openai-responses', 'json/openai-openapi.createResponse.x-oaiMeta.Reasoning.request.curl.txt', 'curl'],
  ['openai-responses', 'json/openai-openapi.createResponse.x-oaiMeta.Text-input.request.curl.txt', 'curl'],
  ['openai-responses', 'sse/openai-responses/openai-openapi.createResponse.x-oaiMeta.Streaming.request.curl.txt', 'curl'],
];

for (const [from, rel, kind] of REQUESTS) {
  t.test(`request ${rel}`, async (t) => {
    const json = kind === 'curl' ? curlBody(rel) : readJson(rel);
    const stream = json.stream === true;
    const bodies: Record<string, any> = {};
    for (const to of PROTOCOLS) {
      const conv = hubConversion(from, to)!;
      bodies[to] = JSON.parse(
        conv.requestBody({ text: JSON.stringify(json), json, stream, upstreamModel: 'up', requestId: 'r1', defaultMaxTokens: 2048 }),
      );
      t.equal(bodies[to].model, 'up', `${to}: upstream model`);
    }
    const a = bodies['anthropic-messages'];
    t.equal(typeof a.max_tokens, 'number', 'Anthropic always gets max_tokens');
    t.ok(
      a.max_tokens === (json.max_tokens ?? json.max_completion_tokens ?? json.max_output_tokens ?? 2048),
      'the client cap or the model default',
    );
    t.equal(a.messages[0].role, 'user');
    t.equal(a.stream === true, stream, 'stream flag');
    t.equal(bodies['openai-chat'].stream_options?.include_usage === true, stream, 'Chat streams ask for usage');
    const tools = json.tools ?? [];
    t.equal((a.tools ?? []).length, tools.length, 'tools carried');
    t.equal((bodies['openai-responses'].tools ?? []).length, tools.length);
    t.equal((bodies['openai-chat'].tools ?? []).length, tools.length);
    if (json.reasoning?.effort === 'high') {
      t.equal(bodies['openai-chat'].reasoning_effort, 'high', 'effort → Chat');
      t.same(a.thinking, { type: 'enabled', budget_tokens: 1024 }, 'high wants 16384, but the 2048-token cap keeps 1024 for the answer');
    }
    const sys = (json.messages ?? []).find((m: any) => m.role === 'developer' || m.role === 'system')?.content ?? json.instructions;
    if (sys) {
      t.equal(a.system, sys, 'system → Anthropic system');
      t.equal(bodies['openai-responses'].instructions, sys, 'system → instructions');
    }
  });
}

t.test('the hub stream translator over every transcript', async (t) => {
  for (const from of PROTOCOLS) {
    for (const tr of transcripts(from)) {
      for (const to of PROTOCOLS) {
        const tx = hubConversion(to, from)!.stream(OPTS);
        const p = new SseParser();
        let out = '';
        for (const b of p.feedBytes(tr.bytes)) out += text(tx.block(b));
        for (const b of p.endBytes(true)) out += text(tx.block(b));
        const end = tx.end();
        out += text(end.text) + text(tx.closing(() => ZERO));
        const name = `${from}/${tr.name} → ${to}`;
        if (tx.upstreamError) {
          t.notOk(end.complete, `${name}: an upstream error is not a complete stream`);
          await t.rejects(sees(to, out), `${name}: the client SDK throws`);
          continue;
        }
        t.ok(end.complete, `${name}: complete`);
        const seen = await sees(to, out);
        t.same(buckets(tx.usage()) ?? ZERO, seen.usage, `${name}: what billing records is what the client was told`);
        t.ok(tx.outputChars() >= seen.text.length, `${name}: output characters counted`);
      }
    }
  }
});
