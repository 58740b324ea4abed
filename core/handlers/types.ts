import type { RequestContext } from '../context.js';
import type { UpstreamDeps } from '../upstream/types.js';

/** A route's terminal step when it is not a model call (`handler:` in gateway.yaml). */
export type Handler = (ctx: RequestContext, deps: UpstreamDeps) => Promise<void>;

export function sendJson(ctx: RequestContext, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (ctx.committed) return;
  ctx.committed = true;
  ctx.res.writeHead(status, { 'content-type': 'application/json', ...headers });
  ctx.res.end(JSON.stringify(body));
}
