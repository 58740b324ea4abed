/**
 * The mock tells callers apart by credential: per-credential counts, an in-flight gauge, and
 * scripted answers (every request, or one-shot in order) that win over the request's directives.
 */
import t from 'tap';
import { startMockServer } from '../../mock/server.js';

const body = (text: string) => JSON.stringify({ model: 'm', messages: [{ role: 'user', content: text }] });

t.test('per-credential stats and scripts', async (t) => {
  const mock = await startMockServer();
  t.teardown(() => mock.close());
  const post = (headers: Record<string, string>, text = 'hi') =>
    fetch(mock.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: body(text),
    });

  mock.script('key-a', { always: 'delay=150', next: ['status=429 retry_after=2', 'status=503'] });
  const r1 = await post({ authorization: 'Bearer key-a' });
  t.equal(r1.status, 429, 'first scripted answer');
  t.equal(r1.headers.get('retry-after'), '2');
  t.equal((await post({ authorization: 'Bearer key-a' }, '[[mock: status=200]]')).status, 503, 'the script wins over the body');
  t.equal((await post({ authorization: 'Bearer key-a' })).status, 200, 'scripts used up: normal again');
  const r4 = await post({ 'x-api-key': 'key-b' });
  t.equal(r4.status, 200, 'another credential is not affected');
  await r4.text();
  t.equal((await post({})).status, 200);

  const parallel = await Promise.all([1, 2, 3].map(() => post({ 'x-api-key': 'key-a' }).then((r) => r.text())));
  t.equal(parallel.length, 3);
  const a = mock.credential('key-a');
  t.equal(a.requests, 6);
  t.equal(a.maxInFlight, 3, 'three delayed requests at once');
  t.equal(a.inFlight, 0);
  t.equal(a.arrivals.length, 6);
  t.equal(mock.credential('key-b').requests, 1, 'x-api-key counts as the credential');
  t.equal(mock.credential('').requests, 1, 'no credential: the empty one');
  t.same(
    mock.requests.slice(0, 5).map((r) => r.credential),
    ['key-a', 'key-a', 'key-a', 'key-b', ''],
  );
  t.same([...mock.credentials.keys()].sort(), ['', 'key-a', 'key-b']);
});
