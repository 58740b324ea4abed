/**
 * Decoders over every transcript fed through `SseParser` in arbitrary pieces: one byte at a time
 * (every boundary at once), two chunks split at each byte boundary (transcripts under 32 KB),
 * and seeded random chunking — the IR events must be identical to the whole-file decode. Also:
 * streams cut short yield a prefix of their events and never `end`; a clean EOF after the finish
 * does end.
 */
import t from 'tap';
import type { ProtocolName } from '../../core/config/types.js';
import { PROTOCOLS, decode, decodeChunks, encode, transcripts } from './helpers.js';
import { randomChunkings } from '../helpers/chunks.js';

for (const p of PROTOCOLS) {
  for (const tr of transcripts(p)) {
    t.test(`${p}/${tr.name} split anywhere`, async (t) => {
      const bytes = tr.bytes;
      const expected = JSON.stringify(decode(p, bytes));
      t.equal(
        JSON.stringify(
          decodeChunks(
            p,
            [...bytes].map((b) => Uint8Array.of(b)),
          ),
        ),
        expected,
        'one byte at a time',
      );
      if (bytes.length < 32 * 1024) {
        let bad = -1;
        for (let i = 1; i < bytes.length && bad < 0; i++) {
          if (JSON.stringify(decodeChunks(p, [bytes.subarray(0, i), bytes.subarray(i)])) !== expected) bad = i;
        }
        t.equal(bad, -1, 'every two-chunk split decodes identically');
      }
      let failed = -1;
      let round = 0;
      for (const chunks of randomChunkings(bytes, bytes.length, 200, 10)) {
        if (JSON.stringify(decodeChunks(p, chunks)) !== expected) {
          failed = round;
          break;
        }
        round++;
      }
      t.equal(failed, -1, 'random chunkings decode identically');
    });
  }
}

/** Byte offset where the frame carrying `marker` starts (the blank-line boundary before it). */
function frameStart(text: string, marker: string): number {
  const at = text.indexOf(marker);
  return at < 0 ? -1 : text.lastIndexOf('\n\n', at) + 2;
}

const TERMINAL: Record<ProtocolName, { finish: string; after: string }> = {
  'anthropic-messages': { finish: '"type":"message_delta"', after: '"type":"message_stop"' },
  'openai-chat': { finish: '"finish_reason":"', after: 'data: [DONE]' },
  'openai-responses': { finish: '"type":"response.completed"', after: '' },
};

for (const p of PROTOCOLS) {
  t.test(`${p}: a stream cut short yields neither end nor error`, async (t) => {
    for (const tr of transcripts(p)) {
      const text = tr.bytes.toString('utf8');
      const whole = decode(p, text);
      if (whole[whole.length - 1].type !== 'end') continue;
      const cut = frameStart(text, TERMINAL[p].finish);
      if (cut <= 0) continue;
      const events = decode(p, text.slice(0, cut));
      t.notOk(
        events.some((e) => e.type === 'end' || e.type === 'error' || e.type === 'finish'),
        `${tr.name}: cut before the finish`,
      );
      // Nothing invented at EOF: not even block stops (an agent would run a half-streamed call).
      t.same(events, whole.slice(0, events.length), `${tr.name}: a prefix of the whole stream's events`);
      // The client of any protocol then gets a well-formed error from encoder.fail().
      for (const to of PROTOCOLS) {
        const out = encode(to, events);
        t.notMatch(out, /message_stop|response\.completed|\[DONE\]/, `${tr.name} → ${to}: no terminal frame`);
      }
    }
  });
}

t.test('a clean EOF after the finish is a complete stream', async (t) => {
  for (const p of ['anthropic-messages', 'openai-chat'] as const) {
    let checked = 0;
    for (const tr of transcripts(p)) {
      const text = tr.bytes.toString('utf8');
      const whole = decode(p, text);
      if (whole[whole.length - 1].type !== 'end') continue;
      const cut = frameStart(text, TERMINAL[p].after);
      if (cut <= 0) continue;
      const events = decode(p, text.slice(0, cut));
      t.equal(events[events.length - 1].type, 'end', `${p}/${tr.name} without its terminator still ends`);
      checked++;
    }
    t.ok(checked > 0, `${p}: some transcripts checked`);
  }
});
