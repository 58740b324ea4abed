/**
 * IP and CIDR lists, compiled into net.BlockList (the ip-filter plugin's, and the admin API's check
 * of a key's lists before it stores them).
 */
import net from 'node:net';

/** Compiles IPs and CIDRs (IPv4 and IPv6); throws naming `where` and the entry on a bad one. */
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
