/**
 * The admin API's rules for what a form sends (core/admin/openapi.ts, core/units.ts), checked in the
 * page first so that nothing the API would refuse can be sent: each returns an error message, or
 * undefined when the value is good. The API checks again and has the last word.
 */

/** Names of users and keys. */
export const NAME = /^[A-Za-z0-9_.@-]{1,64}$/;

export function name(v: string): string | undefined {
  if (v === '') return 'Required';
  return NAME.test(v) ? undefined : 'Letters, digits, _ . @ and - only, at most 64';
}

/**
 * A USD amount as the API reads it: a decimal with at most 6 places (integer micro-USD inside),
 * sent as the string typed so that nothing is lost to floating point.
 */
export function micros(v: string): number | string {
  const s = v.trim();
  const m = /^(-?)([0-9]+)(?:\.([0-9]+))?$/.exec(s);
  if (!m) return 'A USD amount such as 12.50';
  const frac = (m[3] ?? '').replace(/0+$/, '');
  if (frac.length > 6) return 'At most 6 decimal places';
  const n = Number(m[2]) * 1e6 + Number(frac.padEnd(6, '0') || '0');
  if (!Number.isSafeInteger(n)) return 'Too large';
  return m[1] === '-' ? -n : n;
}

/** A limit in USD (0 = no limit): not negative. Empty is left unchanged by the caller. */
export function limitUsd(v: string): string | undefined {
  const r = micros(v);
  if (typeof r === 'string') return r;
  return r < 0 ? 'Must not be negative' : undefined;
}

/** A top-up: not 0; a negative one (a correction) may not take the balance below zero. */
export function topupUsd(v: string, balanceMicros: number): string | undefined {
  const r = micros(v);
  if (typeof r === 'string') return r;
  if (r === 0) return 'Must not be 0';
  if (r < 0 && balanceMicros + r < 0) return 'A correction may not take the balance below zero';
  return undefined;
}

export function integer(v: string, min: number, max = Number.MAX_SAFE_INTEGER): string | undefined {
  if (!/^[0-9]+$/.test(v.trim())) return `A whole number from ${min}`;
  const n = Number(v.trim());
  if (n < min || n > max) return `From ${min} to ${max}`;
  return undefined;
}

export function text(v: string, min: number, max: number): string | undefined {
  if (v.length < min || (min > 0 && v.trim() === '')) return 'Required';
  return v.length > max ? `At most ${max} characters` : undefined;
}

/** A date (YYYY-MM-DD), or empty. */
export function date(v: string): string | undefined {
  if (v === '') return undefined;
  const t = Date.parse(`${v}T00:00:00Z`);
  if (!/^\d{4}-\d{2}-\d{2}$/.test(v) || Number.isNaN(t)) return 'A date such as 2027-12-31';
  return undefined;
}

/** The first error of a form's fields, keyed by field. */
export type Errors<F extends string> = Partial<Record<F, string>>;

export function clean<F extends string>(e: Errors<F>): Errors<F> {
  return Object.fromEntries(Object.entries(e).filter(([, v]) => v !== undefined)) as Errors<F>;
}

/** A new Idempotency-Key (crypto.getRandomValues works on plain HTTP too, where randomUUID does not). */
export function idempotencyKey(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return `console-${Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')}`;
}
