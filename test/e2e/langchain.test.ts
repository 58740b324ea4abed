/**
 * LangChain JS (`@langchain/openai` 1.5.8 — the newest on Node 20 — and `@langchain/anthropic`
 * 1.5.11) through every group kind each chat model can use, with default options: `invoke` and
 * `stream` driving a multi-step tool loop (the model calls a tool, LangChain's tool runs, the model
 * answers), usage non-zero at every step. ChatAnthropic reads input usage from `message_start`
 * only, so a converted Messages stream must report it there (the gateway's estimate until the
 * upstream's own figure arrives in `message_delta`).
 */
import t from 'tap';
import { ChatOpenAI } from '@langchain/openai';
import { ChatAnthropic } from '@langchain/anthropic';
import { tool } from '@langchain/core/tools';
import { AIMessage, HumanMessage, type AIMessageChunk, type BaseMessage } from '@langchain/core/messages';
import { z } from 'zod';
import { baseConfig, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';

let g: TestGateway;
t.before(async () => {
  g = await startGateway(baseConfig());
});
t.teardown(() => g.close());

const weather = tool(async ({ city }: { city: string }) => `Sunny in ${city}`, {
  name: 'weather',
  description: 'The weather in a city',
  schema: z.object({ city: z.string() }),
});

const chatOpenAI = (key: string, model: string, extra: Record<string, unknown> = {}) =>
  new ChatOpenAI({ model, apiKey: key, configuration: { baseURL: g.url + '/v1' }, ...extra });
const chatAnthropic = (key: string, model: string) => new ChatAnthropic({ model, apiKey: key, anthropicApiUrl: g.url });

const CASES: Array<{ name: string; model: () => ChatOpenAI | ChatAnthropic }> = [
  { name: 'ChatOpenAI → chat-only group (passthrough)', model: () => chatOpenAI(KEYS.chat, 'chat-model') },
  { name: 'ChatOpenAI → Messages-style group (converted)', model: () => chatOpenAI(KEYS.messages, 'claude-model') },
  { name: 'ChatOpenAI → Responses-style group', model: () => chatOpenAI(KEYS.responses, 'gpt-model') },
  {
    name: 'ChatOpenAI (Responses API) → Messages-style group (converted)',
    model: () => chatOpenAI(KEYS.messages, 'claude-model', { useResponsesApi: true }),
  },
  {
    name: 'ChatOpenAI (Responses API) → Responses-style group (native)',
    model: () => chatOpenAI(KEYS.responses, 'gpt-model', { useResponsesApi: true }),
  },
  { name: 'ChatAnthropic → Messages-style group (native)', model: () => chatAnthropic(KEYS.messages, 'claude-model') },
  { name: 'ChatAnthropic → Responses-style group (converted)', model: () => chatAnthropic(KEYS.responses, 'gpt-model') },
];

/** A tool loop as an agent runs it: call the model, run its tool calls, until it answers. */
async function loop(model: ChatOpenAI | ChatAnthropic, mode: 'invoke' | 'stream', question: string): Promise<AIMessage[]> {
  const bound = model.bindTools([weather]);
  const messages: BaseMessage[] = [new HumanMessage(question)];
  const steps: AIMessage[] = [];
  for (let i = 0; i < 4; i++) {
    let ai: AIMessage;
    if (mode === 'invoke') ai = await bound.invoke(messages);
    else {
      let acc: AIMessageChunk | undefined;
      for await (const chunk of await bound.stream(messages)) acc = acc ? acc.concat(chunk) : chunk;
      ai = acc as unknown as AIMessage;
    }
    steps.push(ai);
    messages.push(ai);
    if (!ai.tool_calls || ai.tool_calls.length === 0) break;
    for (const call of ai.tool_calls) messages.push(await weather.invoke({ ...call, type: 'tool_call' }));
  }
  return steps;
}

for (const c of CASES) {
  t.test(c.name, async (t) => {
    for (const mode of ['invoke', 'stream'] as const) {
      const steps = await loop(c.model(), mode, 'What is the weather in Paris?');
      t.equal(steps.length, 2, `${mode}: two steps (tool call, answer)`);
      t.equal(steps[0].tool_calls?.[0]?.name, 'weather', `${mode}: the model called the tool`);
      t.type(steps[0].tool_calls?.[0]?.args.city, 'string', `${mode}: with its arguments`);
      t.match(steps[1].text, /^This is a mock reply/, `${mode}: the answer after the tool result`);
      steps.forEach((s, i) => {
        t.ok((s.usage_metadata?.input_tokens ?? 0) > 0, `${mode}: step ${i + 1} input tokens (${s.usage_metadata?.input_tokens})`);
        t.ok((s.usage_metadata?.output_tokens ?? 0) > 0, `${mode}: step ${i + 1} output tokens (${s.usage_metadata?.output_tokens})`);
      });
    }
  });
}
