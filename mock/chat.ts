/** OpenAI Chat Completions wire (`POST /v1/chat/completions`). */
import { formatEvent, formatJsonEvent } from '../core/sse.js';
import { num, textOf, textsOf, type Extracted, type Plan, type ToolDef } from './content.js';
import type { Directives } from './directives.js';

export interface StreamErrorCtx {
  model: string;
  seed: string;
  created: number;
  body: Record<string, any>;
  directives: Directives;
}

export function validateChat(body: Record<string, any>): string | undefined {
  if (typeof body.model !== 'string' || body.model === '') return 'you must provide a model parameter';
  if (!Array.isArray(body.messages)) return "Missing required parameter: 'messages'.";
  if (body.messages.length === 0)
    return "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.";
  return undefined;
}

export function extractChat(body: Record<string, any>): Extracted {
  const texts: string[] = [];
  let lastUserText = '';
  const msgs: any[] = body.messages;
  for (const m of msgs) {
    if (!m || typeof m !== 'object') continue;
    textsOf(m.content, texts);
    if (Array.isArray(m.tool_calls))
      for (const c of m.tool_calls) if (typeof c?.function?.arguments === 'string') texts.push(c.function.arguments);
    if (m.role === 'user') lastUserText = textOf(m.content);
  }
  const last = msgs[msgs.length - 1];
  const tools: ToolDef[] = [];
  if (Array.isArray(body.tools)) {
    for (const t of body.tools) {
      if (t && t.type === 'function' && t.function && typeof t.function.name === 'string')
        tools.push({ name: t.function.name, schema: t.function.parameters });
    }
  }
  let toolChoice = 'auto';
  const tc = body.tool_choice;
  if (tc === 'none' || tc === 'required' || tc === 'auto') toolChoice = tc;
  else if (tc && typeof tc === 'object' && typeof tc.function?.name === 'string') toolChoice = tc.function.name;
  return {
    texts,
    lastUserText,
    lastIsUser: last?.role === 'user',
    tools,
    toolChoice,
    parallel: body.parallel_tool_calls !== false,
    maxTokens: num(body.max_completion_tokens) ?? num(body.max_tokens),
    thinkingRequested: false,
  };
}

export function chatUsage(plan: Plan): Record<string, unknown> {
  const u = plan.usage;
  const prompt = u.input + u.cacheRead + u.cacheWrite;
  const promptDetails: Record<string, number> = { cached_tokens: u.cacheRead, audio_tokens: 0 };
  if (u.cacheWrite > 0) promptDetails.cache_write_tokens = u.cacheWrite;
  return {
    prompt_tokens: prompt,
    completion_tokens: u.output,
    total_tokens: prompt + u.output,
    prompt_tokens_details: promptDetails,
    completion_tokens_details: {
      reasoning_tokens: u.reasoning,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

function chatId(plan: { seed: string }): string {
  return `chatcmpl-${plan.seed.slice(0, 29)}`;
}

function finishOf(plan: Plan): string {
  return plan.toolCalls.length > 0 ? 'tool_calls' : plan.truncated ? 'length' : 'stop';
}

export function renderChat(plan: Plan): Record<string, unknown> {
  const message: Record<string, unknown> = {
    role: 'assistant',
    content: plan.toolCalls.length > 0 ? null : plan.text,
    refusal: null,
    annotations: [],
  };
  if (plan.thinking) message.reasoning_content = plan.thinking.text;
  if (plan.toolCalls.length > 0) {
    message.tool_calls = plan.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
  }
  return {
    id: chatId(plan),
    object: 'chat.completion',
    created: plan.created,
    model: plan.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishOf(plan) }],
    usage: chatUsage(plan),
    service_tier: 'default',
    system_fingerprint: 'fp_mock',
  };
}

export function chatFrames(plan: Plan): string[] {
  const includeUsage = plan.body.stream_options?.include_usage === true;
  const id = chatId(plan);
  const frames: string[] = [];
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) => {
    const c: Record<string, unknown> = {
      id,
      object: 'chat.completion.chunk',
      created: plan.created,
      model: plan.model,
      service_tier: 'default',
      system_fingerprint: 'fp_mock',
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    };
    if (includeUsage) c.usage = null;
    frames.push(formatJsonEvent(c));
  };
  const calls = plan.toolCalls;
  const header = (i: number) => ({ index: i, id: calls[i].id, type: 'function', function: { name: calls[i].name, arguments: '' } });
  if (calls.length > 0 && !plan.thinking) {
    // As recorded: the role, a null content and the first call's header share the first chunk.
    chunk({ role: 'assistant', content: null, tool_calls: [header(0)], refusal: null });
  } else {
    chunk({ role: 'assistant', content: calls.length > 0 ? null : '', refusal: null });
  }
  if (plan.thinking) for (const t of plan.thinking.chunks) chunk({ reasoning_content: t });
  for (let i = 0; i < calls.length; i++) {
    if (i > 0 || plan.thinking) chunk({ tool_calls: [header(i)] });
    for (const f of calls[i].fragments) chunk({ tool_calls: [{ index: i, function: { arguments: f } }] });
  }
  for (const t of plan.textChunks) chunk({ content: t });
  chunk({}, finishOf(plan));
  if (includeUsage && !plan.directives.noUsage) {
    frames.push(
      formatJsonEvent({
        id,
        object: 'chat.completion.chunk',
        created: plan.created,
        model: plan.model,
        service_tier: 'default',
        system_fingerprint: 'fp_mock',
        choices: [],
        usage: chatUsage(plan),
      }),
    );
  }
  if (!plan.directives.noDone) frames.push(formatEvent('[DONE]'));
  return frames;
}

/** The in-stream error as OpenAI sends it: a `data:` frame whose JSON has an `error` key, then the stream ends. */
export function chatStreamError(ctx: StreamErrorCtx): string[] {
  const d = ctx.directives;
  return [
    formatJsonEvent({
      error: {
        message: 'The server had an error while processing your request. Sorry about that!',
        type: d.errorType ?? 'server_error',
        param: null,
        code: d.errorCode ?? null,
      },
    }),
  ];
}
