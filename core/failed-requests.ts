/**
 * Keeps the bodies of failed requests (spec §8.8), for `failed_requests.retention` (30 days),
 * with credentials removed: one JSON file per request under `<dir>/<YYYY-MM-DD>/<request id>.json`.
 * Writes are asynchronous and off the response path; day folders past the retention are deleted
 * hourly. Bodies larger than MAX_BODY are cut (and say so).
 */
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from './log.js';
import type { Clock } from './clock.js';

const MAX_BODY = 1024 * 1024;
const CREDENTIAL_HEADERS = new Set(['authorization', 'proxy-authorization', 'x-api-key', 'x-goog-api-key', 'x-alt-api-key', 'cookie', 'set-cookie']);

export interface FailedRequest {
  requestId: string;
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  status: number;
  error?: { code: string; type: string; message: string };
  key?: string;
  model?: string;
  body?: Buffer;
}

/** Headers without credentials; the URL without key/api_key query parameters. */
export function scrub(r: FailedRequest): Record<string, unknown> {
  const headers: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r.headers)) if (!CREDENTIAL_HEADERS.has(k.toLowerCase())) headers[k] = v;
  const u = new URL(r.url, 'http://gateway');
  for (const p of ['key', 'api_key']) if (u.searchParams.has(p)) u.searchParams.set(p, '[removed]');
  const body = r.body === undefined ? undefined : r.body.subarray(0, MAX_BODY).toString('utf8');
  return {
    request_id: r.requestId,
    method: r.method,
    path: u.pathname + u.search,
    headers,
    status: r.status,
    error: r.error,
    key: r.key,
    model: r.model,
    body,
    ...(r.body && r.body.length > MAX_BODY ? { body_truncated_from: r.body.length } : {}),
  };
}

export class FailedRequestLog {
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly dir: string, private readonly retentionMs: number, private readonly clock: Clock, private readonly log: Logger) {
    this.timer = setInterval(() => void this.cleanup(), 3_600_000);
    this.timer.unref();
    void this.cleanup();
  }

  record(r: FailedRequest): void {
    const now = this.clock.now();
    const day = new Date(now).toISOString().slice(0, 10);
    const folder = path.join(this.dir, day);
    const file = path.join(folder, `${r.requestId.replace(/[^A-Za-z0-9._-]/g, '_')}.json`);
    const text = JSON.stringify({ at: new Date(now).toISOString(), ...scrub(r) }) + '\n';
    void mkdir(folder, { recursive: true })
      .then(() => writeFile(file, text))
      .catch((e) => this.log.warn('could not keep a failed request', { error: e as Error }));
  }

  /** Deletes day folders older than the retention. */
  async cleanup(): Promise<void> {
    let days: string[];
    try {
      days = await readdir(this.dir);
    } catch {
      return;
    }
    const cutoff = this.clock.now() - this.retentionMs;
    for (const d of days) {
      const t = Date.parse(`${d}T23:59:59.999Z`);
      if (/^\d{4}-\d{2}-\d{2}$/.test(d) && !Number.isNaN(t) && t < cutoff) {
        await rm(path.join(this.dir, d), { recursive: true, force: true }).catch(() => undefined);
      }
    }
  }

  close(): void {
    clearInterval(this.timer);
  }
}
