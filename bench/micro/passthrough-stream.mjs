// A passthrough Chat stream as the gateway reads it, in isolation: the bench's streamed answer (a
// role chunk, 20 content chunks, a finish chunk, the usage chunk, [DONE]) parsed into byte blocks
// by the checkout's SSE parser and handed to the passthrough translator (its tap reads usage, finish
// reasons and text length), then its closing. CPU µs per stream, best and median of 5 rounds;
// MICRO_N=n: warm up, do n streams and exit (for bench/micro/count.mjs).
//   node bench/micro/passthrough-stream.mjs [CHECKOUT]
//   node bench/micro/count.mjs --n 5000 bench/micro/passthrough-stream.mjs /path/to/other/checkout
// (not a test; a guide for per-request work)
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const root = path.resolve(process.argv[2] ?? '.');
const load = (f) => import(pathToFileURL(path.join(root, 'dist/core', f)).href);
const { passthrough } = await load('protocols/passthrough.js');
const { SseParser } = await load('sse.js');

const base = {
  id: 'chatcmpl-5e1bccd9a5306d9f65f54b060c5d0',
  object: 'chat.completion.chunk',
  created: 1795762136,
  model: 'bench-chat',
  service_tier: 'default',
  system_fingerprint: 'fp_mock',
};
const chunk = (choices, usage = null) => `data: ${JSON.stringify({ ...base, choices, usage })}\n\n`;
const delta = (d, finish = null) => chunk([{ index: 0, delta: d, logprobs: null, finish_reason: finish }]);
let text = delta({ role: 'assistant', content: '', refusal: null });
for (let i = 0; i < 20; i++) text += delta({ content: ` word${i}` });
text += delta({}, 'stop');
text += chunk([], {
  prompt_tokens: 12,
  completion_tokens: 20,
  total_tokens: 32,
  prompt_tokens_details: { cached_tokens: 0 },
  completion_tokens_details: { reasoning_tokens: 0 },
});
text += 'data: [DONE]\n\n';
// As the upstream's socket hands it over: a few chunks of bytes.
const bytes = Buffer.from(text);
const pieces = [];
for (let i = 0; i < bytes.length; i += 1400) pieces.push(bytes.subarray(i, i + 1400));

const conv = passthrough('openai-chat');
let sink = 0;
const one = () => {
  const parser = new SseParser();
  const tr = conv.stream({ model: 'bench-chat', requestId: 'r' });
  for (const p of pieces) for (const b of parser.feedBytes(p)) sink += typeof tr.block(b) === 'string' ? 0 : 1;
  tr.end();
  const c = tr.closing(() => ({ input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }));
  sink += c.length + (tr.usage()?.output ?? 0) + tr.outputChars();
};
for (let i = 0; i < 20000; i++) one();
if (process.env.MICRO_N) {
  for (let i = 0; i < Number(process.env.MICRO_N); i++) one();
  process.exit(sink > 0 ? 0 : 1);
}
const res = [];
for (let r = 0; r < 5; r++) {
  const u0 = process.cpuUsage();
  for (let i = 0; i < 20000; i++) one();
  const u = process.cpuUsage(u0);
  res.push((u.user + u.system) / 20000);
}
res.sort((a, b) => a - b);
console.log(`${root}: passthrough Chat stream (23 events) ${res[0].toFixed(2)} µs best of 5, median ${res[2].toFixed(2)} µs`);
