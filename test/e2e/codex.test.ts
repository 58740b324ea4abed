/**
 * The real Codex CLI (0.169.0, `codex exec`) with its default configuration plus a custom model
 * provider pointing at the gateway, through every group kind it can use: a Responses-style group
 * on a Responses upstream (passthrough), a Responses-style group whose model sits on an
 * Anthropic (Messages-only) upstream, a Messages-style group, and a Responses-style group whose
 * model sits on a Chat Completions upstream (all three converted). Each run does a
 * tool round trip the mock scripts (`call=` / `args=`): the model asks for `exec_command`, Codex
 * runs the command in its sandbox and sends the output back, the model answers. Codex always sends
 * its `multi_agent_v1` namespace tool and the built-in `web_search` tool (wire-notes), so the
 * converted runs prove both are accepted; on the Anthropic upstream the answer also runs a web
 * search, which Codex shows as its own web_search item.
 */
import t from 'tap';
import { baseConfig, bearer, call, startGateway, type TestGateway } from '../helpers/gateway.js';
import { b64, items, killCodex, runCodex, sandboxed, type CodexRun } from '../helpers/codex.js';
import type { MockRequestRecord } from '../../mock/server.js';

const hex = (n: number) => `sk-${n.toString(16).padStart(64, '0')}`;
const K = { responses: hex(0xc0de1), anthropic: hex(0xc0de2), messages: hex(0xc0de3), chat: hex(0xc0de4) };

// Six Codex runs, each bounded at 90 s: room beyond tap's default file timeout on a loaded machine.
t.setTimeout(600_000);

let g: TestGateway;
t.before(async () => {
  const cfg = baseConfig();
  cfg.providers['claude-api'] = { kind: 'mock', protocols: ['anthropic-messages'] };
  cfg.providers['chat-api'] = { kind: 'mock', protocols: ['openai-chat'] };
  cfg.models['codex-open'] = { provider: 'chat-api', price: { input: 0.5, output: 1.5 } };
  cfg.groups['codex-chat'] = { kind: 'responses', models: ['codex-open'] };
  cfg.models['codex-gpt'] = { provider: 'mock', price: { input: 1.25, output: 10 } };
  cfg.models['codex-claude'] = { provider: 'claude-api', price: { input: 3, output: 15 } };
  cfg.models['codex-sonnet'] = { provider: 'mock', price: { input: 3, output: 15 } };
  cfg.groups['codex-responses'] = { kind: 'responses', models: ['codex-gpt'] };
  cfg.groups['codex-anthropic'] = { kind: 'responses', models: ['codex-claude'] };
  cfg.groups['codex-messages'] = { kind: 'messages', models: ['codex-sonnet'] };
  cfg.users.coder = { balance: 100, concurrency: 4 };
  cfg.keys.push(
    { key: K.responses, name: 'codex-responses', user: 'coder', group: 'codex-responses' },
    { key: K.anthropic, name: 'codex-anthropic', user: 'coder', group: 'codex-anthropic' },
    { key: K.messages, name: 'codex-messages', user: 'coder', group: 'codex-messages' },
    { key: K.chat, name: 'codex-chat', user: 'coder', group: 'codex-chat' },
  );
  g = await startGateway(cfg);
  t.comment(
    (await sandboxed())
      ? 'Codex runs tool commands in its own sandbox'
      : 'Codex\'s sandbox cannot run here (no user namespaces): runs use sandbox_mode = "danger-full-access"',
  );
});
t.teardown(async () => {
  killCodex();
  await g.close();
});

const MARKER = 'hello-from-codex';
const prompt = (extra = '') => `Run the greeting command. [[mock: call=exec_command args=${b64({ cmd: `echo ${MARKER}` })}${extra}]]`;

/** What every run must show: a successful command with its output, a final answer, usage. */
function assertRoundTrip(t: Pick<typeof import('tap').default, 'equal' | 'ok' | 'match' | 'same'>, run: CodexRun): void {
  t.equal(run.timedOut, false, 'finished in time');
  t.equal(run.code, 0, `codex exec exits 0${run.code === 0 ? '' : `: ${run.stderr.slice(-2000)}`}`);
  const cmd = items(run, 'command_execution');
  t.equal(cmd.length, 1, 'one command ran');
  t.match(cmd[0]?.command, new RegExp(`echo ${MARKER}`), 'the command the model asked for');
  t.equal(cmd[0]?.exit_code, 0, 'it succeeded');
  t.match(cmd[0]?.aggregated_output, new RegExp(MARKER), 'and printed its output');
  const answer = items(run, 'agent_message');
  t.equal(answer.length, 1, 'one final answer');
  t.match(answer[0]?.text, /^This is a mock reply/, "the model's text after the tool result");
  t.ok(
    run.events.every((e) => e.type !== 'turn.failed' && e.type !== 'error'),
    'no failure events',
  );
  const done = run.events.find((e) => e.type === 'turn.completed');
  t.ok(done?.usage?.input_tokens > 0 && done?.usage?.output_tokens > 0, 'Codex reports usage');
}

function bodies(records: MockRequestRecord[], path: string): any[] {
  return records.filter((r) => r.path.startsWith(path)).map((r) => JSON.parse(r.body));
}

async function usageOf(key: string) {
  return (await call(g.url + '/v1/usage', { headers: bearer(key) })).json;
}

t.test('Responses-style group on a Responses upstream: passthrough', async (t) => {
  const mock = g.gw.mocks.get('mock')!;
  const before = mock.requests.length;
  const run = await runCodex({ gatewayUrl: g.url, apiKey: K.responses, model: 'codex-gpt', prompt: prompt() });
  assertRoundTrip(t, run);
  const sent = bodies(mock.requests.slice(before), '/v1/responses');
  t.equal(sent.length, 2, 'two model calls: the tool call, then the answer');
  t.ok(
    sent[0].tools.some((x: any) => x.type === 'namespace') && sent[0].tools.some((x: any) => x.type === 'web_search'),
    "Codex's namespace and web_search tools reach the upstream as sent",
  );
  t.same(sent[0].include, ['reasoning.encrypted_content'], 'include passes through');
  t.equal(sent[0].store, false);
  const output = sent[1].input.find((i: any) => i.type === 'function_call_output');
  t.match(output?.output, new RegExp(MARKER), 'the command output went back to the model');
  const u = await usageOf(K.responses);
  t.equal(u.usage.total.requests, 2, 'two requests billed');
  t.ok(u.usage.total.input_tokens > 0 && u.usage.total.output_tokens > 0, 'with their tokens');
});

t.test('Responses-style group on an Anthropic upstream: converted, web search included', async (t) => {
  const mock = g.gw.mocks.get('claude-api')!;
  const before = mock.requests.length;
  const run = await runCodex({ gatewayUrl: g.url, apiKey: K.anthropic, model: 'codex-claude', prompt: prompt(' web_search=gateway+docs') });
  assertRoundTrip(t, run);
  const sent = bodies(mock.requests.slice(before), '/v1/messages');
  t.equal(sent.length, 2, 'two Messages calls upstream');
  const names = sent[0].tools.map((x: any) => x.name);
  t.ok(names.includes('exec_command'), 'function tools');
  t.ok(
    names.some((n: string) => n.startsWith('multi_agent_v1__')),
    `the namespace flattened (${names.filter((n: string) => n.includes('__')).join(', ')})`,
  );
  t.ok(
    sent[0].tools.some((x: any) => x.type === 'web_search_20250305'),
    'web_search → Anthropic web search',
  );
  for (const k of ['include', 'store', 'prompt_cache_key', 'client_metadata', 'reasoning'])
    t.notOk(k in sent[0], `${k} not sent to Anthropic`);
  const results = sent[1].messages
    .flatMap((m: any) => (Array.isArray(m.content) ? m.content : []))
    .filter((b: any) => b.type === 'tool_result');
  t.equal(results.length, 1, 'the tool result went back');
  t.match(JSON.stringify(results[0].content), new RegExp(MARKER), 'with the command output');
  const searches = items(run, 'web_search');
  t.equal(searches.length, 1, 'Codex shows the search Anthropic ran');
  t.match(JSON.stringify(searches[0]), /gateway docs/, 'with its query');
  const u = await usageOf(K.anthropic);
  t.equal(u.usage.total.requests, 2, 'two requests billed');
});

t.test('Messages-style group: converted to Messages', async (t) => {
  const mock = g.gw.mocks.get('mock')!;
  const before = mock.requests.length;
  const run = await runCodex({ gatewayUrl: g.url, apiKey: K.messages, model: 'codex-sonnet', prompt: prompt() });
  assertRoundTrip(t, run);
  const sent = bodies(mock.requests.slice(before), '/v1/messages');
  t.equal(sent.length, 2, 'two Messages calls upstream');
  t.ok(
    sent[0].tools.some((x: any) => x.name === 'multi_agent_v1__spawn_agent'),
    'namespace flattened',
  );
  t.ok(
    sent[1].messages.some(
      (m: any) => m.role === 'assistant' && m.content.some((b: any) => b.type === 'tool_use' && b.name === 'exec_command'),
    ),
    'the call replayed as tool_use',
  );
  const u = await usageOf(K.messages);
  t.equal(u.usage.total.requests, 2, 'two requests billed');
  t.ok(u.usage.total.input_tokens > 0, 'input tokens billed');
});

t.test('Responses-style group on a Chat Completions upstream: converted, web_search dropped', async (t) => {
  const mock = g.gw.mocks.get('chat-api')!;
  const before = mock.requests.length;
  const run = await runCodex({ gatewayUrl: g.url, apiKey: K.chat, model: 'codex-open', prompt: prompt() });
  assertRoundTrip(t, run);
  const sent = bodies(mock.requests.slice(before), '/v1/chat/completions');
  t.equal(sent.length, 2, 'two Chat calls upstream');
  const names = sent[0].tools.map((x: any) => x.function.name);
  t.ok(names.includes('multi_agent_v1__wait_agent'), 'namespace flattened');
  t.notOk(names.includes('web_search'), 'web_search dropped (Chat has no provider-side search)');
  t.ok(
    sent[1].messages.some((m: any) => m.role === 'tool' && String(m.content).includes(MARKER)),
    'the command output went back as a tool message',
  );
});

t.test('a call to a namespaced tool reaches Codex with its namespace and its output goes back', async (t) => {
  const mock = g.gw.mocks.get('claude-api')!;
  const before = mock.requests.length;
  // close_agent of the multi_agent_v1 namespace, for an agent id that does not exist: Codex
  // routes the call to its multi-agent tool, which answers with an error the model then reads.
  const run = await runCodex({
    gatewayUrl: g.url,
    apiKey: K.anthropic,
    model: 'codex-claude',
    prompt: `Close the agent. [[mock: call=multi_agent_v1__close_agent args=${b64({ target: 'nobody' })}]]`,
  });
  t.equal(run.code, 0, `codex exec exits 0${run.code === 0 ? '' : `: ${run.stderr.slice(-2000)}`}`);
  t.match(items(run, 'agent_message')[0]?.text, /^This is a mock reply/, 'the final answer');
  const sent = bodies(mock.requests.slice(before), '/v1/messages');
  t.equal(sent.length, 2, 'the call, then the answer');
  const turn = sent[1].messages;
  const use = turn.flatMap((m: any) => (Array.isArray(m.content) ? m.content : [])).find((b: any) => b.type === 'tool_use');
  t.equal(use?.name, 'multi_agent_v1__close_agent', 'replayed under its flat name');
  const result = turn.flatMap((m: any) => (Array.isArray(m.content) ? m.content : [])).find((b: any) => b.type === 'tool_result');
  t.equal(result?.tool_use_id, use?.id, 'answered');
  t.match(JSON.stringify(result?.content), /invalid agent id nobody/, "by Codex's own multi-agent tool (it understood the namespace)");
});
