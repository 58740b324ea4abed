/**
 * Reads and validates a request body, within the configured limit. An oversized Content-Length is
 * refused before a byte is read; a body without one is counted as it arrives and refused the moment
 * it passes the limit (the connection is then closed rather than drained).
 */
import type { IncomingMessage } from 'node:http';
import { GatewayError } from './errors.js';
import type { ParsedBody, RequestContext } from './context.js';
import { wireFor } from './protocols/index.js';

const decoder = new TextDecoder('utf-8', { fatal: true });

export function readRaw(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) {
    return Promise.reject(tooLarge(req, limit));
  }
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (err?: Error) => {
      if (done) return;
      done = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
      if (err) reject(err);
      else resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
    };
    const onData = (c: Buffer) => {
      size += c.length;
      if (size > limit) {
        req.pause();
        finish(tooLarge(req, limit));
        return;
      }
      chunks.push(c);
    };
    const onEnd = () => finish();
    const onError = (e: Error) => finish(new GatewayError('INVALID_REQUEST', { message: 'Could not read the request body', cause: e }));
    const onAborted = () => finish(new GatewayError('INVALID_REQUEST', { message: 'The request body was not received completely' }));
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('aborted', onAborted);
  });
}

function tooLarge(req: IncomingMessage, limit: number): GatewayError {
  // Do not keep reading a body we have refused: close the connection after the 413.
  (req as IncomingMessage & { gatewayCloseAfter?: boolean }).gatewayCloseAfter = true;
  return new GatewayError('BODY_TOO_LARGE', { message: `Request body is larger than the limit of ${limit} bytes` });
}

const bad = (message: string) => new GatewayError('INVALID_REQUEST', { message });

/** The core's own rules for every model call: a JSON object, a string `model`, a boolean `stream`. */
export function parseBody(buf: Buffer, ctx: Pick<RequestContext, 'protocol' | 'route'>): ParsedBody {
  if (buf.length === 0) throw bad('Request body is empty');
  let text: string;
  try {
    text = decoder.decode(buf);
  } catch {
    throw bad('Request body is not valid UTF-8');
  }
  if (text.trim() === '') throw bad('Request body is empty');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    const msg = e instanceof RangeError ? 'nesting is too deep' : (e as Error).message;
    throw bad(`Request body is not valid JSON: ${msg}`);
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) throw bad('Request body must be a JSON object');
  const obj = json as Record<string, unknown>;
  if (!Object.prototype.hasOwnProperty.call(obj, 'model') || obj.model === undefined || obj.model === null) {
    throw bad("'model' is required");
  }
  if (typeof obj.model !== 'string') throw bad("'model' must be a string");
  if (obj.model.trim() === '') throw bad("'model' must not be empty");
  if (obj.stream !== undefined && obj.stream !== null && typeof obj.stream !== 'boolean') throw bad("'stream' must be a boolean");
  let fallback: string[] = [];
  if (obj.models !== undefined && obj.models !== null) {
    if (!Array.isArray(obj.models) || !obj.models.every((m) => typeof m === 'string' && m.length > 0)) {
      throw bad("'models' must be an array of model names");
    }
    fallback = (obj.models as string[]).filter((m) => m !== obj.model);
  }
  if (ctx.protocol) wireFor(ctx.protocol).validate(obj, { history: ctx.route.handler !== 'count-tokens' });
  return { text, json: obj, model: obj.model, stream: obj.stream === true, fallback };
}

export async function readBody(ctx: RequestContext): Promise<ParsedBody> {
  const buf = await readRaw(ctx.req, ctx.config.server.bodyLimit);
  ctx.rawBody = buf;
  return parseBody(buf, ctx);
}
