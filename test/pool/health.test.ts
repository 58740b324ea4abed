/**
 * Account health as pure functions: what an outcome does to an account, cooldown lengths from
 * provider headers or backoff, and which accounts count as slow.
 */
import t from 'tap';
import {
  classifyOutcome,
  cooldownMs,
  parseResetDuration,
  providerDelayMs,
  slowAccounts,
  TTFT_SAMPLES,
  TtftWindow,
} from '../../core/pool/health.js';
import { GatewayError } from '../../core/errors.js';
import { mapUpstreamStatus } from '../../core/upstream/http.js';

const NOW = Date.UTC(2026, 0, 1);
const sched = { cooldownMs: 1000, maxCooldownMs: 10_000, slowFactor: 3, slowMarginMs: 1000 };

function status(s: number, headers: Record<string, string> = {}) {
  return classifyOutcome(
    { status: s, failure: 'status', error: mapUpstreamStatus(s, headers, ''), responseHeaders: headers },
    { committed: false, now: NOW },
  );
}

t.test('outcomes', async (t) => {
  t.same(classifyOutcome({}, { committed: false, now: NOW }), { kind: 'ok', health: 'success', failover: false });
  t.match(status(401), { kind: 'auth_error', health: 'disable', failover: true });
  t.match(status(403), { kind: 'auth_error', health: 'disable', failover: true });
  t.match(status(429, { 'retry-after': '2' }), { kind: 'rate_limited', health: 'cooldown', failover: true, delayMs: 2000 });
  t.match(status(529), { kind: 'overloaded', health: 'cooldown', failover: true });
  t.match(status(500), { kind: 'server_error', health: 'cooldown', failover: true });
  t.match(status(503, { 'retry-after': '3' }), { kind: 'server_error', delayMs: 3000 });
  for (const s of [400, 404, 413, 422])
    t.match(status(s), { kind: 'client_error', health: 'none', failover: false }, `${s}: the request's own fault`);
  const err = new GatewayError('UPSTREAM_ERROR');
  t.match(classifyOutcome({ failure: 'timeout', error: err }, { committed: false, now: NOW }), {
    kind: 'timeout',
    health: 'cooldown',
    failover: true,
  });
  t.match(classifyOutcome({ failure: 'connect', error: err }, { committed: false, now: NOW }), {
    kind: 'connect_error',
    health: 'cooldown',
    failover: true,
  });
  t.match(classifyOutcome({ failure: 'event', error: new GatewayError('OVERLOADED') }, { committed: false, now: NOW }), {
    kind: 'overloaded',
    failover: true,
  });
  t.match(classifyOutcome({ failure: 'event', error: new GatewayError('INVALID_REQUEST') }, { committed: false, now: NOW }), {
    kind: 'client_error',
    failover: false,
  });
  t.match(
    classifyOutcome({ failure: 'connect', error: err }, { committed: true, now: NOW }),
    { kind: 'stream_error', health: 'none', failover: false },
    'after commit: too late to move, and not held against the account',
  );
  t.match(
    classifyOutcome({ failure: 'connect', error: new GatewayError('UPSTREAM_ERROR', { status: 499 }) }, { committed: false, now: NOW }),
    { kind: 'aborted', health: 'none', failover: false },
    'the client went away',
  );
});

t.test('cooldown length: provider delay (capped), else backoff', async (t) => {
  t.equal(cooldownMs({ kind: 'rate_limited', health: 'cooldown', failover: true, delayMs: 2000 }, 1, sched), 2000);
  t.equal(
    cooldownMs({ kind: 'rate_limited', health: 'cooldown', failover: true, delayMs: 60_000 }, 1, sched),
    10_000,
    'capped by max_cooldown',
  );
  const r = { kind: 'server_error' as const, health: 'cooldown' as const, failover: true };
  t.same(
    [1, 2, 3, 4, 5, 50].map((n) => cooldownMs(r, n, sched)),
    [1000, 2000, 4000, 8000, 10_000, 10_000],
  );
});

t.test('provider delays from headers', async (t) => {
  t.equal(providerDelayMs({ 'retry-after-ms': '1500', 'retry-after': '9' }, NOW, true), 1500);
  t.equal(providerDelayMs({ 'retry-after': new Date(NOW + 4000).toUTCString() }, NOW, true), 4000);
  t.equal(
    providerDelayMs(
      {
        'x-ratelimit-remaining-requests': '0',
        'x-ratelimit-reset-requests': '6m0s',
        'x-ratelimit-remaining-tokens': '900',
        'x-ratelimit-reset-tokens': '20ms',
      },
      NOW,
      true,
    ),
    360_000,
    'the exhausted limit',
  );
  t.equal(
    providerDelayMs({ 'x-ratelimit-reset-requests': '2s', 'x-ratelimit-reset-tokens': '500ms' }, NOW, true),
    500,
    'none known exhausted: the shortest',
  );
  t.equal(
    providerDelayMs(
      { 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': new Date(NOW + 7000).toISOString() },
      NOW,
      true,
    ),
    7000,
  );
  t.equal(providerDelayMs({ 'x-ratelimit-reset-requests': '2s' }, NOW, false), undefined, 'resets only for rate limits');
  t.equal(providerDelayMs({}, NOW, true), undefined);
  t.same(['1s', '6m0s', '1h2m3.5s', '20ms', '2', 'soon'].map(parseResetDuration), [1000, 360_000, 3_723_500, 20, 2000, undefined]);
});

t.test('time to first token: median of recent samples, slow against the fastest peer', async (t) => {
  const w = new TtftWindow();
  w.add(NOW, 100);
  w.add(NOW, 300);
  t.equal(w.figure(NOW), undefined, 'too few samples');
  w.add(NOW, 200);
  t.equal(w.figure(NOW), 200);
  t.equal(w.figure(NOW + 11 * 60_000), undefined, 'old samples stop counting');
  const last = new TtftWindow();
  for (let i = 0; i < TTFT_SAMPLES; i++) last.add(NOW, 1000);
  for (let i = 0; i < TTFT_SAMPLES; i++) last.add(NOW, 10);
  t.equal(last.figure(NOW), 10, 'only the last samples count');
  for (let i = 0; i < 4; i++) last.add(NOW, 500);
  t.equal(last.figure(NOW), 255, 'the newest samples replace the oldest: four of 10, four of 500');
  const figures = new Map<string, number | undefined>([
    ['fast', 50],
    ['slow', 2000],
    ['ok', 120],
    ['new', undefined],
  ]);
  t.same([...slowAccounts(figures, sched)], ['slow']);
  t.same(
    [
      ...slowAccounts(
        new Map([
          ['a', 300],
          ['b', 1100],
        ]),
        sched,
      ),
    ],
    [],
    'above 3× but not 1 s above: not slow',
  );
  t.same([...slowAccounts(new Map([['a', 2000]]), sched)], [], 'no peer: never slow');
});
