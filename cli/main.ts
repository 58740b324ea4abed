/**
 * The `gateway` command — the wiring that joins core/ and plugins/ (core never imports plugins).
 * Options are strict (node:util parseArgs): an unknown or misspelt option is an error, never a
 * silently taken argument. Exit codes: 0 done, 1 failed, 2 wrong usage.
 */
import path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import { ConfigError, formatIssue, loadConfigFile } from '../core/config/load.js';
import { VERSION } from '../core/version.js';
import { builtinPlugins } from '../plugins/index.js';
import { ADMIN_COMMANDS, runAdmin } from './admin.js';
import { CONFIG, UsageError, configPath, parse } from './args.js';
import { start } from './workers.js';

export const USAGE = `usage: gateway <command> [options]

commands:
  start [FILE] [--config FILE]      run a gateway (config: FILE, else $GATEWAY_CONFIG, else ./gateway.yaml)
  check [FILE] [--config FILE]      validate a config; exit 1 listing every error with its line
  keygen [--json]                   a new key (sk- + 64 hex) and its SHA-256 for key_sha256

commands on a running gateway (its admin API):
  usage KEY_NAME                    a key's spend, limits, wallet or plan and usage
  reset-quota KEY_NAME              forget a key's used quota and spend windows
  users add NAME [--note TEXT] [--rpm N] [--concurrency N] [--status active|inactive]
  users list [--status active|inactive] [--source file|store] [--query TEXT] [LIST]
  users show NAME
  users set NAME [--rpm N] [--concurrency N] [--status active|inactive] [--note TEXT]
  keys create --user USER --group GROUP [--name NAME] [--quota USD] [--expires-in-days N]
              [--ip-allow CIDR]... [--ip-deny CIDR]...
                                    prints the key's secret: the only time it is shown
  keys list [--user USER] [--group GROUP] [--enabled true|false] [--source file|store] [LIST]
  keys show|disable|enable|rotate|delete NAME
                                    rotate prints the new secret (once); the old one stops working
  topup USER AMOUNT --reference REF [--idempotency-key K]
                                    credit USD AMOUNT (e.g. 25.50, exact; negative: a correction)
                                    to USER's wallet. Retrying with the same idempotency key never
                                    credits twice; without one, a new key is made and printed:
                                    reuse it to retry a top-up whose answer you did not see
  plans grant USER GROUP [--days N | --expires-at ISO]   (default 30 days)
  plans suspend|resume|remove USER GROUP
  plans extend USER GROUP --days N
  audit [--actor NAME] [--target user:NAME|key:NAME] [--since ISO] [--until ISO] [LIST]
  ledger summary [RANGE] [--by user,key,model,group,day,type]
                                    spend and tokens over the range, grouped (docs/ledger.md)
  ledger records [RANGE] [LIST]     the records themselves, in time order
  ledger export [RANGE] [--format jsonl|csv]
                                    every record of the range to stdout, streamed
  ledger reconcile [--from DAY] [--to DAY]
                                    the ledger against the store's counters; prints each
                                    difference and exits 1 when there is one

  RANGE: [--from YYYY-MM-DD] [--to YYYY-MM-DD] (UTC days, both included; default the 30 days to
  today) [--user USER] [--key KEY_NAME] [--type request|topup|correction]

  LIST: [--limit N] [--cursor C] [--all] (--all follows next_cursor through every page)
  every admin command: [--json] (the API's JSON as it answers) [--url URL] [--token TOKEN]
  [--config FILE]; the gateway from --url, else $GATEWAY_URL, else the config's address; the
  token from --token, else $GATEWAY_ADMIN_TOKEN, else the config's server.admin_token

options:
  -h, --help                        this help
  -v, --version                     the gateway's version

exit status: 0 done, 1 failed (the API's error on stderr), 2 wrong usage

environment: GATEWAY_CONFIG (config path), GATEWAY_LOG_LEVEL (debug|info|warn|error|silent),
GATEWAY_WATCH_CONFIG=0 (reload only on SIGHUP, not on file change), GATEWAY_URL and
GATEWAY_ADMIN_TOKEN (the running gateway for the admin commands)`;

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
    case 'help':
      parse(rest, {}, 1);
      return help();
    default:
      if (ADMIN_COMMANDS.has(cmd)) return runAdmin(cmd, rest, help);
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
