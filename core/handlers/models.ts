/**
 * GET /v1/models: the models the key's group serves. Messages-style entries when the client speaks
 * Messages (it sent `anthropic-version` or used `x-api-key`), Chat-style otherwise (wire-notes).
 * A group that lists no models gets the default list (every configured model) unless
 * `configured_only=true`, which then yields an empty list.
 */
import type { Handler } from './types.js';
import { sendJson } from './types.js';
import { GatewayError } from '../errors.js';

/** Fixed placeholder dates: not release dates (spec §2.8). */
const CREATED_AT = '2024-01-01T00:00:00Z';
const CREATED = 1704067200;

export const modelsHandler: Handler = async (ctx) => {
  const url = new URL(ctx.req.url ?? '/', 'http://gateway');
  const flag = url.searchParams.get('configured_only');
  if (flag !== null && !/^(true|false|1|0)$/i.test(flag)) {
    throw new GatewayError('INVALID_REQUEST', { message: `configured_only must be true or false, got '${flag.slice(0, 40)}'` });
  }
  const configuredOnly = flag !== null && /^(true|1)$/i.test(flag);
  const group = ctx.group;
  const ids = group && group.models.length > 0 ? [...group.models] : configuredOnly ? [] : Object.keys(ctx.config.models);
  const messagesStyle = ctx.headerValues('anthropic-version').length > 0 || ctx.headerValues('x-api-key').length > 0;
  if (messagesStyle) {
    const data = ids.map((id) => ({ id, type: 'model', display_name: id, created_at: CREATED_AT }));
    sendJson(ctx, 200, { object: 'list', data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null });
    return;
  }
  const data = ids.map((id) => ({
    id,
    object: 'model',
    type: 'model',
    display_name: id,
    created: CREATED,
    owned_by: ctx.config.models[id]?.ownedBy ?? 'gateway',
  }));
  sendJson(ctx, 200, { object: 'list', data });
};
