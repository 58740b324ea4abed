/**
 * A scriptable upstream for tests that need exact control (what the mock's directives cannot
 * express): each request is answered by a handler; requests and connection closes are recorded.
 */
import http from 'node:http';

export interface Seen {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** Resolves when the upstream connection of this request closes. */
  closed: Promise<void>;
  /** True once the client (the gateway) went away before the handler finished. */
  aborted: boolean;
}

export interface ScriptedUpstream {
  url: string;
  seen: Seen[];
  close(): Promise<void>;
}

export async function scriptedUpstream(
  handler: (req: http.IncomingMessage, res: http.ServerResponse, body: string, seen: Seen) => void | Promise<void>,
): Promise<ScriptedUpstream> {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let resolveClosed!: () => void;
      const rec: Seen = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        closed: new Promise((r) => {
          resolveClosed = r;
        }),
        aborted: false,
      };
      res.on('close', () => {
        if (!res.writableFinished) rec.aborted = true;
        resolveClosed();
      });
      seen.push(rec);
      void Promise.resolve(handler(req, res, rec.body, rec)).catch(() => res.destroy());
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${addr.port}`,
    seen,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Polls `fn` every `step` ms until it is true (true) or `ms` have passed (false). The default bound
 * is generous: it only matters when the condition never comes, and a loaded machine (load averages
 * of 10 and more) makes slow what is quick on an idle one.
 */
export async function until(fn: () => Promise<boolean> | boolean, ms = 30_000, step = 20): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    if (await fn()) return true;
    if (Date.now() > end) return false;
    await sleep(step);
  }
}
