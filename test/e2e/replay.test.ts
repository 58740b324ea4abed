/**
 * Every conformance transcript, served verbatim by the mock upstream, reaches the client byte for
 * byte on passthrough — except where the gateway's contract says otherwise, asserted exactly:
 * a Chat stream without a usage chunk gets one (estimated) before its `[DONE]`, and a stream whose
 * first event is an error becomes a real HTTP error.
 */
import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { baseConfig, bearer, CONFORMANCE, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';
import { sseText } from '../helpers/raw.js';

let g: TestGateway;
t.before(async () => {
  g = await startGateway(baseConfig());
});
t.teardown(() => g.close());

const targets = {
  'openai-chat': {
    path: '/v1/chat/completions',
    key: KEYS.chat,
    body: (d: string) => ({ model: 'chat-model', stream: true, messages: [{ role: 'user', content: d }] }),
  },
  anthropic: {
    path: '/v1/messages',
    key: KEYS.messages,
    body: (d: string) => ({ model: 'claude-model', max_tokens: 8192, stream: true, messages: [{ role: 'user', content: d }] }),
  },
  'openai-responses': { path: '/v1/responses', key: KEYS.responses, body: (d: string) => ({ model: 'gpt-model', stream: true, input: d }) },
} as const;

for (const [dir, target] of Object.entries(targets)) {
  for (const name of readdirSync(path.join(CONFORMANCE, 'sse', dir)).filter((f) => f.endsWith('.sse'))) {
    t.test(`${dir}/${name}`, async (t) => {
      const file = readFileSync(path.join(CONFORMANCE, 'sse', dir, name), 'utf8');
      const res = await sseText(g.url + target.path, {
        method: 'POST',
        headers: { ...bearer(target.key), 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
        body: JSON.stringify(target.body(`[[mock: replay=sse/${dir}/${name}]]`)),
      });
      if (/^event: error\n/.test(file) || (/^event: error\n/m.test(file) && !/response\.output_item\.added/.test(file))) {
        // The upstream failed before any content: nothing reached the client, so it gets a real
        // HTTP error (which fallback could retry) instead of a 200 stream holding only an error.
        t.ok(res.status === 503 || res.status === 429 || res.status === 502, `HTTP error instead of a stream (${res.status})`);
        t.ok(JSON.parse(res.text).error, 'error body');
        return;
      }
      t.equal(res.status, 200);
      if (dir === 'openai-chat' && !/"usage":\{/.test(file)) {
        const done = file.lastIndexOf('data: [DONE]');
        t.equal(res.text.slice(0, done), file.slice(0, done), 'everything before [DONE] byte for byte');
        t.equal(res.text.slice(-file.length + done), file.slice(done), 'the upstream [DONE] frame last');
        const inserted = res.text.slice(done, res.text.length - (file.length - done));
        const chunk = JSON.parse(inserted.replace(/^data: /, ''));
        t.same(chunk.choices, [], 'one usage chunk inserted before [DONE]');
        t.ok(chunk.usage.completion_tokens > 0, 'estimated from the streamed text');
        return;
      }
      t.equal(res.text, file, 'byte for byte');
    });
  }
}
