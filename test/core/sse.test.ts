import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { SseParser, formatEvent, formatJsonEvent, type SseBlock } from '../../core/sse.js';
import { CONFORMANCE } from '../helpers/gateway.js';
import { randomChunkings } from '../helpers/chunks.js';

function parseAll(chunks: (string | Uint8Array)[], flush = true): SseBlock[] {
  const p = new SseParser();
  const out: SseBlock[] = [];
  for (const c of chunks) out.push(...p.feed(c));
  out.push(...p.end(flush));
  return out;
}

const strip = (b: SseBlock) => ({ event: b.event, data: b.data, id: b.id, retry: b.retry });

t.test('fields, multi-line data, comments, ids and retry', async (t) => {
  const blocks = parseAll([': keepalive\n\nevent: a\ndata: 1\ndata:2\nid: 7\nretry: 150\n\ndata\n\nfoo: bar\n\n']);
  t.same(blocks.map(strip), [
    { event: undefined, data: undefined, id: undefined, retry: undefined },
    { event: 'a', data: '1\n2', id: '7', retry: 150 },
    { event: undefined, data: '', id: undefined, retry: undefined },
    { event: undefined, data: undefined, id: undefined, retry: undefined },
  ]);
});

t.test('CR, LF and CRLF line endings, CRLF split across chunks, BOM', async (t) => {
  const text = '\ufeffdata: a\r\n\r\ndata: b\r\rdata: c\n\n';
  const whole = parseAll([text]).map(strip);
  t.same(
    whole.map((b) => b.data),
    ['a', 'b', 'c'],
  );
  for (let i = 1; i < text.length; i++) {
    t.same(parseAll([text.slice(0, i), text.slice(i)]).map(strip), whole, `split at ${i}`);
  }
});

t.test('raw text of blocks reassembles the input exactly', async (t) => {
  const text = 'event: x\ndata: {"a":1}\n\n: comment\n\ndata: tail';
  const p = new SseParser();
  const blocks = p.feed(text);
  t.equal(blocks.map((b) => b.raw).join('') + p.pending, text);
  const flushed = p.end(true);
  t.equal(flushed.length, 1);
  t.equal(flushed[0].data, 'tail');
});

t.test('multi-byte UTF-8 split inside a character', async (t) => {
  const bytes = Buffer.from('data: héllo ✓ 世界\n\n', 'utf8');
  for (let i = 1; i < bytes.length; i++) {
    const b = parseAll([bytes.subarray(0, i), bytes.subarray(i)]);
    t.equal(b[0].data, 'héllo ✓ 世界', `split at byte ${i}`);
  }
});

t.test('serializer round-trips', async (t) => {
  t.equal(formatEvent('x', 'e'), 'event: e\ndata: x\n\n');
  t.equal(formatEvent('a\nb'), 'data: a\ndata: b\n\n');
  const f = formatJsonEvent({ q: 'a\nb' }, 'message_start');
  t.same(parseAll([f]).map(strip), [{ event: 'message_start', data: '{"q":"a\\nb"}', id: undefined, retry: undefined }]);
});

// Every recorded transcript, fed whole and split at every byte boundary, yields the same events
// and its blocks' raw text reassembles the file byte for byte.
const dirs = ['openai-chat', 'anthropic', 'openai-responses'];
for (const d of dirs) {
  const dir = path.join(CONFORMANCE, 'sse', d);
  for (const name of readdirSync(dir).filter((f) => f.endsWith('.sse'))) {
    t.test(`transcript ${d}/${name}`, async (t) => {
      const bytes = readFileSync(path.join(dir, name));
      const p = new SseParser();
      const whole = p.feed(bytes);
      t.equal(whole.map((b) => b.raw).join('') + p.pending, bytes.toString('utf8'), 'raw reassembles the bytes');
      t.ok(
        whole.some((b) => b.data !== undefined),
        'has events',
      );
      const expected = JSON.stringify([...whole, ...p.end(true)].map(strip));
      // One byte at a time makes every byte boundary a chunk boundary at once (O(n)).
      const oneByOne = parseAll([...bytes].map((b) => Uint8Array.of(b))).map(strip);
      t.equal(JSON.stringify(oneByOne), expected, 'one byte at a time');
      // Two chunks split at each boundary is O(n²): done for every transcript under 32 KB.
      if (bytes.length < 32 * 1024) {
        let bad = -1;
        for (let i = 1; i < bytes.length && bad < 0; i++) {
          if (JSON.stringify(parseAll([bytes.subarray(0, i), bytes.subarray(i)]).map(strip)) !== expected) bad = i;
        }
        t.equal(bad, -1, 'every two-chunk split parses identically');
      }
      let round = 0;
      for (const chunks of randomChunkings(bytes, bytes.length, 64, 20)) {
        round++;
        if (JSON.stringify(parseAll(chunks).map(strip)) !== expected) {
          t.fail(`random chunking round ${round}`);
          break;
        }
      }
    });
  }
}
