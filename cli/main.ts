/**
 * The `gateway` command — the wiring that joins core/ and plugins/ (core never imports plugins).
 * Options are strict (node:util parseArgs): an unknown or misspelt option is an error, never a
 * silently taken argument. Exit codes: 0 done, 1 failed, 2 wrong usage.
 */
import path from 'node:path';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { createHash, randomBytes } from 'node:crypto';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ConfigError, formatIssue, loadConfigFile } from '../core/config/load.js';
import { VERSION } from '../core/version.js';
import { builtinPlugins } from '../plugins/index.js';
import { start } from './workers.js';

export const USAGE = `usage: gateway <command> [options]

commands:
  start [FILE] [--config FILE]      run a gateway (config: FILE, else $GATEWAY_CONFIG, else ./gateway.yaml)
  check [FILE] [--config FILE]      validate a config; exit 1 listing every error with its line
  keygen [--json]                   a new key (sk- + 64 hex) and its SHA-256 for key_sha256
  usage KEY_NAME [--json]           a key's spend, limits, wallet or plan and usage, from the running gateway
  reset-quota KEY_NAME              forget a key's used quota and spend windows, on the running gateway
      usage and reset-quota call the admin API: [--config FILE] [--url URL] [--token TOKEN]
      (default: the config's address and server.admin_token)

options:
  -h, --help                        this help
  -v, --version                     the gateway's version

environment: GATEWAY_CONFIG (config path), GATEWAY_LOG_LEVEL (debug|info|warn|error|silent),
GATEWAY_WATCH_CONFIG=0 (reload only on SIGHUP, not on file change)`;

class UsageError extends Error {}

type Options = NonNullable<ParseArgsConfig['options']>;
const CONFIG: Options = { config: { type: 'string', short: 'c' } };
const ADMIN: Options = { ...CONFIG, url: { type: 'string' }, token: { type: 'string' } };
const HELP: Options = { help: { type: 'boolean', short: 'h' } };

/** Strict parse: unknown options and missing values are usage errors. */
function parse(args: string[], options: Options, positionals: number) {
  let r;
  try {
    r = parseArgs({ args, options: { ...options, ...HELP }, allowPositionals: true, strict: true });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  if (r.positionals.length > positionals) throw new UsageError(`unexpected argument '${r.positionals[positionals]}'`);
  return { values: r.values as Record<string, string | boolean | undefined>, positionals: r.positionals };
}

function configPath(explicit?: string | boolean): string {
  return path.resolve(typeof explicit === 'string' ? explicit : (process.env.GATEWAY_CONFIG ?? './gateway.yaml'));
}

export async function main(argv: string[]): Promise<number> {
  try {
    return await run(argv);
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`gateway: ${e.message}\nRun 'gateway --help' for usage.`);
      return 2;
    }
    throw e;
  }
}

async function run(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd === undefined || cmd.startsWith('-')) {
    const { values } = parse(argv, { version: { type: 'boolean', short: 'v' } }, 0);
    if (values.version) {
      console.log(VERSION);
      return 0;
    }
    if (values.help) {
      console.log(USAGE);
      return 0;
    }
    throw new UsageError('no command given');
  }
  switch (cmd) {
    case 'start': {
      const { values, positionals } = parse(rest, CONFIG, 1);
      if (values.help) return help();
      if (values.config && positionals[0]) throw new UsageError('give the config as FILE or --config FILE, not both');
      return start(configPath(values.config ?? positionals[0]));
    }
    case 'check': {
      const { values, positionals } = parse(rest, CONFIG, 1);
      if (values.help) return help();
      if (values.config && positionals[0]) throw new UsageError('give the config as FILE or --config FILE, not both');
      return check(configPath(values.config ?? positionals[0]));
    }
    case 'keygen': {
      const { values } = parse(rest, { json: { type: 'boolean' } }, 0);
      if (values.help) return help();
      return keygen(values.json === true);
    }
    case 'usage': {
      const { values, positionals } = parse(rest, { ...ADMIN, json: { type: 'boolean' } }, 1);
      if (values.help) return help();
      if (!positionals[0]) throw new UsageError('usage needs a KEY_NAME');
      return usage(positionals[0], values);
    }
    case 'reset-quota': {
      const { values, positionals } = parse(rest, ADMIN, 1);
      if (values.help) return help();
      if (!positionals[0]) throw new UsageError('reset-quota needs a KEY_NAME');
      return resetQuota(positionals[0], values);
    }
    case 'help':
      parse(rest, {}, 1);
      return help();
    default:
      throw new UsageError(`unknown command '${cmd}'`);
  }
}

function help(): number {
  console.log(USAGE);
  return 0;
}

async function check(file: string): Promise<number> {
  try {
    const { config, warnings } = await loadConfigFile(file, { registry: builtinPlugins });
    for (const w of warnings) console.log(`warning: ${formatIssue(file, w)}`);
    console.log(
      `${path.basename(file)}: ok (${Object.keys(config.providers).length} providers, ${Object.keys(config.models).length} models, ` +
        `${Object.keys(config.groups).length} groups, ${config.keys.length} keys, ${config.routes.length} routes)`,
    );
    return 0;
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(e.message);
      return 1;
    }
    throw e;
  }
}

/** A new key from 32 random bytes; the digest lets the config hold `key_sha256` instead of the key. */
function keygen(json: boolean): number {
  const key = `sk-${randomBytes(32).toString('hex')}`;
  const sha256 = createHash('sha256').update(key, 'utf8').digest('hex');
  if (json) console.log(JSON.stringify({ key, key_sha256: sha256 }));
  else {
    console.log(`key:        ${key}`);
    console.log(`key_sha256: ${sha256}`);
    console.log('\nGive the key to its holder; put only `key_sha256:` in gateway.yaml (the key is shown once).');
  }
  return 0;
}

interface AdminTarget {
  url: string;
  token: string;
}

/** The running gateway's address and admin token: from the options, else from the config. */
async function adminTarget(values: Record<string, string | boolean | undefined>): Promise<AdminTarget | undefined> {
  let url = typeof values.url === 'string' ? values.url : undefined;
  let token = typeof values.token === 'string' ? values.token : undefined;
  if (!url || !token) {
    const file = configPath(values.config);
    let config;
    try {
      ({ config } = await loadConfigFile(file, { registry: builtinPlugins }));
    } catch (e) {
      if (e instanceof ConfigError) {
        console.error(e.message);
        return undefined;
      }
      throw e;
    }
    const host = config.server.host === '0.0.0.0' ? '127.0.0.1' : config.server.host === '::' ? '::1' : config.server.host;
    url ??= `http://${host.includes(':') ? `[${host}]` : host}:${config.server.port}`;
    token ??= config.server.adminToken;
  }
  if (!token) {
    console.error('no admin token: set server.admin_token in the config, or pass --token');
    return undefined;
  }
  return { url: url.replace(/\/$/, ''), token };
}

/** One admin API call; the connection is not kept alive, so the command exits as soon as it is answered. */
function adminCall(target: AdminTarget, method: string, path_: string): Promise<{ ok: boolean; status: number; text: string } | undefined> {
  return new Promise((resolve) => {
    let url: URL;
    try {
      url = new URL(target.url + path_);
    } catch {
      console.error(`not a URL: ${target.url}`);
      return resolve(undefined);
    }
    const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = request(url, { method, agent: false, headers: { authorization: `Bearer ${target.token}` } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        resolve({ ok: status >= 200 && status < 300, status, text: Buffer.concat(chunks).toString('utf8') });
      });
    });
    req.on('error', (e) => {
      console.error(`cannot reach the gateway at ${target.url}: ${e.message}`);
      resolve(undefined);
    });
    req.end();
  });
}

async function resetQuota(name: string, values: Record<string, string | boolean | undefined>): Promise<number> {
  const target = await adminTarget(values);
  if (!target) return 1;
  const res = await adminCall(target, 'POST', `/admin/keys/${encodeURIComponent(name)}/reset-quota`);
  if (!res) return 1;
  if (!res.ok) {
    console.error(`reset failed (${res.status}): ${res.text}`);
    return 1;
  }
  console.log(`quota of key '${name}' reset`);
  return 0;
}

const usd = (n: number) => `$${n.toFixed(6).replace(/0{1,4}$/, '')}`;

async function usage(name: string, values: Record<string, string | boolean | undefined>): Promise<number> {
  const target = await adminTarget(values);
  if (!target) return 1;
  const res = await adminCall(target, 'GET', `/admin/keys/${encodeURIComponent(name)}/usage`);
  if (!res) return 1;
  if (!res.ok) {
    console.error(`usage failed (${res.status}): ${res.text}`);
    return 1;
  }
  if (values.json) {
    console.log(res.text);
    return 0;
  }
  const u = JSON.parse(res.text);
  const lines = [
    `key ${u.key} (user ${u.user}, group ${u.group ?? '—'}${u.enabled ? '' : ', disabled'}${u.expires_at ? `, expires ${u.expires_at}` : ''})`,
  ];
  lines.push(
    `  quota      ${u.quota.limit > 0 ? `${usd(u.quota.used)} used of ${usd(u.quota.limit)}` : `unlimited (${usd(u.quota.used)} used)`}`,
  );
  for (const [w, s] of Object.entries<any>(u.windows)) {
    lines.push(`  window ${w.padEnd(3)} ${usd(s.used)} used of ${usd(s.limit)}${s.reset_at ? `, resets ${s.reset_at}` : ''}`);
  }
  if (u.balance) lines.push(`  balance    ${usd(u.balance.remaining)} left of ${usd(u.balance.credit)} (user ${u.user})`);
  if (u.plan) {
    for (const p of ['daily', 'weekly', 'monthly'] as const) {
      if (u.plan[p].limit > 0) lines.push(`  plan ${p.padEnd(7)} ${usd(u.plan[p].used)} used of ${usd(u.plan[p].limit)}`);
    }
  }
  for (const span of ['today', 'total'] as const) {
    const c = u.usage[span];
    lines.push(
      `  ${span.padEnd(10)} ${c.requests} requests, ${c.input_tokens} input / ${c.output_tokens} output tokens, ${usd(c.actual_cost)} charged`,
    );
  }
  console.log(lines.join('\n'));
  return 0;
}
