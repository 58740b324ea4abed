/**
 * Round trips on the Redis store, counted on a real redis-server with MONITOR: a plain request
 * through the full chain (key quota and window, balance, group and user RPM, a concurrency slot)
 * costs one script at admission and one at settlement — the slot is taken and freed inside them.
 */
import t from 'tap';
import net from 'node:net';
import { Redis } from 'ioredis';
import { RedisServer } from '../helpers/redis.js';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway } from '../helpers/gateway.js';

t.test('one EVALSHA per admission and one per settlement on a plain request, slot included', async (t) => {
  const server = await RedisServer.start();
  const prefix = 'rt:';
  const cfg = baseConfig();
  cfg.store = { kind: 'redis', url: server.url, prefix };
  cfg.groups.chat.rpm = 1_000;
  cfg.users.alice = { ...cfg.users.alice, rpm: 1_000, concurrency: 2, queue: { size: 4, max_wait: '30s' } };
  cfg.keys[0] = { ...cfg.keys[0], quota: 50, windows: { '5h': 20 } };
  const gw = await startGateway(cfg);
  const db = new Redis(server.url, { maxRetriesPerRequest: null });
  // Before anything else can fail: a failure must not leave the process waiting on these.
  t.teardown(async () => {
    db.disconnect();
    await gw.close();
    await server.destroy();
  });
  const monitor = await monitorOf(server.port);
  t.teardown(() => monitor.destroy());
  const totals = `${prefix}{k:chat}:totals`;
  const settled = async (n: number) => {
    for (let i = 0; i < 500; i++) {
      if (Number(await db.hget(totals, 'requests')) === n) return true;
      await new Promise((r) => setTimeout(r, 10));
    }
    return false;
  };
  const ask = () =>
    call(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: bearer(KEYS.chat), json: chatBody({ model: 'chat-model' }) });

  // The first request loads the scripts into Redis (EVAL after NOSCRIPT): not the steady state.
  t.equal((await ask()).status, 200);
  t.ok(await settled(1), 'the first request settled');

  const own = `127.0.0.1:${(db as unknown as { stream: { localPort: number } }).stream.localPort}`;
  const seen: string[][] = [];
  monitor.on('command', (source: string, args: string[]) => {
    // Commands a script runs are shown too (source "lua"): only what the gateway sends counts.
    if (source !== own && source !== 'lua') seen.push(args);
  });
  await new Promise((r) => setTimeout(r, 50));
  const reply = await ask();
  t.equal(reply.status, 200, 'served');
  t.ok(await settled(2), 'settled');
  await new Promise((r) => setTimeout(r, 50));

  // Background work of the store (instance heartbeat and reaper, slot lease renewal, the accounts
  // directory's poll of the change log, the ledger drainer's rounds: one read, and one
  // acknowledgement of what it read, per interval) may fall in the window, the longer on a loaded
  // machine; it is not per request.
  const background = (a: string[]) =>
    (a[0].toLowerCase() === 'evalsha' &&
      ((a[3] ?? '').endsWith('{i}:live') || (a[3] ?? '').endsWith('{acct}:users') || a[4 + Number(a[2])] === 'renew')) ||
    ['ping', 'info', 'xreadgroup', 'xautoclaim', 'xgroup', 'xinfo', 'multi', 'xack', 'xdel', 'exec'].includes(a[0].toLowerCase());
  const perRequest = seen.filter((a) => !background(a));
  const scripts = perRequest.filter((a) => a[0].toLowerCase() === 'evalsha' || a[0].toLowerCase() === 'eval');
  t.same(
    perRequest.map((a) => a[0].toLowerCase()),
    ['evalsha', 'evalsha'],
    'two commands for the request, both scripts',
    { seen: perRequest },
  );
  t.ok(
    scripts.every((a) => /:adm:/.test(a[3] ?? '')),
    'both on the admission record: the admission, then the settlement',
  );
  t.notOk(
    seen.some((a) => a[0].toLowerCase() === 'evalsha' && /:held$/.test(a[3] ?? '') && a[4 + Number(a[2])] !== 'renew'),
    'no slot script of its own (acquire, release)',
  );
  t.equal(await db.zcard(`${prefix}{u:alice}:slot:held`), 0, 'the settlement freed the slot');
});

/**
 * MONITOR on a connection of its own, read by hand: emits `command` (source, args) per line.
 * (ioredis's `monitor()` enters its monitor mode a microtask after MONITOR's OK, so a command line
 * in the same read as the OK fails there with "Command queue state error": seen on a loaded run.)
 */
async function monitorOf(port: number): Promise<net.Socket> {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.write('MONITOR\r\n');
  let buffered = '';
  let ok: () => void;
  const started = new Promise<void>((resolve) => (ok = resolve));
  socket.setEncoding('latin1');
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    let end: number;
    while ((end = buffered.indexOf('\r\n')) >= 0) {
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      if (line === '+OK') ok();
      else {
        // +1795778248.708335 [0 127.0.0.1:42734] "EVALSHA" "…" (or [0 lua])
        const m = /^\+[\d.]+ \[\d+ ([^\]]+)\] (.*)$/.exec(line);
        if (m) socket.emit('command', m[1], monitorArgs(m[2]));
      }
    }
  });
  await started;
  return socket;
}

/** The quoted arguments of a MONITOR line (Redis escapes \\, \", \n, \r, \t, \a, \b and \xHH). */
function monitorArgs(text: string): string[] {
  const out: string[] = [];
  const named: Record<string, string> = { n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b' };
  for (let i = 0; i < text.length; i++) {
    if (text[i] !== '"') continue;
    let arg = '';
    for (i++; i < text.length && text[i] !== '"'; i++) {
      if (text[i] !== '\\') arg += text[i];
      else if (text[++i] === 'x') {
        arg += String.fromCharCode(parseInt(text.slice(i + 1, i + 3), 16));
        i += 2;
      } else arg += named[text[i]] ?? text[i];
    }
    out.push(arg);
  }
  return out;
}
