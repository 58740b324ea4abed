/** Raw HTTP for what fetch cannot send: repeated headers, control characters, exact bytes. */
import http from 'node:http';
import net from 'node:net';

export interface RawReply {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  json: any;
}

export function rawRequest(
  url: string,
  opts: { method?: string; headers?: http.OutgoingHttpHeaders; body?: string | Buffer; path?: string },
): Promise<RawReply> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: u.hostname, port: u.port, path: opts.path ?? u.pathname + u.search, method: opts.method ?? 'POST', headers: opts.headers },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: any;
          try {
            json = JSON.parse(text);
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (opts.body !== undefined) req.write(opts.body);
    req.end();
  });
}

/** Writes bytes on a fresh socket and returns everything the server answered before closing (or `waitMs`). */
export function rawSocket(url: string, bytes: string | Buffer, waitMs = 10_000): Promise<string> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(u.port), u.hostname, () => s.write(bytes));
    let out = '';
    s.on('data', (d) => {
      out += d.toString('latin1');
    });
    s.on('end', () => resolve(out));
    s.on('close', () => resolve(out));
    s.on('error', reject);
    setTimeout(() => {
      s.destroy();
      resolve(out);
    }, waitMs).unref();
  });
}

/** Reads an SSE response fully as text (status and headers too). */
export async function sseText(url: string, init: RequestInit): Promise<{ status: number; headers: Headers; text: string }> {
  const res = await fetch(url, init);
  const text = await res.text();
  return { status: res.status, headers: res.headers, text };
}
