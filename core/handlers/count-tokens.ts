/**
 * POST /v1/messages/count_tokens: forwarded to the model's Messages upstream and answered as it
 * answers. No slot, no RPM, no usage record (the route's chain checks the key and billing
 * eligibility only). 502 is not among this endpoint's statuses: upstream failures become 503.
 */
import { GatewayError } from '../errors.js';
import { spliceJson, spliceLarge } from '../protocols/splice.js';
import { accountBaseUrl, mapUpstreamStatus, readAll, upstreamHeaders, upstreamPath } from '../upstream/http.js';
import type { Handler } from './types.js';
import { sendJson } from './types.js';

export const countTokensHandler: Handler = async (ctx, deps) => {
  const body = await ctx.body();
  const { model, provider } = await ctx.model();
  if (!provider.protocols.includes('anthropic-messages')) {
    throw new GatewayError('NO_CHANNELS', { message: `Token counting is not available for model '${model.id}'` });
  }
  // An account of the pool, but no slot and no RPM count (like the user's limits); a 401 still disables it.
  const pool = deps.pools.of(provider);
  const pick = pool.pickQuiet(model);
  if (!pick.ok) throw pick.error;
  const account = pick.account;
  const ops = { set: { model: model.upstream }, remove: ['models'] };
  const text = body.large ? spliceLarge(body.large, ops) : spliceJson(body.text, ops);
  const url = accountBaseUrl(deps, provider, account) + upstreamPath(provider, 'anthropic-messages', 'count');
  const call = deps.transport.send({
    provider,
    account: account.name,
    url,
    body: text,
    headers: upstreamHeaders(ctx, provider, 'anthropic-messages', false, account),
    timeoutMs: provider.timeoutMs ?? ctx.config.server.upstreamTimeoutMs,
    idleTimeoutMs: provider.idleTimeoutMs ?? ctx.config.server.upstreamIdleTimeoutMs,
  });
  ctx.clientGone.addEventListener('abort', call.abort);
  try {
    let up;
    try {
      up = await call.response;
    } catch {
      throw new GatewayError('NO_CHANNELS', { message: 'Token counting is temporarily unavailable' });
    }
    let answer: string;
    try {
      answer = await readAll(up.body, 1024 * 1024);
    } catch {
      throw new GatewayError('NO_CHANNELS', { message: 'Token counting is temporarily unavailable' });
    }
    if (up.status >= 400) {
      const err = mapUpstreamStatus(up.status, up.headers, answer);
      pool.reportQuiet(account, { status: up.status, failure: 'status', error: err, responseHeaders: up.headers });
      if (err.status >= 500)
        throw new GatewayError(err.id === 'OVERLOADED' ? 'OVERLOADED' : 'NO_CHANNELS', { message: err.message, headers: err.headers });
      throw err;
    }
    let json: unknown;
    try {
      json = JSON.parse(answer);
    } catch {
      throw new GatewayError('NO_CHANNELS', { message: 'Token counting returned an unreadable answer' });
    }
    sendJson(ctx, up.status, json);
  } finally {
    call.done();
    ctx.clientGone.removeEventListener('abort', call.abort);
  }
};
