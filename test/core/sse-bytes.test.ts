/**
 * The SSE parser's byte mode (what the stream path uses): the same blocks as the text mode for
 * every transcript however it is chunked, blocks whose bytes are exactly the input's, and the
 * cases a byte scanner gets wrong — CR/LF/CRLF framing with the CRLF split across chunks, a BOM
 * split across chunks, multi-byte UTF-8 split inside a character, blocks spanning many chunks.
 */
import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { SseParser, type SseBlock, type SseBytesBlock } from '../../core/sse.js';
import { CONFORMANCE } from '../helpers/gateway.js';
import { randomChunkings } from '../helpers/chunks.js';

const strip = (b: SseBlock) => ({ event: b.event, data: b.data, id: b.id, retry: b.retry });

function textBlocks(input: Buffer | string, flush = true): SseBlock[] {
  const p = new SseParser();
  return [...p.feed(input), ...p.end(flush)];
}

/** What passthrough forwarded before the byte mode: the text mode's raw blocks under the same chunking. */
function textRaw(chunks: Uint8Array[]): string {
  const p = new SseParser();
  const out: SseBlock[] = [];
  for (const c of chunks) out.push(...p.feed(c));
  out.push(...p.end(true));
  return out.map((b) => b.raw).join('');
}

/** Byte mode over `chunks`; also returns the bytes of every block, in order. */
function byteBlocks(chunks: Uint8Array[], flush = true): { blocks: SseBytesBlock[]; bytes: Buffer } {
  const p = new SseParser();
  const blocks: SseBytesBlock[] = [];
  for (const c of chunks) blocks.push(...p.feedBytes(c));
  blocks.push(...p.endBytes(flush));
  return { blocks, bytes: Buffer.concat(blocks.map((b) => b.bytes)) };
}

const splits = (bytes: Buffer, i: number) => [bytes.subarray(0, i), bytes.subarray(i)];

t.test('fields, multi-line data, comments, ids and retry read as in text mode', async (t) => {
  const text = ': keepalive\n\nevent: a\ndata: 1\ndata:2\nid: 7\nretry: 150\n\ndata\n\nfoo: bar\n\nid: x\0y\nretry: 1a\ndata: z\n\n';
  const { blocks } = byteBlocks([Buffer.from(text)]);
  t.same(blocks.map(strip), textBlocks(text).map(strip));
  t.same(blocks.map(strip), [
    { event: undefined, data: undefined, id: undefined, retry: undefined },
    { event: 'a', data: '1\n2', id: '7', retry: 150 },
    { event: undefined, data: '', id: undefined, retry: undefined },
    { event: undefined, data: undefined, id: undefined, retry: undefined },
    { event: undefined, data: 'z', id: undefined, retry: undefined },
  ]);
  t.equal(blocks[1].dataBuf!.toString('utf8', blocks[1].dataStart, blocks[1].dataEnd), '1\n2', 'multi-line data is scannable in place');
});

t.test('CR, LF and CRLF framing, split at every byte: same blocks, same bytes', async (t) => {
  const text = 'data: a\r\n\r\nevent: e\rdata: b\r\rdata: c\n\ndata: d\r\n\ndata: e\n\r\n';
  const bytes = Buffer.from(text);
  const expected = textBlocks(text).map(strip);
  t.same(
    expected.map((b) => b.data),
    ['a', 'b', 'c', 'd', 'e'],
  );
  for (let i = 0; i <= bytes.length; i++) {
    const { blocks, bytes: out } = byteBlocks(splits(bytes, i));
    t.same(blocks.map(strip), expected, `split at ${i}`);
    t.equal(out.toString(), textRaw(splits(bytes, i)), `split at ${i}: the blocks' bytes are what the text mode forwarded`);
    // Only the LF of a final CRLF split from its CR is in no block (in either mode: no block follows).
    if (i !== bytes.length - 1) t.equal(out.toString(), text, `split at ${i}: the blocks' bytes are the input`);
  }
  const bytewise = [...bytes].map((b) => Uint8Array.of(b));
  const one = byteBlocks(bytewise);
  t.same(one.blocks.map(strip), expected, 'one byte at a time');
  t.equal(one.bytes.toString(), textRaw(bytewise));
});

t.test('a leading BOM is dropped like the text mode drops it, wherever the chunks split it', async (t) => {
  const bytes = Buffer.from('\ufeffdata: x\n\ndata: \ufeffy\n\n');
  for (let i = 0; i <= bytes.length; i++) {
    const { blocks, bytes: out } = byteBlocks(splits(bytes, i));
    t.same(
      blocks.map((b) => b.data),
      ['x', '\ufeffy'],
      `split at ${i}`,
    );
    t.equal(out.toString(), 'data: x\n\ndata: \ufeffy\n\n');
    t.same(
      blocks.map((b) => b.raw),
      textBlocks(bytes).map((b) => b.raw),
      'raw as in text mode',
    );
  }
});

t.test('multi-byte UTF-8 split inside a character (data and event names)', async (t) => {
  const bytes = Buffer.from('event: é✓\ndata: héllo ✓ 世界 😀\n\n', 'utf8');
  for (let i = 1; i < bytes.length; i++) {
    const { blocks, bytes: out } = byteBlocks(splits(bytes, i));
    t.equal(blocks.length, 1);
    t.equal(blocks[0].data, 'héllo ✓ 世界 😀', `split at byte ${i}`);
    t.equal(blocks[0].event, 'é✓');
    t.ok(out.equals(bytes));
  }
});

t.test('a block spanning many chunks; blocks already handed out keep their bytes', async (t) => {
  const big = 'x'.repeat(50_000);
  const text = `data: a\n\ndata: ${big}\n\ndata: b\n\n`;
  const bytes = Buffer.from(text);
  const p = new SseParser();
  const got: SseBytesBlock[] = [];
  const copies: string[] = [];
  for (let i = 0; i < bytes.length; i += 333) {
    for (const b of p.feedBytes(bytes.subarray(i, i + 333))) {
      got.push(b);
      copies.push(b.bytes.toString());
    }
  }
  got.push(...p.endBytes(true));
  t.same(
    got.map((b) => b.data),
    ['a', big, 'b'],
  );
  t.same(
    got.map((b) => b.bytes.toString()),
    copies,
    'views stay intact while the parser reads on',
  );
  t.equal(Buffer.concat(got.map((b) => b.bytes)).toString(), text);
});

t.test('end: an unterminated block is dropped, or flushed on request', async (t) => {
  const bytes = Buffer.from('data: 1\n\nevent: e\ndata: tail');
  t.same(
    byteBlocks([bytes], false).blocks.map((b) => b.data),
    ['1'],
  );
  const flushed = byteBlocks([bytes.subarray(0, 20), bytes.subarray(20)], true).blocks;
  t.same(flushed.map(strip), textBlocks(bytes).map(strip));
  t.same(
    flushed.map((b) => b.data),
    ['1', 'tail'],
  );
  t.equal(flushed[1].bytes.toString(), 'event: e\ndata: tail');
  t.same(byteBlocks([Buffer.from('data: 1\n\n: comment only')], true).blocks.length, 1, 'a trailing comment is not an event');
});

// Every recorded transcript: byte mode agrees with text mode however it is chunked.
for (const d of ['openai-chat', 'anthropic', 'openai-responses']) {
  const dir = path.join(CONFORMANCE, 'sse', d);
  for (const name of readdirSync(dir).filter((f) => f.endsWith('.sse'))) {
    t.test(`transcript ${d}/${name} in byte mode`, async (t) => {
      const bytes = readFileSync(path.join(dir, name));
      const text = textBlocks(bytes);
      const expected = JSON.stringify(text.map(strip));
      const raws = text.map((b) => b.raw);
      const whole = byteBlocks([bytes]);
      t.equal(JSON.stringify(whole.blocks.map(strip)), expected, 'same blocks as the text mode');
      t.equal(whole.bytes.toString(), raws.join(''), 'the same bytes forwarded');
      t.same(
        whole.blocks.map((b) => b.raw),
        raws,
        'same raw text',
      );
      t.equal(JSON.stringify(byteBlocks([...bytes].map((b) => Uint8Array.of(b))).blocks.map(strip)), expected, 'one byte at a time');
      // Two chunks split at each boundary is O(n²): every split of the smaller transcripts, seeded
      // random chunkings of all (sse.test.ts does every split in text mode).
      if (bytes.length < 3 * 1024) {
        let bad = -1;
        for (let i = 1; i < bytes.length && bad < 0; i++) {
          const r = byteBlocks(splits(bytes, i));
          if (JSON.stringify(r.blocks.map(strip)) !== expected || r.bytes.toString() !== textRaw(splits(bytes, i))) bad = i;
        }
        t.equal(bad, -1, 'every two-chunk split: same blocks, same bytes');
      }
      let round = 0;
      for (const chunks of randomChunkings(bytes, bytes.length, 300, 10)) {
        round++;
        const r = byteBlocks(chunks);
        if (JSON.stringify(r.blocks.map(strip)) !== expected || r.bytes.toString() !== textRaw(chunks)) {
          t.fail(`random chunking round ${round}`);
          break;
        }
      }
    });
  }
}
