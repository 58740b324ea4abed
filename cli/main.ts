/**
 * The `gateway` command — the wiring that joins core/ and plugins/ (core never imports plugins).
 *
 *   gateway start [--config FILE]        run a config (default: $GATEWAY_CONFIG or ./gateway.yaml)
 *   gateway check [FILE]                 validate a config; exit 1 listing every error
 * Environment: GATEWAY_CONFIG (config path), GATEWAY_LOG_LEVEL (debug|info|warn|error),
 * GATEWAY_WATCH_CONFIG=0 (reload only on SIGHUP, not on file change).
 *
 *   gateway reset-quota KEY_NAME         reset a key's used quota on a running gateway (admin API)
 *            [--url URL] [--token TOKEN]   (defaults: the config's address and server.admin_token)
 */
import path from 'node:path';
import { Gateway } from '../core/server.js';
import { ConfigError, formatIssue, loadConfigFile } from '../core/config/load.js';
import { createLogger } from '../core/log.js';
import { builtinPlugins } from '../plugins/index.js';

function flag(args: string[], name: string): string | undefined {
  const i = args.indexOf(name);
  if (i === -1) return undefined;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
}

function configPath(explicit?: string): string {
  return path.resolve(explicit ?? process.env.GATEWAY_CONFIG ?? './gateway.yaml');
}

const USAGE = `usage:
  gateway start [--config FILE]
  gateway check [FILE]
  gateway reset-quota KEY_NAME [--config FILE] [--url URL] [--token TOKEN]`;

export async function main(argv: string[]): Promise<number> {
  const args = [...argv];
  const cmd = args.shift();
  switch (cmd) {
    case 'start':
      return start(configPath(flag(args, '--config') ?? args[0]));
    case 'check':
      return check(configPath(flag(args, '--config') ?? args[0]));
    case 'reset-quota':
      return resetQuota(args);
    case undefined:
    case '-h':
    case '--help':
    case 'help':
      console.log(USAGE);
      return cmd === undefined ? 1 : 0;
    default:
      console.error(`unknown command '${cmd}'\n${USAGE}`);
      return 1;
  }
}

async function check(file: string): Promise<number> {
  try {
    const { config, warnings } = await loadConfigFile(file, { registry: builtinPlugins });
    for (const w of warnings) console.log(`warning: ${formatIssue(file, w)}`);
    console.log(`${path.basename(file)}: ok (${Object.keys(config.providers).length} providers, ${Object.keys(config.models).length} models, ` +
      `${Object.keys(config.groups).length} groups, ${config.keys.length} keys, ${config.routes.length} routes)`);
    return 0;
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(e.message);
      return 1;
    }
    throw e;
  }
}

async function start(file: string): Promise<number> {
  const log = createLogger();
  let gw: Gateway;
  try {
    gw = await Gateway.start({
      configFile: file, registry: builtinPlugins, log, sighup: true, watch: process.env.GATEWAY_WATCH_CONFIG !== '0',
    });
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(e.message);
      return 1;
    }
    throw e;
  }
  log.info(`gateway listening on ${gw.url}`, { config: file, store: gw.config.store.kind, storePath: gw.config.store.path ?? null });
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      log.info('shutting down', { signal });
      process.off('SIGTERM', onTerm);
      process.off('SIGINT', onInt);
      void gw.close().then(resolve);
    };
    const onTerm = () => stop('SIGTERM');
    const onInt = () => stop('SIGINT');
    process.on('SIGTERM', onTerm);
    process.on('SIGINT', onInt);
  });
  return 0;
}

async function resetQuota(args: string[]): Promise<number> {
  const file = configPath(flag(args, '--config'));
  let url = flag(args, '--url');
  let token = flag(args, '--token');
  const name = args[0];
  if (!name) {
    console.error(USAGE);
    return 1;
  }
  if (!url || !token) {
    const { config } = await loadConfigFile(file, { registry: builtinPlugins });
    url ??= `http://${config.server.host.includes(':') ? `[${config.server.host}]` : config.server.host}:${config.server.port}`;
    token ??= config.server.adminToken;
  }
  if (!token) {
    console.error('no admin token: set server.admin_token in the config, or pass --token');
    return 1;
  }
  const res = await fetch(`${url.replace(/\/$/, '')}/admin/keys/${encodeURIComponent(name)}/reset-quota`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}` },
  });
  const text = await res.text();
  if (!res.ok) {
    console.error(`reset failed (${res.status}): ${text}`);
    return 1;
  }
  console.log(`quota of key '${name}' reset`);
  return 0;
}
