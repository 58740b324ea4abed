/** Responses end to end with openai 6.x: create, stream → finalResponse, models, errors. */
import t from 'tap';
import OpenAI from 'openai';
import { bearer, call, KEYS, responsesBody, startGateway, baseConfig, type TestGateway } from '../helpers/gateway.js';
import { sseText } from '../helpers/raw.js';

let g: TestGateway;
let client: OpenAI;
t.before(async () => {
  g = await startGateway(baseConfig());
  client = new OpenAI({ baseURL: g.url + '/v1', apiKey: KEYS.responses, maxRetries: 0 });
});
t.teardown(() => g.close());

t.test('responses.create and responses.stream().finalResponse()', async (t) => {
  const r = await client.responses.create({ model: 'gpt-model', input: 'Hello there' });
  t.equal(r.object, 'response');
  t.equal(r.status, 'completed');
  t.ok(r.output_text.length > 0);
  t.ok(r.usage!.input_tokens > 0 && r.usage!.output_tokens > 0);
  const s = client.responses.stream({ model: 'gpt-model', input: 'Stream please' });
  let deltas = '';
  s.on('response.output_text.delta', (e) => {
    deltas += e.delta;
  });
  const final = await s.finalResponse();
  t.equal(final.status, 'completed');
  t.equal(final.output_text, deltas);
  t.ok(final.usage!.output_tokens > 0);
});

t.test('function calls and reasoning in streams', async (t) => {
  const tools = [
    {
      type: 'function' as const,
      name: 'lookup',
      description: 'Look up',
      parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
      strict: false,
    },
  ];
  const final = await client.responses.stream({ model: 'gpt-model', input: 'find it', tools }).finalResponse();
  const fc = final.output.find((o) => o.type === 'function_call') as any;
  t.equal(fc?.name, 'lookup');
  t.match(fc?.id, /^fc_/);
  t.ok(fc?.call_id);
  t.doesNotThrow(() => JSON.parse(fc.arguments));
  const reasoning = await client.responses
    .stream({ model: 'gpt-model', input: 'think [[mock: thinking]]', reasoning: { effort: 'low', summary: 'auto' } })
    .finalResponse();
  t.equal(reasoning.output[0].type, 'reasoning');
});

t.test('stream frames have event: lines and no [DONE]', async (t) => {
  const raw = await sseText(g.url + '/v1/responses', {
    method: 'POST',
    headers: { ...bearer(KEYS.responses), 'content-type': 'application/json' },
    body: JSON.stringify(responsesBody({ stream: true })),
  });
  const frames = raw.text.trim().split('\n\n');
  t.ok(frames.every((f) => /^event: response\.\S+\ndata: /.test(f)));
  t.match(frames[0], /^event: response\.created/);
  t.match(frames.at(-1), /^event: response\.completed/);
  t.notMatch(raw.text, /\[DONE\]/);
});

t.test('previous_response_id is refused with 400 invalid_request_error', async (t) => {
  const err: any = await client.responses.create({ model: 'gpt-model', input: 'x', previous_response_id: 'resp_123' }).then(
    () => undefined,
    (e) => e,
  );
  t.equal(err?.status, 400);
  t.equal(err?.type, 'invalid_request_error');
  t.match(err?.message, /previous_response_id/);
});

t.test('models.list: Chat-style entries', async (t) => {
  const page = await client.models.list();
  t.same(
    page.data.map((m) => m.id),
    ['gpt-model', 'chat-model'],
  );
  t.match(page.data[0], { id: 'gpt-model', object: 'model', type: 'model', display_name: 'gpt-model', owned_by: 'mock' });
});

t.test('mid-stream failures are thrown by the SDK', async (t) => {
  const cut = await client.responses
    .stream({ model: 'gpt-model', input: 'x [[mock: cut_after=5 words=20]]' })
    .finalResponse()
    .then(
      () => undefined,
      (e) => e,
    );
  t.ok(cut instanceof OpenAI.APIError, "cut stream throws the SDK's APIError");
  const raw = await sseText(g.url + '/v1/responses', {
    method: 'POST',
    headers: { ...bearer(KEYS.responses), 'content-type': 'application/json' },
    body: JSON.stringify(responsesBody({ stream: true, input: 'x [[mock: cut_after=5 words=20]]' })),
  });
  t.match(raw.text, /event: error\ndata: \{"type":"error","sequence_number":\d+,"error":\{"type":"upstream_error"/);
  t.match(raw.text, /event: response\.failed\ndata: .*"status":"failed"/);
  const own = await client.responses
    .stream({ model: 'gpt-model', input: 'x [[mock: stream_error=8 words=20 chunk_delay=20]]' })
    .finalResponse()
    .then(
      () => undefined,
      (e) => e,
    );
  const ownRaw = await sseText(g.url + '/v1/responses', {
    method: 'POST',
    headers: { ...bearer(KEYS.responses), 'content-type': 'application/json' },
    body: JSON.stringify(responsesBody({ stream: true, input: 'x [[mock: stream_error=8 words=20 chunk_delay=20]]' })),
  });
  t.equal(ownRaw.status, 200, 'the stream had started');
  t.match(ownRaw.text, /output_text\.delta[\s\S]*event: error\n/, "the upstream's error event after content");
  t.ok(own instanceof OpenAI.APIError, "the upstream's own error event throws the SDK's APIError");
  const s500: any = await client.responses.create({ model: 'gpt-model', input: 'x [[mock: status=500]]' }).then(
    () => undefined,
    (e) => e,
  );
  t.equal(s500?.status, 502);
  t.equal(s500?.type, 'upstream_error');
});

t.test('Codex-style streaming request with x-api-key-less Bearer and a big body', async (t) => {
  const r = await call(g.url + '/v1/responses', {
    headers: bearer(KEYS.responses),
    json: responsesBody({ instructions: 'i'.repeat(80_000), input: [{ role: 'user', content: [{ type: 'input_text', text: 'hi' }] }] }),
  });
  t.equal(r.status, 200);
});
