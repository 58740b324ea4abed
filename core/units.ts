/**
 * Operator-facing units in gateway.yaml, parsed once at config load.
 * Durations: `250ms`, `30s`, `5m`, `5h`, `1d`, `7d`. Sizes: `512KiB`, `256MiB`, `1GB`, or bytes.
 * Money: USD as decimals with at most 6 places, kept inside as integer micro-USD.
 */

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
export const DURATION_PATTERN = '^[0-9]+(\\.[0-9]+)?(ms|s|m|h|d)$';

export function parseDuration(v: string): number {
  const m = /^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)$/.exec(v.trim());
  if (!m) throw new Error(`invalid duration '${v}' (use e.g. 250ms, 30s, 5m, 5h, 1d)`);
  return Math.round(Number(m[1]) * DURATION_UNITS[m[2]]);
}

const SIZE_UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  kb: 1e3,
  mb: 1e6,
  gb: 1e9,
  kib: 1024,
  mib: 1024 ** 2,
  gib: 1024 ** 3,
};
export const SIZE_PATTERN = '^[0-9]+(\\.[0-9]+)?\\s*([kKmMgG]i?[bB]|[bB])?$';

export function parseSize(v: string | number): number {
  if (typeof v === 'number') return Math.floor(v);
  const m = /^([0-9]+(?:\.[0-9]+)?)\s*([kmg]i?b|b)?$/i.exec(v.trim());
  if (!m) throw new Error(`invalid size '${v}' (use e.g. 512KiB, 256MiB)`);
  return Math.floor(Number(m[1]) * SIZE_UNITS[(m[2] ?? '').toLowerCase()]);
}

/** Parses a decimal (number or string) with at most `places` decimals into an integer scaled by 10^places, exactly. */
export function parseDecimal(v: number | string, places = 6): number {
  let s = typeof v === 'number' ? numberToPlainString(v) : v.trim();
  let neg = false;
  if (s.startsWith('-')) {
    neg = true;
    s = s.slice(1);
  }
  const m = /^([0-9]+)(?:\.([0-9]+))?$/.exec(s);
  if (!m) throw new Error(`invalid decimal '${v}'`);
  const frac = (m[2] ?? '').replace(/0+$/, '');
  if (frac.length > places) throw new Error(`'${v}' has more than ${places} decimal places`);
  const scaled = Number(m[1]) * 10 ** places + Number((frac + '0'.repeat(places)).slice(0, places) || '0');
  if (!Number.isSafeInteger(scaled)) throw new Error(`'${v}' is too large`);
  return neg ? -scaled : scaled;
}

function numberToPlainString(n: number): string {
  if (!Number.isFinite(n)) throw new Error(`invalid number ${n}`);
  const s = String(n);
  if (!/e/i.test(s)) return s;
  return n.toFixed(12).replace(/\.?0+$/, '');
}

/** micro-USD → USD number with at most 6 decimals, for JSON output. */
export function microsToUsd(micros: number): number {
  return Number((micros / 1e6).toFixed(6));
}
