/**
 * rpm: requests per clock minute for the key's group (`groups.<g>.rpm`), then for the user
 * (`users.<u>.rpm`); 0 = unlimited. 429 rate_limit_exceeded with Retry-After = seconds left in the
 * minute. Counted once per request (fallback attempts do not count again); count_tokens, /v1/models
 * and /v1/usage are not counted.
 */
import { definePlugin } from '../../core/plugin.js';
import { GatewayError } from '../../core/errors.js';
import { isModelCall } from '../../core/billing.js';
import type { GroupConfig, UserConfig } from '../../core/config/types.js';
import type { Claim } from '../../core/store/types.js';
import { perObject } from '../../core/memo.js';
import { rpmSchema, type RpmOptions } from './schema.js';

const rpmError = (scope: string) => (ms?: number) =>
  new GatewayError('RPM_EXCEEDED', {
    message: `Rate limit exceeded: too many requests per minute for this ${scope}`,
    retryAfter: Math.max(1, Math.ceil((ms ?? 60_000) / 1000)),
    retryAfterMs: ms,
  });

const groupError = rpmError('group');
const userError = rpmError('user');

export default definePlugin<RpmOptions>({
  name: 'rpm',
  description: 'Requests per minute per group and per user',
  schema: rpmSchema,
  requires: ['auth'],
  create() {
    // Claims are data of the config: made once per group or user object (a reload, or an admin
    // change, makes new objects), not on every request.
    const groupClaim = perObject((g: GroupConfig): Claim => Object.freeze({ kind: 'rpm', scope: 'group', id: g.name, limit: g.rpm }));
    const userClaim = perObject((u: UserConfig): Claim => Object.freeze({ kind: 'rpm', scope: 'user', id: u.name, limit: u.rpm }));
    return {
      onAccess(ctx) {
        const { user, group } = ctx;
        if (!user || !group || !isModelCall(ctx)) return;
        if (group.rpm > 0) ctx.admission.add(groupClaim(group), groupError);
        if (user.rpm > 0) ctx.admission.add(userClaim(user), userError);
      },
    };
  },
});
