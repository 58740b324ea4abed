/**
 * API key secrets: their format (spec §5 rule 3), new ones, their SHA-256 (the only form kept), and
 * what may be shown of one.
 */
import crypto from 'node:crypto';

/** `sk-` and 64 hex, or a custom key of at least 16 letters, digits, `_` and `-`. */
export const KEY_FORMAT = /^(sk-[0-9a-fA-F]{64}|[A-Za-z0-9_-]{16,})$/;

/** A new key: `sk-` and 64 hex from a CSPRNG. */
export function newKey(): string {
  return `sk-${crypto.randomBytes(32).toString('hex')}`;
}

/** SHA-256, hex: the one-shot `crypto.hash` where Node has it (20.12+), else a Hash object. */
export const sha256Hex: (s: string) => string =
  typeof crypto.hash === 'function'
    ? (s) => crypto.hash('sha256', s, 'hex')
    : (s) => crypto.createHash('sha256').update(s, 'utf8').digest('hex');

/** What may be shown of a key: its first 6 and last 4 characters (spec §5 rule 4). */
export function keyHint(key: string): string {
  return `${key.slice(0, 6)}…${key.slice(-4)}`;
}
