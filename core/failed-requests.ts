/**
 * Keeps the bodies of failed requests (spec §8.8), for `failed_requests.retention` (30 days), with
 * every credential removed: one JSON file per request under `<dir>/<YYYY-MM-DD>/<request id>.json`.
 * Writes are asynchronous and off the response path; day folders past the retention are deleted
 * hourly, and the oldest files go first whenever the folder passes `failed_requests.max_size`.
 * Bodies larger than MAX_BODY are cut (and say so).
 *
 * What "no credential" means (docs/operations.md "Failed requests"):
 * - any header, query parameter or JSON body field (at any depth) whose name looks like a
 *   credential (CREDENTIAL_NAME, case-insensitive) has its value replaced by `[removed]`;
 * - then every occurrence of a configured client or provider key anywhere in the record's text,
 *   and anything shaped like a bearer token or an `sk-…` key, is replaced too;
 * - requests refused before their key was known (strangers, bad keys) are sampled: at most
 *   UNKEYED_PER_MINUTE a minute are written, without their body.
 */
import { createHash } from 'node:crypto';
import { mkdir, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from './log.js';
import type { Clock } from './clock.js';

const MAX_BODY = 1024 * 1024;
/** Records a minute for requests refused before a key was known. */
export const UNKEYED_PER_MINUTE = 10;
const REMOVED = '[removed]';

/** Names (headers, query parameters, body fields) whose values are credentials. */
const CREDENTIAL_NAME =
  /^(authorization|proxy-authorization|cookie|set-cookie|key|auth)$|api[-_]?key|access[-_]?key|secret|token|password|passwd|credential|session[-_]?id|[-_]key$|^x-.*-key$/i;

export function isCredentialName(name: string): boolean {
  return CREDENTIAL_NAME.test(name);
}

/** Token shapes removed wherever they appear, configured or not. */
const TOKEN_SHAPES = /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}|\b(sk|pk|rk)-[A-Za-z0-9_-]{16,}/g;

export interface FailedRequest {
  requestId: string;
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  status: number;
  error?: { code: string; type: string; message: string };
  key?: string;
  model?: string;
  body?: Buffer | string;
  /** The length of the whole body when `body` is only its head (large bodies). */
  bodyLength?: number;
}

/** Replaces credential-named fields at any depth of a parsed JSON value. */
function scrubJson(v: unknown, depth = 0): unknown {
  if (depth > 64 || v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map((x) => scrubJson(x, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) out[k] = isCredentialName(k) ? REMOVED : scrubJson(x, depth + 1);
  return out;
}

function scrubBody(text: string): string {
  try {
    return JSON.stringify(scrubJson(JSON.parse(text)));
  } catch {
    // Not JSON (or cut): remove `"name": "value"` / name=value pairs with credential names.
    return text
      .replace(/("([^"\\]{1,64})"\s*:\s*)"(?:[^"\\]|\\.)*"/g, (m, pre: string, name: string) =>
        isCredentialName(name) ? `${pre}"${REMOVED}"` : m,
      )
      .replace(/\b([A-Za-z_][\w-]{0,63})=([^&\s"]+)/g, (m, name: string) => (isCredentialName(name) ? `${name}=${REMOVED}` : m));
  }
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** What must never be written: plain secrets, and the SHA-256 digests of client keys (kept hashed). */
export interface Secrets {
  plain: readonly string[];
  digests: ReadonlySet<string>;
}

const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');

/**
 * Removes every secret and token-shaped string from a text. Client keys are known only by their
 * digest, so every run of key characters (16 to 256 long) is hashed and compared; percent and
 * backslash escapes are read as separators, so an encoded or escaped key is found too.
 */
export function redactSecrets(text: string, secrets: Secrets): string {
  let out = text;
  const found = new Set<string>();
  if (secrets.digests.size > 0) {
    const seen = out.replace(/%[0-9A-Fa-f]{2}|\\u[0-9A-Fa-f]{4}|\\./g, (m) => ' '.repeat(m.length));
    for (const m of seen.matchAll(/[A-Za-z0-9_-]{16,256}/g)) if (secrets.digests.has(sha256(m[0]))) found.add(m[0]);
  }
  for (const s of [...secrets.plain, ...found])
    if (s.length >= 6 && out.includes(s)) out = out.replace(new RegExp(escapeRegExp(s), 'g'), REMOVED);
  return out.replace(TOKEN_SHAPES, REMOVED);
}

/** The record as written: credential names scrubbed, then every secret removed from its text. */
export function scrub(r: FailedRequest, secrets: Secrets = { plain: [], digests: new Set() }): Record<string, unknown> {
  const headers: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r.headers)) headers[k] = isCredentialName(k) ? REMOVED : v;
  let pathText: string;
  try {
    const u = new URL(r.url, 'http://gateway');
    for (const p of [...u.searchParams.keys()]) if (isCredentialName(p)) u.searchParams.set(p, REMOVED);
    pathText = u.pathname + u.search;
  } catch {
    pathText = '[unreadable]';
  }
  const raw = r.body === undefined ? undefined : typeof r.body === 'string' ? r.body : r.body.toString('utf8');
  const total = r.bodyLength ?? raw?.length ?? 0;
  const cut = raw !== undefined && (raw.length > MAX_BODY || total > MAX_BODY);
  const body = raw === undefined ? undefined : scrubBody(cut ? raw.slice(0, MAX_BODY) : raw);
  const record = {
    request_id: r.requestId,
    method: r.method,
    path: pathText,
    headers,
    status: r.status,
    error: r.error,
    key: r.key,
    model: r.model,
    body,
    ...(cut ? { body_truncated_from: Math.max(total, raw.length) } : {}),
  };
  return JSON.parse(redactSecrets(JSON.stringify(record), secrets)) as Record<string, unknown>;
}

export interface FailedRequestOptions {
  retentionMs: number;
  /** Bytes the folder may hold; the oldest files are deleted past it. */
  maxBytes: number;
  /** Configured client keys (digests) and provider credentials: read at each record, so reloads apply. */
  secrets: () => Secrets;
}

export class FailedRequestLog {
  private readonly timer: NodeJS.Timeout;
  /** Files written or found, oldest first, with their sizes (for the size cap). */
  private files: Array<{ file: string; size: number }> = [];
  private bytes = 0;
  private trimming = false;
  private unkeyed = { minute: -1, count: 0 };
  private readonly ready: Promise<void>;

  constructor(
    private readonly dir: string,
    private readonly opts: FailedRequestOptions,
    private readonly clock: Clock,
    private readonly log: Logger,
  ) {
    this.timer = setInterval(() => void this.cleanup(), 3_600_000);
    this.timer.unref();
    this.ready = this.cleanup().then(() => this.scan());
  }

  record(r: FailedRequest): void {
    const now = this.clock.now();
    if (r.key === undefined) {
      // Refused before a key was known: a stranger's traffic fills no disk.
      const minute = Math.floor(now / 60_000);
      if (this.unkeyed.minute !== minute) this.unkeyed = { minute, count: 0 };
      if (++this.unkeyed.count > UNKEYED_PER_MINUTE) return;
      r = { ...r, body: undefined };
    }
    const day = new Date(now).toISOString().slice(0, 10);
    const folder = path.join(this.dir, day);
    const file = path.join(folder, `${r.requestId.replace(/[^A-Za-z0-9._-]/g, '_')}.json`);
    const text = JSON.stringify({ at: new Date(now).toISOString(), ...scrub(r, this.opts.secrets()) }) + '\n';
    void this.ready
      .then(() => mkdir(folder, { recursive: true }))
      // Written aside, then renamed: a reader (an operator's tooling, a log shipper) never sees a
      // record half-written under its final name.
      .then(() => writeFile(`${file}.partial`, text))
      .then(() => rename(`${file}.partial`, file))
      .then(() => {
        const size = Buffer.byteLength(text);
        this.files.push({ file, size });
        this.bytes += size;
        if (this.bytes > this.opts.maxBytes) void this.trim();
      })
      .catch((e) => this.log.warn('could not keep a failed request', { error: e as Error }));
  }

  /** Lists what the folder already holds, oldest first. */
  private async scan(): Promise<void> {
    const found: Array<{ file: string; size: number; t: number }> = [];
    let days: string[];
    try {
      days = (await readdir(this.dir)).filter((d) => /^\d{4}-\d{2}-\d{2}$/.test(d)).sort();
    } catch {
      return;
    }
    for (const d of days) {
      let names: string[] = [];
      try {
        names = await readdir(path.join(this.dir, d));
      } catch {
        continue;
      }
      for (const n of names) {
        const file = path.join(this.dir, d, n);
        try {
          const st = await stat(file);
          if (st.isFile()) found.push({ file, size: st.size, t: st.mtimeMs });
        } catch {
          /* gone meanwhile */
        }
      }
    }
    found.sort((a, b) => a.t - b.t);
    this.files = found.map(({ file, size }) => ({ file, size })).concat(this.files);
    this.bytes = this.files.reduce((n, f) => n + f.size, 0);
    if (this.bytes > this.opts.maxBytes) await this.trim();
  }

  /** Deletes the oldest files until the folder is back under 90 % of its cap. */
  private async trim(): Promise<void> {
    if (this.trimming) return;
    this.trimming = true;
    try {
      const target = Math.floor(this.opts.maxBytes * 0.9);
      while (this.bytes > target && this.files.length > 0) {
        const f = this.files.shift()!;
        this.bytes -= f.size;
        await rm(f.file, { force: true }).catch(() => undefined);
      }
    } finally {
      this.trimming = false;
    }
  }

  /** Deletes day folders older than the retention. */
  async cleanup(): Promise<void> {
    let days: string[];
    try {
      days = await readdir(this.dir);
    } catch {
      return;
    }
    const cutoff = this.clock.now() - this.opts.retentionMs;
    for (const d of days) {
      const t = Date.parse(`${d}T23:59:59.999Z`);
      if (/^\d{4}-\d{2}-\d{2}$/.test(d) && !Number.isNaN(t) && t < cutoff) {
        await rm(path.join(this.dir, d), { recursive: true, force: true }).catch(() => undefined);
        const prefix = path.join(this.dir, d) + path.sep;
        const gone = this.files.filter((f) => f.file.startsWith(prefix));
        if (gone.length > 0) {
          this.files = this.files.filter((f) => !f.file.startsWith(prefix));
          this.bytes -= gone.reduce((n, f) => n + f.size, 0);
        }
      }
    }
  }

  close(): void {
    clearInterval(this.timer);
  }
}
