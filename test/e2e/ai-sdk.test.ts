/**
 * The Vercel AI SDK (`ai` 6 with `@ai-sdk/openai` and `@ai-sdk/anthropic` 3, the newest majors
 * that run on Node 20) through every group kind each provider can use, with default options:
 * `generateText` and `streamText` running a multi-step tool loop (the model calls a tool, the SDK
 * runs it, the model answers), usage non-zero at every step. The Responses provider stores
 * responses by default, so later steps and turns refer to earlier output items by id
 * (`item_reference`): on converting groups the gateway answers them from its item cache.
 */
import t from 'tap';
import { generateText, stepCountIs, streamText, tool, type LanguageModel } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { z } from 'zod';
import { baseConfig, bearer, call, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';

let g: TestGateway;
t.before(async () => {
  g = await startGateway(baseConfig());
});
t.teardown(() => g.close());

const openai = (key: string) => createOpenAI({ apiKey: key, baseURL: g.url + '/v1' });
const anthropic = (key: string) => createAnthropic({ apiKey: key, baseURL: g.url + '/v1' });

const weather = tool({
  description: 'The weather in a city',
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => `Sunny in ${city}`,
});

/** Every (provider API, group kind) pair the contract allows, and the wire it takes. */
const CASES: Array<{ name: string; model: () => LanguageModel }> = [
  { name: 'openai.chat → chat-only group (passthrough)', model: () => openai(KEYS.chat).chat('chat-model') },
  { name: 'openai.chat → Messages-style group (converted)', model: () => openai(KEYS.messages).chat('claude-model') },
  { name: 'openai.responses → Messages-style group (converted)', model: () => openai(KEYS.messages).responses('claude-model') },
  { name: 'anthropic → Messages-style group (native)', model: () => anthropic(KEYS.messages)('claude-model') },
  { name: 'openai.responses → Responses-style group (native)', model: () => openai(KEYS.responses).responses('gpt-model') },
  { name: 'openai.chat → Responses-style group', model: () => openai(KEYS.responses).chat('gpt-model') },
  { name: 'anthropic → Responses-style group (converted)', model: () => anthropic(KEYS.responses)('gpt-model') },
];

type Steps = ReadonlyArray<{
  toolCalls: ReadonlyArray<{ toolName: string }>;
  toolResults: ReadonlyArray<{ output: unknown }>;
  usage: { inputTokens?: number; outputTokens?: number };
}>;

function assertLoop(t: Pick<typeof import('tap').default, 'equal' | 'ok' | 'match'>, steps: Steps, text: string, label: string): void {
  t.equal(steps.length, 2, `${label}: two steps (tool call, answer)`);
  t.equal(steps[0].toolCalls[0]?.toolName, 'weather', `${label}: the model called the tool`);
  t.match(String(steps[0].toolResults[0]?.output), /^Sunny in /, `${label}: the SDK ran it`);
  t.equal(steps[1].toolCalls.length, 0, `${label}: then answered`);
  t.match(text, /^This is a mock reply/, `${label}: final text`);
  steps.forEach((s, i) => {
    t.ok((s.usage.inputTokens ?? 0) > 0, `${label}: step ${i + 1} input tokens (${s.usage.inputTokens})`);
    t.ok((s.usage.outputTokens ?? 0) > 0, `${label}: step ${i + 1} output tokens (${s.usage.outputTokens})`);
  });
}

for (const c of CASES) {
  t.test(c.name, async (t) => {
    const gen = await generateText({
      model: c.model(),
      tools: { weather },
      stopWhen: stepCountIs(4),
      prompt: 'What is the weather in Paris?',
    });
    assertLoop(t, gen.steps, gen.text, 'generateText');

    const s = streamText({ model: c.model(), tools: { weather }, stopWhen: stepCountIs(4), prompt: 'What is the weather in Rome?' });
    let streamed = '';
    for await (const d of s.textStream) streamed += d;
    const steps = await s.steps;
    assertLoop(t, steps, await s.text, 'streamText');
    t.equal(streamed, await s.text, 'streamText: the text stream is the text');
  });
}

t.test("stored responses on a converting group: item references are answered from the gateway's cache", async (t) => {
  const mock = g.gw.mocks.get('mock')!;
  const sent: any[] = [];
  const capturing = createOpenAI({
    apiKey: KEYS.messages,
    baseURL: g.url + '/v1',
    fetch: (async (url: any, init: any) => {
      if (typeof init?.body === 'string') sent.push(JSON.parse(init.body));
      return fetch(url, init);
    }) as typeof fetch,
  });
  const model = () => capturing.responses('claude-model');
  // Reasoning asked for: Anthropic thinks, the client gets a reasoning item, and its next step
  // (after running the tool) refers to that item by id rather than sending it.
  const before = mock.requests.length;
  const gen = await generateText({
    model: model(),
    tools: { weather },
    stopWhen: stepCountIs(4),
    prompt: 'Weather in Oslo?',
    // (forceReasoning: the SDK sends reasoning settings only for model names it knows reason.)
    providerOptions: { openai: { forceReasoning: true, reasoningEffort: 'low', reasoningSummary: 'auto' } },
  });
  assertLoop(t, gen.steps, gen.text, 'with reasoning');
  t.ok(gen.steps[0].reasoning.length > 0, 'the first step reasoned');
  t.ok(
    sent[1].input.some((i: any) => i.type === 'item_reference' && String(i.id).startsWith('rs_')),
    "the SDK's second step referred to the reasoning by id",
  );
  const ups = mock.requests
    .slice(before)
    .filter((r) => r.path.startsWith('/v1/messages'))
    .map((r) => JSON.parse(r.body));
  t.equal(ups.length, 2);
  const replayed = ups[1].messages.find((m: any) => m.role === 'assistant');
  t.equal(replayed?.content[0]?.type, 'thinking', 'the referenced reasoning went back to Anthropic as its signed thinking');
  t.ok(replayed?.content[0]?.signature, 'signature included');

  // A second turn refers to the first turn's answer by id.
  const next = await generateText({
    model: model(),
    messages: [...gen.response.messages, { role: 'user', content: 'And tomorrow?' }],
  });
  t.match(next.text, /^This is a mock reply/, 'the second turn answers');
  t.ok(
    sent.at(-1).input.some((i: any) => i.type === 'item_reference' && String(i.id).startsWith('msg_')),
    'the SDK referred to the earlier answer by id',
  );
  const last = JSON.parse(mock.requests.at(-1)!.body);
  const texts = JSON.stringify(last.messages);
  t.ok(texts.includes(gen.text), 'the referenced answer is in the history sent upstream');

  // References are per key: another key cannot read the items, and unknown ids stay a 400.
  const msgId =
    gen.response.messages.length > 0 ? (gen.steps[1].response.body as any)?.output?.find((o: any) => o.type === 'message')?.id : undefined;
  t.ok(typeof msgId === 'string' && msgId.startsWith('msg_'), `the answer's item id (${msgId})`);
  const refer = (key: string, id: string) =>
    call(g.url + '/v1/responses', {
      headers: bearer(key),
      json: {
        model: 'claude-model',
        input: [
          { type: 'item_reference', id },
          { role: 'user', content: 'go on' },
        ],
      },
    });
  t.equal((await refer(KEYS.messages, msgId)).status, 200, 'the owner can refer to it');
  const other = await refer(KEYS.plan, msgId);
  t.equal(other.status, 400, 'another key cannot');
  t.match(other.json?.error?.message, /item_reference/, 'told why');
  t.equal((await refer(KEYS.messages, 'msg_never_made')).status, 400, 'an unknown id is a 400');
});

t.test('store: false keeps nothing to refer to', async (t) => {
  const first = await call(g.url + '/v1/responses', {
    headers: bearer(KEYS.messages),
    json: { model: 'claude-model', input: 'Hello', store: false },
  });
  t.equal(first.status, 200);
  const id = first.json.output.find((o: any) => o.type === 'message').id;
  const again = await call(g.url + '/v1/responses', {
    headers: bearer(KEYS.messages),
    json: { model: 'claude-model', input: [{ type: 'item_reference', id }] },
  });
  t.equal(again.status, 400, 'not remembered');
  const prev = await call(g.url + '/v1/responses', {
    headers: bearer(KEYS.messages),
    json: { model: 'claude-model', input: 'Hi', previous_response_id: first.json.id },
  });
  t.equal(prev.status, 400, 'previous_response_id stays a 400');
});
