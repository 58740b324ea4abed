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
