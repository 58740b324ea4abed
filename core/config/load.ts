/**
 * gateway.yaml → a frozen GatewayConfig: parse (yaml, keeping source positions), interpolate
 * `${VAR}` / `${VAR:-default}` (`$${…}` is a literal), validate against the JSON Schema, validate
 * each plugin's `with:` against that plugin's schema, check cross-references, resolve units, freeze.
 * Every problem is collected (not just the first) with its path and line: `gateway check` lists
 * them all, and a reload that finds any keeps the old config.
 */
import { createHash } from 'node:crypto';
import net from 'node:net';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { getHeapStatistics } from 'node:v8';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import {
  isCollection,
  isMap,
  isScalar,
  isSeq,
  LineCounter,
  parseDocument,
  visit,
  type Document,
  type Node as YamlNode,
  type YAMLError,
  Scalar,
} from 'yaml';
import { gatewaySchema } from './schema.js';
import { KEY_FORMAT } from '../accounts/secret.js';
import type {
  AdminConfig,
  AdminToken,
  AccountConfig,
  GatewayConfig,
  GroupConfig,
  KeyConfig,
  ModelConfig,
  PluginInstanceConfig,
  ProtocolName,
  ProviderConfig,
  ProviderKind,
  RouteConfig,
  UserConfig,
  Window,
} from './types.js';
import { PROTOCOLS, WINDOWS } from './types.js';
import { DURATION_PATTERN, SIZE_PATTERN, parseDecimal, parseDuration, parseSize } from '../units.js';
import type { PluginDefinition, PluginRegistry } from '../plugin.js';
import { importPlugin, resolvePluginPackage } from '../plugin-modules.js';
import { nativeProtocols } from '../routing.js';
import { resolveTracing } from './tracing.js';

export interface ConfigIssue {
  path: string;
  line?: number;
  col?: number;
  message: string;
}

export class ConfigError extends Error {
  constructor(
    readonly file: string,
    readonly issues: ConfigIssue[],
  ) {
    super(
      `${path.basename(file)}: ${issues.length} error${issues.length === 1 ? '' : 's'}\n` +
        issues.map((i) => '  ' + formatIssue(file, i)).join('\n'),
    );
    this.name = 'ConfigError';
  }
}

export function formatIssue(file: string, i: ConfigIssue): string {
  const where = i.line !== undefined ? `${path.basename(file)}:${i.line}:${i.col ?? 1}` : path.basename(file);
  return `${where} ${i.path || '(root)'}: ${i.message}`;
}

/** A plugin instance ready to be created: its definition and validated options (defaults applied). */
export interface PluginPlan {
  name: string;
  definition: PluginDefinition<any>;
  options: Record<string, unknown>;
}

export interface LoadedConfig {
  config: GatewayConfig;
  plugins: ReadonlyMap<string, PluginPlan>;
  warnings: ConfigIssue[];
}

export interface LoadOptions {
  registry: PluginRegistry;
  env?: NodeJS.ProcessEnv;
}

type Seg = string | number;

function pathString(segs: readonly Seg[]): string {
  let out = '';
  for (const s of segs) out += typeof s === 'number' ? `[${s}]` : out ? `.${s}` : s;
  return out;
}

export function sha256Hex(s: string): string {
  return createHash('sha256').update(s, 'utf8').digest('hex');
}

export async function loadConfigFile(file: string, opts: LoadOptions): Promise<LoadedConfig> {
  const abs = path.resolve(file);
  let text: string;
  try {
    text = await readFile(abs, 'utf8');
  } catch (e) {
    throw new ConfigError(abs, [{ path: '', message: `cannot read config: ${(e as Error).message}` }]);
  }
  return loadConfigText(text, abs, opts);
}

/**
 * Loads and checks a config; throws one ConfigError listing every problem found. Interpolation,
 * schema and cross-reference problems are all collected in one pass: after a schema failure the
 * cross-reference checks still run (on data the schema refused, so a check that trips over it is
 * abandoned rather than reported), and an issue is listed once per path.
 */
export async function loadConfigText(text: string, file: string, opts: LoadOptions): Promise<LoadedConfig> {
  const issues: ConfigIssue[] = [];
  const state = { schemaFailed: false };
  try {
    return await loadChecked(text, file, opts, issues, state);
  } catch (e) {
    if (e instanceof ConfigError) throw new ConfigError(file, onePerPath(e.issues));
    if (state.schemaFailed || issues.length) throw new ConfigError(file, onePerPath(issues));
    throw e;
  }
}

/** One issue per path, in file order. */
function onePerPath(issues: readonly ConfigIssue[]): ConfigIssue[] {
  const seen = new Set<string>();
  const line = (i: ConfigIssue) => i.line ?? Number.MAX_SAFE_INTEGER;
  return [...issues]
    .sort((a, b) => line(a) - line(b))
    .filter((i) => {
      if (i.path && seen.has(i.path)) return false;
      seen.add(i.path);
      return true;
    });
}

async function loadChecked(
  text: string,
  file: string,
  opts: LoadOptions,
  issues: ConfigIssue[],
  state: { schemaFailed: boolean },
): Promise<LoadedConfig> {
  const env = opts.env ?? process.env;
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true });
  const warnings: ConfigIssue[] = [];
  const pos = (offset: number | undefined) => {
    if (offset === undefined) return {};
    const p = lineCounter.linePos(offset);
    return { line: p.line, col: p.col };
  };
  for (const e of doc.errors) {
    const { offset, message } = syntaxError(doc, e);
    issues.push({ path: '', ...pos(offset), message });
  }
  if (issues.length) throw new ConfigError(file, issues);

  /** Scalars whose text came from the environment, with the variables it came from. */
  const fromEnv = new Map<unknown, string[]>();
  interpolate(
    doc,
    env,
    (segs, node, message) => issues.push({ path: pathString(segs), ...pos(node.range?.[0]), message }),
    (node, names) => fromEnv.set(node, names),
  );

  /**
   * The issue at `segs`, placed on its value (or, with `onKey`, on the key that names it: an
   * unknown setting is the key's mistake). A value read from `${VAR}` names the variable, since
   * the text in the file is not what was checked.
   */
  const at = (segs: readonly Seg[], message: string, onKey = false): ConfigIssue => {
    let node: unknown;
    let exact = false;
    if (onKey && segs.length > 0) {
      const parent = segs.length === 1 ? doc.contents : doc.getIn(segs.slice(0, -1), true);
      const last = segs[segs.length - 1];
      if (isMap(parent)) node = parent.items.find((p) => isScalar(p.key) && String(p.key.value) === String(last))?.key;
    }
    for (let n = segs.length; node === undefined && n >= 0; n--) {
      node = n === 0 ? doc.contents : doc.getIn(segs.slice(0, n), true);
      exact = n === segs.length;
      if (node && typeof node === 'object' && 'range' in node) break;
      node = undefined;
    }
    const range = (node as YamlNode | undefined)?.range;
    const vars = exact && !onKey ? fromEnv.get(node) : undefined;
    const from = vars ? ` (the value comes from ${vars.map((v) => `\${${v}}`).join(', ')})` : '';
    return { path: pathString(segs), ...pos(range?.[0]), message: message + from };
  };
  const fail = (segs: readonly Seg[], message: string, onKey = false) => issues.push(at(segs, message, onKey));
  const warn = (segs: readonly Seg[], message: string) => warnings.push(at(segs, message));

  const raw = doc.toJS({ maxAliasCount: 100 }) as Record<string, any>;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new ConfigError(file, [{ path: '', message: 'the config must be a YAML mapping' }]);
  }

  // The config schema's defaults are documentation (this loader applies its own below); plugins'
  // option defaults are applied by ajv.
  const validate = configValidator();
  const ajv = new Ajv({ allErrors: true, strict: false, useDefaults: true });
  if (!validate(raw)) {
    const errors = validate.errors ?? [];
    for (const e of dedupeAjv(errors)) fail(ajvSegs(e), ajvMessage(e, errors), e.keyword === 'additionalProperties');
    state.schemaFailed = true;
  }

  const baseDir = path.dirname(file);

  // ---- plugins: definitions and their options ------------------------------------------------
  const plans = new Map<string, PluginPlan>();
  for (const [name, decl] of Object.entries<any>(raw.plugins ?? {})) {
    let def: PluginDefinition<any> | undefined;
    const use: string = decl.use;
    if (typeof use !== 'string') continue; // the schema said so
    // A path (relative to this file), else a built-in (built-ins win), else a package found from here.
    let moduleFile: string | undefined;
    if (use.startsWith('.') || use.startsWith('/')) moduleFile = path.resolve(baseDir, use);
    else if (!opts.registry.has(use)) {
      try {
        moduleFile = resolvePluginPackage(use, file);
      } catch (e) {
        fail(
          ['plugins', name, 'use'],
          `unknown plugin '${use}': not a built-in (${[...opts.registry.keys()].join(', ')}) nor a package found from ${baseDir} (${(e as Error).message})`,
        );
        continue;
      }
    }
    if (moduleFile !== undefined) {
      try {
        def = await importPlugin(moduleFile);
      } catch (e) {
        fail(
          ['plugins', name, 'use'],
          `cannot load plugin module '${use}'${moduleFile === path.resolve(baseDir, use) ? '' : ` (${moduleFile})`}: ${(e as Error).message}`,
        );
        continue;
      }
    } else def = opts.registry.get(use)!;
    const options: Record<string, unknown> = structuredClone(decl.with ?? {});
    const check = ajv.compile<any>(def.schema);
    if (!check(options)) {
      const errors = check.errors ?? [];
      for (const e of dedupeAjv(errors))
        fail(['plugins', name, 'with', ...ajvSegs(e)], ajvMessage(e, errors), e.keyword === 'additionalProperties');
      continue;
    }
    plans.set(name, { name, definition: def, options });
  }

  // ---- providers ---------------------------------------------------------------------------
  const providers: Record<string, ProviderConfig> = {};
  for (const [name, p] of Object.entries<any>(raw.providers ?? {})) {
    // A kind the schema refused still defines the provider (for the checks that follow).
    const kind = (['openai', 'anthropic', 'mock'].includes(p.kind) ? p.kind : 'mock') as ProviderKind;
    const defaults: Record<ProviderKind, { url: string; protocols: ProtocolName[] }> = {
      openai: { url: 'https://api.openai.com/v1', protocols: ['openai-chat', 'openai-responses'] },
      anthropic: { url: 'https://api.anthropic.com', protocols: ['anthropic-messages'] },
      mock: { url: '', protocols: [...PROTOCOLS] },
    };
    if (kind === 'mock' && p.base_url) fail(['providers', name, 'base_url'], 'a mock provider has no base_url: the gateway starts it');
    if (kind !== 'mock' && p.fixtures_dir) fail(['providers', name, 'fixtures_dir'], 'fixtures_dir is for mock providers only');
    const headers: Record<string, string> = p.headers ?? {};
    const accounts: AccountConfig[] = [];
    if (Array.isArray(p.accounts)) {
      if (p.api_key !== undefined) fail(['providers', name, 'api_key'], 'use either api_key (one account) or accounts, not both');
      const seen = new Set<string>();
      p.accounts.forEach((a: any, i: number) => {
        if (!a || typeof a !== 'object' || typeof a.name !== 'string') return;
        if (seen.has(a.name)) fail(['providers', name, 'accounts', i, 'name'], `account '${a.name}' is listed twice`);
        seen.add(a.name);
        if (kind === 'mock' && a.base_url)
          fail(['providers', name, 'accounts', i, 'base_url'], 'accounts of a mock provider have no base_url: the gateway starts the mock');
        accounts.push({
          name: a.name,
          id: `${name}/${a.name}`,
          apiKey: a.api_key ?? '',
          baseUrl: typeof a.base_url === 'string' ? a.base_url.replace(/\/+$/, '') : undefined,
          headers: { ...headers, ...(a.headers ?? {}) },
          weight: a.weight ?? 1,
          priority: a.priority ?? 0,
          concurrency: a.concurrency ?? 0,
          rpm: a.rpm ?? 0,
          models: Array.isArray(a.models) ? a.models : undefined,
        });
      });
    } else {
      accounts.push({
        name: 'default',
        id: `${name}/default`,
        apiKey: p.api_key ?? '',
        headers,
        weight: 1,
        priority: 0,
        concurrency: 0,
        rpm: 0,
      });
    }
    const sched = p.scheduling ?? {};
    const dur = (key: string, fallback: number) => (typeof sched[key] === 'string' ? parseDuration(sched[key]) : fallback);
    providers[name] = {
      name,
      kind,
      baseUrl: (p.base_url ?? defaults[kind].url).replace(/\/+$/, ''),
      apiKey: Array.isArray(p.accounts) ? '' : (p.api_key ?? ''),
      accounts,
      scheduling: {
        stickyTtlMs: dur('sticky_ttl', 3_600_000),
        cooldownMs: dur('cooldown', 30_000),
        maxCooldownMs: dur('max_cooldown', 3_600_000),
        maxAttempts: sched.max_attempts ?? 3,
        slowFactor: sched.slow_factor ?? 3,
        slowMarginMs: dur('slow_margin', 1_000),
      },
      protocols: p.protocols ?? defaults[kind].protocols,
      headers,
      timeoutMs: p.timeout ? parseDuration(p.timeout) : undefined,
      idleTimeoutMs: p.idle_timeout ? parseDuration(p.idle_timeout) : undefined,
      maxSockets: p.max_sockets ?? 256,
      fixturesDir: p.fixtures_dir ? path.resolve(baseDir, p.fixtures_dir) : undefined,
    };
  }

  const money = (segs: Seg[], v: unknown, fallback = 0): number => {
    if (v === undefined || v === null) return fallback;
    try {
      return parseDecimal(v as number | string, 6);
    } catch (e) {
      fail(segs, (e as Error).message);
      return 0;
    }
  };
  const time = (segs: Seg[], v: unknown): number | undefined => {
    if (v === undefined || v === null) return undefined;
    const text = typeof v === 'string' || typeof v === 'number' ? String(v) : JSON.stringify(v);
    const t = v instanceof Date ? v.getTime() : Date.parse(/^\d{4}-\d{2}-\d{2}$/.test(text) ? `${text}T00:00:00Z` : text);
    if (Number.isNaN(t)) {
      fail(segs, `invalid date '${text}' (use ISO 8601, e.g. 2027-12-31T00:00:00Z)`);
      return undefined;
    }
    return t;
  };

  // ---- models ------------------------------------------------------------------------------
  const models: Record<string, ModelConfig> = {};
  for (const [id, m] of Object.entries<any>(raw.models ?? {})) {
    if (!providers[m.provider]) fail(['models', id, 'provider'], `provider '${m.provider}' is not defined`);
    models[id] = {
      id,
      provider: m.provider,
      upstream: m.upstream ?? id,
      ownedBy: m.owned_by ?? m.provider,
      // Unset cache prices bill cached tokens as plain input: never free by omission.
      price: {
        input: money(['models', id, 'price', 'input'], m.price.input),
        output: money(['models', id, 'price', 'output'], m.price.output),
        cacheRead: money(['models', id, 'price', 'cache_read'], m.price.cache_read ?? m.price.input),
        cacheWrite: money(['models', id, 'price', 'cache_write'], m.price.cache_write ?? m.price.input),
      },
      maxOutputTokens: m.max_output_tokens ?? 8192,
    };
  }

  // Account model subsets name models of their provider; every model keeps at least one account.
  for (const p of Object.values(providers)) {
    p.accounts.forEach((a, i) =>
      a.models?.forEach((id, j) => {
        if (!models[id]) fail(['providers', p.name, 'accounts', i, 'models', j], `model '${id}' is not defined`);
        else if (models[id].provider !== p.name)
          fail(
            ['providers', p.name, 'accounts', i, 'models', j],
            `model '${id}' is served by provider '${models[id].provider}', not '${p.name}'`,
          );
      }),
    );
    if (p.scheduling.maxCooldownMs < p.scheduling.cooldownMs)
      fail(['providers', p.name, 'scheduling', 'max_cooldown'], 'max_cooldown is shorter than cooldown');
  }
  for (const m of Object.values(models)) {
    const p = providers[m.provider];
    if (p && p.accounts.length > 0 && !p.accounts.some((a) => !a.models || a.models.includes(m.id))) {
      fail(['models', m.id, 'provider'], `no account of provider '${p.name}' serves model '${m.id}' (see the accounts' models lists)`);
    }
  }

  // ---- groups ------------------------------------------------------------------------------
  const groups: Record<string, GroupConfig> = {};
  for (const [name, g] of Object.entries<any>(raw.groups ?? {})) {
    const list: string[] = g.models ?? [];
    list.forEach((id, i) => {
      if (!models[id]) fail(['groups', name, 'models', i], `model '${id}' is not defined`);
    });
    if (g.passthrough) {
      const proto = nativeProtocols(g.kind)[0];
      list.forEach((id, i) => {
        const prov = models[id] && providers[models[id].provider];
        if (prov && !prov.protocols.includes(proto)) {
          fail(['groups', name, 'models', i], `passthrough group '${name}' needs ${proto}, which provider '${prov.name}' does not speak`);
        }
      });
    }
    if (g.allow_messages !== undefined && g.kind !== 'responses')
      warn(['groups', name, 'allow_messages'], 'allow_messages only applies to responses groups');
    if (g.plan && (g.billing ?? 'balance') !== 'plan') warn(['groups', name, 'plan'], 'plan limits apply only with billing: plan');
    groups[name] = {
      name,
      kind: g.kind,
      passthrough: g.passthrough ?? false,
      allowMessages: g.allow_messages ?? false,
      builtinTools: g.builtin_tools ?? 'map',
      models: list,
      multiplierPpm: money(['groups', name, 'multiplier'], g.multiplier, 1_000_000),
      billing: g.billing ?? 'balance',
      plan: {
        daily: money(['groups', name, 'plan', 'daily'], g.plan?.daily),
        weekly: money(['groups', name, 'plan', 'weekly'], g.plan?.weekly),
        monthly: money(['groups', name, 'plan', 'monthly'], g.plan?.monthly),
      },
      rpm: g.rpm ?? 0,
    };
  }

  // ---- users -------------------------------------------------------------------------------
  const users: Record<string, UserConfig> = {};
  for (const [name, u] of Object.entries<any>(raw.users ?? {})) {
    const rates: Record<string, number> = {};
    for (const [g, r] of Object.entries<any>(u.rates ?? {})) {
      if (!groups[g]) fail(['users', name, 'rates', g], `group '${g}' is not defined`);
      rates[g] = money(['users', name, 'rates', g], r);
    }
    const subs = (u.subscriptions ?? []).map((s: any, i: number) => {
      if (!groups[s.group]) fail(['users', name, 'subscriptions', i, 'group'], `group '${s.group}' is not defined`);
      else if (groups[s.group].billing !== 'plan')
        fail(['users', name, 'subscriptions', i, 'group'], `group '${s.group}' is not a plan group`);
      return {
        group: s.group,
        expiresAt: time(['users', name, 'subscriptions', i, 'expires_at'], s.expires_at) ?? 0,
        status: s.status ?? 'active',
      };
    });
    users[name] = {
      name,
      status: u.status ?? 'active',
      balance: money(['users', name, 'balance'], u.balance),
      rpm: u.rpm ?? 0,
      concurrency: u.concurrency ?? 0,
      queue: { size: u.queue?.size ?? 16, maxWaitMs: u.queue?.max_wait ? parseDuration(u.queue.max_wait) : 30_000 },
      spendCaps: {
        weekly: money(['users', name, 'spend_caps', 'weekly'], u.spend_caps?.weekly),
        monthly: money(['users', name, 'spend_caps', 'monthly'], u.spend_caps?.monthly),
      },
      rates,
      subscriptions: subs,
    };
  }

  const checkIps = (segs: Seg[], list: string[] | undefined) => {
    (list ?? []).forEach((e, i) => {
      const [addr, bits] = e.trim().split('/');
      const fam = net.isIP(addr);
      if (fam === 0 || (bits !== undefined && (!/^\d+$/.test(bits) || Number(bits) > (fam === 4 ? 32 : 128)))) {
        fail([...segs, i], `'${e}' is not an IP address or CIDR`);
      }
    });
  };
  checkIps(['server', 'trusted_proxies'], raw.server?.trusted_proxies);
  for (const [name, decl] of Object.entries<any>(raw.plugins ?? {})) {
    if (decl.use === 'ip-filter') {
      checkIps(['plugins', name, 'with', 'allow'], decl.with?.allow);
      checkIps(['plugins', name, 'with', 'deny'], decl.with?.deny);
    }
  }

  // ---- keys --------------------------------------------------------------------------------
  const keys: KeyConfig[] = [];
  const byDigest = new Map<string, KeyConfig>();
  const ids = new Set<string>();
  (raw.keys ?? []).forEach((k: any, i: number) => {
    const segs: Seg[] = ['keys', i];
    if ((k.key === undefined) === (k.key_sha256 === undefined)) {
      fail(segs, 'give exactly one of key and key_sha256');
      return;
    }
    if (k.key !== undefined && !KEY_FORMAT.test(k.key)) {
      fail([...segs, 'key'], 'a key is sk- followed by 64 hex characters, or 16+ letters, digits, _ and -');
      return;
    }
    const digest = k.key !== undefined ? sha256Hex(k.key) : String(k.key_sha256).toLowerCase();
    if (byDigest.has(digest)) {
      fail(segs, 'this key is declared twice');
      return;
    }
    const id: string = k.name ?? `key-${digest.slice(0, 12)}`;
    if (ids.has(id)) fail([...segs, 'name'], `key name '${id}' is used twice`);
    ids.add(id);
    if (k.group !== undefined && !groups[k.group]) fail([...segs, 'group'], `group '${k.group}' is not defined`);
    if (!users[k.user]) warn([...segs, 'user'], `user '${k.user}' is not defined: requests with this key get 401 USER_NOT_FOUND`);
    checkIps([...segs, 'ip_allow'], k.ip_allow);
    checkIps([...segs, 'ip_deny'], k.ip_deny);
    const windows = {} as Record<Window, number>;
    for (const w of WINDOWS) windows[w] = money([...segs, 'windows', w], k.windows?.[w]);
    const rec: KeyConfig = {
      id,
      name: k.name ?? id,
      digest,
      user: k.user,
      group: k.group,
      enabled: k.enabled ?? true,
      quota: money([...segs, 'quota'], k.quota),
      windows,
      expiresAt: time([...segs, 'expires_at'], k.expires_at),
      ipAllow: k.ip_allow ?? [],
      ipDeny: k.ip_deny ?? [],
    };
    keys.push(rec);
    byDigest.set(digest, rec);
  });

  // ---- chains and routes -------------------------------------------------------------------
  const chains: Record<string, string[]> = {};
  const checkChain = (list: string[], segs: Seg[]) => {
    list.forEach((inst, j) => {
      const decl = raw.plugins?.[inst];
      if (!decl) {
        fail([...segs, j], `plugin instance '${inst}' is not declared under plugins:`);
        return;
      }
      const plan = plans.get(inst);
      if (!plan) return; // its own error is already reported
      for (const req of plan.definition.requires ?? []) {
        const earlier = list.slice(0, j).some((x) => plans.get(x)?.definition.name === req);
        if (!earlier) fail([...segs, j], `(${inst}): requires '${req}' earlier`);
      }
    });
    if (new Set(list).size !== list.length) fail(segs, 'a plugin instance appears twice in the chain');
  };
  for (const [name, list] of Object.entries<any>(raw.chains ?? {})) {
    chains[name] = list;
    checkChain(list, ['chains', name]);
  }
  const routes: RouteConfig[] = [];
  const seen = new Set<string>();
  (raw.routes ?? []).forEach((r: any, i: number) => {
    let chain: string[] = [];
    if (typeof r.chain === 'string') {
      if (!chains[r.chain]) fail(['routes', i, 'chain'], `chain '${r.chain}' is not defined`);
      else chain = chains[r.chain];
    } else {
      chain = r.chain;
      checkChain(chain, ['routes', i, 'chain']);
    }
    const method = r.method ?? 'POST';
    const handler = r.handler;
    let protocol: ProtocolName | undefined = r.protocol;
    if (handler === 'count-tokens') protocol ??= 'anthropic-messages';
    if (!handler && !protocol) fail(['routes', i], 'a route without a handler needs a protocol');
    const id = `${method} ${r.path}`;
    if (seen.has(id)) fail(['routes', i, 'path'], `route ${id} is declared twice`);
    seen.add(id);
    routes.push({ path: r.path, method, protocol, chain, handler });
  });

  // ---- server, store and the rest ------------------------------------------------------------
  const s = raw.server ?? {};
  const st = raw.store ?? {};
  const server = {
    host: s.host ?? '127.0.0.1',
    port: s.port ?? 8080,
    bodyLimit: parseSize(s.body_limit ?? '256MiB'),
    trustedProxies: s.trusted_proxies ?? [],
    headersTimeoutMs: parseDuration(s.headers_timeout ?? '20s'),
    bodyTimeoutMs: parseDuration(s.body_timeout ?? '30s'),
    bodyMemory: s.body_memory === undefined ? defaultBodyMemory() : parseSize(s.body_memory),
    upstreamTimeoutMs: parseDuration(s.upstream_timeout ?? '600s'),
    upstreamIdleTimeoutMs: parseDuration(s.upstream_idle_timeout ?? '300s'),
    onClientAbort: s.on_client_abort ?? 'abort',
    workers: s.workers ?? 1,
    adminToken: s.admin_token || undefined,
    drainTimeoutMs: parseDuration(s.drain_timeout ?? '30s'),
    shutdownDelayMs: parseDuration(s.shutdown_delay ?? '0s'),
    preambleHoldMs: parseDuration(s.preamble_hold ?? '10s'),
    streamKeepaliveMs: parseDuration(s.stream_keepalive ?? '15s'),
  } as const;
  const storeKind = st.kind ?? 'memory';
  if (server.workers > 1 && storeKind !== 'redis') {
    fail(
      ['server', 'workers'],
      `workers: ${server.workers} needs store.kind: redis (the memory store lives in one process; the workers would not share limits and money)`,
    );
  }
  if (storeKind === 'redis' && !st.url) fail(['store', 'url'], 'store.kind: redis needs store.url (redis://host:6379)');
  const store = {
    kind: storeKind,
    path:
      storeKind !== 'memory'
        ? undefined
        : st.path === undefined
          ? path.resolve(baseDir, './data')
          : st.path === ''
            ? undefined
            : path.resolve(baseDir, st.path),
    url: st.url,
    cluster: st.cluster ?? false,
    prefix: st.prefix ?? 'gw:',
    flushIntervalMs: parseDuration(st.flush_interval ?? '1s'),
    instancesHint: st.instances_hint ?? 1,
    timeoutMs: parseDuration(st.timeout ?? '500ms'),
    leaseMs: parseDuration(st.lease ?? '15s'),
  } as const;
  if (store.leaseMs > 30_000 || store.leaseMs < 1_000) fail(['store', 'lease'], 'lease must be between 1s and 30s');
  if (store.timeoutMs <= 0) fail(['store', 'timeout'], 'timeout must be more than 0');
  // PostgreSQL gets the ledger from its day files (the outbox); without them it would get nothing.
  if (raw.ledger?.postgres && store.kind === 'memory' && store.path === undefined) {
    fail(
      ['ledger', 'postgres'],
      "ledger.postgres ships the ledger's day files, and the memory store keeps none without a folder: set store.path (docs/ledger.md)",
    );
  }

  let metricsListen: { host: string; port: number } | undefined;
  if (typeof raw.metrics?.listen === 'string') {
    const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(raw.metrics.listen);
    if (!m || Number(m[3]) > 65535) fail(['metrics', 'listen'], `'${raw.metrics.listen}' is not host:port (e.g. 127.0.0.1:9464)`);
    else metricsListen = { host: m[1] ?? m[2], port: Number(m[3]) };
  }

  const tracing = resolveTracing(raw.tracing, fail);

  if (issues.length) throw new ConfigError(file, issues);

  const config: GatewayConfig = {
    version: 1,
    file,
    server,
    store,
    metrics: {
      path: raw.metrics?.path === undefined ? '/metrics' : raw.metrics.path,
      listen: metricsListen,
      token: raw.metrics?.token || undefined,
      keyLabels: raw.metrics?.key_labels ?? false,
    },
    admin: adminConfig(raw, server.adminToken, fail),
    ledger: {
      dir:
        raw.ledger?.enabled === false
          ? undefined
          : raw.ledger?.dir
            ? path.resolve(baseDir, raw.ledger.dir)
            : store.kind === 'memory'
              ? store.path && path.join(store.path, 'ledger')
              : path.resolve(baseDir, './data/ledger'),
      retentionMs: parseDuration(raw.ledger?.retention ?? '400d'),
      postgres: raw.ledger?.postgres
        ? {
            url: raw.ledger.postgres.url,
            table: raw.ledger.postgres.table ?? 'ledger_records',
            batchSize: raw.ledger.postgres.batch_size ?? 500,
          }
        : undefined,
    },
    console: { enabled: raw.console?.enabled ?? false },
    failedRequests: {
      dir: raw.failed_requests?.dir ? path.resolve(baseDir, raw.failed_requests.dir) : undefined,
      retentionMs: parseDuration(raw.failed_requests?.retention ?? '30d'),
      maxSize: parseSize(raw.failed_requests?.max_size ?? '1GiB'),
      maxFiles: raw.failed_requests?.max_files ?? 100_000,
    },
    tracing,
    limits: { freeRpmAtZeroBalance: raw.limits?.free_rpm_at_zero_balance ?? 10 },
    providers,
    models,
    groups,
    users,
    keys,
    keysByDigest: byDigest,
    plugins: Object.fromEntries(
      Object.entries<any>(raw.plugins ?? {}).map(([name, d]): [string, PluginInstanceConfig] => [
        name,
        { name, use: d.use, with: plans.get(name)?.options ?? {} },
      ]),
    ),
    chains,
    routes,
  };
  return { config: deepFreeze(config), plugins: plans, warnings };
}

/** The admin API's tokens (server.admin_token is `admin`) as digests, names unique. */
function adminConfig(raw: any, adminToken: string | undefined, fail: (segs: readonly Seg[], msg: string) => void): AdminConfig {
  const tokens: AdminToken[] = [];
  if (adminToken) tokens.push({ name: 'admin', digest: createHash('sha256').update(adminToken).digest('hex') });
  (raw.admin?.tokens ?? []).forEach((t: any, i: number) => {
    const segs: Seg[] = ['admin', 'tokens', i];
    if ((t.token === undefined) === (t.token_sha256 === undefined)) {
      fail(segs, 'give exactly one of token and token_sha256');
      return;
    }
    if (tokens.some((o) => o.name === t.name)) {
      fail([...segs, 'name'], `token name '${t.name}' is used twice${t.name === 'admin' ? ' (server.admin_token is named admin)' : ''}`);
      return;
    }
    const digest = t.token_sha256 ? String(t.token_sha256).toLowerCase() : createHash('sha256').update(String(t.token)).digest('hex');
    if (tokens.some((o) => o.digest === digest)) {
      fail(segs, `token '${t.name}' is the same secret as token '${tokens.find((o) => o.digest === digest)!.name}'`);
      return;
    }
    tokens.push({ name: t.name, digest });
  });
  return {
    tokens,
    auditRetentionMs: parseDuration(raw.admin?.audit_retention ?? '90d'),
    authFailuresPerMinute: raw.admin?.auth_failures_per_minute ?? 10,
  };
}

/**
 * Replaces `${VAR}` and `${VAR:-default}` in string scalars; `$${` stays a literal `${`. A default
 * is expanded as shells and compose files expand it: `$B`, `${B}` and `${B:-…}` in it are
 * references too (`$$` is a literal `$` there), and it is read only when VAR is unset or empty.
 */
function interpolate(
  doc: Document,
  env: NodeJS.ProcessEnv,
  report: (segs: Seg[], node: Scalar, msg: string) => void,
  replacedFrom: (node: Scalar, names: string[]) => void,
): void {
  visit(doc, {
    Scalar(_key, node, pathNodes) {
      if (typeof node.value !== 'string' || !node.value.includes('${')) return;
      const original = node.value;
      const names: string[] = [];
      const problems: string[] = [];
      const { text: replaced, whole } = expandRefs(original, env, names, problems);
      for (const p of problems) report(segsOf(pathNodes, node), node, p);
      if (replaced === original) return;
      if (names.length > 0) replacedFrom(node, [...new Set(names)]);
      // A plain scalar that was only a reference takes the type its text has (port: ${PORT:-8080}).
      if (whole && node.type === Scalar.PLAIN) {
        if (/^-?\d+(\.\d+)?$/.test(replaced)) {
          node.value = Number(replaced);
          return;
        }
        if (replaced === 'true' || replaced === 'false') {
          node.value = replaced === 'true';
          return;
        }
      }
      node.value = replaced;
    },
  });
}

const VAR_NAME = /[A-Za-z_][A-Za-z0-9_]*/y;

/**
 * One left-to-right pass over `text` (a default's text when `inDefault`). `names` collects the
 * variables read, `problems` what is wrong; `whole` is true when the text was a single reference.
 */
function expandRefs(
  text: string,
  env: NodeJS.ProcessEnv,
  names: string[],
  problems: string[],
  inDefault = false,
): { text: string; whole: boolean } {
  let out = '';
  let refs = 0;
  let literal = false;
  const resolve = (name: string, def: string | undefined): string => {
    names.push(name);
    const v = env[name];
    if (v !== undefined && v !== '') return v;
    if (def !== undefined) return expandRefs(def, env, names, problems, true).text;
    if (v === '') return '';
    problems.push(`environment variable ${name} is not set (use \${${name}:-default} for a default)`);
    return '';
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c !== '$') {
      out += c;
      literal = true;
      i++;
      continue;
    }
    if (!inDefault && text.startsWith('$${', i)) {
      out += '${';
      literal = true;
      i += 3;
      continue;
    }
    if (inDefault && text[i + 1] === '$') {
      out += '$';
      i += 2;
      continue;
    }
    if (text[i + 1] === '{') {
      VAR_NAME.lastIndex = i + 2;
      const name = VAR_NAME.exec(text)?.[0];
      if (!name) {
        out += '${';
        literal = true;
        i += 2;
        continue;
      }
      let j = i + 2 + name.length;
      let def: string | undefined;
      if (text.startsWith(':-', j)) {
        let depth = 1;
        let k = j + 2;
        for (; k < text.length; k++) {
          if (text[k] === '$' && text[k + 1] === '{') {
            depth++;
            k++;
          } else if (text[k] === '}' && --depth === 0) break;
        }
        if (k >= text.length) {
          problems.push(`'\${${name}:-' has no closing }`);
          return { text: out, whole: false };
        }
        def = text.slice(j + 2, k);
        j = k;
      } else if (text[j] !== '}') {
        problems.push(
          j >= text.length
            ? `'\${${name}' has no closing }`
            : `'\${${name}${text[j]}…': only \${${name}} and \${${name}:-default} are understood`,
        );
        return { text: out, whole: false };
      }
      out += resolve(name, def);
      refs++;
      i = j + 1;
      continue;
    }
    if (inDefault) {
      VAR_NAME.lastIndex = i + 1;
      const name = VAR_NAME.exec(text)?.[0];
      if (name) {
        out += resolve(name, undefined);
        refs++;
        i += 1 + name.length;
        continue;
      }
    }
    out += '$';
    literal = true;
    i++;
  }
  return { text: out, whole: refs === 1 && !literal };
}

/**
 * Where a YAML syntax error is, and what it says. An unclosed flow collection or quoted string is
 * noticed where the parser gave up on it (a line or more later); it is reported where it opened.
 */
function syntaxError(doc: Document, e: YAMLError): { offset: number; message: string } {
  const message = e.message.split('\n')[0];
  const offset = e.pos[0];
  if (e.code !== 'MISSING_CHAR' && e.code !== 'BAD_INDENT') return { offset, message };
  let opened: { start: number; what: string } | undefined;
  visit(doc, (_key, node) => {
    const range = (node as YamlNode).range;
    if (!range || range[1] !== offset || range[0] >= offset) return;
    let what: string | undefined;
    if (isCollection(node) && node.flow) what = isSeq(node) ? 'the [ list' : 'the { mapping';
    else if (isScalar(node) && (node.type === Scalar.QUOTE_DOUBLE || node.type === Scalar.QUOTE_SINGLE)) what = 'the quoted string';
    if (what && (!opened || range[0] > opened.start)) opened = { start: range[0], what };
  });
  return opened ? { offset: opened.start, message: `${message} (${opened.what} opened here is never closed)` } : { offset, message };
}

function segsOf(pathNodes: readonly unknown[], target: unknown): Seg[] {
  const segs: Seg[] = [];
  const chain = [...pathNodes, target];
  for (let i = 0; i < chain.length - 1; i++) {
    const parent = chain[i];
    const child = chain[i + 1];
    if (isMap(parent)) {
      const pair = parent.items.find((p) => p === child);
      if (pair && isScalar(pair.key)) segs.push(String(pair.key.value));
    } else if (isSeq(parent)) {
      const idx = parent.items.indexOf(child);
      if (idx >= 0) segs.push(idx);
    }
  }
  return segs;
}

let compiled: ValidateFunction | undefined;
function configValidator(): ValidateFunction {
  return (compiled ??= new Ajv({ allErrors: true, strict: false }).compile(gatewaySchema as object));
}

function ajvSegs(e: ErrorObject): Seg[] {
  const segs: Seg[] = e.instancePath
    .split('/')
    .slice(1)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((s) => (/^\d+$/.test(s) ? Number(s) : s));
  if (e.keyword === 'additionalProperties') segs.push((e.params as { additionalProperty: string }).additionalProperty);
  return segs;
}

/** What a value of each pattern the schema uses looks like (ajv would show the raw pattern). */
const PATTERN_HINTS: Record<string, string> = {
  [DURATION_PATTERN]: 'expected a duration like 30s, 5m, 1h (units: ms, s, m, h, d)',
  [SIZE_PATTERN]: 'expected a size like 512KiB, 256MiB, 1GiB, or a number of bytes',
  '^[0-9]+(\\.[0-9]{1,6})?$': 'expected USD with at most 6 decimals, like 1.5',
  '^[A-Za-z0-9][A-Za-z0-9._:/-]*$': 'expected a name of letters, digits and . _ : / - (starting with a letter or digit)',
  '^https?://': 'expected an http:// or https:// URL',
  '^/': 'expected a path starting with /',
  '^[0-9a-fA-F]{64}$': 'expected 64 hexadecimal characters (a SHA-256 digest)',
  '^[^{}\\u0000-\\u001f]*$': 'expected text without { or } or control characters',
};

function patternMessage(pattern: string): string {
  return PATTERN_HINTS[pattern] ?? `has an invalid format (expected to match ${pattern})`;
}

function ajvMessage(e: ErrorObject, all: readonly ErrorObject[] = []): string {
  switch (e.keyword) {
    case 'additionalProperties':
      return 'unknown setting';
    case 'required':
      return `missing required setting '${(e.params as { missingProperty: string }).missingProperty}'`;
    case 'enum':
      return `must be one of ${(e.params as { allowedValues: unknown[] }).allowedValues.map((v) => JSON.stringify(v)).join(', ')}`;
    case 'pattern':
      return patternMessage((e.params as { pattern: string }).pattern);
    case 'anyOf': {
      // A branch's pattern says what was meant (a size: '256MiB' or a number).
      const branch = all.find((x) => x.instancePath === e.instancePath && x.keyword === 'pattern');
      return branch ? patternMessage((branch.params as { pattern: string }).pattern) : 'has an invalid value';
    }
    default:
      return e.message ?? 'is invalid';
  }
}

/** anyOf produces one error per branch plus its own; keep the most useful. */
function dedupeAjv(errors: ErrorObject[]): ErrorObject[] {
  const anyOfPaths = new Set(errors.filter((e) => e.keyword === 'anyOf').map((e) => e.instancePath));
  const out: ErrorObject[] = [];
  const seen = new Set<string>();
  for (const e of errors) {
    if (e.keyword !== 'anyOf' && anyOfPaths.has(e.instancePath)) continue;
    if (e.keyword === 'propertyNames') continue; // reported with the pattern error of the name
    const id = `${e.instancePath}|${e.keyword}|${JSON.stringify(e.params)}`;
    if (seen.has(id)) continue;
    seen.add(id);
    out.push(e);
  }
  return out;
}

export function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    if (o instanceof Map) {
      for (const v of o.values()) deepFreeze(v);
      // Object.freeze does not stop Map.set: shut the mutators too.
      const refuse = () => {
        throw new TypeError('the loaded config is frozen');
      };
      Object.defineProperties(o, { set: { value: refuse }, delete: { value: refuse }, clear: { value: refuse } });
    } else {
      for (const v of Object.values(o)) deepFreeze(v);
    }
    Object.freeze(o);
  }
  return o;
}

/**
 * Default `server.body_memory`: a quarter of the V8 heap limit. Bodies are counted as received
 * bytes, and a body's parsed JSON costs a few times its size on the heap, so a quarter leaves the
 * rest of the heap for everything else even when the budget is full.
 */
export function defaultBodyMemory(): number {
  return Math.max(16 * 1024 * 1024, Math.floor(getHeapStatistics().heap_size_limit / 4));
}
