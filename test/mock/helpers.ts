/** Shared bits for the mock upstream tests (not a test file itself). */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { SseParser, type SseBlock } from '../../core/sse.js';

/** Repository root (this file runs from dist/test/mock). */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const CONFORMANCE = path.resolve(ROOT, 'test/fixtures/conformance');

export interface Raw {
  status: number;
  headers: Headers;
  text: string;
}

export async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Raw> {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: r.status, headers: r.headers, text: await r.text() };
}

export function blocks(text: string): SseBlock[] {
  const p = new SseParser();
  return [...p.feed(text), ...p.end(true)].filter((b) => b.data !== undefined);
}

export function jsonBlocks(text: string): { event?: string; data: any }[] {
  return blocks(text)
    .filter((b) => b.data !== '[DONE]')
    .map((b) => ({ event: b.event, data: JSON.parse(b.data as string) }));
}

/** Reads a streaming response until the server ends or kills it; returns what arrived and how it ended. */
export async function readRaw(url: string, body: unknown): Promise<{ status: number; text: string; error?: unknown }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const dec = new TextDecoder();
  let text = '';
  try {
    for await (const c of r.body as any as AsyncIterable<Uint8Array>) text += dec.decode(c, { stream: true });
    return { status: r.status, text };
  } catch (error) {
    return { status: r.status, text, error };
  }
}
