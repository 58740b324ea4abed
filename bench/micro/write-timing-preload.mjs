// Preload (`--import`) for bench/micro/write-timing.mjs: times every fs.writeSync and fs.fsyncSync of the process
// it is loaded into (wall clock, per file descriptor, bytes too), and on SIGUSR2 writes the figures
// since the last SIGUSR2 to $WRITE_TIMING_OUT as JSON and starts again. ESM modules' named imports
// of node:fs are rebound too (syncBuiltinESMExports). Its own cost (two clock reads per call) is
// inside the figures.
import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';

const out = process.env.WRITE_TIMING_OUT;
let stats = new Map();
for (const name of ['writeSync', 'fsyncSync']) {
  const orig = fs[name];
  fs[name] = function (fd, data, ...rest) {
    const t0 = process.hrtime.bigint();
    try {
      return orig.call(this, fd, data, ...rest);
    } finally {
      const us = Number(process.hrtime.bigint() - t0) / 1000;
      const key = `${name} ${fd}`;
      let s = stats.get(key);
      if (!s) stats.set(key, (s = { call: name, fd, calls: 0, bytes: 0, us: [] }));
      s.calls++;
      s.bytes += typeof data === 'string' ? Buffer.byteLength(data) : (rest[1] ?? data.length - (rest[0] ?? 0));
      s.us.push(us);
    }
  };
}
syncBuiltinESMExports();

process.on('SIGUSR2', () => {
  const rows = [...stats.values()].map((s) => {
    let path = '';
    try {
      path = fs.readlinkSync(`/proc/self/fd/${s.fd}`);
    } catch {
      // closed since
    }
    const us = s.us.sort((a, b) => a - b);
    const q = (p) => us[Math.floor(p * (us.length - 1))];
    const total = us.reduce((a, b) => a + b, 0);
    return {
      call: s.call,
      fd: s.fd,
      path,
      calls: s.calls,
      bytes: s.bytes,
      totalUs: total,
      p50: q(0.5),
      p99: q(0.99),
      max: q(1),
      over1ms: us.filter((x) => x > 1000).length,
    };
  });
  stats = new Map();
  if (out) fs.writeFileSync(out, JSON.stringify(rows));
});
