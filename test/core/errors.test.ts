/**
 * The retry signal and the body formats of the error catalogue (core/errors.ts). Every error the
 * contract says not to retry carries `x-should-retry: false` in every body format; nothing ever
 * says `x-should-retry: true`; flat bodies carry an `error` object with the same meaning.
 * The SDKs' own behaviour against these headers is in test/e2e/retry.test.ts.
 */
import t from 'tap';
import { CATALOGUE, GatewayError, isRetryable, renderError, type ErrorFormat, type ErrorId } from '../../core/errors.js';

const FORMATS: ErrorFormat[] = ['flat', 'messages', 'chat', 'responses-lite'];

/** One row per non-retryable status of the contract (§7.2, §8 rule 7; wire-notes "Retry signals"). */
const FINAL: Array<[string, ErrorId, Record<string, unknown>?]> = [
  ['400 malformed request', 'INVALID_REQUEST'],
  ['400 key in the query string', 'API_KEY_IN_QUERY'],
  ['401 missing key', 'API_KEY_REQUIRED'],
  ['401 wrong key', 'INVALID_API_KEY'],
  ['401 disabled key', 'API_KEY_DISABLED'],
  ['402 spend cap', 'SPEND_CAP_REACHED', { retryAfter: 3600 }],
  ['403 expired key', 'API_KEY_EXPIRED'],
  ['403 balance', 'BILLING_ERROR'],
  ['403 IP rule', 'ACCESS_DENIED'],
  ['403 no group', 'NO_GROUP'],
  ['403 Messages not allowed', 'MESSAGES_NOT_ALLOWED'],
  ['404 endpoint not served', 'ENDPOINT_NOT_SERVED'],
  ['409 malformed session', 'MALFORMED_SESSION'],
  ['413 body too large', 'BODY_TOO_LARGE'],
  ['413 from the upstream', 'BODY_TOO_LARGE', { message: 'prompt is too long' }],
  ['429 key quota', 'API_KEY_QUOTA_EXHAUSTED'],
  ['429 key window', 'WINDOW_EXHAUSTED'],
  ['429 plan limit', 'USAGE_LIMIT_EXCEEDED'],
  ['503 no available accounts', 'NO_ACCOUNTS'],
  ['503 pricing not available', 'PRICING_UNAVAILABLE'],
  ['503 every account of the model disabled', 'ACCOUNTS_DISABLED'],
];

/** Errors clients should retry with their own backoff: no header at all. */
const RETRY: Array<[string, ErrorId, Record<string, unknown>?]> = [
  ['429 requests per minute', 'RPM_EXCEEDED', { retryAfter: 12 }],
  ['429 free-model rate', 'FREE_RPM_EXCEEDED', { retryAfter: 12 }],
  ['429 queue full', 'QUEUE_FULL'],
  ['429 queued too long', 'QUEUE_TIMEOUT'],
  ['429 held by requests in flight', 'LIMIT_HELD', { retryAfter: 1 }],
  ['429 provider rate limit', 'PROVIDER_RATE_LIMIT'],
  ['502 upstream error', 'UPSTREAM_ERROR'],
  ['503 overloaded', 'OVERLOADED'],
  ['503 billing service', 'BILLING_SERVICE'],
  ['503 no channel now', 'NO_CHANNELS'],
  ['429 every account cooling down', 'ACCOUNTS_COOLING', { retryAfter: 5 }],
  ['503 every account busy', 'ACCOUNTS_BUSY'],
  ['500 internal', 'INTERNAL'],
];

for (const [name, id, opts] of FINAL) {
  t.test(`${name}: x-should-retry: false in every body format`, async (t) => {
    const err = new GatewayError(id, opts);
    t.notOk(isRetryable(err));
    for (const f of FORMATS) {
      const r = renderError(err, f);
      t.equal(r.status, CATALOGUE[id].status, `${f}: status`);
      t.equal(r.headers['x-should-retry'], 'false', `${f}: x-should-retry: false`);
    }
  });
}

for (const [name, id, opts] of RETRY) {
  t.test(`${name}: retryable, no x-should-retry header`, async (t) => {
    const err = new GatewayError(id, opts);
    t.ok(isRetryable(err));
    for (const f of FORMATS) t.notOk('x-should-retry' in renderError(err, f).headers, `${f}: no header`);
  });
}

t.test('the signal is structural: every entry, whatever status it is thrown with', async (t) => {
  for (const [id, e] of Object.entries(CATALOGUE)) {
    t.ok(e.category, `${id} has a category`);
    const err = new GatewayError(id as ErrorId, { retryAfter: 1 });
    const header = renderError(err, 'chat').headers['x-should-retry'];
    t.not(header, 'true', `${id}: never "true"`);
    if (e.status >= 400 && e.status < 500 && e.status !== 429) t.equal(header, 'false', `${id}: a ${e.status} is final by its status`);
    if (e.category === 'exhausted' || e.category === 'unserved') t.equal(header, 'false', `${id}: ${e.category} is final`);
    if (e.category === 'throttled' || e.category === 'transient')
      t.equal(e.status >= 429, true, `${id}: retryable categories are 429 or 5xx`);
  }
  // A status override decides too: an upstream 4xx passed through as is.
  t.equal(
    renderError(new GatewayError('UPSTREAM_ERROR', { status: 404 }), 'chat').headers['x-should-retry'],
    'false',
    'a 404 thrown from a 5xx entry',
  );
  t.notOk(
    'x-should-retry' in renderError(new GatewayError('PROVIDER_RATE_LIMIT', { status: 429 }), 'chat').headers,
    'a provider 429 stays retryable',
  );
});

t.test('flat bodies keep {code, message} and carry error {type, code, message} with the same meaning', async (t) => {
  const r = renderError(new GatewayError('INVALID_API_KEY'), 'chat');
  t.same(r.body, {
    code: 'INVALID_API_KEY',
    message: 'Invalid API key',
    error: { type: 'authentication_error', code: 'INVALID_API_KEY', message: 'Invalid API key' },
  });
  const q = renderError(new GatewayError('API_KEY_QUOTA_EXHAUSTED'), 'messages');
  t.equal(q.body.code, 'API_KEY_QUOTA_EXHAUSTED', 'flat whatever the route');
  t.same(q.body.error, { type: 'rate_limit_error', code: 'API_KEY_QUOTA_EXHAUSTED', message: 'API key quota exhausted' });
  const m = renderError(new GatewayError('SPEND_CAP_REACHED', { retryAfter: 90.2 }), 'messages');
  t.same(
    m.body,
    { type: 'error', error: { type: 'spend_cap_reached', message: 'Account spend cap reached' } },
    'protocol formats unchanged',
  );
  t.equal(m.headers['retry-after'], '91', 'Retry-After in whole seconds');
});
