import t from 'tap';
import { spliceJson } from '../../core/protocols/splice.js';

t.test('replaces a value and leaves every other byte alone', async (t) => {
  const src = '{ "model" : "a",\n  "messages": [ {"role":"user","content":"x"} ],\n  "seed": 12345678901234567890, "t": 1.0 }';
  const out = spliceJson(src, { set: { model: 'up/stream' } });
  t.equal(out, src.replace('"a"', '"up/stream"'));
});

t.test('removes members at the start, middle and end', async (t) => {
  t.equal(spliceJson('{"models":["b"],"model":"a","x":1}', { remove: ['models'] }), '{"model":"a","x":1}');
  t.equal(spliceJson('{"model":"a", "models":["b"], "x":1}', { remove: ['models'] }), '{"model":"a", "x":1}');
  t.equal(spliceJson('{"model":"a","x":1,"models":["b"]}', { remove: ['models'] }), '{"model":"a","x":1}');
  t.equal(spliceJson('{"models":["b"]}', { remove: ['models'] }), '{}');
  t.equal(spliceJson('{"a":1,"models":[],"b":2,"models":[]}', { remove: ['models'] }), '{"a":1,"b":2}');
});

t.test('adds members that are absent', async (t) => {
  t.equal(
    spliceJson('{"model":"a"}', { set: { stream_options: { include_usage: true } } }),
    '{"model":"a","stream_options":{"include_usage":true}}',
  );
  t.equal(spliceJson('{ }', { set: { a: 1 } }), '{ "a":1}');
});

t.test('handles escapes, nested strings with braces and duplicate keys', async (t) => {
  const src = '{"mod\\u0065l":"a","messages":[{"content":"} \\" {"}],"model":"b"}';
  const out = spliceJson(src, { set: { model: 'z' } });
  t.same(JSON.parse(out), { model: 'z', messages: [{ content: '} " {' }] });
  t.equal(out, '{"mod\\u0065l":"z","messages":[{"content":"} \\" {"}],"model":"z"}');
});

t.test('result is always valid JSON equal to the edited object', async (t) => {
  const samples = [
    '{"model":"a","models":["b","c"],"stream":true,"messages":[]}',
    '  {\n\t"messages" : [],\n\t"models":null,\n\t"model":"a"\n}  ',
    '{"__proto__":{"x":1},"model":"a"}',
  ];
  for (const s of samples) {
    const out = spliceJson(s, { set: { model: 'm2' }, remove: ['models'] });
    const expected = JSON.parse(s);
    expected.model = 'm2';
    delete expected.models;
    t.same(JSON.parse(out), expected);
  }
});

// Passthrough forwards a body its edits would not change without splicing it (a search of the text
// instead of a scan of its members). It must give exactly what the splice gives, for every body:
// a duplicate, an escaped key or a nested `model` must not let a second value through unedited.
t.test('passthrough: a body the edits would not change goes as it is; any other is spliced, every duplicate rewritten', async (t) => {
  const bodies = [
    '{"model":"up","messages":[]}',
    '{ "model" : "up" ,\n "messages": [{"role":"user","content":"say \\"model\\""}] }',
    '{"model":"a","messages":[]}',
    '{"model":"cheap","model":"up","messages":[]}',
    '{"mod\\u0065l":"cheap","model":"up"}',
    '{"model":"up","mod\\u0065l":"cheap"}',
    '{"model":"up","models":["x"]}',
    '{"model":"up","messages":[{"role":"model","content":"hi"}]}',
    '{"model":"up","tools":[{"parameters":{"properties":{"model":{"type":"string"}}}}]}',
    '{"model":"up","stream":true}',
    '{\n  "model": "up",\n  "stream": true,\n  "messages": [{"role": "user", "content": "}"}]\n}\n',
    '{"model":"up","stream":true,"messages":[],"note":{"stream_options":1}}',
    '{"model":"up","stream":true,"stream_options":null}',
    '{"model":"up","stream":true,"metadata":{"a":"\\"stream_options\\""}}',
    '{"model":"up","stream":true,"stream_options":{"include_usage":true}}',
    '{"model":"up","stream":true,"stream_options":{"include_usage":false}}',
    '{"model":"up","stream":true,"stream_options":{"include_usage":false,"include_usage":true}}',
    '{"model":"up","stream":true,"stream_options":{"include_usage":false},"stream_options":{"include_usage":true}}',
    '{"model":"up","stream":true,"stream_options":{"include_usage":true},"note":"C:\\\\users"}',
  ];
  const { passthrough } = await import('../../core/protocols/passthrough.js');
  for (const protocol of ['openai-chat', 'anthropic-messages', 'openai-responses'] as const) {
    const conv = passthrough(protocol);
    for (const text of bodies) {
      const json = JSON.parse(text) as Record<string, unknown>;
      const stream = json.stream === true;
      const out = conv.requestBody({ text, json, stream, upstreamModel: 'up', requestId: 'r' });
      const set: Record<string, unknown> = { model: 'up' };
      if (protocol === 'openai-chat' && stream) {
        const so = json.stream_options as Record<string, unknown> | undefined;
        set.stream_options = { ...(so ?? {}), include_usage: true };
      }
      t.equal(out, spliceJson(text, { set, remove: ['models'] }), `${protocol}: ${text}`);
      // What any upstream parser reads, first or last of duplicates: the upstream's model, and usage asked for.
      for (const m of out.matchAll(/"mod(?:el|\\u0065l)"\s*:\s*"([^"]*)"/g))
        t.equal(m[1], 'up', `${protocol}: every model member is the upstream's`);
      if (protocol === 'openai-chat' && stream) t.notMatch(out, /"include_usage":false/, `${protocol}: no include_usage: false left`);
    }
  }
});
