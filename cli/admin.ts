/**
 * The operator commands: `usage`, `reset-quota`, `users`, `keys`, `topup`, `plans`, `audit`, `ledger`. Each is
 * one or more calls to the admin API of a running gateway (core/admin, its contract at
 * /admin/openapi.json), so it sees and changes exactly what the gateway enforces, whatever the store.
 *
 * - Target: `--url`/`--token`, else $GATEWAY_URL/$GATEWAY_ADMIN_TOKEN, else the config's server
 *   address and `server.admin_token` (`--config`, default as for `start`).
 * - Output: short tables or `key value` lines; `--json` prints the API's answer exactly as sent
 *   (a list with `--all`: every page's `data` in one `{"data":[…],"next_cursor":null}`).
 * - Errors: the API's message, code and field details on stderr, exit 1. Usage errors exit 2
 *   before anything is sent.
 * - Money: USD amounts are sent as the decimal strings given; the API keeps integer micro-USD.
 */
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { randomBytes } from 'node:crypto';
import { ConfigError, loadConfigFile } from '../core/config/load.js';
import { builtinPlugins } from '../plugins/index.js';
import { CONFIG, UsageError, configPath, decimal, int, oneOf, parse, str, type Options, type Values } from './args.js';

const ADMIN: Options = { ...CONFIG, url: { type: 'string' }, token: { type: 'string' }, json: { type: 'boolean' } };
const PAGE: Options = { limit: { type: 'string' }, cursor: { type: 'string' }, all: { type: 'boolean' } };
/** The largest page the API gives; what --all asks for unless --limit says otherwise. */
const MAX_PAGE = 200;

/** Runs an admin command; `help` prints the usage. */
export async function runAdmin(cmd: string, rest: string[], help: () => number): Promise<number> {
  switch (cmd) {
    case 'usage': {
      const { values, positionals } = parse(rest, ADMIN, 1);
      if (values.help) return help();
      return usage(need(positionals[0], 'usage needs a KEY_NAME'), values);
    }
    case 'reset-quota': {
      const { values, positionals } = parse(rest, ADMIN, 1);
      if (values.help) return help();
      const name = need(positionals[0], 'reset-quota needs a KEY_NAME');
      return send(values, 'reset-quota', 'POST', `/admin/keys/${enc(name)}/reset-quota`, {}, () => [`quota of key '${name}' reset`]);
    }
    case 'users':
      return users(rest, help);
    case 'keys':
      return keys(rest, help);
    case 'topup':
      return topup(rest, help);
    case 'plans':
      return plans(rest, help);
    case 'ledger':
      return ledger(rest, help);
    case 'audit': {
      const { values } = parse(
        rest,
        { ...ADMIN, ...PAGE, actor: { type: 'string' }, target: { type: 'string' }, since: { type: 'string' }, until: { type: 'string' } },
        0,
      );
      if (values.help) return help();
      const q = query(values, { actor: 'actor', target: 'target', since: 'since', until: 'until' });
      return list(values, 'audit', '/admin/audit', q, (data) =>
        table(
          ['AT', 'ACTOR', 'ACTION', 'TARGET', 'FROM'],
          data.map((e) => [e.at, e.actor, e.action, e.target, e.ip]),
          'no audit entries',
        ),
      );
    }
    default:
      throw new UsageError(`unknown command '${cmd}'`);
  }
}

/** The commands runAdmin serves. */
export const ADMIN_COMMANDS = new Set(['usage', 'reset-quota', 'users', 'keys', 'topup', 'plans', 'audit', 'ledger']);

// ---- users --------------------------------------------------------------------------------------

const USER_SETTINGS: Options = {
  note: { type: 'string' },
  rpm: { type: 'string' },
  concurrency: { type: 'string' },
  status: { type: 'string' },
};

function userSettings(values: Values): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  const note = str(values.note);
  if (note !== undefined) body.note = note;
  const rpm = int(values, 'rpm', 0);
  if (rpm !== undefined) body.rpm = rpm;
  const concurrency = int(values, 'concurrency', 0);
  if (concurrency !== undefined) body.concurrency = concurrency;
  const status = oneOf(values, 'status', ['active', 'inactive']);
  if (status !== undefined) body.status = status;
  return body;
}

async function users(rest: string[], help: () => number): Promise<number> {
  const [sub, ...args] = rest;
  switch (sub) {
    case 'add': {
      const { values, positionals } = parse(args, { ...ADMIN, ...USER_SETTINGS }, 1);
      if (values.help) return help();
      const name = need(positionals[0], 'users add needs a NAME');
      const body = { name, ...userSettings(values) };
      return send(values, 'users add', 'POST', '/admin/users', { body }, (u) => [`user '${name}' created`, ...userLines(u)]);
    }
    case 'list': {
      const { values } = parse(
        args,
        { ...ADMIN, ...PAGE, status: { type: 'string' }, source: { type: 'string' }, query: { type: 'string' } },
        0,
      );
      if (values.help) return help();
      oneOf(values, 'status', ['active', 'inactive']);
      oneOf(values, 'source', ['file', 'store']);
      const q = query(values, { status: 'status', source: 'source', query: 'q' });
      return list(values, 'users list', '/admin/users', q, (data) =>
        table(
          ['NAME', 'SOURCE', 'STATUS', 'BALANCE', 'KEYS', 'PLANS', 'NOTE'],
          data.map((u) => [
            u.name,
            u.source,
            u.status,
            usd(u.wallet.balance_usd),
            String(u.keys.length),
            u.subscriptions
              .map((s: any) => `${s.group}${s.active ? '' : ` (${s.status === 'active' ? 'expired' : s.status})`}`)
              .join(', ') || '—',
            u.note ?? '',
          ]),
          'no users',
        ),
      );
    }
    case 'show': {
      const { values, positionals } = parse(args, ADMIN, 1);
      if (values.help) return help();
      const name = need(positionals[0], 'users show needs a NAME');
      return send(values, 'users show', 'GET', `/admin/users/${enc(name)}`, {}, userLines);
    }
    case 'set': {
      const { values, positionals } = parse(args, { ...ADMIN, ...USER_SETTINGS }, 1);
      if (values.help) return help();
      const name = need(positionals[0], 'users set needs a NAME');
      const body = userSettings(values);
      if (Object.keys(body).length === 0)
        throw new UsageError('users set: nothing to change (give --rpm, --concurrency, --status or --note)');
      return send(values, 'users set', 'PATCH', `/admin/users/${enc(name)}`, { body }, (u) => [`user '${name}' changed`, ...userLines(u)]);
    }
    default:
      return subcommand('users', sub, ['add', 'list', 'show', 'set'], help);
  }
}

function userLines(u: any): string[] {
  const lines = [`user ${u.name} (${u.source}, ${u.status})`];
  const row = (k: string, v: string) => lines.push(`  ${k.padEnd(12)} ${v}`);
  if (u.note !== undefined) row('note', u.note);
  const w = u.wallet;
  row('balance', `${usd(w.balance_usd)} (${usd(w.credit_usd)} credited, ${usd(w.spent_usd)} spent)`);
  row('rpm', u.rpm > 0 ? String(u.rpm) : 'unlimited');
  row('concurrency', u.concurrency > 0 ? `${u.concurrency} (queue ${u.queue.size}, wait up to ${u.queue.max_wait_ms} ms)` : 'unlimited');
  const caps = (['weekly', 'monthly'] as const).filter((p) => u.spend_caps[`${p}_usd`] > 0);
  row('spend caps', caps.map((p) => `${p} ${usd(u.spend_caps[`${p}_usd`])}`).join(', ') || 'none');
  const rates = Object.entries<number>(u.rates);
  if (rates.length > 0) row('rates', rates.map(([g, m]) => `${g} ×${m}`).join(', '));
  if (u.subscriptions.length === 0) row('plans', 'none');
  for (const s of u.subscriptions) row('plan', `${s.group}: ${subscriptionText(s)}`);
  row('keys', u.keys.join(', ') || 'none');
  if (u.created_at) row('created', `${u.created_at} (updated ${u.updated_at}, revision ${u.revision})`);
  return lines;
}

function subscriptionText(s: any): string {
  const state = s.active ? 'active' : s.status === 'suspended' ? 'suspended (not serving)' : 'expired (not serving)';
  return `${state}, until ${s.expires_at}`;
}

// ---- keys ---------------------------------------------------------------------------------------

async function keys(rest: string[], help: () => number): Promise<number> {
  const [sub, ...args] = rest;
  switch (sub) {
    case 'create': {
      const { values } = parse(
        args,
        {
          ...ADMIN,
          user: { type: 'string' },
          group: { type: 'string' },
          name: { type: 'string' },
          quota: { type: 'string' },
          'expires-in-days': { type: 'string' },
          'ip-allow': { type: 'string', multiple: true },
          'ip-deny': { type: 'string', multiple: true },
        },
        0,
      );
      if (values.help) return help();
      const body: Record<string, unknown> = {
        user: need(str(values.user), 'keys create needs --user USER'),
        group: need(str(values.group), 'keys create needs --group GROUP'),
      };
      if (str(values.name) !== undefined) body.name = values.name;
      if (str(values.quota) !== undefined) body.quota_usd = decimal(values.quota as string, '--quota');
      const days = int(values, 'expires-in-days', 1);
      if (days !== undefined) body.expires_in_days = days;
      for (const [opt, field] of [
        ['ip-allow', 'ip_allow'],
        ['ip-deny', 'ip_deny'],
      ] as const) {
        const v = values[opt];
        if (Array.isArray(v)) body[field] = v.flatMap((s) => s.split(',')).map((s) => s.trim());
      }
      return send(values, 'keys create', 'POST', '/admin/keys', { body }, (k) => [
        `key '${k.name}' created for user ${k.user}, group ${k.group}`,
        ...secretLines(k),
        ...keyLines(k),
      ]);
    }
    case 'list': {
      const { values } = parse(
        args,
        { ...ADMIN, ...PAGE, user: { type: 'string' }, group: { type: 'string' }, enabled: { type: 'string' }, source: { type: 'string' } },
        0,
      );
      if (values.help) return help();
      oneOf(values, 'enabled', ['true', 'false']);
      oneOf(values, 'source', ['file', 'store']);
      const q = query(values, { user: 'user', group: 'group', enabled: 'enabled', source: 'source' });
      return list(values, 'keys list', '/admin/keys', q, (data) =>
        table(
          ['NAME', 'USER', 'GROUP', 'STATE', 'SOURCE', 'QUOTA', 'EXPIRES', 'HINT'],
          data.map((k) => [
            k.name,
            k.user,
            k.group ?? '—',
            k.enabled ? 'enabled' : 'disabled',
            k.source,
            k.quota_usd > 0 ? usd(k.quota_usd) : 'unlimited',
            k.expires_at ?? 'never',
            k.hint ?? '—',
          ]),
          'no keys',
        ),
      );
    }
    case 'show':
    case 'disable':
    case 'enable':
    case 'rotate':
    case 'delete': {
      const { values, positionals } = parse(args, ADMIN, 1);
      if (values.help) return help();
      const name = need(positionals[0], `keys ${sub} needs a NAME`);
      const path = `/admin/keys/${enc(name)}`;
      const label = `keys ${sub}`;
      if (sub === 'show') return send(values, label, 'GET', path, {}, keyLines);
      if (sub === 'disable' || sub === 'enable') {
        const enabled = sub === 'enable';
        return send(values, label, 'PATCH', path, { body: { enabled } }, () => [
          `key '${name}' ${enabled ? 'enabled' : 'disabled: requests with it are refused from now on'}`,
        ]);
      }
      if (sub === 'rotate') {
        return send(values, label, 'POST', `${path}/rotate`, {}, (k) => [
          `key '${name}' rotated: the old secret no longer works; limits and usage stay`,
          ...secretLines(k),
        ]);
      }
      return send(values, label, 'DELETE', path, {}, () => [`key '${name}' deleted`]);
    }
    default:
      return subcommand('keys', sub, ['create', 'list', 'show', 'disable', 'enable', 'rotate', 'delete'], help);
  }
}

/** A key's secret, labelled: this answer is the only time anyone sees it. */
function secretLines(k: any): string[] {
  return [
    `secret: ${k.key}`,
    '  Shown this once, never again (the gateway keeps only its digest): give it to its holder now.',
    `  Lost? \`gateway keys rotate ${k.name}\` makes a new one.`,
  ];
}

function keyLines(k: any): string[] {
  const lines = [`key ${k.name} (${k.source}, ${k.enabled ? 'enabled' : 'disabled'})`];
  const row = (key: string, v: string) => lines.push(`  ${key.padEnd(12)} ${v}`);
  row('user', k.user);
  row('group', k.group ?? '—');
  if (k.hint) row('hint', k.hint);
  row('quota', k.quota_usd > 0 ? usd(k.quota_usd) : 'unlimited');
  const windows = Object.entries<number>(k.windows_usd).filter(([, v]) => v > 0);
  row('windows', windows.map(([w, v]) => `${w} ${usd(v)}`).join(', ') || 'none');
  row('expires', k.expires_at ?? 'never');
  if (k.ip_allow.length > 0) row('ip allow', k.ip_allow.join(', '));
  if (k.ip_deny.length > 0) row('ip deny', k.ip_deny.join(', '));
  if (k.created_at) row('created', `${k.created_at} (updated ${k.updated_at}, revision ${k.revision})`);
  return lines;
}

// ---- top-ups ------------------------------------------------------------------------------------

async function topup(rest: string[], help: () => number): Promise<number> {
  const { values, positionals } = parse(rest, { ...ADMIN, reference: { type: 'string' }, 'idempotency-key': { type: 'string' } }, 2);
  if (values.help) return help();
  const user = need(positionals[0], 'topup needs a USER and an AMOUNT');
  const amount = decimal(need(positionals[1], 'topup needs an AMOUNT (USD, e.g. 25.50)'), 'AMOUNT', true);
  const reference = need(str(values.reference), 'topup needs --reference REF (an invoice or payment id)');
  let key = str(values['idempotency-key']);
  if (key === undefined) {
    key = `cli-${randomBytes(16).toString('hex')}`;
    // Said before the call, so that it is known even when the answer never comes.
    console.error(`idempotency key: ${key} (to retry this top-up, pass --idempotency-key ${key}: it never credits twice)`);
  }
  const idempotencyKey = key;
  return send(
    values,
    'topup',
    'POST',
    `/admin/users/${enc(user)}/topups`,
    { body: { amount_usd: amount, reference }, headers: { 'idempotency-key': idempotencyKey } },
    (r, res) => {
      const replayed = res.headers['idempotent-replayed'] === 'true';
      const w = r.wallet;
      return [
        replayed
          ? `already credited at ${r.created_at} (this idempotency key was used for this top-up before): nothing added again`
          : r.amount_usd < 0
            ? `corrected ${usd(r.amount_usd)} on user ${r.user}`
            : `credited ${usd(r.amount_usd)} to user ${r.user}`,
        `  reference    ${r.reference}`,
        `  top-up       ${r.id} by ${r.actor}`,
        `  balance      ${usd(w.balance_usd)} (${usd(w.credit_usd)} credited, ${usd(w.spent_usd)} spent${replayed ? ', at the time' : ''})`,
        `  idempotency key: ${idempotencyKey}`,
      ];
    },
  );
}

// ---- plans --------------------------------------------------------------------------------------

async function plans(rest: string[], help: () => number): Promise<number> {
  const [sub, ...args] = rest;
  if (!['grant', 'suspend', 'resume', 'extend', 'remove'].includes(sub)) {
    return subcommand('plans', sub, ['grant', 'suspend', 'resume', 'extend', 'remove'], help);
  }
  const extra: Options =
    sub === 'grant' ? { days: { type: 'string' }, 'expires-at': { type: 'string' } } : sub === 'extend' ? { days: { type: 'string' } } : {};
  const { values, positionals } = parse(args, { ...ADMIN, ...extra }, 2);
  if (values.help) return help();
  const user = need(positionals[0], `plans ${sub} needs a USER and a GROUP`);
  const group = need(positionals[1], `plans ${sub} needs a GROUP`);
  const label = `plans ${sub}`;
  const base = `/admin/users/${enc(user)}/subscriptions`;
  const after = (verb: string) => (u: any) => {
    const s = u.subscriptions.find((x: any) => x.group === group);
    return [`plan '${group}' of user ${u.name} ${verb}${s ? `: ${subscriptionText(s)}` : ''}`];
  };
  switch (sub) {
    case 'grant': {
      const days = int(values, 'days', 1);
      const expiresAt = str(values['expires-at']);
      if (days !== undefined && expiresAt !== undefined) throw new UsageError('plans grant: give --days or --expires-at, not both');
      const body = { group, ...(days !== undefined ? { days } : {}), ...(expiresAt !== undefined ? { expires_at: expiresAt } : {}) };
      return send(values, label, 'POST', base, { body }, after('granted'));
    }
    case 'extend': {
      const days = need(int(values, 'days', 1), 'plans extend needs --days N');
      return send(values, label, 'PATCH', `${base}/${enc(group)}`, { body: { extend_days: days } }, after(`extended by ${days} days`));
    }
    case 'remove':
      return send(values, label, 'DELETE', `${base}/${enc(group)}`, {}, (u) => [`plan '${group}' removed from user ${u.name}`]);
    default: {
      const status = sub === 'suspend' ? 'suspended' : 'active';
      return send(
        values,
        label,
        'PATCH',
        `${base}/${enc(group)}`,
        { body: { status } },
        after(sub === 'suspend' ? 'suspended' : 'resumed'),
      );
    }
  }
}

// ---- ledger (docs/ledger.md) --------------------------------------------------------------------

const RANGE: Options = {
  from: { type: 'string' },
  to: { type: 'string' },
  user: { type: 'string' },
  key: { type: 'string' },
  type: { type: 'string' },
};

async function ledger(rest: string[], help: () => number): Promise<number> {
  const [sub, ...args] = rest;
  switch (sub) {
    case 'summary': {
      const { values } = parse(args, { ...ADMIN, ...RANGE, by: { type: 'string' } }, 0);
      if (values.help) return help();
      oneOf(values, 'type', ['request', 'topup', 'correction']);
      const q = query(values, { from: 'from', to: 'to', user: 'user', key: 'key', type: 'type', by: 'by' });
      return send(values, 'ledger summary', 'GET', `/admin/ledger/summary?${q.toString()}`, {}, (r) => {
        const by: string[] = r.by;
        const rows = r.data.map((x: any) => [
          ...by.map((b) => (x[b] === '' ? '—' : String(x[b]))),
          String(x.requests),
          String(x.input_tokens),
          String(x.output_tokens),
          String(x.cache_read_tokens + x.cache_write_tokens),
          usd(x.charged_usd),
          usd(x.credited_usd),
          String(x.estimated),
        ]);
        return [
          `ledger from ${r.from} to ${r.to} (${r.source})`,
          ...table(
            [...by.map((b) => b.toUpperCase()), 'REQUESTS', 'INPUT', 'OUTPUT', 'CACHE', 'CHARGED', 'CREDITED', 'ESTIMATED'],
            rows,
            'no records',
          ),
        ];
      });
    }
    case 'records': {
      const { values } = parse(args, { ...ADMIN, ...RANGE, ...PAGE }, 0);
      if (values.help) return help();
      oneOf(values, 'type', ['request', 'topup', 'correction']);
      const q = query(values, { from: 'from', to: 'to', user: 'user', key: 'key', type: 'type' });
      return list(values, 'ledger records', '/admin/ledger/records', q, (data) =>
        table(
          ['TIME', 'ID', 'TYPE', 'USER', 'KEY', 'MODEL', 'IN', 'OUT', 'CHARGED', 'USAGE'],
          data.map((x) => [
            new Date(x.ts).toISOString(),
            x.id,
            x.type,
            x.user,
            x.key ?? '—',
            x.model ?? '—',
            String(x.input_tokens),
            String(x.output_tokens),
            usd(x.charged_micros / 1e6),
            x.usage_source === null ? '—' : x.estimate_reason ? `estimated (${x.estimate_reason})` : x.usage_source,
          ]),
          'no records',
        ),
      );
    }
    case 'export': {
      const { values } = parse(args, { ...ADMIN, ...RANGE, format: { type: 'string' } }, 0);
      if (values.help) return help();
      oneOf(values, 'type', ['request', 'topup', 'correction']);
      oneOf(values, 'format', ['jsonl', 'csv']);
      const q = query(values, { from: 'from', to: 'to', user: 'user', key: 'key', type: 'type', format: 'format' });
      const target = await adminTarget(values);
      if (!target) return 1;
      return exportTo(target, `/admin/ledger/export?${q.toString()}`, process.stdout);
    }
    case 'reconcile': {
      const { values } = parse(args, { ...ADMIN, from: { type: 'string' }, to: { type: 'string' } }, 0);
      if (values.help) return help();
      const q = query(values, { from: 'from', to: 'to' });
      const target = await adminTarget(values);
      if (!target) return 1;
      const res = await adminCall(target, 'GET', `/admin/ledger/reconcile?${q.toString()}`);
      if (!res) return 1;
      if (!res.ok) {
        failed('ledger reconcile', res);
        return 1;
      }
      const r = JSON.parse(res.text);
      if (values.json) console.log(res.text);
      else if (r.ok) console.log(`ledger (${r.source}) and the store's counters from ${r.from} to ${r.to}: no difference`);
      else {
        console.log(`ledger (${r.source}) and the store's counters from ${r.from} to ${r.to}: ${r.differences.length} differences`);
        console.log(
          table(
            ['WHAT', 'FIELD', 'LEDGER', 'STORE'],
            r.differences.map((d: any) => [d.what, d.field, String(d.ledger), String(d.store)]),
            '',
          ).join('\n'),
        );
      }
      // Differences are a failure: scripts and monitoring see them in the exit status.
      return r.ok ? 0 : 1;
    }
    default:
      return subcommand('ledger', sub, ['summary', 'records', 'export', 'reconcile'], help);
  }
}

/**
 * A streamed export: the body written to `out` as it arrives, waiting for `out` between chunks
 * (a month of records is never held here either). An error answer is reported like any other.
 */
function exportTo(target: AdminTarget, path_: string, out: NodeJS.WritableStream): Promise<number> {
  return new Promise((resolve) => {
    const url = new URL(target.url + path_);
    const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = request(url, { method: 'GET', agent: false, headers: { authorization: `Bearer ${target.token}` } }, (res) => {
      const status = res.statusCode ?? 0;
      if (status < 200 || status >= 300) {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          failed('ledger export', { ok: false, status, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') });
          resolve(1);
        });
        return;
      }
      res.pipe(out, { end: false });
      res.on('end', () => resolve(0));
      res.on('error', (e) => {
        console.error(`ledger export: the answer broke off: ${e.message}`);
        resolve(1);
      });
      // A gateway that stops mid-export ends the response early: chunked encoding tells it apart.
      res.on('aborted', () => {
        console.error('ledger export: the answer broke off before its end');
        resolve(1);
      });
    });
    req.on('error', (e) => {
      console.error(`cannot reach the gateway at ${target.url}: ${e.message}`);
      resolve(1);
    });
    req.end();
  });
}

// ---- usage (the running gateway's view of a key) ------------------------------------------------

function usage(name: string, values: Values): Promise<number> {
  return send(values, 'usage', 'GET', `/admin/keys/${enc(name)}/usage`, {}, (u) => {
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
    return lines;
  });
}

// ---- the calls ----------------------------------------------------------------------------------

interface AdminTarget {
  url: string;
  token: string;
}

interface Reply {
  ok: boolean;
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** The running gateway's address and admin token: the options, else the environment, else the config. */
async function adminTarget(values: Values): Promise<AdminTarget | undefined> {
  let url = str(values.url) ?? (process.env.GATEWAY_URL || undefined);
  let token = str(values.token) ?? (process.env.GATEWAY_ADMIN_TOKEN || undefined);
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
    console.error('no admin token: pass --token, set GATEWAY_ADMIN_TOKEN, or set server.admin_token in the config');
    return undefined;
  }
  return { url: url.replace(/\/$/, ''), token };
}

/**
 * One admin API call, with a JSON body and extra headers if given; undefined (said on stderr) when
 * the gateway cannot be reached. The connection is not kept alive, so the command exits as soon as
 * it is answered.
 */
function adminCall(
  target: AdminTarget,
  method: string,
  path_: string,
  opts: { body?: unknown; headers?: Record<string, string> } = {},
): Promise<Reply | undefined> {
  return new Promise((resolve) => {
    let url: URL;
    try {
      url = new URL(target.url + path_);
    } catch {
      console.error(`not a URL: ${target.url}`);
      return resolve(undefined);
    }
    const payload = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body), 'utf8');
    const headers: Record<string, string> = { authorization: `Bearer ${target.token}`, ...opts.headers };
    if (payload) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(payload.length);
    }
    const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = request(url, { method, agent: false, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        resolve({ ok: status >= 200 && status < 300, status, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') });
      });
    });
    req.on('error', (e) => {
      console.error(`cannot reach the gateway at ${target.url}: ${e.message}`);
      resolve(undefined);
    });
    req.end(payload);
  });
}

/** The API's error on stderr: message, code, and each invalid field. */
function failed(label: string, res: Reply): void {
  let error: any;
  try {
    error = JSON.parse(res.text)?.error;
  } catch {
    // not the API's JSON: a proxy's page, say
  }
  if (typeof error?.message !== 'string') {
    console.error(`${label} failed (${res.status}): ${res.text.trim().slice(0, 2000) || '(no body)'}`);
    return;
  }
  const lines = [`${label} failed (${res.status}): ${error.message}${error.code ? ` [${error.code}]` : ''}`];
  // Field details, each unless the message already says it.
  if (Array.isArray(error.details)) {
    for (const d of error.details) {
      const line = `${d.path || 'body'}: ${d.message}`;
      if (!error.message.includes(line)) lines.push(`  ${line}`);
    }
  }
  if (res.status === 401) lines.push('  (the admin token: --token, GATEWAY_ADMIN_TOKEN or server.admin_token)');
  const retry = res.headers['retry-after'];
  if (typeof retry === 'string') lines.push(`  retry after ${retry} s`);
  console.error(lines.join('\n'));
}

/** One call; prints the answer (`render`, or the API's JSON with --json). */
async function send(
  values: Values,
  label: string,
  method: string,
  path: string,
  opts: { body?: unknown; headers?: Record<string, string> },
  render: (json: any, res: Reply) => string[],
): Promise<number> {
  const target = await adminTarget(values);
  if (!target) return 1;
  const res = await adminCall(target, method, path, opts);
  if (!res) return 1;
  if (!res.ok) {
    failed(label, res);
    return 1;
  }
  if (values.json) {
    if (res.text) console.log(res.text);
    return 0;
  }
  console.log(render(res.text ? JSON.parse(res.text) : undefined, res).join('\n'));
  return 0;
}

/** A list: one page (saying how to get the next), or with --all every page in turn. */
async function list(values: Values, label: string, path: string, q: URLSearchParams, render: (data: any[]) => string[]): Promise<number> {
  const all = values.all === true;
  const limit = int(values, 'limit', 1);
  let cursor = str(values.cursor);
  if (all && cursor !== undefined) throw new UsageError('give --all or --cursor, not both');
  if (limit !== undefined || all) q.set('limit', String(limit ?? MAX_PAGE));
  const target = await adminTarget(values);
  if (!target) return 1;
  const data: any[] = [];
  for (;;) {
    if (cursor !== undefined) q.set('cursor', cursor);
    const qs = q.toString();
    const res = await adminCall(target, 'GET', qs ? `${path}?${qs}` : path);
    if (!res) return 1;
    if (!res.ok) {
      failed(label, res);
      return 1;
    }
    const page = JSON.parse(res.text);
    if (!all) {
      if (values.json) console.log(res.text);
      else {
        const lines = render(page.data);
        if (page.next_cursor !== null) lines.push(`(more: --cursor ${page.next_cursor}, or --all)`);
        console.log(lines.join('\n'));
      }
      return 0;
    }
    data.push(...page.data);
    if (page.next_cursor === null) break;
    if (page.next_cursor === cursor) {
      console.error(`${label} failed: the gateway gave the same cursor twice (${cursor})`);
      return 1;
    }
    cursor = page.next_cursor as string;
  }
  console.log(values.json ? JSON.stringify({ data, next_cursor: null }) : render(data).join('\n'));
  return 0;
}

// ---- helpers ------------------------------------------------------------------------------------

const enc = encodeURIComponent;

function need<T>(v: T | undefined, message: string): T {
  if (v === undefined || v === '') throw new UsageError(message);
  return v;
}

function subcommand(cmd: string, sub: string | undefined, known: string[], help: () => number): number {
  if (sub === '--help' || sub === '-h') return help();
  if (sub === undefined || sub.startsWith('-')) throw new UsageError(`${cmd} needs a subcommand: ${known.join(', ')}`);
  throw new UsageError(`unknown ${cmd} subcommand '${sub}' (${known.join(', ')})`);
}

/** The query of a list: each option given, under the API's parameter name. */
function query(values: Values, names: Record<string, string>): URLSearchParams {
  const q = new URLSearchParams();
  for (const [opt, param] of Object.entries(names)) {
    const v = str(values[opt]);
    if (v !== undefined) q.set(param, v);
  }
  return q;
}

/** Columns padded to their widest cell. */
function table(head: string[], rows: string[][], empty: string): string[] {
  if (rows.length === 0) return [empty];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  return [head, ...rows].map((r) =>
    r
      .map((c, i) => c.padEnd(widths[i]))
      .join('  ')
      .trimEnd(),
  );
}

const usd = (n: number) =>
  `${n < 0 ? '-' : ''}$${Math.abs(n)
    .toFixed(6)
    .replace(/0{1,4}$/, '')}`;
