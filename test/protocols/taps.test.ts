/**
 * The passthrough taps see each event as a view of the upstream's bytes, decoded only when read,
 * and forward those bytes. Checked here against what a user's bill and stream depend on:
 *  - the one-pattern text finder (`textLength`) agrees with the per-key search it replaced
 *    (`stringValueLength`, the oracle) on seeded random events: multi-byte and astral text,
 *    escapes, nulls, nesting, whitespace;
 *  - a passthrough stream split at every byte boundary (usage and finish split across chunks,
 *    UTF-8 characters split inside, CRLF framing) forwards exactly the upstream's bytes and reads
 *    the same usage, completion and generated-text length as when it arrives whole — and that
 *    length is the true UTF-16 length of the text, which the reservation cut and the estimate bill.
 */
import t from 'tap';
import { passthrough } from '../../core/protocols/passthrough.js';
import {
  fromAnthropicUsage,
  fromChatUsage,
  fromResponsesUsage,
  stringValueLength,
  textKeys,
  textLength,
} from '../../core/protocols/usage.js';
import { SseParser, type SseBytesBlock } from '../../core/sse.js';
import type { ProtocolName } from '../../core/config/types.js';
import type { Usage } from '../../core/money.js';

// ---- the text finder against the per-key search it replaced ------------------------------------

const KEYS = ['content', 'arguments', 'reasoning_content', 'refusal'];
const TEXT_KEYS = textKeys(KEYS);
const oracle = (data: string) => stringValueLength(data, KEYS);
const scanned = (data: string) => textLength(data, TEXT_KEYS);

t.test('the text finder reads what the per-key search read, on seeded random events', async (t) => {
  let seed = 42;
  const rand = (n: number) => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n;
  const pick = <T>(xs: T[]): T => xs[rand(xs.length)];
  const texts = [
    '',
    'hi',
    'héllo',
    '世界',
    '😀x😀',
    'a"b',
    'back\\slash',
    'line\nbreak',
    '\u0000\u001f',
    '"usage":{',
    'content',
    '\\"',
    'é😀"\\',
  ];
  const ws = () => pick(['', ' ', '  ', '\t', '\n ']);
  const value = (depth: number): unknown => {
    switch (rand(depth > 2 ? 4 : 7)) {
      case 0:
        return pick(texts);
      case 1:
        return rand(1000);
      case 2:
        return null;
      case 3:
        return pick([true, false]);
      case 4:
        return Array.from({ length: rand(3) }, () => value(depth + 1));
      default:
        return object(depth + 1);
    }
  };
  const keys = [
    'content',
    'arguments',
    'reasoning_content',
    'refusal',
    'usage',
    'finish_reason',
    'tool_calls',
    'sequence_number',
    'delta',
    'id',
    'x',
  ];
  const object = (depth: number): Record<string, unknown> => {
    const o: Record<string, unknown> = {};
    for (let i = rand(5); i > 0; i--) o[pick(keys)] = value(depth);
    return o;
  };
  /** JSON text with random whitespace around colons and commas (as some servers write it). */
  const write = (v: unknown): string => {
    if (Array.isArray(v)) return `[${ws()}${v.map(write).join(`,${ws()}`)}${ws()}]`;
    if (v && typeof v === 'object')
      return `{${ws()}${Object.entries(v)
        .map(([k, x]) => `${JSON.stringify(k)}${pick(['', '', ' '])}:${ws()}${write(x)}`)
        .join(`,${ws()}`)}${ws()}}`;
    return JSON.stringify(v);
  };
  let bad: string | undefined;
  let hits = 0;
  for (let i = 0; i < 20_000 && !bad; i++) {
    const data = write(object(0));
    const want = oracle(data);
    if (want > 0) hits++;
    if (scanned(data) !== want) bad = data;
  }
  t.equal(bad, undefined, 'every event reads the same');
  t.ok(hits > 1000, `the events exercise the keys (${hits} with text)`);
  // The cases by name.
  t.equal(scanned('{"delta":{"content":"é😀\\n\\u00e9"}}'), 5, 'astral characters count twice, escapes once');
  t.equal(
    scanned('{"delta":{"content":null,"tool_calls":[{"function":{"arguments":"{\\"a\\":1}"}}]}}'),
    7,
    'a null content: the arguments',
  );
  t.equal(scanned('{"refusal":"no","content":"yes!"}'), 4, 'content first, wherever it is');
  t.equal(scanned('{"content" :"x","refusal":"yy"}'), 2, 'like the per-key search, `"content" :` is not read as text');
});

// ---- passthrough streams split anywhere ----------------------------------------------------------

interface Run {
  out: Buffer;
  usage: Usage | undefined;
  chars: number;
  complete: boolean;
  started: boolean;
}

function run(protocol: ProtocolName, chunks: Buffer[]): Run {
  const tr = passthrough(protocol).stream({ model: 'm', requestId: 'r' });
  const parser = new SseParser();
  const parts: Buffer[] = [];
  const add = (x: string | Buffer | SseBytesBlock) => parts.push(typeof x === 'string' ? Buffer.from(x) : Buffer.isBuffer(x) ? x : x.bytes);
  for (const c of chunks) for (const b of parser.feedBytes(c)) add(tr.block(b));
  for (const b of parser.endBytes(true)) add(tr.block(b));
  const end = tr.end();
  add(end.text);
  if (end.complete) add(tr.closing(() => ({ input: 0, output: 0, cacheRead: 0, cacheWrite: 0 })));
  return { out: Buffer.concat(parts), usage: tr.usage(), chars: tr.outputChars(), complete: end.complete, started: tr.started };
}

const words = ['Hé', 'llo ', '世界', ' 😀', '\n"q"', ' \\ ', 'ok'];
const TEXT_LEN = words.join('').length; // UTF-16 code units

const STREAMS: Record<ProtocolName, { text: string; usage: Usage }> = {
  'openai-chat': {
    text: [
      ...words.map(
        (w, i) =>
          `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{${i === 0 ? '"role":"assistant",' : ''}"content":${JSON.stringify(w)}},"finish_reason":null}],"usage":null}\r\n\r\n`,
      ),
      'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}\r\n\r\n',
      'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":2}}}\r\n\r\n',
      'data: [DONE]\r\n\r\n',
    ].join(''),
    usage: { input: 10, output: 9, cacheRead: 2, cacheWrite: 0 },
  },
  'anthropic-messages': {
    text: [
      'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","model":"m","usage":{"input_tokens":7,"output_tokens":1}}}\n\n',
      'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
      ...words.map(
        (w) =>
          `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":${JSON.stringify(w)}}}\n\n`,
      ),
      'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
      'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}\n\n',
      'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ].join(''),
    usage: { input: 7, output: 9, cacheRead: 0, cacheWrite: 0 },
  },
  'openai-responses': {
    text: [
      'event: response.created\r\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","model":"m","created_at":1}}\r\n\r\n',
      ...words.map(
        (w, i) =>
          `event: response.output_text.delta\r\ndata: {"type":"response.output_text.delta","sequence_number":${i + 1},"item_id":"i","output_index":0,"content_index":0,"delta":${JSON.stringify(w)}}\r\n\r\n`,
      ),
      'event: response.completed\r\ndata: {"type":"response.completed","sequence_number":99,"response":{"id":"resp_1","usage":{"input_tokens":5,"output_tokens":9,"input_tokens_details":{"cached_tokens":1}}}}\r\n\r\n',
    ].join(''),
    usage: { input: 4, output: 9, cacheRead: 1, cacheWrite: 0 },
  },
};

for (const [protocol, s] of Object.entries(STREAMS) as [ProtocolName, { text: string; usage: Usage }][]) {
  t.test(`${protocol}: a passthrough stream split at every byte reads and forwards the same`, async (t) => {
    const bytes = Buffer.from(s.text);
    const whole = run(protocol, [bytes]);
    t.ok(whole.out.equals(bytes), 'the client gets the upstream bytes unchanged');
    t.same(whole.usage, s.usage, 'usage read from the final event');
    t.equal(whole.chars, TEXT_LEN, 'generated text counted in UTF-16 code units');
    t.ok(whole.complete, 'complete');
    t.ok(whole.started, 'started');
    const expected = JSON.stringify({ ...whole, out: whole.out.toString('base64') });
    // The LF of a last CRLF that comes apart from its CR belongs to a block that never comes, so it
    // is not forwarded (as before the byte mode): the only split whose output differs.
    const crlfTail = bytes.subarray(-2).toString() === '\r\n' ? bytes.length - 1 : -1;
    const expectedAt = (i: number) =>
      i !== crlfTail || crlfTail < 0 ? expected : JSON.stringify({ ...whole, out: whole.out.subarray(0, -1).toString('base64') });
    let bad = -1;
    for (let i = 1; i < bytes.length && bad < 0; i++) {
      const r = run(protocol, [bytes.subarray(0, i), bytes.subarray(i)]);
      if (JSON.stringify({ ...r, out: r.out.toString('base64') }) !== expectedAt(i)) bad = i;
    }
    t.equal(bad, -1, 'every two-chunk split: same bytes out, same usage, text length and completion');
    const r = run(
      protocol,
      [...bytes].map((b) => Buffer.of(b)),
    );
    t.equal(JSON.stringify({ ...r, out: r.out.toString('base64') }), expectedAt(crlfTail), 'one byte at a time');
  });
}

t.test('Chat: an upstream without a usage chunk still gets its estimated usage chunk before its own [DONE]', async (t) => {
  const text = STREAMS['openai-chat'].text.replace(/data: \{[^\n]*"choices":\[\],"usage":\{[^\n]*\r\n\r\n/, '');
  const r = run('openai-chat', [Buffer.from(text)]);
  const out = r.out.toString();
  t.ok(
    out.endsWith(
      '"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,"prompt_tokens_details":{"cached_tokens":0}}}\n\ndata: [DONE]\r\n\r\n',
    ),
    "usage chunk, then the upstream's [DONE] bytes",
  );
});

// ---- the Chat usage chunk read without parsing the whole chunk -----------------------------------

/** The usage the Chat tap reads from one chunk of `data`. */
const chatUsageOf = (data: string) => run('openai-chat', [Buffer.from(`data: ${data}\n\ndata: [DONE]\n\n`)]).usage;

/**
 * Seeded JSON objects shaped like an upstream's answer with a usage member: the root's usage last,
 * or followed by plain members (as OpenAI's non-streaming body: service_tier, system_fingerprint)
 * or by others; nested usage members before it (decoys), repeated ones (the last counts), usage
 * values that are null or not objects, strings holding braces and escaped quotes.
 */
function usageAnswers(seed: number, count: number): { text: string; after: 'none' | 'plain' | 'other' }[] {
  // The generator's high bits: its low ones repeat with a short period (the lowest alternates).
  const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) >>> 16) % n;
  const pick = <T>(xs: T[]): T => xs[rand(xs.length)];
  const ws = () => pick(['', '', ' ', '\t', '  ']);
  const members = (m: [string, string][]) =>
    `{${ws()}${m.map(([k, v]) => `${JSON.stringify(k)}${ws()}:${ws()}${v}`).join(`${ws()},${ws()}`)}${ws()}}`;
  const scalar = () => pick(['0', '7', '1234', '-3', '2.5', '1e2', 'null', 'true', '"9"', '"}"', '"a\\"}"']);
  const usageText = (): string => {
    const m: [string, string][] = [];
    const names = ['prompt_tokens', 'completion_tokens', 'total_tokens', 'cache_creation_input_tokens', 'input_tokens', 'output_tokens'];
    for (let i = rand(6); i > 0; i--) m.push([pick(names), pick([scalar(), String(rand(100_000))])]);
    const details = () =>
      members([
        ['cached_tokens', scalar()],
        ['cache_write_tokens', scalar()],
      ]);
    if (rand(2)) m.push([pick(['prompt_tokens_details', 'input_tokens_details']), pick([details(), 'null', '{}'])]);
    if (rand(2)) m.push([pick(['completion_tokens_details', 'output_tokens_details']), members([['reasoning_tokens', scalar()]])]);
    if (rand(4) === 0) m.push(['server_tool_use', members([['web_search_requests', '[1,{"a":"}"}]']])]);
    return members(m);
  };
  const usageValue = () => pick([usageText(), usageText(), usageText(), 'null', '5', '[]']);
  const out: { text: string; after: 'none' | 'plain' | 'other' }[] = [];
  for (let i = 0; i < count; i++) {
    const m: [string, string][] = [
      ['id', pick(['"chatcmpl-1"', '"a}b"', '"\\"}"'])],
      ['object', '"chat.completion.chunk"'],
    ];
    const choice =
      rand(3) === 0
        ? members([
            ['index', '0'],
            ['usage', usageText()],
          ])
        : members([
            ['index', '0'],
            ['delta', '{}'],
          ]);
    m.push(['choices', rand(2) ? `[${choice}]` : '[]']);
    if (rand(4) === 0) m.splice(rand(m.length + 1), 0, ['usage', usageValue()]);
    m.push(['usage', usageValue()]);
    const after = pick(['none', 'plain', 'other'] as const);
    if (after === 'plain') {
      for (let k = 1 + rand(3); k > 0; k--) m.push([pick(['service_tier', 'system_fingerprint', 'x', 'usage']), scalar()]);
    } else if (after === 'other') m.push([pick(['x', 'metadata']), pick(['{}', '{"usage":{"prompt_tokens":1}}', '[1]'])]);
    out.push({ text: members(m) + ws(), after });
  }
  return out;
}

t.test('Chat: the usage read from a chunk is what JSON.parse of the whole chunk reads, on seeded random chunks', async (t) => {
  let bad: string | undefined;
  const read = { none: 0, plain: 0, other: 0 };
  for (const { text, after } of usageAnswers(7, 6_000)) {
    // What the tap read before: the whole chunk parsed when a usage object is anywhere in it.
    const want = /"usage"\s*:\s*\{/.test(text) ? fromChatUsage(JSON.parse(text).usage) : undefined;
    if (want !== undefined) read[after]++;
    if (JSON.stringify(chatUsageOf(text)) !== JSON.stringify(want)) {
      bad = text;
      break;
    }
  }
  t.equal(bad, undefined, 'every chunk reads the same usage');
  t.ok(read.none > 800 && read.plain > 800 && read.other > 800, `usage last, before plain members, before others: ${JSON.stringify(read)}`);
});

t.test('a non-streaming answer: the usage read is what JSON.parse of the whole body reads, on seeded random bodies', async (t) => {
  const oracles: Record<ProtocolName, (u: unknown) => Usage | undefined> = {
    'openai-chat': fromChatUsage,
    'anthropic-messages': fromAnthropicUsage,
    'openai-responses': fromResponsesUsage,
  };
  for (const [protocol, usageOf] of Object.entries(oracles) as [ProtocolName, (u: unknown) => Usage | undefined][]) {
    const conversion = passthrough(protocol);
    let bad: string | undefined;
    let read = 0;
    for (const { text } of usageAnswers(11, 3_000)) {
      const want = usageOf((JSON.parse(text) as { usage?: unknown }).usage);
      if (want !== undefined) read++;
      const got = conversion.response(text, { model: 'm', requestId: 'r' });
      if (got.body !== text || JSON.stringify(got.usage) !== JSON.stringify(want)) {
        bad = text;
        break;
      }
    }
    t.equal(bad, undefined, `${protocol}: every body reads the same usage, forwarded as it came`);
    t.ok(read > 1500, `${protocol}: ${read} bodies with usage`);
  }
  const body =
    '{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],' +
    '"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}},"service_tier":"default","system_fingerprint":"fp_1"}';
  t.same(
    passthrough('openai-chat').response(body, { model: 'm', requestId: 'r' }).usage,
    { input: 4, output: 2, cacheRead: 1, cacheWrite: 0 },
    "OpenAI's body",
  );
});

t.test('Chat: the usage chunk by name', async (t) => {
  const usage = '{"prompt_tokens":12,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":2}}';
  const read = { input: 10, output: 9, cacheRead: 2, cacheWrite: 0 };
  t.same(chatUsageOf(`{"id":"c","choices":[],"usage":${usage}}`), read, 'usage last (OpenAI)');
  t.same(chatUsageOf(`{"id":"c","usage":${usage},"choices":[]}`), read, 'usage not last: the whole chunk is read');
  t.same(
    chatUsageOf(`{"choices":[{"usage":{"prompt_tokens":99}}],"usage":${usage}}`),
    read,
    "a usage member nested before the root's: the root's",
  );
  t.same(chatUsageOf(`{"usage":${usage},"usage":null}`), undefined, 'a later usage member of null wins, as JSON.parse has it');
  t.same(chatUsageOf(`{"choices":[{"usage":${usage}}]}`), undefined, 'only a nested usage member: none');
  t.same(chatUsageOf(`{"id":"c","usage":{"prompt_tokens":12,}}`), undefined, 'a usage object that is not JSON: none');
  // What the whole parse checked and the last-member read does not: the text before the usage member.
  t.same(chatUsageOf(`{"id":"c",,"usage":${usage}}`), read, 'the rest of the chunk is not validated');
});
