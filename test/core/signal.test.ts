/**
 * core/signal.ts: the minimal abort signal behind ctx.clientGone and the stores' slot waits behaves
 * as the AbortSignal it replaces where the gateway relies on it.
 */
import t from 'tap';
import { Abort } from '../../core/signal.js';

t.test('listeners run once, in the order added; removed, duplicate and late ones do not', async (t) => {
  const a = new Abort();
  const ran: string[] = [];
  const one = () => ran.push('one');
  const two = () => ran.push('two');
  const gone = () => ran.push('removed');
  a.addEventListener('abort', one);
  a.addEventListener('abort', two, { once: true });
  a.addEventListener('abort', one); // the same listener again: still once
  a.addEventListener('abort', gone);
  a.removeEventListener('abort', gone);
  t.equal(a.aborted, false);
  a.abort();
  a.abort();
  t.equal(a.aborted, true);
  t.same(ran, ['one', 'two']);
  a.addEventListener('abort', () => ran.push('late'));
  t.same(ran, ['one', 'two'], 'a listener added after the abort never runs');
});

t.test('a listener that removes itself or another during the abort, or throws, stops nothing', async (t) => {
  const a = new Abort();
  const ran: string[] = [];
  const second = () => ran.push('second');
  a.addEventListener('abort', () => {
    ran.push('first');
    a.removeEventListener('abort', second);
  });
  a.addEventListener('abort', second);
  a.addEventListener('abort', () => {
    throw new Error('listener failed');
  });
  a.addEventListener('abort', () => ran.push('last'));
  const thrown = new Promise<unknown>((resolve) => process.once('uncaughtException', resolve));
  a.abort();
  t.same(ran, ['first', 'second', 'last'], 'every listener present when the abort began runs');
  t.match(await thrown, { message: 'listener failed' }, 'the error is reported as an EventTarget reports it');
});

t.test('signal() is a real AbortSignal that follows it, made before or after the abort', async (t) => {
  const before = new Abort();
  const s = before.signal();
  t.ok(s instanceof AbortSignal);
  t.equal(before.signal(), s, 'one signal per Abort');
  let fired = 0;
  s.addEventListener('abort', () => fired++);
  t.equal(s.aborted, false);
  before.abort();
  t.equal(s.aborted, true);
  t.equal(fired, 1);
  const after = new Abort();
  after.abort();
  t.equal(after.signal().aborted, true, 'made after the abort: already aborted');
});
