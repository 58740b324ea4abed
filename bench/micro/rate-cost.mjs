// What a server's CPU per request costs beyond its own work when it answers more slowly: the
// bench's bare proxy (http-proxy-3, as bench/roles.ts runs it) with a busy wait of SPIN µs added
// to every request, under the bench's wrk from the other core, sampled by Linux `perf` (as
// perf-profile.mjs). Rounds alternate the given waits. For each: requests/s, the sampled CPU per
// request, and the kernel's wake-ups of the peers (`_raw_spin_unlock_irqrestore`: on this VM,
// waking the reader of a socket on the other, idle, vCPU is paid there, with interrupts off).
// A slower server leaves wrk and the upstream idle more often, so more of its answers must wake
// them: CPU per request is not its own work alone, and a gateway measured beside a faster proxy
// pays that difference too.
//
//   node bench/micro/rate-cost.mjs [--root CHECKOUT] [--spins 0,100,0,100] [--seconds N]
// (not a test: a guide, like the rest of bench/micro; needs perf: Debian's linux-perf)
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

if (process.argv[2] === '--serve') {
  // The proxy itself: PORT TARGET SPIN ROOT
  const [port, target, spin, root] = process.argv.slice(3);
  const { default: httpProxy } = await import(path.join(root, 'node_modules/http-proxy-3/dist/lib/index.js'));
  const us = Number(spin);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4096 });
  const proxy = httpProxy.createProxyServer({ target, agent });
  proxy.on('error', (_e, _req, res) => {
    if (res instanceof http.ServerResponse && !res.headersSent) res.writeHead(502).end();
    else res?.destroy?.();
  });
  const server = http.createServer((req, res) => {
    if (us > 0) for (const end = performance.now() + us / 1000; performance.now() < end;);
    proxy.web(req, res);
  });
  server.keepAliveTimeout = 5_000;
  server.listen(Number(port), '127.0.0.1');
} else {
  const { argReader, gatewaySetup, PERF_HZ, perfRecord, perfSymbols, processes, wrk } = await import('./under-load.mjs');
  const args = process.argv.slice(2);
  const { opt } = argReader(args);
  const root = path.resolve(opt('--root', '.'));
  const spins = opt('--spins', '0,100,0,100').split(',').map(Number);
  const seconds = Number(opt('--seconds', '6'));
  console.log('| round | busy wait added, µs | req/s | sampled CPU µs/req | of it, waking the peers, µs/req |');
  console.log('|---:|---:|---:|---:|---:|');
  for (const [i, spin] of spins.entries()) {
    const s = await gatewaySetup(root, 'rate-cost', undefined, false);
    const procs = processes(s);
    try {
      procs.mock();
      const me = fileURLToPath(import.meta.url);
      const target = `http://127.0.0.1:${s.mockPort}`;
      const argv = ['-c', '0', process.execPath, me, '--serve', String(s.gwPort), target, String(spin), root];
      const p = procs.start('taskset', argv, { stdio: 'ignore' });
      await sleep(1200);
      wrk(s, 4, 50); // warm-up
      const out = path.join(s.dir, 'perf.data');
      const stop = await perfRecord(p.pid, out);
      const r = wrk(s, seconds, 50);
      await stop();
      const us = perfSymbols(out, PERF_HZ, r.requests);
      const total = [...us.values()].reduce((x, y) => x + y, 0);
      const wake = us.get('[kernel] _raw_spin_unlock_irqrestore') ?? 0;
      console.log(`| ${i + 1} | ${spin} | ${(r.requests / seconds).toFixed(0)} | ${total.toFixed(1)} | ${wake.toFixed(1)} |`);
    } finally {
      await procs.stopAll();
    }
  }
}
