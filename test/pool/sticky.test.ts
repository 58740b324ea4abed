/**
 * Sticky sessions: the turns of one conversation stay on one account while it is healthy (a
 * Claude Code-shaped session through the Anthropic SDK, a Codex-shaped one through the OpenAI
 * SDK), move when it cools down, and two API keys sending the same conversations are never bound
 * together.
 */
import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { randomUUID } from 'node:crypto';
import { KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';
import { chatCall, cred, poolConfig } from './helpers.js';
import type { MockServer } from '../../mock/server.js';

let g: TestGateway;
const ACCOUNTS = ['a', 'b', 'c'];

t.before(async () => {
  g = await startGateway(
    poolConfig({
      st: { accounts: ACCOUNTS.map((name) => ({ name })) },
      two: { accounts: ACCOUNTS.map((name) => ({ name })) },
    }),
  );
});
t.teardown(() => g.close());

/** The account that received the mock's latest request. */
const lastAccount = (mock: MockServer, provider: string) => {
  const c = mock.requests[mock.requests.length - 1].credential;
  return ACCOUNTS.find((a) => cred(provider, a) === c)!;
};

t.test('20 turns of a Claude Code-shaped session stay on one account; it moves when that account cools down', async (t) => {
  const mock = g.gw.mocks.get('st')!;
  const session = randomUUID();
  const client = new Anthropic({
    apiKey: KEYS.messages,
    baseURL: g.url,
    maxRetries: 0,
    defaultHeaders: { 'x-claude-code-session-id': session, 'x-app': 'cli', 'anthropic-beta': 'claude-code-20250219' },
  });
  const messages: Anthropic.MessageParam[] = [];
  const used: string[] = [];
  const turn = async (i: number) => {
    messages.push({ role: 'user', content: [{ type: 'text', text: `Step ${i}: keep going`, cache_control: { type: 'ephemeral' } }] });
    const m = await client.messages
      .stream({
        model: 'st-model',
        max_tokens: 1024,
        stream: true,
        system: [{ type: 'text', text: 'You are Claude Code.' }],
        metadata: { user_id: `user_0123_account_4567_session_${session}` },
        messages,
      } as any)
      .finalMessage();
    messages.push({ role: 'assistant', content: m.content });
    used.push(lastAccount(mock, 'st'));
  };
  for (let i = 0; i < 20; i++) await turn(i);
  t.equal(new Set(used).size, 1, `one account for all 20 turns (${used[0]})`);
  // The bound account rate-limits: the session moves (transparently) and stays on its new account.
  const first = used[0];
  mock.script(cred('st', first), { next: ['status=429 retry_after=30'] });
  used.length = 0;
  for (let i = 20; i < 26; i++) await turn(i);
  t.not(used[0], first, 'moved off the cooling account');
  t.equal(new Set(used).size, 1, 'and the next turns stay together on the new one');
});

t.test('20 turns of a Codex-shaped session stay on one account', async (t) => {
  const mock = g.gw.mocks.get('st')!;
  const session = randomUUID();
  const client = new OpenAI({ apiKey: KEYS.responses, baseURL: g.url + '/v1', maxRetries: 0 });
  const input: any[] = [];
  const used: string[] = [];
  for (let i = 0; i < 20; i++) {
    input.push({ type: 'message', role: 'user', content: [{ type: 'input_text', text: `Codex step ${i}` }] });
    const r = await client.responses
      .stream(
        {
          model: 'st-model',
          instructions: 'You are Codex.',
          input,
          store: false,
          prompt_cache_key: session,
          reasoning: { effort: 'low', summary: 'auto' },
          include: ['reasoning.encrypted_content'],
        } as any,
        { headers: { 'session-id': session, originator: 'codex_exec' } },
      )
      .finalResponse();
    for (const item of r.output as any[])
      if (item.type === 'message')
        input.push({ role: 'assistant', content: item.content.map((c: any) => ({ type: 'output_text', text: c.text })) });
    used.push(lastAccount(mock, 'st'));
  }
  t.equal(new Set(used).size, 1, `one account for all 20 turns (${used[0]})`);
});

t.test('two keys sending identical conversations are not bound together', async (t) => {
  const mock = g.gw.mocks.get('two')!;
  let differ = 0;
  for (let conv = 0; conv < 12; conv++) {
    const byKey: string[][] = [];
    for (const key of [KEYS.chat, KEYS.custom]) {
      const turns: string[] = [];
      for (let turn = 0; turn < 3; turn++) {
        const r = await chatCall(g.url, key, 'two-model', `Identical conversation ${conv}`);
        t.equal(r.status, 200);
        turns.push(lastAccount(mock, 'two'));
      }
      t.equal(new Set(turns).size, 1, `conversation ${conv} sticks within one key`);
      byKey.push(turns);
    }
    if (byKey[0][0] !== byKey[1][0]) differ++;
  }
  // Bound together, every conversation would share its account; independent, about 2 in 3 differ.
  t.ok(differ > 0, `${differ} of 12 identical conversations went to different accounts for the two keys`);
});
