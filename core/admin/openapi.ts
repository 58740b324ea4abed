/**
 * The admin API's contract: the OpenAPI 3.1 document served at `/admin/openapi.json`. The request
 * body schemas here are the ones the handlers validate with (validate.ts), and the tests check every
 * real response against the response schemas, so the document cannot drift from the code.
 *
 * Money is USD: a decimal with at most 6 places (a JSON number or a string), kept inside as integer
 * micro-USD. Times are ISO 8601 strings. Names of users and keys: letters, digits, `_ . @ -`.
 */
import { VERSION } from '../version.js';
import { FIELDS } from '../ledger/record.js';

const NAME = { type: 'string', pattern: '^[A-Za-z0-9_.@-]{1,64}$' };
const USD = {
  description: 'USD, at most 6 decimal places (a number, or a string such as "12.50")',
  oneOf: [{ type: 'number' }, { type: 'string', pattern: '^-?[0-9]+(\\.[0-9]+)?$' }],
};
const USD_LIMIT = { ...USD, description: 'USD, at most 6 decimal places; 0 = no limit' };
const TIME = { type: 'string', format: 'date-time' };
const IP_LIST = { type: 'array', maxItems: 1000, items: { type: 'string', maxLength: 64 } };
const WINDOWS_IN = {
  type: 'object',
  additionalProperties: false,
  properties: { '5h': USD_LIMIT, '1d': USD_LIMIT, '7d': USD_LIMIT },
};

// ---- request bodies ----------------------------------------------------------------------------

const UserSettings = {
  status: { enum: ['active', 'inactive'] },
  note: { type: 'string', maxLength: 500 },
  rpm: { type: 'integer', minimum: 0, description: "Requests per minute across the user's keys; 0 = unlimited" },
  concurrency: { type: 'integer', minimum: 0, description: 'Concurrent requests; 0 = unlimited' },
  queue: {
    type: 'object',
    additionalProperties: false,
    properties: {
      size: { type: 'integer', minimum: 0, description: 'Requests that may wait for a concurrency slot' },
      max_wait_ms: { type: 'integer', minimum: 0, maximum: 600000, description: 'Longest wait for a slot' },
    },
  },
  spend_caps: {
    type: 'object',
    additionalProperties: false,
    properties: { weekly_usd: USD_LIMIT, monthly_usd: USD_LIMIT },
    description: 'Caps on balance spend: week from Monday 00:00 UTC, month from the 1st',
  },
  rates: {
    type: 'object',
    description: "Personal rate per group (a multiplier such as 0.8), replacing the group's multiplier; replaces the whole map",
    additionalProperties: { type: 'number', minimum: 0, maximum: 1000 },
  },
};

export const CreateUser = {
  type: 'object',
  additionalProperties: false,
  required: ['name'],
  properties: { name: NAME, ...UserSettings },
};

export const UpdateUser = {
  type: 'object',
  additionalProperties: false,
  minProperties: 1,
  properties: UserSettings,
};

export const CreateTopup = {
  type: 'object',
  additionalProperties: false,
  required: ['amount_usd', 'reference'],
  properties: {
    amount_usd: { ...USD, description: 'Credit to add; negative for a correction (refused if it would leave the balance below zero)' },
    reference: { type: 'string', minLength: 1, maxLength: 200, description: 'Your reference: an invoice, a payment id' },
  },
};

export const GrantSubscription = {
  type: 'object',
  additionalProperties: false,
  required: ['group'],
  properties: {
    group: { type: 'string', description: 'A plan group (groups.<g>.billing: plan)' },
    expires_at: TIME,
    days: { type: 'integer', minimum: 1, maximum: 36500, description: 'Instead of expires_at: this many days from now' },
  },
};

export const UpdateSubscription = {
  type: 'object',
  additionalProperties: false,
  minProperties: 1,
  properties: {
    status: { enum: ['active', 'suspended'] },
    expires_at: TIME,
    extend_days: { type: 'integer', minimum: 1, maximum: 36500, description: 'Adds days to the later of now and the current expiry' },
  },
};

const KeySettings = {
  group: { type: 'string' },
  enabled: { type: 'boolean' },
  quota_usd: { ...USD_LIMIT, description: "Spend over the key's life; 0 = unlimited" },
  windows_usd: { ...WINDOWS_IN, description: 'Spend per fixed window from first use; 0 = unlimited' },
  expires_at: { oneOf: [TIME, { type: 'null' }], description: 'null: never' },
  ip_allow: IP_LIST,
  ip_deny: IP_LIST,
};

export const CreateKey = {
  type: 'object',
  additionalProperties: false,
  required: ['user', 'group'],
  properties: {
    user: NAME,
    name: { ...NAME, description: "Default: key- and 12 hex of the key's SHA-256" },
    key: {
      type: 'string',
      description: 'A key of your own (sk- and 64 hex, or 16+ letters, digits, _ and -); default: a new sk- key',
    },
    expires_in_days: { type: 'integer', minimum: 1, maximum: 36500 },
    ...KeySettings,
  },
};

export const UpdateKey = {
  type: 'object',
  additionalProperties: false,
  minProperties: 1,
  properties: KeySettings,
};

export const RotateKey = {
  type: 'object',
  additionalProperties: false,
  properties: { key: CreateKey.properties.key },
};

// ---- responses ----------------------------------------------------------------------------------

const ErrorBody = {
  type: 'object',
  required: ['error'],
  additionalProperties: false,
  properties: {
    error: {
      type: 'object',
      required: ['type', 'code', 'message'],
      additionalProperties: false,
      properties: {
        type: { type: 'string' },
        code: {
          enum: [
            'invalid_request',
            'idempotency_key_required',
            'unauthorized',
            'not_found',
            'method_not_allowed',
            'conflict',
            'managed_by_config',
            'idempotency_conflict',
            'below_zero',
            'body_too_large',
            'rate_limited',
            'store_unavailable',
            'internal',
          ],
        },
        message: { type: 'string' },
        details: {
          type: 'array',
          items: {
            type: 'object',
            required: ['path', 'message'],
            additionalProperties: false,
            properties: { path: { type: 'string' }, message: { type: 'string' } },
          },
        },
      },
    },
  },
};

const Source = { enum: ['file', 'store'], description: 'file: declared in gateway.yaml (read-only here); store: made through this API' };
const NULLABLE_TIME = { oneOf: [TIME, { type: 'null' }] };

const Wallet = {
  type: 'object',
  required: ['credit_usd', 'spent_usd', 'balance_usd'],
  additionalProperties: false,
  properties: {
    credit_usd: { type: 'number', description: "The config file's credit plus every top-up and correction" },
    spent_usd: { type: 'number' },
    balance_usd: { type: 'number', description: "credit − spent (below zero by at most the last request's overrun)" },
  },
};

const Subscription = {
  type: 'object',
  required: ['group', 'expires_at', 'status', 'active'],
  additionalProperties: false,
  properties: {
    group: { type: 'string' },
    expires_at: TIME,
    status: { enum: ['active', 'suspended'] },
    active: { type: 'boolean', description: 'status active and not expired' },
  },
};

const User = {
  type: 'object',
  additionalProperties: false,
  required: [
    'name',
    'source',
    'status',
    'rpm',
    'concurrency',
    'queue',
    'spend_caps',
    'rates',
    'subscriptions',
    'wallet',
    'keys',
    'created_at',
    'updated_at',
    'revision',
  ],
  properties: {
    name: { type: 'string' },
    source: Source,
    status: { enum: ['active', 'inactive'] },
    note: { type: 'string' },
    rpm: { type: 'integer' },
    concurrency: { type: 'integer' },
    queue: {
      type: 'object',
      required: ['size', 'max_wait_ms'],
      additionalProperties: false,
      properties: { size: { type: 'integer' }, max_wait_ms: { type: 'integer' } },
    },
    spend_caps: {
      type: 'object',
      required: ['weekly_usd', 'monthly_usd'],
      additionalProperties: false,
      properties: { weekly_usd: { type: 'number' }, monthly_usd: { type: 'number' } },
    },
    rates: { type: 'object', additionalProperties: { type: 'number' } },
    subscriptions: { type: 'array', items: Subscription },
    wallet: Wallet,
    keys: { type: 'array', items: { type: 'string' }, description: "The names of the user's keys" },
    created_at: NULLABLE_TIME,
    updated_at: NULLABLE_TIME,
    revision: { type: 'integer', description: '0 for a user of the config file' },
  },
};

const Key = {
  type: 'object',
  additionalProperties: false,
  required: [
    'name',
    'source',
    'user',
    'group',
    'enabled',
    'hint',
    'quota_usd',
    'windows_usd',
    'expires_at',
    'ip_allow',
    'ip_deny',
    'created_at',
    'updated_at',
    'revision',
  ],
  properties: {
    name: { type: 'string' },
    source: Source,
    user: { type: 'string' },
    group: { type: ['string', 'null'] },
    enabled: { type: 'boolean' },
    hint: { type: ['string', 'null'], description: 'The first 6 and last 4 characters (null for a key of the config file)' },
    quota_usd: { type: 'number' },
    windows_usd: {
      type: 'object',
      required: ['5h', '1d', '7d'],
      additionalProperties: false,
      properties: { '5h': { type: 'number' }, '1d': { type: 'number' }, '7d': { type: 'number' } },
    },
    expires_at: NULLABLE_TIME,
    ip_allow: { type: 'array', items: { type: 'string' } },
    ip_deny: { type: 'array', items: { type: 'string' } },
    created_at: NULLABLE_TIME,
    updated_at: NULLABLE_TIME,
    revision: { type: 'integer' },
  },
};

const KeyWithSecret = {
  ...Key,
  required: [...Key.required, 'key'],
  properties: { ...Key.properties, key: { type: 'string', description: 'The secret: shown in this answer only, never again' } },
};

const Topup = {
  type: 'object',
  additionalProperties: false,
  required: ['id', 'user', 'amount_usd', 'reference', 'actor', 'created_at', 'wallet'],
  properties: {
    id: { type: 'string' },
    user: { type: 'string' },
    amount_usd: { type: 'number' },
    reference: { type: 'string' },
    actor: { type: 'string', description: 'The admin token that made it' },
    created_at: TIME,
    wallet: { ...Wallet, description: 'The wallet right after this top-up' },
  },
};

const AuditEntry = {
  type: 'object',
  additionalProperties: false,
  required: ['id', 'at', 'actor', 'ip', 'method', 'path', 'action', 'target', 'before', 'after'],
  properties: {
    id: { type: 'string' },
    at: TIME,
    actor: { type: 'string' },
    ip: { type: 'string' },
    method: { type: 'string' },
    path: { type: 'string' },
    action: { type: 'string' },
    target: { type: 'string' },
    before: { description: 'The record before (never a secret)' },
    after: { description: 'The record after (never a secret)' },
  },
};

const nullable = (type: string) => ({ type: [type, 'null'] });
const LedgerRecord = {
  type: 'object',
  additionalProperties: false,
  required: [...FIELDS],
  properties: {
    id: { type: 'string', description: 'The request id, or credit:<id>' },
    type: { enum: ['request', 'topup', 'correction'] },
    ts: { type: 'integer', description: 'Epoch ms' },
    user: { type: 'string' },
    key: nullable('string'),
    group: nullable('string'),
    model_requested: nullable('string'),
    model: nullable('string'),
    provider: nullable('string'),
    account: nullable('string'),
    protocol_in: nullable('string'),
    protocol_out: nullable('string'),
    stream: nullable('boolean'),
    status: nullable('integer'),
    billing: { enum: ['balance', 'plan', null] },
    input_tokens: { type: 'integer' },
    output_tokens: { type: 'integer' },
    cache_read_tokens: { type: 'integer' },
    cache_write_tokens: { type: 'integer' },
    reasoning_tokens: nullable('integer'),
    usage_source: { enum: ['reported', 'estimated', 'late', null] },
    estimate_reason: { enum: ['client_disconnect', 'cut_at_reservation', 'upstream_cut', 'no_usage_reported', 'crash_recovery', null] },
    list_micros: { type: 'integer' },
    rate_ppm: nullable('integer'),
    charged_micros: { type: 'integer', description: 'Charged (requests) or credited (top-ups; corrections negative), micro-USD' },
    duration_ms: nullable('integer'),
    ttft_ms: nullable('integer'),
    attempts: nullable('integer'),
    reference: nullable('string'),
    actor: nullable('string'),
  },
};
const LedgerSummary = {
  type: 'object',
  additionalProperties: false,
  required: ['from', 'to', 'by', 'source', 'data'],
  properties: {
    from: { type: 'string' },
    to: { type: 'string' },
    by: { type: 'array', items: { type: 'string' } },
    source: { enum: ['files', 'postgres'] },
    data: {
      type: 'array',
      items: {
        type: 'object',
        required: ['records', 'requests', 'charged_usd', 'list_usd', 'credited_usd'],
        properties: {
          user: { type: 'string' },
          key: { type: 'string' },
          model: { type: 'string' },
          group: { type: 'string' },
          day: { type: 'string' },
          type: { type: 'string' },
          records: { type: 'integer' },
          requests: { type: 'integer' },
          input_tokens: { type: 'integer' },
          output_tokens: { type: 'integer' },
          cache_read_tokens: { type: 'integer' },
          cache_write_tokens: { type: 'integer' },
          list_usd: { type: 'number' },
          charged_usd: { type: 'number' },
          credited_usd: { type: 'number' },
          estimated: { type: 'integer' },
        },
      },
    },
  },
};
const Reconciliation = {
  type: 'object',
  additionalProperties: false,
  required: ['from', 'to', 'source', 'scope', 'ok', 'differences'],
  properties: {
    from: { type: 'string' },
    to: { type: 'string' },
    source: { type: 'string' },
    scope: {
      enum: ['ledger', 'instance'],
      description:
        '`instance`: the records this instance drained from a store shared with other instances (Redis store, no PostgreSQL): the whole ledger only while it is the only instance (`note` says so)',
    },
    note: { type: 'string' },
    ok: { type: 'boolean' },
    differences: {
      type: 'array',
      items: {
        type: 'object',
        required: ['what', 'field', 'ledger', 'store'],
        properties: { what: { type: 'string' }, field: { type: 'string' }, ledger: { type: 'integer' }, store: { type: 'integer' } },
      },
    },
  },
};

const page = (item: object) => ({
  type: 'object',
  additionalProperties: false,
  required: ['data', 'next_cursor'],
  properties: {
    data: { type: 'array', items: item },
    next_cursor: { type: ['string', 'null'], description: 'Pass as `cursor` for the next page; null on the last' },
  },
});

// ---- the document ------------------------------------------------------------------------------

const json = (schema: object) => ({ 'application/json': { schema } });
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const err = (description: string) => ({ description, content: json(ref('Error')) });
const errors = (...statuses: number[]) =>
  Object.fromEntries(
    statuses.map((s) => [
      String(s),
      err(
        {
          400: 'Invalid request (field errors in `details`)',
          401: 'No or wrong admin token',
          404: 'No such user, key or path',
          409: 'Conflict: exists, changed meanwhile, or owned by the config file',
          429: 'Too many failed authentications from this address',
          503: 'The store is unreachable: nothing changed; retry',
        }[s] ?? 'Error',
      ),
    ]),
  );
const common = errors(401, 429, 503);
const body = (name: string) => ({ required: true, content: json(ref(name)) });
const pathName = (what: string) => ({ name: 'name', in: 'path', required: true, schema: { type: 'string' }, description: what });
const limitCursor = [
  { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 200, default: 50 } },
  { name: 'cursor', in: 'query', schema: { type: 'string' }, description: 'next_cursor of the previous page' },
];
const ledgerRange = [
  { name: 'from', in: 'query', schema: { type: 'string', format: 'date' }, description: 'First UTC day (default: 30 days before to)' },
  { name: 'to', in: 'query', schema: { type: 'string', format: 'date' }, description: 'Last UTC day, included (default: today)' },
  { name: 'user', in: 'query', schema: { type: 'string' } },
  { name: 'key', in: 'query', schema: { type: 'string' } },
  { name: 'type', in: 'query', schema: { enum: ['request', 'topup', 'correction'] } },
];
const idempotencyKey = {
  name: 'Idempotency-Key',
  in: 'header',
  required: true,
  schema: { type: 'string', minLength: 1, maxLength: 200 },
  description: 'The same key and body answer the first result again (for a day); the same key with another body: 409',
};

export const OPENAPI = {
  openapi: '3.1.0',
  info: {
    title: 'llm-gateway admin API',
    version: VERSION,
    description:
      'Users, keys, top-ups, plans and the audit trail (docs/accounts.md), plus operations on the running gateway. ' +
      'Authorization: Bearer <admin token>. Every error is `{"error":{"type","code","message","details"?}}`.',
  },
  components: {
    securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
    schemas: {
      Error: ErrorBody,
      User,
      Key,
      KeyWithSecret,
      Topup,
      AuditEntry,
      Wallet,
      Subscription,
      CreateUser,
      UpdateUser,
      CreateTopup,
      GrantSubscription,
      UpdateSubscription,
      CreateKey,
      UpdateKey,
      RotateKey,
      LedgerRecord,
      LedgerSummary,
      Reconciliation,
      LedgerPage: page(ref('LedgerRecord')),
      UserPage: page(ref('User')),
      KeyPage: page(ref('Key')),
      TopupPage: page(ref('Topup')),
      AuditPage: page(ref('AuditEntry')),
    },
  },
  security: [{ bearer: [] }],
  paths: {
    '/admin/openapi.json': {
      get: {
        summary: 'This document',
        security: [],
        responses: { 200: { description: 'OpenAPI 3.1', content: json({ type: 'object' }) } },
      },
    },
    '/admin/users': {
      get: {
        summary: 'List users (file and store)',
        parameters: [
          { name: 'status', in: 'query', schema: { enum: ['active', 'inactive'] } },
          { name: 'source', in: 'query', schema: { enum: ['file', 'store'] } },
          { name: 'q', in: 'query', schema: { type: 'string' }, description: 'Part of the name or note' },
          ...limitCursor,
        ],
        responses: { 200: { description: 'A page of users', content: json(ref('UserPage')) }, ...errors(400), ...common },
      },
      post: {
        summary: 'Create a user (its wallet starts at zero)',
        requestBody: body('CreateUser'),
        responses: { 201: { description: 'Created', content: json(ref('User')) }, ...errors(400, 409), ...common },
      },
    },
    '/admin/users/{name}': {
      parameters: [pathName('The user')],
      get: { summary: 'One user', responses: { 200: { description: 'The user', content: json(ref('User')) }, ...errors(404), ...common } },
      patch: {
        summary: "Change a user's settings (a user of the config file: 409 managed_by_config)",
        requestBody: body('UpdateUser'),
        responses: { 200: { description: 'The user after', content: json(ref('User')) }, ...errors(400, 404, 409), ...common },
      },
    },
    '/admin/users/{name}/topups': {
      parameters: [pathName('The user')],
      get: {
        summary: "The user's top-ups and corrections, newest first",
        parameters: limitCursor,
        responses: { 200: { description: 'A page of top-ups', content: json(ref('TopupPage')) }, ...errors(400, 404), ...common },
      },
      post: {
        summary: "Credit the user's wallet (negative: a correction)",
        parameters: [idempotencyKey],
        requestBody: body('CreateTopup'),
        responses: {
          201: {
            description: 'Credited (a replay of the same Idempotency-Key answers the same, with Idempotent-Replayed: true)',
            content: json(ref('Topup')),
          },
          ...errors(400, 404, 409),
          ...common,
        },
      },
    },
    '/admin/users/{name}/subscriptions': {
      parameters: [pathName('The user')],
      post: {
        summary: 'Grant a plan (replaces an existing subscription to the same group)',
        requestBody: body('GrantSubscription'),
        responses: { 201: { description: 'The user after', content: json(ref('User')) }, ...errors(400, 404, 409), ...common },
      },
    },
    '/admin/users/{name}/subscriptions/{group}': {
      parameters: [pathName('The user'), { name: 'group', in: 'path', required: true, schema: { type: 'string' } }],
      patch: {
        summary: 'Extend, suspend or resume a plan',
        requestBody: body('UpdateSubscription'),
        responses: { 200: { description: 'The user after', content: json(ref('User')) }, ...errors(400, 404, 409), ...common },
      },
      delete: {
        summary: 'Remove a plan',
        responses: { 200: { description: 'The user after', content: json(ref('User')) }, ...errors(404, 409), ...common },
      },
    },
    '/admin/keys': {
      get: {
        summary: 'List keys (never a secret or digest)',
        parameters: [
          { name: 'user', in: 'query', schema: { type: 'string' } },
          { name: 'group', in: 'query', schema: { type: 'string' } },
          { name: 'enabled', in: 'query', schema: { enum: ['true', 'false'] } },
          { name: 'source', in: 'query', schema: { enum: ['file', 'store'] } },
          ...limitCursor,
        ],
        responses: { 200: { description: 'A page of keys', content: json(ref('KeyPage')) }, ...errors(400), ...common },
      },
      post: {
        summary: 'Create a key; its secret is in this answer only',
        requestBody: body('CreateKey'),
        responses: { 201: { description: 'Created', content: json(ref('KeyWithSecret')) }, ...errors(400, 409), ...common },
      },
    },
    '/admin/keys/{name}': {
      parameters: [pathName('The key')],
      get: { summary: 'One key', responses: { 200: { description: 'The key', content: json(ref('Key')) }, ...errors(404), ...common } },
      patch: {
        summary: 'Enable or disable, change limits, group, expiry, IP rules',
        requestBody: body('UpdateKey'),
        responses: { 200: { description: 'The key after', content: json(ref('Key')) }, ...errors(400, 404, 409), ...common },
      },
      delete: { summary: 'Delete a key', responses: { 204: { description: 'Deleted' }, ...errors(404, 409), ...common } },
    },
    '/admin/keys/{name}/rotate': {
      parameters: [pathName('The key')],
      post: {
        summary: 'A new secret for the key (the old one stops working); limits and usage stay',
        requestBody: { required: false, content: json(ref('RotateKey')) },
        responses: {
          200: { description: 'The key with its new secret', content: json(ref('KeyWithSecret')) },
          ...errors(400, 404, 409),
          ...common,
        },
      },
    },
    '/admin/keys/{name}/usage': {
      parameters: [pathName('The key')],
      get: {
        summary: "A key's spend, limits, wallet or plan, and usage",
        responses: { 200: { description: 'Usage', content: json({ type: 'object' }) }, ...errors(404), ...common },
      },
    },
    '/admin/keys/{name}/reset-quota': {
      parameters: [pathName('The key')],
      post: {
        summary: "Forget the key's used quota and spend windows",
        responses: {
          200: {
            description: 'Reset',
            content: json({ type: 'object', required: ['ok', 'key'], properties: { ok: { const: true }, key: { type: 'string' } } }),
          },
          ...errors(404),
          ...common,
        },
      },
    },
    '/admin/audit': {
      get: {
        summary: 'The audit trail, newest first',
        parameters: [
          { name: 'actor', in: 'query', schema: { type: 'string' } },
          { name: 'target', in: 'query', schema: { type: 'string' }, description: 'user:<name> or key:<name>' },
          { name: 'since', in: 'query', schema: TIME },
          { name: 'until', in: 'query', schema: TIME },
          ...limitCursor,
        ],
        responses: { 200: { description: 'A page of entries', content: json(ref('AuditPage')) }, ...errors(400), ...common },
      },
    },
    '/admin/ledger/summary': {
      get: {
        summary: 'Ledger totals over UTC days, grouped (docs/ledger.md)',
        parameters: [
          ...ledgerRange,
          { name: 'by', in: 'query', schema: { type: 'string' }, description: 'Comma-separated: user, key, model, group, day, type' },
        ],
        responses: { 200: { description: 'Totals', content: json(ref('LedgerSummary')) }, ...errors(400, 404), ...common },
      },
    },
    '/admin/ledger/records': {
      get: {
        summary: 'Ledger records, oldest first, a page at a time',
        parameters: [...ledgerRange, ...limitCursor],
        responses: { 200: { description: 'A page of records', content: json(ref('LedgerPage')) }, ...errors(400, 404), ...common },
      },
    },
    '/admin/ledger/export': {
      get: {
        summary: 'Every record of the range, streamed as JSON Lines or CSV',
        parameters: [...ledgerRange, { name: 'format', in: 'query', schema: { enum: ['jsonl', 'csv'], default: 'jsonl' } }],
        responses: {
          200: {
            description: 'The records',
            content: { 'application/x-ndjson': { schema: { type: 'string' } }, 'text/csv': { schema: { type: 'string' } } },
          },
          ...errors(400, 404),
          ...common,
        },
      },
    },
    '/admin/ledger/reconcile': {
      get: {
        summary: "The ledger against the store's counters, key by key, day by day, model by model",
        parameters: ledgerRange,
        responses: { 200: { description: 'Differences (none: ok)', content: json(ref('Reconciliation')) }, ...errors(400, 404), ...common },
      },
    },
    '/admin/reload': {
      post: {
        summary: 'Reload gateway.yaml now',
        responses: {
          200: { description: 'Reloaded', content: json({ type: 'object', required: ['ok'], properties: { ok: { const: true } } }) },
          400: {
            description: 'Invalid config: the previous one keeps serving',
            content: json({
              type: 'object',
              required: ['ok', 'errors'],
              properties: { ok: { const: false }, errors: { type: 'array', items: { type: 'string' } } },
            }),
          },
          ...common,
        },
      },
    },
    '/admin/accounts': {
      get: {
        summary: 'Upstream provider accounts: health as every instance on the store shares it, and what their limits hold across instances',
        responses: {
          200: {
            description: 'Providers and accounts',
            content: json({
              type: 'object',
              required: ['counts', 'providers'],
              properties: { counts: { enum: ['all_instances', 'this_instance'] }, providers: { type: 'array' } },
            }),
          },
          ...common,
        },
      },
    },
  },
} as const;
