/**
 * The load-side client process of the scenarios wrk cannot drive (bench/run.ts pins it with the
 * other load generators): time to first token at idle, thousands of held-open streams, and large
 * request bodies in a loop. Driven over IPC, one command at a time:
 *
 *   {op:'ttft', url, auth, body, n, warmup}   → {ms: number[], errors}
 *   {op:'hold', url, auth, body, n, batch}    → {opened, failed, statuses, ms}; the streams stay open
 *                                               until this process is killed (the clients "leave").
 *   {op:'bodies', url, auth, model, headers, loads, format} → {started: true}; large bodies POSTed at a steady pace …
 *   {op:'stop'}                               → … until this: {completed: {<bytes>: {ok, failed, statuses, meanMs}}}
 */
import http from 'node:http';

type Msg = Record<string, any>;

/** A chat stream's first token: a delta with non-empty content (the role-only first chunk has `"content":""`). */
const FIRST_TOKEN = /"content":"[^"]/;

function post(url: string, auth: string, body: Buffer, agent: http.Agent | false, extra: Record<string, string> = {}): http.ClientRequest {
  const u = new URL(url);
  const req = http.request({
    host: u.hostname,
    port: u.port,
    path: u.pathname,
    method: 'POST',
    agent,
    headers: { 'content-type': 'application/json', 'content-length': body.length, ...(auth ? { authorization: auth } : {}), ...extra },
  });
  req.on('socket', guard);
  return req;
}

/**
 * A server that answers before it has read the whole body (a 413 or 503 to a large upload) and
 * closes can leave the socket's last write failing with EPIPE after the request has let go of the
 * socket; without a listener of its own that error would end this process mid-run.
 */
const guarded = new WeakSet<object>();
function guard(socket: import('node:net').Socket): void {
  if (guarded.has(socket)) return;
  guarded.add(socket);
  socket.on('error', () => undefined);
}

/** One streaming request; resolves with the ms from sending the body to the first token (NaN: failed). */
function firstToken(
  url: string,
  auth: string,
  body: Buffer,
  agent: http.Agent | false,
  keep?: http.IncomingMessage[],
): Promise<{ ms: number; status: number }> {
  return new Promise((resolve) => {
    let t0 = 0n;
    let done = false;
    const finish = (ms: number, status: number) => {
      if (!done) {
        done = true;
        resolve({ ms, status });
      }
    };
    const req = post(url, auth, body, agent);
    req.on('response', (res) => {
      let seen = '';
      res.on('data', (d: Buffer) => {
        if (done) return;
        seen += d.toString('latin1');
        if (res.statusCode === 200 && FIRST_TOKEN.test(seen)) {
          const ms = Number(process.hrtime.bigint() - t0) / 1e6;
          if (keep) keep.push(res);
          finish(ms, 200);
        } else if (seen.length > 65536) seen = seen.slice(-1024);
      });
      res.on('end', () => finish(NaN, res.statusCode ?? 0));
      res.on('error', () => finish(NaN, res.statusCode ?? 0));
    });
    req.on('error', () => finish(NaN, 0));
    t0 = process.hrtime.bigint();
    req.end(body);
  });
}

async function ttft(m: Msg): Promise<Msg> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const body = Buffer.from(m.body);
  for (let i = 0; i < m.warmup; i++) await firstToken(m.url, m.auth, body, agent);
  const ms: number[] = [];
  let errors = 0;
  for (let i = 0; i < m.n; i++) {
    const r = await firstToken(m.url, m.auth, body, agent);
    if (Number.isFinite(r.ms)) ms.push(r.ms);
    else errors++;
    // Let the rest of the stream arrive so the next request finds the server idle.
    await new Promise((r) => setTimeout(r, 2));
  }
  agent.destroy();
  return { ms, errors };
}

const held: http.IncomingMessage[] = [];

async function hold(m: Msg): Promise<Msg> {
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  const body = Buffer.from(m.body);
  const statuses: Record<string, number> = {};
  let opened = 0;
  const t0 = Date.now();
  // In batches, so the accept queue never overflows into SYN retransmits.
  for (let i = 0; i < m.n; i += m.batch) {
    const batch = Array.from({ length: Math.min(m.batch, m.n - i) }, () => firstToken(m.url, m.auth, body, agent, held));
    for (const r of await Promise.all(batch)) {
      statuses[r.status] = (statuses[r.status] ?? 0) + 1;
      if (Number.isFinite(r.ms)) opened++;
    }
  }
  for (const res of held) res.resume(); // keep reading (keepalive comments), never end
  return { opened, failed: m.n - opened, statuses, ms: Date.now() - t0 };
}

interface BodyLoad {
  bytes: number;
  ok: number;
  failed: number;
  statuses: Record<string, number>;
  totalMs: number;
}
let stopping = false;
const timers: NodeJS.Timeout[] = [];
const inflight = new Set<http.ClientRequest>();
const counts = new Map<number, BodyLoad>();

/**
 * A request of about `bytes` bytes whose bulk is a base64 image, the usual reason for a large body
 * in practice: a Chat data URL, or (format `messages`) an Anthropic base64 image block.
 */
function bigBody(model: string, bytes: number, format = 'chat'): Buffer {
  const chat = format !== 'messages';
  const head = chat
    ? `{"model":${JSON.stringify(model)},"stream":false,"messages":[{"role":"user","content":[{"type":"text","text":"describe this image"},{"type":"image_url","image_url":{"url":"data:image/png;base64,`
    : `{"model":${JSON.stringify(model)},"max_tokens":16,"stream":false,"messages":[{"role":"user","content":[{"type":"text","text":"describe this image"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"`;
  const tail = chat ? '"}}]}]}' : '"}}]}]}';
  const pad = Math.max(0, bytes - head.length - tail.length);
  return Buffer.concat([Buffer.from(head), Buffer.alloc(pad, 'iVBORw0KGgo'), Buffer.from(tail)]);
}

/** Large bodies at a steady pace: one every `everyMs`, at most `maxInFlight` at a time (a slow server is not buried). */
function bodies(m: Msg): Msg {
  stopping = false;
  const loads = m.loads as Array<{ bytes: number; everyMs: number; maxInFlight: number }>;
  const agent = new http.Agent({ keepAlive: true, maxSockets: loads.reduce((a, l) => a + l.maxInFlight, 0) });
  for (const l of loads) {
    const body = bigBody(m.model, l.bytes, m.format);
    const c: BodyLoad = { bytes: l.bytes, ok: 0, failed: 0, statuses: {}, totalMs: 0 };
    counts.set(l.bytes, c);
    let active = 0;
    const one = () => {
      if (stopping || active >= l.maxInFlight) return;
      active++;
      const t0 = Date.now();
      const req = post(m.url, m.auth, body, agent, m.headers);
      inflight.add(req);
      let ended = false;
      const end = (status: number) => {
        if (ended) return;
        ended = true;
        active--;
        inflight.delete(req);
        if (stopping) return;
        c.statuses[status] = (c.statuses[status] ?? 0) + 1;
        if (status === 200) {
          c.ok++;
          c.totalMs += Date.now() - t0;
        } else c.failed++;
      };
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => end(res.statusCode ?? 0));
        res.on('error', () => end(res.statusCode ?? 0));
      });
      req.on('error', () => end(0));
      req.end(body);
    };
    one();
    timers.push(setInterval(one, l.everyMs));
  }
  return { started: true };
}

async function stop(): Promise<Msg> {
  stopping = true;
  for (const t of timers.splice(0)) clearInterval(t);
  const completed: Record<string, Msg> = {};
  for (const [bytes, c] of counts)
    completed[bytes] = { ok: c.ok, failed: c.failed, statuses: c.statuses, meanMs: c.ok ? c.totalMs / c.ok : NaN };
  for (const r of inflight) r.destroy();
  inflight.clear();
  counts.clear();
  return { completed };
}

process.on('message', (m: Msg) => {
  const run = async (): Promise<Msg> => {
    switch (m.op) {
      case 'ttft':
        return ttft(m);
      case 'hold':
        return hold(m);
      case 'bodies':
        return bodies(m);
      case 'stop':
        return stop();
      default:
        throw new Error(`unknown op ${m.op}`);
    }
  };
  run().then(
    (r) => process.send?.({ ok: true, ...r }),
    (e) => process.send?.({ ok: false, error: String(e?.stack ?? e) }),
  );
});
process.send?.({ ready: true });
