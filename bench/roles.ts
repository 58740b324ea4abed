/**
 * Child processes of the benchmark (one process tree): `mock` (the mock upstream), `gateway` (the
 * real gateway, full default chain, persisted store), `proxy` (a bare http-proxy-3 reverse proxy
 * over the same mock — the baseline). Each prints `READY <url>` on stdout when listening.
 */
import http from 'node:http';
import httpProxy from 'http-proxy-3';
import { startMockServer } from '../core/mock/server.js';
import { Gateway } from '../core/server.js';
import { builtinPlugins } from '../plugins/index.js';
import { createLogger } from '../core/log.js';

const [role, arg] = process.argv.slice(2);

// The parent asks for this process's CPU time around each load run (IPC), so the report can give
// CPU per request: steadier than requests/s on a small shared machine.
process.on('message', (m) => {
  if (m === 'cpu') process.send?.(process.cpuUsage());
});

async function main(): Promise<void> {
  if (role === 'mock') {
    const m = await startMockServer({ keepRequests: 0 });
    console.log(`READY ${m.url}`);
    return;
  }
  if (role === 'proxy') {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
    const proxy = httpProxy.createProxyServer({ target: arg, agent });
    proxy.on('error', (_e, _req, res) => {
      if (res instanceof http.ServerResponse && !res.headersSent) res.writeHead(502).end();
    });
    const server = http.createServer((req, res) => proxy.web(req, res));
    server.keepAliveTimeout = 5_000;
    server.listen(0, '127.0.0.1', () => {
      const addr = server.address() as { port: number };
      console.log(`READY http://127.0.0.1:${addr.port}`);
    });
    return;
  }
  if (role === 'gateway') {
    const gw = await Gateway.start({ configFile: arg, registry: builtinPlugins, log: createLogger('warn'), watch: false, port: 0 });
    console.log(`READY ${gw.url}`);
    process.on('SIGINT', () => void gw.close().then(() => process.exit(0)));
    return;
  }
  throw new Error(`unknown role ${role}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
