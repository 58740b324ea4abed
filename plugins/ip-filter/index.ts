/**
 * ip-filter: allow and deny lists of IPs and CIDRs, IPv4 and IPv6 (IPv4-mapped IPv6 matches its
 * IPv4 rules); deny wins. Lists come from the plugin's options (everyone) and from each key's
 * `ip_allow` / `ip_deny`. The client address is the socket's — unless the socket is a trusted proxy
 * (`server.trusted_proxies`), then X-Forwarded-For is walked right to left past trusted hops.
 * A refusal says only "Access denied" (403 ACCESS_DENIED): which rule matched is not disclosed.
 * All lists are compiled into net.BlockList once per config load.
 */
import net from 'node:net';
import { definePlugin } from '../../core/plugin.js';
import { GatewayError } from '../../core/errors.js';
import { createSlot, type RequestContext } from '../../core/context.js';
import { clientAddress, compileList, inList as has } from '../../core/client-ip.js';
import type { KeyConfig } from '../../core/config/types.js';
import { ipFilterSchema, type IpFilterOptions } from './schema.js';

export { clientAddress, compileList };

/** The address as the filter saw it ('' when X-Forwarded-For hid it). */
const CLIENT_IP = createSlot<string>('ip-filter.client');

/** Deny wins; an allow list admits only its addresses; an unknown address passes no list. */
function check(ip: string, allow: net.BlockList | undefined, deny: net.BlockList | undefined): void {
  if (!ip && (allow || deny)) throw new GatewayError('ACCESS_DENIED');
  if (has(deny, ip)) throw new GatewayError('ACCESS_DENIED');
  if (allow && !has(allow, ip)) throw new GatewayError('ACCESS_DENIED');
}

export default definePlugin<IpFilterOptions>({
  name: 'ip-filter',
  description: 'IP / CIDR allow and deny lists, global and per key',
  schema: ipFilterSchema,
  create(options, { config }) {
    const allow = compileList(options.allow, 'ip-filter allow');
    const deny = compileList(options.deny, 'ip-filter deny');
    const trusted = compileList(config.server.trustedProxies, 'server.trusted_proxies');
    // Per key, compiled once per key object: the file's keys now (a bad entry fails the load), the
    // store's on first use (the admin API checked their entries; a changed key is a new object).
    const perKey = new WeakMap<KeyConfig, { allow?: net.BlockList; deny?: net.BlockList }>();
    const listsOf = (k: KeyConfig) => {
      let lists = perKey.get(k);
      if (!lists) {
        lists = { allow: compileList(k.ipAllow, `key ${k.id} ip_allow`), deny: compileList(k.ipDeny, `key ${k.id} ip_deny`) };
        perKey.set(k, lists);
      }
      return lists;
    };
    for (const k of config.keys) listsOf(k);
    const checkKey = (ctx: RequestContext, ip: string) => {
      const key = ctx.key;
      if (!key || (key.ipAllow.length === 0 && key.ipDeny.length === 0)) return;
      const own = listsOf(key);
      check(ip, own.allow, own.deny);
    };
    return {
      onRequest(ctx) {
        // '' when an unreadable hop hides the client: no allow rule admits it (the context keeps the socket's).
        const ip = clientAddress(ctx.req.socket.remoteAddress ?? '', ctx.headerValues('x-forwarded-for'), trusted);
        check(ip, allow, deny);
        // Per-key lists need the key. With auth earlier in the chain (the documented order) they
        // are checked here, before key expiry as wire-notes order it; with ip-filter first they are
        // checked in onAccess, so the chain's order can never switch them off.
        if (ctx.key) checkKey(ctx, ip);
        else ctx.set(CLIENT_IP, ip);
      },
      onAccess(ctx) {
        const ip = ctx.get(CLIENT_IP);
        if (ip !== undefined) checkKey(ctx, ip);
      },
    };
  },
});
