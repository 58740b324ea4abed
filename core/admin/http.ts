/**
 * The admin API's HTTP plumbing: its one error shape, JSON bodies in and out, request validation
 * against the OpenAPI document's schemas (ajv, JSON Schema 2020-12 as OpenAPI 3.1 has it), and
 * the conversions of money and time every handler shares.
 *
 * Every error is `{"error":{"type","code","message","details"?}}` with a stable `code`
 * (openapi.ts lists them); `details` names each invalid field by its JSON pointer.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Ajv2020, type ErrorObject } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { parseDecimal } from '../units.js';

/** The largest admin request body. */
export const MAX_BODY = 64 * 1024;

export type AdminErrorCode =
  | 'invalid_request'
  | 'idempotency_key_required'
  | 'unauthorized'
  | 'not_found'
  | 'method_not_allowed'
  | 'conflict'
  | 'managed_by_config'
  | 'idempotency_conflict'
  | 'below_zero'
  | 'body_too_large'
  | 'rate_limited'
  | 'store_unavailable'
  | 'internal';

const STATUS: Record<AdminErrorCode, [number, string]> = {
  invalid_request: [400, 'invalid_request_error'],
  idempotency_key_required: [400, 'invalid_request_error'],
  unauthorized: [401, 'authentication_error'],
  not_found: [404, 'not_found_error'],
  method_not_allowed: [405, 'invalid_request_error'],
  conflict: [409, 'conflict_error'],
  managed_by_config: [409, 'conflict_error'],
  idempotency_conflict: [409, 'conflict_error'],
  below_zero: [409, 'conflict_error'],
  body_too_large: [413, 'invalid_request_error'],
  rate_limited: [429, 'rate_limit_error'],
  // The gateway's type for a store that cannot answer (as its catalogue's BILLING_SERVICE).
  store_unavailable: [503, 'billing_service_error'],
  internal: [500, 'api_error'],
};

export interface FieldError {
  path: string;
  message: string;
}

export class AdminError extends Error {
  constructor(
    readonly code: AdminErrorCode,
    message: string,
    readonly details?: FieldError[],
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  get status(): number {
    return STATUS[this.code][0];
  }
}

/** A field error of a valid-looking body (a group that does not exist, a bad date…). */
export function invalid(path: string, message: string): AdminError {
  return new AdminError('invalid_request', `${path ? `${path}: ` : ''}${message}`, [{ path, message }]);
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers });
  res.end(text);
}

export function sendError(res: ServerResponse, e: AdminError): void {
  const [status, type] = STATUS[e.code];
  sendJson(
    res,
    status,
    { error: { type, code: e.code, message: e.message, ...(e.details ? { details: e.details } : {}) } },
    // Clients (and the official SDKs) retry 5xx and 429 on their own; not what a 4xx here wants.
    status >= 400 && status < 500 && status !== 429 ? { 'x-should-retry': 'false', ...e.headers } : e.headers,
  );
}

/** Reads a JSON body of at most MAX_BODY bytes; `undefined` for an empty one. */
export async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > MAX_BODY) throw new AdminError('body_too_large', `The request body is larger than ${MAX_BODY / 1024} KiB`);
    chunks.push(c as Buffer);
  }
  if (size === 0) return undefined;
  const text = Buffer.concat(chunks, size).toString('utf8');
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new AdminError('invalid_request', `The body is not valid JSON: ${(e as Error).message}`);
  }
}

// ---- validation ---------------------------------------------------------------------------------

const ajv = new Ajv2020({ allErrors: true, strict: false });
addFormats.default(ajv);

/** A validator of one request body schema; throws 400 with every field error. */
export function validator<T>(schema: object): (body: unknown) => T {
  const check = ajv.compile(schema);
  return (body) => {
    if (body === undefined) throw new AdminError('invalid_request', 'A JSON body is required');
    if (check(body)) return body as T;
    const details = fieldErrors(check.errors ?? []);
    throw new AdminError('invalid_request', details.map((d) => `${d.path || 'body'}: ${d.message}`).join('; '), details);
  };
}

function fieldErrors(errors: ErrorObject[]): FieldError[] {
  const out: FieldError[] = [];
  const seen = new Set<string>();
  for (const e of errors) {
    // oneOf's own summary adds nothing to its branches' messages.
    if (e.keyword === 'oneOf' || e.keyword === 'if') continue;
    let path = e.instancePath;
    let message = e.message ?? 'is invalid';
    if (e.keyword === 'additionalProperties') {
      path = `${path}/${(e.params as { additionalProperty: string }).additionalProperty}`;
      message = 'is not a known field';
    } else if (e.keyword === 'required') {
      path = `${path}/${(e.params as { missingProperty: string }).missingProperty}`;
      message = 'is required';
    } else if (e.keyword === 'enum') {
      message = `must be one of ${(e.params as { allowedValues: unknown[] }).allowedValues.map((v) => JSON.stringify(v)).join(', ')}`;
    }
    const k = `${path}\u0000${message}`;
    if (seen.has(k)) continue;
    seen.add(k);
    out.push({ path, message });
  }
  return out;
}

// ---- money and time -----------------------------------------------------------------------------

/** A USD decimal (number or string, ≤ 6 places) as integer micro-USD, exactly; `path` names it in the error. */
export function usd(v: number | string, path: string, opts: { min?: number } = {}): number {
  let micros: number;
  try {
    micros = parseDecimal(v, 6);
  } catch (e) {
    throw invalid(path, (e as Error).message.replace(/^invalid decimal/, 'not a USD amount'));
  }
  if (opts.min !== undefined && micros < opts.min)
    throw invalid(path, opts.min === 0 ? 'must not be negative' : `must be at least ${opts.min / 1e6}`);
  return micros;
}

/** micro-USD → USD for JSON (at most 6 decimals). */
export function toUsd(micros: number): number {
  return Number((micros / 1e6).toFixed(6));
}

/** An ISO 8601 date-time (or date) as epoch ms; `path` names it in the error. */
export function time(v: string, path: string): number {
  const t = Date.parse(/^\d{4}-\d{2}-\d{2}$/.test(v) ? `${v}T00:00:00Z` : v);
  if (Number.isNaN(t)) throw invalid(path, `'${v}' is not an ISO 8601 time (e.g. 2027-12-31T00:00:00Z)`);
  return t;
}

export function iso(t: number | undefined): string | null {
  return t === undefined ? null : new Date(t).toISOString();
}

/** A positive page size, 50 by default, at most 200. */
export function pageLimit(v: string | null): number {
  if (v === null) return 50;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 200) throw invalid('limit', 'must be an integer from 1 to 200');
  return n;
}
