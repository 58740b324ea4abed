/**
 * The large-body path (core/json): the incremental parser gives exactly what JSON.parse gives and
 * rejects exactly what it rejects, wherever the text is cut into pieces and however often it stops;
 * the incremental serializer writes exactly what JSON.stringify writes; the splice of a large body
 * sends exactly the bytes spliceJson would; the block decoder reads UTF-8 exactly across blocks.
 * Seeded fast-check runs (reproducible); the corpus holds the adversarial cases by name.
 */
import t from 'tap';
import fc from 'fast-check';
import { IncrementalJsonParser, JsonSyntaxError, parseAll, textOf, type ParserOptions } from '../../core/json/parse.js';
import { JsonWriter } from '../../core/json/serialize.js';
import { LargeText, Ropes, concatLong, headOf, sliceLong, withRopes } from '../../core/json/text.js';
import { TextCollector } from '../../core/body.js';
import { spliceJson, spliceLarge } from '../../core/protocols/splice.js';

/**
 * Deep equality that JSON.parse results must meet: same own keys in the same order, same
 * prototypes, Object.is on leaves (iterative: the corpus nests 100,000 deep).
 */
function same(x: unknown, y: unknown): boolean {
  const todo: Array<[unknown, unknown]> = [[x, y]];
  while (todo.length > 0) {
    const [a, b] = todo.pop()!;
    if (Object.is(a, b)) continue;
    if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
    if (Array.isArray(a) !== Array.isArray(b) || Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
    const ka = Reflect.ownKeys(a);
    const kb = Reflect.ownKeys(b);
    if (ka.length !== kb.length || ka.some((k, i) => k !== kb[i])) return false;
    for (const k of ka) todo.push([(a as Record<PropertyKey, unknown>)[k], (b as Record<PropertyKey, unknown>)[k]]);
  }
  return true;
}

type Outcome = { ok: true; value: unknown } | { ok: false };

function viaJson(s: string): Outcome {
  try {
    return { ok: true, value: JSON.parse(s) };
  } catch {
    return { ok: false };
  }
}

function viaParser(s: string, piece: number, opts?: ParserOptions, maxOps?: number): Outcome {
  try {
    return { ok: true, value: parseAll(textOf(s, piece), opts, maxOps).value };
  } catch (e) {
    if (!(e instanceof JsonSyntaxError)) throw e;
    return { ok: false };
  }
}

/** The parser agrees with JSON.parse on `s` for every given way of cutting and pausing it. */
function agrees(s: string, piece: number, opts?: ParserOptions, maxOps?: number): boolean {
  const a = viaJson(s);
  const b = viaParser(s, piece, opts, maxOps);
  return a.ok === b.ok && (!a.ok || same(a.value, (b as { value: unknown }).value));
}

/** Small thresholds so every string and number takes the long paths, across tiny pieces. */
const tight = fc.record({
  longString: fc.integer({ min: 1, max: 24 }),
  longNumber: fc.integer({ min: 1, max: 24 }),
  chunk: fc.integer({ min: 8, max: 48 }),
});

const jsonChars = fc.constantFrom(...'{}[]",:\\/01-9.eE+ tfnrualsb\n\t\r\u0000\u001fé😀\ud800\u2028');
const texts = fc.oneof(
  fc.json(),
  fc.jsonValue().map((v) => JSON.stringify(v, null, 2)),
  fc.string({ unit: 'binary', maxLength: 60 }),
  fc.string({ unit: jsonChars, maxLength: 60 }),
  // Valid JSON with a few characters inserted or removed somewhere: mostly invalid, near-valid texts.
  fc
    .json()
    .chain((j) =>
      fc
        .tuple(fc.nat(j.length), fc.nat(3), fc.string({ unit: jsonChars, maxLength: 3 }))
        .map(([at, cut, ins]) => j.slice(0, at) + ins + j.slice(at + cut)),
    ),
);

t.test('parser: the same result as JSON.parse (values, key order, rejections), whatever the pieces and pauses', async (t) => {
  fc.assert(
    fc.property(texts, fc.integer({ min: 1, max: 16 }), tight, fc.integer({ min: 1, max: 5 }), (s, piece, opts, ops) =>
      agrees(s, piece, opts, ops),
    ),
    { numRuns: 15_000, seed: 20240610 },
  );
  fc.assert(
    fc.property(texts, fc.integer({ min: 1, max: 64 }), (s, piece) => agrees(s, piece)),
    { numRuns: 5_000, seed: 7 },
  );
  t.pass('15,000 + 5,000 texts agree');
});

t.test('parser: long numbers read digit by digit round exactly as JSON.parse does', async (t) => {
  const digits = (max: number) => fc.string({ unit: fc.constantFrom(...'0123456789'), minLength: 1, maxLength: max });
  const num = fc
    .tuple(
      fc.boolean(),
      fc.oneof(
        fc.constant('0'),
        fc
          .tuple(fc.constantFrom(...'123456789'), fc.string({ unit: fc.constantFrom(...'0123456789'), maxLength: 1200 }))
          .map(([a, b]) => a + b),
      ),
      fc.option(digits(1200)),
      fc.option(fc.tuple(fc.constantFrom('e', 'E'), fc.constantFrom('', '+', '-'), digits(25)).map((x) => x.join(''))),
    )
    .map(([neg, int, frac, exp]) => `${neg ? '-' : ''}${int}${frac === null ? '' : '.' + frac}${exp ?? ''}`);
  fc.assert(
    fc.property(num, fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1, max: 30 }), (s, piece, longNumber) => {
      const b = viaParser(s, piece, { longNumber });
      return b.ok && Object.is(b.value, JSON.parse(s));
    }),
    { numRuns: 3_000, seed: 99 },
  );
  const corpus = [
    '2.4703282292062327e-324',
    '2.4703282292062328e-324',
    '1.7976931348623157e308',
    '1.7976931348623159e308',
    '9007199254740993',
    `9007199254740993${'0'.repeat(900)}1e-901`,
    `9007199254740992${'0'.repeat(900)}1e-901`,
    `0.${'0'.repeat(5000)}1e5000`,
    '1e-99999999999999999999',
    '1e99999999999999999999',
    '0e99999999999999999999',
    '-0.0e-5',
    '-0',
    `${'1'.repeat(2000)}e-1700`,
    `-${'9'.repeat(400)}.${'9'.repeat(400)}e-500`,
  ];
  for (const s of corpus) {
    const b = viaParser(s, 3, { longNumber: 1 });
    t.ok(b.ok && Object.is(b.value, JSON.parse(s)), `${s.slice(0, 30)}… (${s.length} chars)`);
  }
});

t.test('parser: adversarial corpus', async (t) => {
  const deep = 100_000;
  const corpus: Array<[string, string]> = [
    ['duplicate keys: the last value at the first position', '{"a":1,"b":2,"a":3}'],
    ['__proto__ is an own property, the prototype untouched', '{"__proto__":{"polluted":true},"constructor":{"prototype":1},"toString":2}'],
    ['a duplicate __proto__', '{"__proto__":1,"__proto__":{"x":2}}'],
    ['integer-like keys order first', '{"b":1,"2":2,"a":3,"1":4,"-1":5,"01":6}'],
    ['nesting 100,000 deep (JSON.parse has no limit)', '['.repeat(deep) + ']'.repeat(deep)],
    ['objects 100,000 deep', '{"a":'.repeat(deep) + '1' + '}'.repeat(deep)],
    ['unclosed nesting', '['.repeat(1000)],
    ['escapes of every kind', String.raw`{"s":"\" \\ \/ \b \f \n \r \t \u0041 \ud83d\ude00 \ud800 \udc00x"}`],
    ['a lone surrogate escape at a chunk edge', `"${'a'.repeat(30)}\\ud83d${'b'.repeat(7)}\\ude00"`],
    ['a raw control character in a long string', `"${'a'.repeat(50)}\u0001${'a'.repeat(50)}"`],
    ['a raw tab in a long string', `"${'a'.repeat(50)}\t"`],
    ['a bad escape', '"\\x41"'],
    ['a short unicode escape', '"\\u12"'],
    ['a backslash before the closing quote', `"${'a'.repeat(40)}\\"`],
    ['an escaped backslash before the closing quote', `"${'a'.repeat(40)}\\\\"`],
    ['many backslashes', `"${'\\\\'.repeat(100)}\\"${'\\\\'.repeat(33)}"`],
    ['unterminated long string', `{"a":"${'x'.repeat(100)}`],
    ['leading zero', '01'],
    ['bare minus', '-'],
    ['trailing dot', '1.'],
    ['exponent without digits', '1e'],
    ['plus sign', '+1'],
    ['trailing comma in an array', '[1,]'],
    ['trailing comma in an object', '{"a":1,}'],
    ['missing colon', '{"a" 1}'],
    ['single quotes', "{'a':1}"],
    ['comment', '{"a":1 /* x */}'],
    ['two values', '1 2'],
    ['BOM', '\ufeff{}'],
    ['empty', ''],
    ['whitespace only', ' \n\t\r '],
    ['non-JSON whitespace', '\u00a0{}'],
    ['literals', '[true,false,null]'],
    ['truncated literal', 'tru'],
    ['literal with a tail', 'nullx'],
    ['a long key', `{"${'k'.repeat(100)}":1}`],
    ['U+2028 and U+2029 raw in strings', '"\u2028\u2029"'],
  ];
  for (const [name, s] of corpus) {
    for (const piece of [1, 2, 7, s.length || 1]) {
      for (const opts of [{}, { longString: 1, longNumber: 1, chunk: 8 }, { longString: 16, chunk: 9 }]) {
        if (!agrees(s, piece, opts, 3)) t.fail(`${name}: pieces of ${piece}, ${JSON.stringify(opts)}`);
      }
    }
    t.pass(name);
  }
  const proto = parseAll(textOf('{"__proto__":{"polluted":true}}', 3)).value as Record<string, unknown>;
  t.equal(Object.getPrototypeOf(proto), Object.prototype, 'the prototype of the result is untouched');
  t.equal(({} as Record<string, unknown>).polluted, undefined, 'nothing polluted');
});

t.test('parser: errors name what went wrong and where', async (t) => {
  const err = (s: string, opts?: ParserOptions) => {
    try {
      parseAll(textOf(s, 4), opts);
      return undefined;
    } catch (e) {
      return e as JsonSyntaxError;
    }
  };
  t.match(err('{"a":1,}')?.message, /^Unexpected token "}" at position 7$/);
  t.match(err('[1, 2')?.message, /^Unexpected end of JSON input at position 5$/);
  t.match(err(`{"a":"${'x'.repeat(20)}\u0001"}`, { longString: 4 })?.message, /^Bad control character in string literal at position 26$/);
  t.match(err('{"a":"\\q"}')?.message, /Bad escaped character at position 5/);
  t.match(err(`"${'x'.repeat(30)}`, { longString: 4 })?.message, /^Unterminated string/);
  const p = new IncrementalJsonParser(textOf('   ', 1));
  t.throws(() => p.run(Infinity));
  t.ok(p.empty, 'a text of whitespace only is told apart (the body is empty)');
});

t.test('parser: long strings are views of the text, readable by parts; top-level members recorded', async (t) => {
  const image = 'iVBORw0KGgo'.repeat(1000);
  const s = `{ "model" : "m", "messages":[{"content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,${image}"}}]}], "n": 1 }`;
  const p = parseAll(textOf(s, 1000), { longString: 64 });
  const url = (p.value as any).messages[0].content[0].image_url.url as string;
  t.equal(url, `data:image/png;base64,${image}`);
  const long = p.ropes.get(url)!;
  t.ok(long && long.plain, 'the long string is known by its parts, plain (no escapes)');
  t.ok(long.parts.length > 1, 'it spans pieces');
  t.equal(long.parts.join(''), url);
  t.same(
    p.top!.list.map((m) => [m.key, s.slice(m.start, m.valueEnd)]),
    [
      ['model', '"model" : "m"'],
      ['messages', s.slice(s.indexOf('"messages"'), s.lastIndexOf(','))],
      ['n', '"n": 1'],
    ],
  );
  t.equal(s[p.top!.open], '{');
  t.equal(s[p.top!.close], '}');
});

t.test('splice of a large body: the same bytes as spliceJson', async (t) => {
  const objects = fc.dictionary(
    fc.constantFrom('model', 'models', 'stream', 'stream_options', 'messages', 'a', '__proto__'),
    fc.jsonValue(),
    { maxKeys: 6 },
  );
  fc.assert(
    fc.property(objects, fc.integer({ min: 1, max: 20 }), fc.boolean(), fc.constantFrom(0, 2), (o, piece, dup, indent) => {
      let s = JSON.stringify(o, null, indent);
      if (dup && s.length > 2) s = s.slice(0, -1) + (s.length > 2 ? ',' : '') + '"model":"dup"}';
      const p = parseAll(textOf(s, piece), { longString: 3 });
      const ops = { set: { model: 'up/stream', stream_options: { include_usage: true } }, remove: ['models'] };
      const out = spliceLarge({ text: textOf(s, piece), top: p.top!, ropes: p.ropes }, ops);
      const expected = spliceJson(s, ops);
      return out.toString() === expected && out.bytes === Buffer.byteLength(expected);
    }),
    { numRuns: 3_000, seed: 5 },
  );
  t.pass('3,000 bodies');
});

t.test('serializer: the same text as JSON.stringify, however long strings are cut', async (t) => {
  const str = fc.string({
    unit: fc.oneof(
      fc.constantFrom('a', '"', '\\', '\n', '\u0001', '\ud83d', '\ude00', '😀', 'é', '\u2028'),
      fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
    ),
    maxLength: 40,
  });
  const val = fc.letrec((tie) => ({
    v: fc.oneof(
      { depthSize: 'small' },
      str,
      fc.double(),
      fc.integer(),
      fc.boolean(),
      fc.constant(null),
      fc.constant(undefined),
      fc.array(tie('v'), { maxLength: 5 }),
      fc.dictionary(str, tie('v'), { maxKeys: 5 }),
    ),
  })).v;
  fc.assert(
    fc.property(
      val,
      fc.integer({ min: 1, max: 10 }),
      fc.integer({ min: 2, max: 9 }),
      fc.integer({ min: 1, max: 4 }),
      (v, longString, chunk, ops) => {
        const w = new JsonWriter(v, undefined, { longString, chunk });
        while (!w.step(Infinity, ops)) {
          /* next turn */
        }
        const expected = JSON.stringify(v);
        const got = expected === undefined && w.parts.length === 0 ? undefined : w.toString();
        return got === expected && w.bytes === (expected === undefined ? 0 : Buffer.byteLength(expected));
      },
    ),
    { numRuns: 10_000, seed: 11 },
  );
  const dated = {
    at: new Date(0),
    n: Object(1),
    s: Object('x'),
    f: () => 1,
    u: undefined,
    arr: [undefined, () => 1, Symbol('s')],
    nan: NaN,
    negz: -0,
  };
  const w = new JsonWriter(dated);
  while (!w.step()) {
    /* next turn */
  }
  t.equal(w.toString(), JSON.stringify(dated), 'toJSON, boxed primitives, skipped and nulled members');
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  t.throws(
    () => {
      const c = new JsonWriter(cyclic);
      while (!c.step()) {
        /* */
      }
    },
    TypeError,
    'a cycle throws like JSON.stringify',
  );
});

t.test(
  "serializer and codec helpers: a body's long strings are written by their parts, and cut or joined without flattening",
  async (t) => {
    const image = 'QUJD'.repeat(3000);
    const s = `{"url":"data:image/png;base64,${image}","text":"${'é\\n'.repeat(3000)}"}`;
    const p = parseAll(textOf(s, 997), { longString: 64 });
    const v = p.value as { url: string; text: string };
    const { data, url } = withRopes(p.ropes, () => {
      const d = sliceLong(v.url, 'data:image/png;base64,'.length);
      return { data: d, url: concatLong('data:image/jpeg;base64,', d) };
    });
    t.equal(data, image, 'sliceLong');
    t.equal(url, `data:image/jpeg;base64,${image}`, 'concatLong');
    t.ok(p.ropes.get(data)?.plain && p.ropes.get(url)?.plain, 'both registered as plain');
    t.equal(
      withRopes(p.ropes, () => headOf(url, 30)),
      url.slice(0, 30),
      'headOf',
    );
    const out = { url, text: v.text, data };
    const w = new JsonWriter(out, p.ropes, { chunk: 100 });
    while (!w.step(Infinity, 7)) {
      /* next turn */
    }
    t.equal(w.toString(), JSON.stringify(out));
    t.equal(w.bytes, Buffer.byteLength(JSON.stringify(out)));
    const r = new Ropes();
    t.equal(
      withRopes(r, () => sliceLong('x'.repeat(5000), 10)),
      'x'.repeat(4990),
      'strings not of the body are sliced as usual',
    );
  },
);

t.test('block decoder: UTF-8 read exactly across blocks, invalid bytes refused, control characters seen per piece', async (t) => {
  const chars = fc.string({
    unit: fc.oneof(fc.constantFrom('a', 'é', '€', '😀', '\n', '"'), fc.string({ unit: 'grapheme', minLength: 1, maxLength: 1 })),
    maxLength: 200,
  });
  fc.assert(
    fc.property(
      chars,
      fc.integer({ min: 4, max: 17 }),
      fc.array(fc.integer({ min: 1, max: 9 }), { minLength: 1, maxLength: 8 }),
      (s, block, cuts) => {
        const bytes = Buffer.from(s, 'utf8');
        const c = new TextCollector(block);
        let at = 0;
        for (let i = 0; at < bytes.length; i++) {
          const n = cuts[i % cuts.length];
          c.write(bytes.subarray(at, at + n));
          at += n;
        }
        c.end();
        const text = c.text;
        const cleanOk = text.pieces.every((p, i) => text.clean[i] === !/[\x00-\x1f]/.test(p));
        const asciiOk = text.pieces.every((p, i) => !text.ascii[i] || !/[^\x00-\x7f]/.test(p));
        return (
          !c.invalid &&
          text.toString() === s &&
          text.bytes === bytes.length &&
          c.bytes === bytes.length &&
          cleanOk &&
          asciiOk &&
          text.byteLengths.every((n, i) => n === Buffer.byteLength(text.pieces[i]))
        );
      },
    ),
    { numRuns: 3_000, seed: 3 },
  );
  for (const bad of [
    Buffer.from([0x61, 0xff, 0x62]),
    Buffer.from([0x61, 0xe2, 0x82]),
    Buffer.from([0xed, 0xa0, 0x80]),
    Buffer.from('aaaaaaaa\xc3', 'latin1'),
  ]) {
    const c = new TextCollector(4);
    c.write(bad);
    c.end();
    t.ok(c.invalid, `invalid: ${bad.toString('hex')}`);
    t.ok(c.rawHead && c.rawHead.length > 0, 'its first bytes kept for the record');
  }
  const lt = new LargeText();
  lt.push('abc', true, true, 3);
  lt.push('déf', false, true, 4);
  t.equal(lt.slice(1, 5), 'bcdé');
  t.equal(lt.head(4), 'abcd');
});

t.test('long strings read from ASCII pieces are written as ASCII parts (latin1, byte for byte); others as UTF-8', async (t) => {
  const image = 'QUJD'.repeat(3000);
  const s = `{"url":"data:image/png;base64,${image}","text":"${'é'.repeat(5000)}"}`;
  const p = parseAll(textOf(s, 997), { longString: 64 });
  const v = p.value as { url: string; text: string };
  t.equal(p.ropes.get(v.url)?.ascii, true, 'the image URL is ASCII');
  t.equal(p.ropes.get(v.text)?.ascii, false, 'the text is not');
  const converted = withRopes(p.ropes, () => ({
    url: concatLong('data:image/jpeg;base64,', sliceLong(v.url, 'data:image/png;base64,'.length)),
    text: v.text,
  }));
  t.equal(p.ropes.get(converted.url)?.ascii, true, 'cut and joined, still ASCII');
  const w = new JsonWriter(converted, p.ropes, { chunk: 1000 });
  while (!w.step(Infinity)) {
    /* next turn */
  }
  t.equal(w.toString(), JSON.stringify(converted));
  t.equal(w.bytes, Buffer.byteLength(JSON.stringify(converted)));
  const imageParts = w.parts.filter((x) => /^[QUJD]+$/.test(x));
  t.ok(imageParts.length > 1, 'the image is written by parts');
  t.ok(
    w.parts.every((x, i) => !/^[QUJD]+$/.test(x) || w.asciiParts[i]),
    'every part of the image is marked ASCII',
  );
  t.ok(
    w.parts.every((x, i) => !x.includes('é') || !w.asciiParts[i]),
    'no part of the text is',
  );
});

t.test(
  "large-body work waits for the turn's share: a chunk arriving once it is spent is decoded in a later turn; a large upstream body is written likewise",
  async (t) => {
    const { Readable, Writable } = await import('node:stream');
    const { largeWork } = await import('../../core/json/share.js');
    const { readRaw } = await import('../../core/body.js');
    const { Abort } = await import('../../core/signal.js');
    const { OutgoingBody } = await import('../../core/json/text.js');
    const { writeParts } = await import('../../core/upstream/transport.js');
    const text = JSON.stringify({ model: 'm', data: 'x'.repeat(200) });
    const req = Object.assign(new Readable({ read() {} }), { headers: { 'content-length': String(text.length) } });
    const raw = readRaw(req as never, 1 << 20, new Abort(), undefined, 16);
    const decoded: number[] = [];
    // eslint-disable-next-line @typescript-eslint/unbound-method -- patched for this test, called with its own receiver
    const write = TextCollector.prototype.write;
    TextCollector.prototype.write = function (c: Buffer) {
      decoded.push(c.length);
      return write.call(this, c);
    };
    t.teardown(() => {
      TextCollector.prototype.write = write;
    });
    largeWork.charge(1e9); // this turn's share is spent
    req.push(Buffer.from(text.slice(0, 100)));
    req.push(Buffer.from(text.slice(100)));
    req.push(null);
    await new Promise((r) => process.nextTick(r));
    t.same(decoded, [], 'nothing decoded in the turn whose share was spent');
    const body = await raw;
    t.equal(body.large?.text.toString(), text, 'decoded in full later, in order');
    t.equal(
      decoded.reduce((a, b) => a + b, 0),
      text.length,
    );

    const out = new OutgoingBody();
    out.push('a'.repeat(100_000), true);
    out.push('é'.repeat(50_000));
    const got: Buffer[] = [];
    const dest = new Writable({
      write(c: Buffer, _e, cb) {
        got.push(c);
        cb();
      },
    });
    largeWork.charge(1e9);
    let sent!: () => void;
    const written = new Promise<void>((r) => (sent = r));
    writeParts(out, dest, sent);
    t.equal(got.length, 0, 'nothing written in the turn whose share was spent');
    await written;
    t.equal(Buffer.concat(got).toString('utf8'), out.toString(), 'the whole body, in order');
  },
);
