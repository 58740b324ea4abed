/**
 * Keeps the bodies of failed requests (spec §8.8), for `failed_requests.retention` (30 days), with
 * every credential removed: one JSON file per request under `<dir>/<YYYY-MM-DD>/<request id>.json`.
 * Writes are asynchronous and off the response path; day folders past the retention are deleted
 * hourly. Bodies larger than MAX_BODY are cut (and say so).
 *
 * What "no credential" means (docs/operations.md "Failed requests"):
 * - any header, query parameter or JSON body field (at any depth) whose name looks like a
 *   credential (CREDENTIAL_NAME, case-insensitive) has its value replaced by `[removed]`;
 * - then every occurrence of a configured client or provider key anywhere in the record's text,
 *   and anything shaped like a bearer token or an `sk-…` key, is replaced too.
 *
 * The folder is bounded whatever clients do (docs/operations.md "Failed requests"):
 * - refusals the gateway decided by its own rules, before anything went upstream (a limit, a key,
 *   the balance, the billing service), say all they have to say in their error: they are sampled,
 *   REFUSALS_PER_MINUTE a minute per error code, without their body; requests refused before
 *   their key was known, UNKEYED_PER_MINUTE a minute in all, without their body;
 * - the folder never holds more than `max_size` bytes nor `max_files` files, the record being
 *   written included: records are written one at a time, in order, each after room was made for
 *   it by deleting the oldest files (their deletion awaited first); at most MAX_PENDING records
 *   (MAX_PENDING_BYTES) wait to be written, the rest are dropped;
 * - every record not kept is counted (`dropped`, the metric gateway_failed_requests_dropped_total).
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
/** Records a minute, per error code, for refusals decided by the gateway's own rules. */
export const REFUSALS_PER_MINUTE = 10;
/** Records (and their bytes) waiting to be written at once; more are dropped (a burst faster than the disk). */
export const MAX_PENDING = 256;
export const MAX_PENDING_BYTES = 64 * 1024 * 1024;
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
  /**
   * Refused by the gateway's own rules before anything went upstream (a limit, a key, the balance,
   * the billing service): sampled, and kept without its body.
   */
  refused?: boolean;
}

/** Why a record was not kept (the `reason` of gateway_failed_requests_dropped_total). */
export type DropReason = 'sampled' | 'evicted' | 'backlog' | 'too_large' | 'write_error';

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
  /** Bytes the folder may hold, writes in progress included. */
  maxBytes: number;
  /** Files the folder may hold, writes in progress included. */
  maxFiles?: number;
  /** Configured client keys (digests) and provider credentials: read at each record, so reloads apply. */
  secrets: () => Secrets;
  /** Told of every record not kept. */
  dropped?: (reason: DropReason) => void;
}

export class FailedRequestLog {
  private readonly timer: NodeJS.Timeout;
  /** Files written or found, oldest first, with their sizes. */
  private files: Array<{ file: string; size: number }> = [];
  private bytes = 0;
  /** Records accepted and not yet written (waiting for the folder scan or their turn), and their bytes. */
  private pending = 0;
  private pendingBytes = 0;
  /** The writes, one after the other (the first waits for the folder scan). */
  private queue: Promise<void>;
  private unkeyed = { minute: -1, count: 0 };
  private refusals = { minute: -1, counts: new Map<string, number>() };

  constructor(
    private readonly dir: string,
    private readonly opts: FailedRequestOptions,
    private readonly clock: Clock,
    private readonly log: Logger,
  ) {
    this.timer = setInterval(() => void this.cleanup(), 3_600_000);
    this.timer.unref();
    this.queue = this.cleanup().then(() => this.scan());
  }

  private get maxFiles(): number {
    return this.opts.maxFiles ?? Number.MAX_SAFE_INTEGER;
  }

  private drop(reason: DropReason): void {
    this.opts.dropped?.(reason);
  }

  record(r: FailedRequest): void {
    const now = this.clock.now();
    const minute = Math.floor(now / 60_000);
    if (r.key === undefined) {
      // Refused before a key was known: a stranger's traffic fills no disk.
      if (this.unkeyed.minute !== minute) this.unkeyed = { minute, count: 0 };
      if (++this.unkeyed.count > UNKEYED_PER_MINUTE) return this.drop('sampled');
      r = { ...r, body: undefined, bodyLength: undefined };
    } else if (r.refused) {
      // The gateway's own refusal (an RPM 429 repeated by a client in a loop): its error says it all.
      if (this.refusals.minute !== minute) this.refusals = { minute, counts: new Map() };
      const code = r.error?.code ?? String(r.status);
      const n = (this.refusals.counts.get(code) ?? 0) + 1;
      this.refusals.counts.set(code, n);
      if (n > REFUSALS_PER_MINUTE) return this.drop('sampled');
      r = { ...r, body: undefined, bodyLength: undefined };
    }
    // A full queue drops the record before it is scrubbed: a burst of failures (thousands of
    // clients leaving at once) would otherwise pay the scrubbing for every record it then drops.
    if (this.pending >= MAX_PENDING) return this.drop('backlog');
    const day = new Date(now).toISOString().slice(0, 10);
    const folder = path.join(this.dir, day);
    const file = path.join(folder, `${r.requestId.replace(/[^A-Za-z0-9._-]/g, '_')}.json`);
    const { refused: _refused, ...kept } = r;
    const text = JSON.stringify({ at: new Date(now).toISOString(), ...scrub(kept, this.opts.secrets()) }) + '\n';
    const size = Buffer.byteLength(text);
    if (size > this.opts.maxBytes) return this.drop('too_large');
    if (this.pendingBytes + size > MAX_PENDING_BYTES) return this.drop('backlog');
    this.pending++;
    this.pendingBytes += size;
    this.queue = this.queue
      .then(() => this.write(folder, file, text, size))
      .finally(() => {
        this.pending--;
        this.pendingBytes -= size;
      });
  }

  /** Makes room for `text` (oldest files first, their deletion awaited), then writes it. */
  private async write(folder: string, file: string, text: string, size: number): Promise<void> {
    const removals: Promise<unknown>[] = [];
    while (this.files.length > 0 && (this.bytes + size > this.opts.maxBytes || this.files.length + 1 > this.maxFiles)) {
      const old = this.files.shift()!;
      this.bytes -= old.size;
      removals.push(rm(old.file, { force: true }).catch(() => undefined));
      this.drop('evicted');
    }
    await Promise.all(removals);
    try {
      await mkdir(folder, { recursive: true });
      // Written aside, then renamed: a reader (an operator's tooling, a log shipper) never sees a
      // record half-written under its final name.
      await writeFile(`${file}.partial`, text);
      await rename(`${file}.partial`, file);
      this.files.push({ file, size });
      this.bytes += size;
    } catch (e) {
      await rm(`${file}.partial`, { force: true }).catch(() => undefined);
      this.drop('write_error');
      this.log.warn('could not keep a failed request', { error: e as Error });
    }
  }

  /** Lists what the folder already holds, oldest first, and deletes the oldest past the bounds. */
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
    this.files = found.map(({ file, size }) => ({ file, size }));
    this.bytes = this.files.reduce((n, f) => n + f.size, 0);
    while (this.files.length > 0 && (this.bytes > this.opts.maxBytes || this.files.length > this.maxFiles)) {
      const old = this.files.shift()!;
      this.bytes -= old.size;
      await rm(old.file, { force: true }).catch(() => undefined);
      this.drop('evicted');
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

  /**
   * Stops the hourly cleanup; resolves once every record accepted so far is written (or dropped):
   * a gateway that stops keeps the failures of its last requests.
   */
  close(): Promise<void> {
    clearInterval(this.timer);
    return this.queue.catch(() => undefined);
  }
}
