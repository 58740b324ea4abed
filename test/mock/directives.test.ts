import t from 'tap';
import { parseDirectives, splitModel, stripDirectives } from '../../mock/directives.js';
import { argumentsFor, countInputTokens, fragmentsOf, replyWords, thinkingWords } from '../../mock/content.js';

t.test('model suffix directives', async (t) => {
  t.same(splitModel('demo-chat#status=503,retry_after=2'), { name: 'demo-chat', directives: 'status=503,retry_after=2' });
  t.same(splitModel('plain'), { name: 'plain', directives: '' });
  const d = parseDirectives('demo-chat#status=503,retry_after=2', '{}');
  t.equal(d.status, 503);
  t.equal(d.retryAfter, '2');
});

t.test('body directives, several blocks, flags, later wins, body beats model', async (t) => {
  const body = JSON.stringify({
    model: 'm#words=4,status=500',
    messages: [
      { role: 'user', content: 'hi [[mock: words=7 no_done]] there' },
      { role: 'user', content: '[[mock: status=429 cut-after=3 HANG thinking]]' },
    ],
  });
  const d = parseDirectives('m#words=4,status=500', body);
  t.equal(d.words, 7);
  t.equal(d.status, 429);
  t.equal(d.cutAfter, 3);
  t.equal(d.noDone, true);
  t.equal(d.hang, true);
  t.equal(d.thinking, true);
  t.equal(d.raw.words, '7');
});

t.test('typed values and ignored garbage', async (t) => {
  const d = parseDirectives(
    undefined,
    '[[mock: status=abc delay=-5 chunk_delay=10 tool_calls=3 thinking=5 replay=a\\/b.sse unknown=1 should_retry=false]]',
  );
  t.equal(d.status, undefined, 'non-numeric status ignored');
  t.equal(d.delay, undefined, 'negative delay ignored');
  t.equal(d.chunkDelay, 10);
  t.equal(d.toolCalls, 3);
  t.equal(d.tools, true, 'tool_calls implies tools');
  t.equal(d.thinking, 5);
  t.equal(d.replay, 'a/b.sse', 'JSON-escaped slash unescaped');
  t.equal(d.shouldRetry, false);
  t.equal(d.raw.unknown, '1');
  t.equal(parseDirectives(undefined, '[[mock: no_tools thinking=0]]').tools, false);
  t.equal(parseDirectives(undefined, '[[mock: thinking=0]]').thinking, false);
  t.equal(parseDirectives(undefined, '[[mock: stream_error]]').streamError, 0);
});

t.test('content functions', async (t) => {
  t.equal(stripDirectives('a [[mock: x=1]] b').replace(/\s+/g, ' '), 'a b');
  t.equal(countInputTokens(['hello world', '  three more words [[mock: words=2]] ']), 5, 'words, directives excluded');
  t.equal(countInputTokens([]), 1, 'at least one');
  t.equal(replyWords('Hello there', undefined).join(' '), 'This is a mock reply. You said: Hello there');
  t.equal(replyWords('', undefined).join(' '), 'This is a mock reply.');
  t.equal(replyWords('one two three four five six seven eight nine ten', undefined).length, 15, 'echo capped at 8 words');
  t.equal(replyWords('x', 3).join(' '), 'This is a');
  t.equal(replyWords('', 8).join(' '), 'This is a mock reply. lorem ipsum dolor');
  t.equal(thinkingWords('Hi', undefined).join(' '), 'Thinking about the request: Hi. A short deterministic answer will do.');
  t.equal(
    argumentsFor({
      type: 'object',
      properties: {
        city: { type: 'string' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        n: { type: 'integer' },
        flag: { type: ['boolean', 'null'] },
        tags: { type: 'array', items: { type: 'string' } },
        nested: { type: 'object', properties: { x: { type: 'number' } } },
      },
    }),
    '{"city":"mock","unit":"celsius","n":1,"flag":true,"tags":[],"nested":{"x":1}}',
  );
  t.equal(argumentsFor(undefined), '{}');
  t.same(fragmentsOf('{"city":"mock"}'), ['{"city', '":"moc', 'k"}']);
});
