/**
 * The per-request metrics skip prom-client's label hashing once a series exists (core/metrics.ts
 * `HotCounter`, `HotGauge`, `HotHistogram`). What a scrape shows must not change: the same
 * operations on the gateway's metrics and on plain prom-client metrics give the same Prometheus
 * text, and a gateway's scrape after N requests (then N + M) counts each of them exactly.
 */
import t from 'tap';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { createMetrics, HotCounter, HotGauge, HotHistogram } from '../../core/metrics.js';
import { baseConfig, bearer, call, KEYS, startGateway } from '../helpers/gateway.js';
import { bodyFor, directive } from '../limits/helpers.js';
import { parseProm, total } from '../helpers/prom.js';

/** The same metrics twice: the gateway's classes on one registry, prom-client's on another. */
function twins() {
  const hot = new Registry();
  const plain = new Registry();
  const make = (r: Registry, C: typeof Counter, G: typeof Gauge, H: typeof Histogram) => ({
    c: new C({ name: 'c_total', help: 'c', labelNames: ['a', 'b'] as const, registers: [r] }),
    g: new G({ name: 'g', help: 'g', labelNames: ['a'] as const, registers: [r] }),
    h: new H({ name: 'h_seconds', help: 'h', labelNames: ['a', 'b'] as const, buckets: [0.01, 0.1, 1], registers: [r] }),
    u: new C({ name: 'u_total', help: 'unlabelled', registers: [r] }),
  });
  return { hot, plain, h: make(hot, HotCounter, HotGauge, HotHistogram), p: make(plain, Counter, Gauge, Histogram) };
}

t.test("the gateway's metric classes scrape exactly like prom-client's for the same operations", async (t) => {
  const { hot, plain, h, p } = twins();
  // A deterministic pseudo-random sequence: label values, values, operations.
  let seed = 7;
  const rnd = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
  const as = ['x', 'y', 'z'];
  const bs = ['1', '2'];
  for (let i = 0; i < 5000; i++) {
    const a = as[rnd(3)];
    const b = bs[rnd(2)];
    const v = rnd(1000);
    for (const m of [h, p]) {
      // Key order varies: the lookup goes by label name, not by the object's order.
      m.c.inc(i % 2 ? { a, b } : { b, a }, v);
      m.c.inc({ a, b });
      m.h.observe({ a, b }, v / 997);
      m.g.inc({ a }, v);
      m.g.dec({ a });
      m.u.inc();
    }
    if (i === 2500) {
      for (const m of [h, p]) {
        m.g.set({ a: 'x' }, 5); // replaces prom-client's series object
        m.c.remove('y', '1');
        m.h.labels('z', '2').observe(0.5);
        m.c.inc({ a: 'x', b: '2' }, null as unknown as number); // prom-client counts a null as 1
      }
    }
    if (i === 4000) {
      for (const m of [h, p]) m.h.reset();
    }
  }
  const hotText = await hot.metrics();
  t.equal(hotText, await plain.metrics(), 'identical Prometheus text');
  // The text is not trivially equal: it holds the counts.
  const samples = parseProm(hotText);
  t.equal(total(samples, 'u_total'), 5000);
  t.ok(total(samples, 'c_total') > 5000, 'counter sums present');
  t.equal(total(samples, 'h_seconds_count'), 999, 'observations since the reset at 4000');
  t.equal(total(samples, 'h_seconds_bucket', { le: '+Inf' }), 999);

  // Refusals stay prom-client's, on a series that exists too.
  t.throws(() => h.c.inc({ a: 'x', b: '1' }, -1), /not possible to decrease/);
  t.throws(() => h.h.observe({ a: 'x', b: '1' }, Infinity), /not a valid number/);
  t.throws(() => h.c.inc({ a: 'x', nope: '1' } as never), /label/, 'an unknown label name is refused');
});

t.test("bound series (`series()`, kept per label set) scrape exactly like prom-client's labelled calls", async (t) => {
  const { hot, plain, h, p } = twins();
  const bound = new Map<
    string,
    { c: { inc(v?: number): void }; h: { observe(v: number): void }; g: { inc(v?: number): void; dec(v?: number): void } }
  >();
  const of = (a: string, b: string) => {
    let x = bound.get(a + b);
    if (!x)
      bound.set(
        a + b,
        (x = {
          c: (h.c as HotCounter<'a' | 'b'>).series({ a, b }),
          h: (h.h as HotHistogram<'a' | 'b'>).series({ a, b }),
          g: (h.g as HotGauge<'a'>).series({ a }),
        }),
      );
    return x;
  };
  let seed = 11;
  const rnd = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
  for (let i = 0; i < 5000; i++) {
    const a = ['x', 'y', 'z'][rnd(3)];
    const b = ['1', '2'][rnd(2)];
    const v = rnd(1000);
    const s = of(a, b);
    s.c.inc(v);
    s.c.inc();
    s.h.observe(v / 997);
    s.g.inc(v);
    s.g.dec();
    p.c.inc({ a, b }, v);
    p.c.inc({ a, b });
    p.h.observe({ a, b }, v / 997);
    p.g.inc({ a }, v);
    p.g.dec({ a });
    // What makes prom-client drop or replace its series objects: a bound series must follow.
    if (i === 1000) for (const m of [h, p]) m.c.remove('y', '1');
    if (i === 2000) for (const m of [h, p]) m.g.set({ a: 'x' }, 5);
    if (i === 3000) for (const m of [h, p]) m.h.reset();
    if (i === 3500) {
      hot.resetMetrics();
      plain.resetMetrics();
    }
    if (i === 4000) for (const m of [h, p]) m.h.zero({ a: 'z', b: '2' });
  }
  const text = await hot.metrics();
  t.equal(text, await plain.metrics(), 'identical Prometheus text');
  t.ok(total(parseProm(text), 'h_seconds_count') > 1000, 'the text holds the counts');
  // A value prom-client refuses is still refused through a bound series.
  t.throws(() => of('x', '1').c.inc(-1), /not possible to decrease/);
  t.throws(() => of('x', '1').h.observe(NaN), /not a valid number/);
});

t.test('a scrape after N requests, then N + M, counts each request exactly', async (t) => {
  const g = await startGateway(baseConfig());
  t.teardown(() => g.close());
  const chat = async () => {
    const r = await call(g.url + '/v1/chat/completions', {
      headers: bearer(KEYS.chat),
      json: bodyFor('chat', 'chat-model', directive({ input: 10, output: 20 })),
    });
    if (r.status !== 200) throw new Error(`chat: ${r.status} ${r.text}`);
  };
  const scrape = async () => parseProm(await (await fetch(g.url + '/metrics')).text());
  const check = (s: ReturnType<typeof parseProm>, n: number, when: string) => {
    const chatLabels = { provider: 'mock', model: 'chat-model', group: 'chat' };
    t.equal(total(s, 'gateway_requests_total', { route: 'openai-chat', status: '200' }), n, `${when}: requests`);
    t.equal(total(s, 'gateway_request_duration_seconds_count', { route: 'openai-chat' }), n, `${when}: durations`);
    t.equal(total(s, 'gateway_request_duration_seconds_bucket', { route: 'openai-chat', le: '+Inf' }), n, `${when}: +Inf bucket`);
    t.equal(total(s, 'gateway_requests_in_flight', { route: 'openai-chat' }), 0, `${when}: nothing in flight`);
    t.equal(total(s, 'gateway_tokens_total', { ...chatLabels, bucket: 'input' }), 10 * n, `${when}: input tokens`);
    t.equal(total(s, 'gateway_tokens_total', { ...chatLabels, bucket: 'output' }), 20 * n, `${when}: output tokens`);
    t.equal(total(s, 'gateway_tokens_total', { ...chatLabels, bucket: 'cache_read' }), 0, `${when}: cache_read series, 0`);
    t.equal(total(s, 'gateway_charged_micro_usd_total', chatLabels), 50 * n, `${when}: charged micro-USD (10 × $1 + 20 × $2 per M)`);
    t.equal(total(s, 'gateway_upstream_attempts_total', { provider: 'mock', model: 'chat-model', outcome: 'ok' }), n, `${when}: attempts`);
    t.equal(
      total(s, 'gateway_upstream_latency_seconds_count', { provider: 'mock', model: 'chat-model' }),
      n,
      `${when}: upstream latencies`,
    );
    t.equal(total(s, 'gateway_store_operation_seconds_count', { store: 'memory', op: 'admit' }), n, `${when}: admissions timed`);
    t.equal(total(s, 'gateway_store_operation_seconds_count', { store: 'memory', op: 'settle' }), n, `${when}: settlements timed`);
  };
  const N = 37;
  const M = 23;
  for (let i = 0; i < N; i++) await chat();
  check(await scrape(), N, 'after N');
  await Promise.all(Array.from({ length: M }, chat));
  check(await scrape(), N + M, 'after N + M');
});

t.test("plugin metrics made through deps.metrics are the same fast kind and keep prom-client's API", async (t) => {
  const m = createMetrics({ defaultMetrics: false });
  const c = m.counter({ name: 'plugin_things_total', help: 'things', labelNames: ['kind'] });
  t.ok(c instanceof Counter);
  t.equal(m.counter({ name: 'plugin_things_total', help: 'things', labelNames: ['kind'] }), c, 'the registered one is reused');
  for (let i = 0; i < 10; i++) c.inc({ kind: 'a' });
  c.labels('a').inc(5);
  c.inc({ kind: 'b' }, 2);
  const v = await c.get();
  t.same(
    v.values.map((x) => [x.labels, x.value]),
    [
      [{ kind: 'a' }, 15],
      [{ kind: 'b' }, 2],
    ],
  );
  c.reset();
  c.inc({ kind: 'a' });
  t.same(
    (await c.get()).values.map((x) => [x.labels, x.value]),
    [[{ kind: 'a' }, 1]],
    'after reset, counting starts over',
  );
});
