/**
 * Option parsing shared by the `gateway` commands: strict (node:util parseArgs), so an unknown or
 * misspelt option is a usage error (exit 2), never a silently taken argument.
 */
import path from 'node:path';
import { parseArgs, type ParseArgsConfig } from 'node:util';

/** Wrong usage: main() prints it with a pointer to the help and exits 2. */
export class UsageError extends Error {}

export type Options = NonNullable<ParseArgsConfig['options']>;
export type Values = Record<string, string | boolean | string[] | undefined>;

export const CONFIG: Options = { config: { type: 'string', short: 'c' } };
const HELP: Options = { help: { type: 'boolean', short: 'h' } };

/** A negative number in an argument's place (a correction's AMOUNT): no option is a digit. */
const NEGATIVE = /^-\d+(\.\d+)?$/;
/** Marks such an argument so that parseArgs takes it as one; removed again after parsing. */
const MARK = '\u0000';

/** Strict parse: unknown options, missing values and more than `positionals` arguments are usage errors. */
export function parse(args: string[], options: Options, positionals: number) {
  const all = { ...options, ...HELP };
  const takesValue = new Set<string>();
  for (const [name, o] of Object.entries(all)) {
    if (o.type !== 'string') continue;
    takesValue.add(`--${name}`);
    if (o.short) takesValue.add(`-${o.short}`);
  }
  const end = args.indexOf('--');
  const marked = args.map((a, i) =>
    NEGATIVE.test(a) && (end === -1 || i < end) && !(i > 0 && takesValue.has(args[i - 1])) ? MARK + a : a,
  );
  let r;
  try {
    r = parseArgs({ args: marked, options: all, allowPositionals: true, strict: true });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const found = r.positionals.map((p) => (p.startsWith(MARK) ? p.slice(1) : p));
  if (found.length > positionals) throw new UsageError(`unexpected argument '${found[positionals]}'`);
  return { values: r.values as Values, positionals: found };
}

export function configPath(explicit?: Values[string]): string {
  return path.resolve(typeof explicit === 'string' ? explicit : (process.env.GATEWAY_CONFIG ?? './gateway.yaml'));
}

export function str(v: Values[string]): string | undefined {
  return typeof v === 'string' ? v : undefined;
}

/** An option's whole number (at least `min`), or undefined when not given. */
export function int(values: Values, name: string, min: number): number | undefined {
  const v = str(values[name]);
  if (v === undefined) return undefined;
  const n = /^\d+$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n) || n < min) throw new UsageError(`--${name} must be a whole number, ${min} or more (got '${v}')`);
  return n;
}

/** A USD amount as the decimal string given (sent as a string: never through a float). */
export function decimal(v: string, what: string, signed = false): string {
  if (!(signed ? /^-?\d+(\.\d+)?$/ : /^\d+(\.\d+)?$/).test(v)) {
    throw new UsageError(`${what} must be a decimal USD amount such as 25.50${signed ? ' (negative: a correction)' : ''} (got '${v}')`);
  }
  return v;
}

/** One of the allowed words, or undefined when not given. */
export function oneOf<T extends string>(values: Values, name: string, allowed: readonly T[]): T | undefined {
  const v = str(values[name]);
  if (v === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(v)) throw new UsageError(`--${name} must be ${allowed.join(' or ')} (got '${v}')`);
  return v as T;
}
