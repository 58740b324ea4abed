/**
 * Claude Code's requests as wire-notes describe them (Claude Code 2.1.197), replayed through a
 * Messages-style group (native) and a Responses-style group (converted to a Responses upstream):
 * `HEAD /` without a key, `POST /v1/messages?beta=true` with its headers (`anthropic-beta` list,
 * `x-app`, `x-claude-code-session-id`, `anthropic-dangerous-direct-browser-access`), a streamed
 * body with extended thinking (budget 31999 of max_tokens 32000), `context_management`,
 * `metadata.user_id`, cached system blocks and its tool shapes; a tool round trip with the
 * thinking replayed; count_tokens?beta=true. Sent through @anthropic-ai/sdk 0.x's beta API, the
 * way Claude Code sends them.
 */
import t from 'tap';
import Anthropic0 from 'anthropic0';
import { baseConfig, call, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';

let g: TestGateway;
t.before(async () => {
  g = await startGateway(baseConfig());
});
t.teardown(() => g.close());

const SESSION = '5b0d1c2e-8d4f-4f5e-9a51-0c8f2a6e7d31';
const BETAS = [
  'claude-code-20250219',
  'interleaved-thinking-2025-05-14',
  'context-management-2025-06-27',
  'prompt-caching-scope-2026-01-05',
];

const client = (key: string) =>
  new Anthropic0({
    apiKey: key,
    baseURL: g.url,
    maxRetries: 0,
    defaultHeaders: { 'x-app': 'cli', 'x-claude-code-session-id': SESSION, 'anthropic-dangerous-direct-browser-access': 'true' },
  });

const schema = (props: Record<string, unknown>, required: string[]) => ({
  $schema: 'http://json-schema.org/draft-07/schema#',
  type: 'object',
  properties: props,
  required,
  additionalProperties: false,
});
/** Tools in Claude Code's shape (JSON Schema draft-07, no additional properties). */
const TOOLS = [
  {
    name: 'Bash',
    description: 'Executes a bash command.',
    input_schema: schema({ command: { type: 'string', description: 'The command' }, timeout: { type: 'number' } }, ['command']),
  },
  {
    name: 'Read',
    description: 'Reads a file.',
    input_schema: schema({ file_path: { type: 'string' }, offset: { type: 'number' }, limit: { type: 'number' } }, ['file_path']),
  },
  {
    name: 'Edit',
    description: 'Edits a file.',
    input_schema: schema(
      {
        file_path: { type: 'string' },
        old_string: { type: 'string' },
        new_string: { type: 'string' },
        replace_all: { type: 'boolean', default: false },
      },
      ['file_path', 'old_string', 'new_string'],
    ),
  },
  {
    name: 'TodoWrite',
    description: 'Updates the todo list.',
    input_schema: schema(
      {
        todos: {
          type: 'array',
          items: {
            type: 'object',
            properties: { content: { type: 'string' }, status: { type: 'string', enum: ['pending', 'in_progress', 'completed'] } },
          },
        },
      },
      ['todos'],
    ),
  },
];

/** The body fields Claude Code sends on every turn. */
const turn = (model: string, messages: unknown[]) => ({
  model,
  max_tokens: 32000,
  thinking: { type: 'enabled' as const, budget_tokens: 31999 },
  system: [
    {
      type: 'text' as const,
      text: "You are Claude Code, Anthropic's official CLI for Claude.",
      cache_control: { type: 'ephemeral' as const },
    },
    { type: 'text' as const, text: 'Answer briefly. Use the tools when needed.', cache_control: { type: 'ephemeral' as const } },
  ],
  tools: TOOLS,
  messages,
  metadata: { user_id: `user_abc_account__session_${SESSION}` },
  context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
  betas: BETAS,
  stream: true as const,
});

const GROUPS = [
  { name: 'Messages-style group (native)', key: KEYS.messages, model: 'claude-model', upstream: '/v1/messages', converted: false },
  {
    name: 'Responses-style group (converted to Responses)',
    key: KEYS.responses,
    model: 'gpt-model',
    upstream: '/v1/responses',
    converted: true,
  },
];

t.test('HEAD / answers 200 without a key', async (t) => {
  const r = await fetch(g.url + '/', { method: 'HEAD' });
  t.equal(r.status, 200);
});

for (const grp of GROUPS) {
  t.test(`${grp.name}: a tool round trip with thinking`, async (t) => {
    const mock = g.gw.mocks.get('mock')!;
    const before = mock.requests.length;
    const c = client(grp.key);
    const user = { role: 'user' as const, content: [{ type: 'text' as const, text: 'List the files in this directory.' }] };
    const first = await c.beta.messages.stream(turn(grp.model, [user]) as any).finalMessage();
    t.equal(first.stop_reason, 'tool_use', 'the model asks for a tool');
    const use: any = first.content.find((b: any) => b.type === 'tool_use');
    t.equal(use?.name, 'Bash', "Claude Code's first tool");
    t.type(use?.input?.command, 'string', 'with its input');
    t.ok(first.usage.input_tokens > 0 && first.usage.output_tokens > 0, 'usage');
    const thinking: any[] = first.content.filter((b: any) => b.type === 'thinking');
    if (grp.converted)
      t.equal(thinking.length, 0, 'no thinking block: an OpenAI reasoning item could not be replayed to Anthropic (docs/conversion.md)');
    else t.ok(thinking.length === 1 && thinking[0].signature, 'a signed thinking block');

    const second = await c.beta.messages
      .stream(
        turn(grp.model, [
          user,
          { role: 'assistant', content: first.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'README.md\npackage.json' }] },
        ]) as any,
      )
      .finalMessage();
    t.equal(second.stop_reason, 'end_turn', 'then answers');
    t.match((second.content.find((b: any) => b.type === 'text') as any)?.text, /^This is a mock reply/);

    const seen = mock.requests.slice(before).filter((r) => r.path.startsWith(grp.upstream));
    t.equal(seen.length, 2, 'two upstream calls');
    const [up1, up2] = seen.map((r) => JSON.parse(r.body));
    if (grp.converted) {
      t.same(up1.reasoning, { effort: 'high' }, 'thinking budget 31999 → reasoning effort high');
      for (const k of ['context_management', 'metadata', 'thinking', 'betas']) t.notOk(k in up1, `${k} dropped in conversion`);
      t.equal(
        up1.instructions,
        "You are Claude Code, Anthropic's official CLI for Claude.\n\nAnswer briefly. Use the tools when needed.",
        'system blocks → instructions',
      );
      t.same(
        up1.tools.map((x: any) => x.name),
        TOOLS.map((x) => x.name),
        'tools converted',
      );
      t.ok(
        up2.input.some((i: any) => i.type === 'function_call_output' && i.call_id === use.id),
        'the tool result went back',
      );
    } else {
      t.equal(seen[0].path, '/v1/messages', 'routed on the path (?beta=true accepted, not needed upstream)');
      t.same(up1.context_management, turn('m', []).context_management, 'context_management passed through');
      t.same(up1.thinking, { type: 'enabled', budget_tokens: 31999 });
      t.equal(seen[0].headers['anthropic-beta'], BETAS.join(','), 'anthropic-beta forwarded');
      t.equal(up2.messages[1].content[0].type, 'thinking', 'the signed thinking replayed first in the assistant turn');
    }
  });
}

t.test('count_tokens?beta=true: counted on the Messages-style group, 404 on the Responses-style one', async (t) => {
  const body = {
    model: 'claude-model',
    messages: [{ role: 'user', content: 'How many tokens is this?' }],
    tools: TOOLS,
    system: 'You are Claude Code.',
  };
  const ok = await client(KEYS.messages).beta.messages.countTokens({ ...body, betas: BETAS } as any);
  t.ok(ok.input_tokens > 0, `Messages-style: ${ok.input_tokens}`);
  const r = await call(g.url + '/v1/messages/count_tokens?beta=true', {
    headers: { 'x-api-key': KEYS.responses, 'anthropic-version': '2023-06-01', 'anthropic-beta': BETAS.join(',') },
    json: { ...body, model: 'gpt-model' },
  });
  t.equal(r.status, 404, 'Responses-style: 404 (the contract), so Claude Code falls back');
  t.equal(r.json?.error?.type, 'not_found_error');
  t.equal(r.headers.get('x-should-retry'), 'false', 'and it is told not to retry');
});

t.test('a bad key: 401 with x-should-retry: false, so Claude Code stops at once', async (t) => {
  let attempts = 0;
  const c = new Anthropic0({
    apiKey: 'sk-' + '9'.repeat(64),
    baseURL: g.url,
    fetch: ((url: any, init: any) => {
      attempts++;
      return fetch(url, init);
    }) as typeof fetch,
  });
  const err: any = await c.beta.messages.create(turn('claude-model', [{ role: 'user', content: 'hi' }]) as any).catch((e: unknown) => e);
  t.equal(err.status, 401);
  t.equal(attempts, 1, "one attempt with the SDK's default retries");
});
