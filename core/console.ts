/**
 * The web console's static files (docs/console.md), served at /console/ when `console.enabled`.
 * The console is built from console/ into dist/console/ at `npm run build` (scripts/build.mjs) and
 * ships in the package; the gateway only serves that folder — it never imports the console's
 * sources, and needs no bundler at run time.
 *
 * - The folder is read once, on the first request, into memory (a few files, tens of KiB), so a
 *   request never touches the file system and a path can only name a file that was listed
 *   (nothing like `..` can reach outside it). A folder without index.html is not cached: the next
 *   request looks again (a build finishing while the gateway runs).
 * - `index.html` is revalidated on every load (`no-cache`, ETag); everything under `assets/` has a
 *   content hash in its name and is cached for a year (`immutable`).
 * - Every answer under /console/ — files, 304s, 404s, 405s — carries the same strict
 *   Content-Security-Policy: scripts, styles, images, fonts and API calls from this origin only, no
 *   inline script or style (the console has none), no plugins, no `<base>`, no form submissions
 *   (the console's forms are handled by its script: an admin token can never land in a URL),
 *   no framing; and Trusted Types required, so even a bug could not write a string as HTML.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { GatewayError, renderError } from './errors.js';

/** Where the build puts the console: dist/console/, next to this module's dist/core/. */
export const CONSOLE_DIR = fileURLToPath(new URL('../console/', import.meta.url));

export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
  "object-src 'none'",
  "require-trusted-types-for 'script'",
  "trusted-types 'none'",
].join('; ');

const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': CONSOLE_CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'permissions-policy': 'camera=(), microphone=(), geolocation=(), payment=()',
};

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
  '.json': 'application/json',
};

interface Asset {
  body: Buffer;
  gzip?: Buffer;
  type: string;
  etag: string;
  cache: string;
}

export class ConsoleFiles {
  private files?: Map<string, Asset>;

  constructor(private readonly dir = CONSOLE_DIR) {}

  /** Answers a GET or HEAD under /console (the caller checked `console.enabled`). */
  async serve(req: IncomingMessage, res: ServerResponse, pathname: string): Promise<void> {
    req.resume();
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) res.setHeader(k, v);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      return refuse(res, new GatewayError('METHOD_NOT_ALLOWED', { message: `Method ${req.method} is not allowed on ${pathname}` }), {
        allow: 'GET, HEAD',
      });
    }
    // The console's own links are relative to /console/.
    if (pathname === '/console') {
      res.writeHead(301, { location: '/console/', 'cache-control': 'no-cache' });
      return void res.end();
    }
    const files = await this.load();
    if (!files) {
      const message = 'The console is enabled but not built (no dist/console/): run `npm run build` where dev dependencies are installed';
      return refuse(res, new GatewayError('ROUTE_NOT_FOUND', { message }));
    }
    const asset = files.get(pathname === '/console/' ? 'index.html' : pathname.slice('/console/'.length));
    if (!asset) return refuse(res, new GatewayError('ROUTE_NOT_FOUND', { message: `No console file at ${pathname}` }));
    const headers: Record<string, string> = { 'content-type': asset.type, 'cache-control': asset.cache, etag: asset.etag };
    if (asset.gzip) headers.vary = 'accept-encoding';
    if (req.headers['if-none-match'] === asset.etag) {
      res.writeHead(304, headers);
      return void res.end();
    }
    const gzip = asset.gzip && /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
    const body = gzip ? asset.gzip! : asset.body;
    if (gzip) headers['content-encoding'] = 'gzip';
    headers['content-length'] = String(body.length);
    res.writeHead(200, headers);
    res.end(req.method === 'HEAD' ? undefined : body);
  }

  private async load(): Promise<Map<string, Asset> | undefined> {
    if (this.files) return this.files;
    const files = new Map<string, Asset>();
    const add = async (rel: string, cache: string) => {
      const body = await readFile(path.join(this.dir, rel));
      const type = TYPES[path.extname(rel)] ?? 'application/octet-stream';
      const compressible = /^text\/|svg|json/.test(type) && body.length > 1024;
      const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`;
      files.set(rel, { body, gzip: compressible ? gzipSync(body) : undefined, type, etag, cache });
    };
    try {
      await add('index.html', 'no-cache');
      for (const name of await readdir(path.join(this.dir, 'assets'))) {
        await add(`assets/${name}`, 'public, max-age=31536000, immutable');
      }
    } catch {
      return undefined;
    }
    this.files = files;
    return files;
  }
}

function refuse(res: ServerResponse, err: GatewayError, headers: Record<string, string> = {}): void {
  const r = renderError(err, 'chat');
  res.writeHead(r.status, { 'content-type': 'application/json', 'cache-control': 'no-store', ...r.headers, ...headers });
  res.end(JSON.stringify(r.body));
}
