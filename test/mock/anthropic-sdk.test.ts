/** The real `@anthropic-ai/sdk` 1.x and 0.x (`anthropic0`) pointed straight at the mock. */
import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import Anthropic0 from 'anthropic0';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { CONFORMANCE } from './helpers.js';

let mock: MockServer;
t.before(async () => {
  mock = await startMockServer({ fixturesDir: CONFORMANCE });
});
t.teardown(() => mock.close());

const tools = [
  {
    name: 'get_weather',
    description: 'Weather',
    input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
  },
  { name: 'get_time', input_schema: { type: 'object' as const, properties: {} } },
];

type AnyClient = any;
const sdks: { name: string; make: () => AnyClient; E: any; v1: boolean }[] = [
  {
    name: '@anthropic-ai/sdk@1',
    make: () => new Anthropic({ apiKey: 'sk-ant-up', baseURL: mock.url, maxRetries: 0, timeout: 10_000 }),
    E: Anthropic,
    v1: true,
  },
  {
    name: 'anthropic0',
    make: () => new Anthropic0({ apiKey: 'sk-ant-up', baseURL: mock.url, maxRetries: 0, timeout: 10_000 }),
    E: Anthropic0,
    v1: false,
  },
];

for (const sdk of sdks) {
  t.test(sdk.name, async (t) => {
    const client = sdk.make();

    t.test('messages.create (text) and the headers the SDK sent', async (t) => {
      const m = await client.messages.create({
        model: 'claude-model',
        max_tokens: 512,
        system: 'Be brief.',
        messages: [{ role: 'user', content: 'Hello claude' }],
      });
      t.equal(m.type, 'message');
      t.equal(m.model, 'claude-model');
      t.match(m.id, /^msg_/);
      t.same(m.content, [{ type: 'text', text: 'This is a mock reply. You said: Hello claude' }]);
      t.equal(m.stop_reason, 'end_turn');
      t.match(m.usage, { input_tokens: 4, output_tokens: 9, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 });
      const rec = mock.requests[mock.requests.length - 1];
      t.equal(rec.path, '/v1/messages');
      if (sdk.v1) {
        t.equal(rec.headers.authorization, 'Bearer sk-ant-up');
        t.equal(rec.headers['anthropic-version'], '2026-10-21');
      } else {
        t.equal(rec.headers['x-api-key'], 'sk-ant-up');
        t.equal(rec.headers['anthropic-version'], '2023-06-01');
      }
    });

    t.test('messages.stream().finalMessage() (text, cache usage)', async (t) => {
      const s = client.messages.stream({
        model: 'claude-model#cache_read=100,cache_write=20',
        max_tokens: 512,
        messages: [{ role: 'user', content: 'Stream [[mock: words=10]]' }],
      });
      const texts: string[] = [];
      s.on('text', (d: string) => texts.push(d));
      const m = await s.finalMessage();
      t.equal(m.content[0].text, 'This is a mock reply. You said: Stream lorem ipsum');
      t.equal(texts.length, 10);
      t.match(m.usage, { input_tokens: 1, output_tokens: 10, cache_read_input_tokens: 100, cache_creation_input_tokens: 20 });
    });

    t.test('tool use: stream and create', async (t) => {
      const m = await client.messages
        .stream({
          model: 'claude-model',
          max_tokens: 512,
          tools,
          messages: [{ role: 'user', content: 'Weather and time [[mock: tool_calls=2]]' }],
        })
        .finalMessage();
      t.equal(m.stop_reason, 'tool_use');
      t.same(
        m.content.map((b: any) => [b.type, b.name, b.input]),
        [
          ['tool_use', 'get_weather', { city: 'mock' }],
          ['tool_use', 'get_time', {}],
        ],
      );
      t.match(m.content[0].id, /^toolu_/);
      // After the tool result the mock answers in text.
      const next = await client.messages.create({
        model: 'claude-model',
        max_tokens: 512,
        tools,
        messages: [
          { role: 'user', content: 'Weather?' },
          { role: 'assistant', content: [{ type: 'tool_use', id: m.content[0].id, name: 'get_weather', input: { city: 'mock' } }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: m.content[0].id, content: 'sunny' }] },
        ],
      });
      t.equal(next.stop_reason, 'end_turn');
      t.equal(next.content[0].text, 'This is a mock reply. You said: Weather?');
      // tool_choice none: text even on a user turn.
      const none = await client.messages.create({
        model: 'claude-model',
        max_tokens: 64,
        tools,
        tool_choice: { type: 'none' },
        messages: [{ role: 'user', content: 'x' }],
      });
      t.equal(none.content[0].type, 'text');
    });

    t.test('thinking with signature', async (t) => {
      const req = {
        model: 'claude-model',
        max_tokens: 2048,
        thinking: { type: 'enabled', budget_tokens: 1024 },
        messages: [{ role: 'user', content: 'Ponder' }],
      };
      const m = await client.messages.stream(req).finalMessage();
      t.equal(m.content[0].type, 'thinking');
      t.equal(m.content[0].thinking, 'Thinking about the request: Ponder. A short deterministic answer will do.');
      t.ok(m.content[0].signature.length > 40, 'signature accumulated');
      t.equal(m.content[1].type, 'text');
      t.equal(m.usage.output_tokens, 8 + 11);
      const n = await client.messages.create(req);
      t.equal(n.content[0].signature, m.content[0].signature, 'deterministic signature');
    });

    t.test('countTokens', async (t) => {
      const c = await client.messages.countTokens({
        model: 'claude-model',
        system: 'Be brief.',
        messages: [{ role: 'user', content: 'one two three' }],
      });
      t.same(c, { input_tokens: 5 });
      t.equal(mock.requests[mock.requests.length - 1].path, '/v1/messages/count_tokens');
    });

    t.test('HTTP errors surface as the proper error classes', async (t) => {
      const cases: [number, any][] = [
        [400, sdk.E.BadRequestError],
        [401, sdk.E.AuthenticationError],
        [429, sdk.E.RateLimitError],
        [500, sdk.E.InternalServerError],
        [529, sdk.v1 ? sdk.E.OverloadedError : sdk.E.InternalServerError],
      ];
      if (sdk.v1) cases.push([413, sdk.E.ContentTooLargeError], [503, sdk.E.ServiceUnavailableError]);
      for (const [status, cls] of cases) {
        const err = await client.messages
          .create({ model: `claude-model#status=${status}`, max_tokens: 64, messages: [{ role: 'user', content: 'x' }] })
          .catch((e: unknown) => e);
        t.ok(cls && err instanceof cls, `create ${status} → ${cls?.name}`);
        t.equal(err.status, status);
        t.match(err.requestID, /^req_/);
        const serr = await client.messages
          .stream({ model: 'claude-model', max_tokens: 64, messages: [{ role: 'user', content: `x [[mock: status=${status}]]` }] })
          .finalMessage()
          .catch((e: unknown) => e);
        t.ok(serr instanceof cls, `stream ${status} → ${cls?.name}`);
      }
      const rl = await client.messages
        .create({ model: 'claude-model#status=429,retry_after=4', max_tokens: 64, messages: [{ role: 'user', content: 'x' }] })
        .catch((e: any) => e);
      t.equal(rl.error.error.type, 'rate_limit_error');
      t.equal(rl.headers.get('retry-after'), '4');
      t.equal(rl.headers.get('anthropic-ratelimit-requests-remaining'), '0');
    });

    t.test('in-stream error and cut stream throw', async (t) => {
      const se = await client.messages
        .stream({ model: 'claude-model#stream_error=4', max_tokens: 64, messages: [{ role: 'user', content: 'x' }] })
        .finalMessage()
        .then(
          () => 'resolved',
          (e: unknown) => e,
        );
      t.ok(se instanceof sdk.E.APIError, 'stream_error → APIError');
      t.match(String((se as Error).message), /overloaded_error/);
      const cut = await client.messages
        .stream({ model: 'claude-model#cut_after=5', max_tokens: 64, messages: [{ role: 'user', content: 'x' }] })
        .finalMessage()
        .then(
          () => 'resolved',
          (e: unknown) => e,
        );
      t.ok(cut instanceof Error, 'cut_after → thrown');
      const cutBody = await client.messages
        .create({ model: 'claude-model#cut_after=30', max_tokens: 64, messages: [{ role: 'user', content: 'x' }] })
        .then(
          () => 'resolved',
          (e: unknown) => e,
        );
      t.ok(cutBody instanceof Error, 'non-stream cut_after → thrown');
    });

    t.test('replayed recording with thinking goes through finalMessage', async (t) => {
      const m = await client.messages
        .stream({
          model: 'x',
          max_tokens: 64,
          messages: [
            {
              role: 'user',
              content: '[[mock: replay=sse/anthropic/prism.tests-Fixtures-anthropic.stream-with-extended-thinking-1.sse chunk_delay=0]]',
            },
          ],
        })
        .finalMessage();
      t.equal(m.content[0].type, 'thinking');
      t.ok(m.content[0].signature.length > 0);
      t.equal(m.usage.output_tokens, 452);
    });
  });
}
