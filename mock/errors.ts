/**
 * The providers' real error bodies and headers, by protocol and status.
 *   OpenAI (Chat, Responses): {"error":{"message","type","param":null,"code"}} + x-request-id
 *   Anthropic (Messages):     {"type":"error","error":{"type","message"},"request_id"} + request-id
 */
import type { Directives } from './directives.js';
import type { Protocol } from './content.js';

export interface ErrorReply {
  status: number;
  headers: Record<string, string>;
  body: string;
}

type Headers = Record<string, string>;

const OPENAI: Record<number, { type: string; code: string | null; message: string }> = {
  400: { type: 'invalid_request_error', code: null, message: 'Invalid request (mock upstream).' },
  401: {
    type: 'invalid_request_error',
    code: 'invalid_api_key',
    message: 'Incorrect API key provided: sk-mock***. You can find your API key at https://platform.openai.com/account/api-keys.',
  },
  403: {
    type: 'invalid_request_error',
    code: 'unsupported_country_region_territory',
    message: 'Country, region, or territory not supported',
  },
  404: {
    type: 'invalid_request_error',
    code: 'model_not_found',
    message: 'The model `{model}` does not exist or you do not have access to it.',
  },
  409: { type: 'invalid_request_error', code: 'conflict', message: 'Conflict (mock upstream).' },
  413: { type: 'invalid_request_error', code: 'request_too_large', message: 'Request too large (mock upstream).' },
  422: { type: 'invalid_request_error', code: null, message: 'Unprocessable entity (mock upstream).' },
  429: {
    type: 'requests',
    code: 'rate_limit_exceeded',
    message:
      'Rate limit reached for {model} in organization org-mock on requests per min (RPM): Limit 60, Used 60, Requested 1. Please try again in {retry}s. Visit https://platform.openai.com/account/rate-limits to learn more.',
  },
  500: { type: 'server_error', code: null, message: 'The server had an error while processing your request. Sorry about that!' },
  502: { type: 'server_error', code: null, message: 'Bad gateway.' },
  503: { type: 'server_error', code: null, message: 'Service Unavailable.' },
  504: { type: 'server_error', code: null, message: 'Gateway timeout.' },
  529: { type: 'server_error', code: null, message: 'Overloaded' },
};

const QUOTA_MESSAGE =
  'You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.';

const ANTHROPIC: Record<number, { type: string; message: string }> = {
  400: { type: 'invalid_request_error', message: 'Invalid request (mock upstream).' },
  401: { type: 'authentication_error', message: 'invalid x-api-key' },
  402: {
    type: 'billing_error',
    message: 'Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.',
  },
  403: { type: 'permission_error', message: 'Your API key does not have permission to use the specified resource.' },
  404: { type: 'not_found_error', message: 'model: {model}' },
  413: { type: 'request_too_large', message: 'Request exceeds the maximum allowed number of bytes.' },
  429: {
    type: 'rate_limit_error',
    message:
      'This request would exceed the rate limit for your organization (org-mock) of 50 requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.',
  },
  500: { type: 'api_error', message: 'Internal server error' },
  503: { type: 'api_error', message: 'Service Unavailable' },
  504: { type: 'timeout_error', message: 'Request timed out' },
  529: { type: 'overloaded_error', message: 'Overloaded' },
};

function fill(s: string, model: string, retry: string): string {
  return s.replace('{model}', model || 'unknown').replace('{retry}', retry);
}

/** The retry-after value for a status: the directive, else 1 for 429, else none. */
function retryAfterFor(status: number, d: Directives): string | undefined {
  if (status !== 429 && status !== 503 && status !== 529) return undefined;
  return d.retryAfter ?? (status === 429 ? '1' : undefined);
}

function common(status: number, d: Directives, h: Headers): Headers {
  const ra = retryAfterFor(status, d);
  if (ra !== undefined) h['retry-after'] = ra;
  if (d.shouldRetry !== undefined) h['x-should-retry'] = String(d.shouldRetry);
  return h;
}

export function openaiError(status: number, d: Directives, model: string, requestId: string, message?: string): ErrorReply {
  const def = OPENAI[status] ?? (status >= 500 ? OPENAI[500] : OPENAI[400]);
  const retry = d.retryAfter ?? '1';
  let type = def.type;
  let code = def.code;
  let msg = message ?? fill(def.message, model, retry);
  if (d.errorType !== undefined) {
    type = d.errorType;
    if (d.errorType === 'insufficient_quota') {
      code = 'insufficient_quota';
      if (message === undefined) msg = QUOTA_MESSAGE;
    }
    if (d.errorType === 'overloaded_error' && message === undefined) msg = 'Overloaded';
  }
  if (d.errorCode !== undefined) code = d.errorCode;
  const headers = common(status, d, { 'content-type': 'application/json', 'x-request-id': requestId });
  if (status === 429) {
    headers['x-ratelimit-limit-requests'] = '60';
    headers['x-ratelimit-remaining-requests'] = '0';
    headers['x-ratelimit-reset-requests'] = `${retry}s`;
    headers['x-ratelimit-limit-tokens'] = '150000';
    headers['x-ratelimit-remaining-tokens'] = '149000';
    headers['x-ratelimit-reset-tokens'] = '0s';
  }
  return { status, headers, body: JSON.stringify({ error: { message: msg, type, param: null, code } }) };
}

export function anthropicError(status: number, d: Directives, model: string, requestId: string, message?: string): ErrorReply {
  const def = ANTHROPIC[status] ?? (status >= 500 ? ANTHROPIC[500] : ANTHROPIC[400]);
  const type = d.errorType ?? def.type;
  const error: Record<string, unknown> = {
    type,
    message: message ?? (type === 'overloaded_error' ? 'Overloaded' : fill(def.message, model, '')),
  };
  if (d.errorCode !== undefined) error.details = { error_code: d.errorCode };
  const headers = common(status, d, { 'content-type': 'application/json', 'request-id': requestId });
  if (status === 429) {
    const secs = Number(d.retryAfter ?? '1');
    const reset = new Date(Date.now() + (Number.isFinite(secs) ? secs : 1) * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
    headers['anthropic-ratelimit-requests-limit'] = '50';
    headers['anthropic-ratelimit-requests-remaining'] = '0';
    headers['anthropic-ratelimit-requests-reset'] = reset;
    headers['anthropic-ratelimit-input-tokens-limit'] = '30000';
    headers['anthropic-ratelimit-input-tokens-remaining'] = '30000';
    headers['anthropic-ratelimit-input-tokens-reset'] = reset;
    headers['anthropic-ratelimit-output-tokens-limit'] = '8000';
    headers['anthropic-ratelimit-output-tokens-remaining'] = '8000';
    headers['anthropic-ratelimit-output-tokens-reset'] = reset;
    headers['anthropic-ratelimit-tokens-limit'] = '38000';
    headers['anthropic-ratelimit-tokens-remaining'] = '38000';
    headers['anthropic-ratelimit-tokens-reset'] = reset;
  }
  return { status, headers, body: JSON.stringify({ type: 'error', error, request_id: requestId }) };
}

export function protocolError(
  protocol: Protocol,
  status: number,
  d: Directives,
  model: string,
  requestId: string,
  message?: string,
): ErrorReply {
  return protocol === 'messages' ? anthropicError(status, d, model, requestId, message) : openaiError(status, d, model, requestId, message);
}
