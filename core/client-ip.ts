/**
 * The client's address: the socket's, or — when the socket is a trusted proxy
 * (`server.trusted_proxies`) — the right-most X-Forwarded-For hop that is not one. Used by the
 * access log for every request and by the ip-filter plugin for its rules. IP lists are compiled
 * into net.BlockList once per config (the trusted list is cached by the config's server object).
 */
import net from 'node:net';

/** IPv4-mapped IPv6 (`::ffff:1.2.3.4`) becomes plain IPv4, so rules match either spelling. */
export function normaliseIp(ip: string): string {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  return m ? m[1] : ip;
}

/** A BlockList of IPs and CIDRs (undefined when empty); throws on an entry that is neither. */
export function compileList(entries: readonly string[], where: string): net.BlockList | undefined {
  if (entries.length === 0) return undefined;
  const list = new net.BlockList();
  for (const raw of entries) {
    const e = raw.trim();
    const [addr, bits] = e.split('/');
    const family = net.isIP(addr);
    if (family === 0) throw new Error(`${where}: '${raw}' is not an IP address or CIDR`);
    const type = family === 4 ? 'ipv4' : 'ipv6';
    if (bits === undefined) list.addAddress(addr, type);
    else {
      const n = Number(bits);
      if (!/^\d+$/.test(bits) || n > (family === 4 ? 32 : 128)) throw new Error(`${where}: '${raw}' has an invalid prefix length`);
      list.addSubnet(addr, n, type);
    }
  }
  return list;
}

export function inList(list: net.BlockList | undefined, ip: string): boolean {
  if (!list) return false;
  const family = net.isIP(ip);
  return family !== 0 && list.check(ip, family === 4 ? 'ipv4' : 'ipv6');
}

/**
 * The socket's address, or the right-most untrusted X-Forwarded-For hop behind trusted proxies;
 * '' when an unreadable hop hides the client (never the proxy's address then).
 */
export function clientAddress(socketIp: string, forwardedFor: string[], trusted: net.BlockList | undefined): string {
  let ip = normaliseIp(socketIp);
  if (!trusted || !inList(trusted, ip)) return ip;
  if (forwardedFor.length === 0) return ip;
  const hops = forwardedFor
    .join(',')
    .split(',')
    .map((s) => s.trim());
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = normaliseIp(hops[i].replace(/^\[(.*)\](?::\d+)?$/, '$1').replace(/^(\d{1,3}(?:\.\d{1,3}){3}):\d+$/, '$1'));
    // An unreadable hop hides the client: its address is unknown (''), never the proxy's nor the
    // hop before it. An empty hop (`1.2.3.4, `) is unreadable too: the proxy that wrote the
    // header did not say who its client was.
    if (net.isIP(hop) === 0) return '';
    ip = hop;
    if (!inList(trusted, hop)) return hop;
  }
  return ip;
}

const trustedLists = new WeakMap<object, net.BlockList | null>();

/** `server.trusted_proxies` compiled, once per loaded config (the config is frozen). */
export function trustedProxies(server: { readonly trustedProxies: readonly string[] }): net.BlockList | undefined {
  let list = trustedLists.get(server);
  if (list === undefined) trustedLists.set(server, (list = compileList(server.trustedProxies, 'server.trusted_proxies') ?? null));
  return list ?? undefined;
}
