/**
 * How numbers and times read in the console. Money arrives as USD numbers with at most 6 decimals
 * (integer micro-USD in the gateway); it is shown exactly, with at least 2 decimals.
 */

/** USD as `$1,234.50` or `$0.000123`: every decimal the gateway gave, at least two. */
export function usd(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '—';
  const micros = Math.round(Math.abs(n) * 1e6);
  const whole = Math.floor(micros / 1e6);
  let frac = String(micros % 1e6)
    .padStart(6, '0')
    .replace(/0+$/, '');
  if (frac.length < 2) frac = frac.padEnd(2, '0');
  return `${n < 0 && micros > 0 ? '−' : ''}$${whole.toLocaleString('en-US')}.${frac}`;
}

const INT = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
export function int(n: number | null | undefined): string {
  return n === null || n === undefined || !Number.isFinite(n) ? '—' : INT.format(n);
}

/** An ISO time as `2026-11-26 16:22 UTC` (operators across time zones read one clock). */
export function time(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return `${d.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

/** How far an ISO time is from now: `in 4h 12m`, `3d ago`. */
export function relative(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const ms = t - now;
  const abs = Math.abs(ms);
  const m = Math.round(abs / 60_000);
  let s: string;
  if (m < 1) s = 'less than a minute';
  else if (m < 60) s = `${m}m`;
  else if (m < 48 * 60) s = `${Math.floor(m / 60)}h ${m % 60}m`;
  else s = `${Math.round(m / 1440)}d`;
  return ms >= 0 ? `in ${s}` : `${s} ago`;
}

/** A limit that 0 turns off. */
export function limit(n: number): string {
  return n > 0 ? usd(n) : 'no limit';
}

/** Today (UTC) as YYYY-MM-DD, the day the gateway's counters use. */
export function today(): string {
  return new Date().toISOString().slice(0, 10);
}
