/**
 * JSON Schema of gateway.yaml. `gateway.schema.json` at the repository root is generated from
 * this object (`npm run schema`, checked by a test) so editors get completion and hover docs.
 * Each plugin's `with:` options are validated against that plugin's own schema at load time.
 */
import { DURATION_PATTERN, SIZE_PATTERN } from '../units.js';

const duration = { type: 'string', pattern: DURATION_PATTERN, description: 'A duration: 250ms, 30s, 5m, 5h, 1d, 7d' };
const usd = {
  anyOf: [
    { type: 'number', minimum: 0 },
    { type: 'string', pattern: '^[0-9]+(\\.[0-9]{1,6})?$' },
  ],
  description: 'USD, at most 6 decimals',
};
const price = {
  type: 'object',
  additionalProperties: false,
  required: ['input', 'output'],
  description: 'USD per million tokens',
  properties: { input: usd, output: usd, cache_read: usd, cache_write: usd },
};
const protocol = { enum: ['openai-chat', 'anthropic-messages', 'openai-responses'] };
const name = { type: 'string', minLength: 1, pattern: '^[A-Za-z0-9][A-Za-z0-9._:/-]*$' };
const ipList = { type: 'array', items: { type: 'string', minLength: 1 }, description: 'IPs or CIDRs, IPv4 or IPv6' };
const timestamp = {
  anyOf: [{ type: 'string', minLength: 1 }, { type: 'object' }],
  description: 'An ISO 8601 date or date-time (UTC when no zone is given)',
};

export const gatewaySchema = {
  $schema: 'http://json-schema.org/draft-07/schema#',
  $id: 'https://llm-gateway.local/gateway.schema.json',
  title: 'LLM gateway configuration (gateway.yaml)',
  type: 'object',
  additionalProperties: false,
  required: ['version', 'providers', 'models', 'groups', 'plugins', 'chains', 'routes'],
  properties: {
    $schema: { type: 'string' },
    version: { const: 1 },
    server: {
      type: 'object',
      additionalProperties: false,
      properties: {
        host: { type: 'string', minLength: 1, default: '127.0.0.1' },
        port: { type: 'integer', minimum: 0, maximum: 65535, default: 8080 },
        body_limit: { anyOf: [{ type: 'string', pattern: SIZE_PATTERN }, { type: 'integer', minimum: 1 }], default: '256MiB' },
        trusted_proxies: { ...ipList, description: 'CIDRs whose X-Forwarded-For is believed; empty: the socket address is the client' },
        headers_timeout: { ...duration, description: 'Request headers must arrive within this (default 20s); a slow sender is closed within it + 1s' },
        body_timeout: { ...duration, description: 'A request body must arrive within this once the headers did (default 30s); then 400 request_timeout and the connection closes' },
        body_memory: { anyOf: [{ type: 'string', pattern: SIZE_PATTERN }, { type: 'integer', minimum: 1 }], description: 'Request bytes held in flight across all requests; past it a request waits up to 2s, then 503 body_memory_exhausted (default: a quarter of the heap limit)' },
        upstream_timeout: { ...duration, description: 'Whole upstream attempt, request to last byte (default 600s)' },
        upstream_idle_timeout: { ...duration, description: 'Longest upstream silence once it answers (default 300s)' },
        on_client_abort: { enum: ['abort'], description: 'abort: stop the upstream and bill what was generated (the only mode)' },
        workers: { type: 'integer', minimum: 1, description: 'More than 1 requires store.kind: redis' },
        admin_token: { type: 'string', description: 'Bearer token for the /admin API; the API is off without one' },
        drain_timeout: { ...duration, description: 'Grace period for in-flight requests on shutdown (default 30s)' },
        preamble_hold: { ...duration, description: "Longest a stream's preamble waits for content before the response commits (default 10s)" },
        stream_keepalive: { ...duration, description: 'Silence on a committed stream bridged by an SSE comment (default 15s)' },
      },
    },
    store: {
      type: 'object',
      additionalProperties: false,
      properties: {
        kind: { enum: ['memory', 'redis'] },
        path: { type: 'string', description: 'memory: where state is persisted; omit to keep nothing on disk' },
        url: { type: 'string' },
        prefix: { type: 'string' },
        flush_interval: { ...duration, description: 'memory: journal fsync interval (default 1s)' },
      },
    },
    metrics: {
      type: 'object',
      additionalProperties: false,
      properties: { path: { anyOf: [{ type: 'string', pattern: '^/' }, { type: 'null' }] } },
    },
    failed_requests: {
      type: 'object',
      additionalProperties: false,
      properties: {
        dir: { type: 'string', description: 'Where failed requests are kept (credentials removed); absent: not kept' },
        retention: { ...duration, description: 'Day folders older than this are deleted (default 30d)' },
        max_size: { anyOf: [{ type: 'string', pattern: SIZE_PATTERN }, { type: 'integer', minimum: 1 }], description: 'Most the folder may hold; the oldest files are deleted past it (default 1GiB)' },
      },
    },
    limits: {
      type: 'object',
      additionalProperties: false,
      properties: { free_rpm_at_zero_balance: { type: 'integer', minimum: 0 } },
    },
    providers: {
      type: 'object',
      propertyNames: name,
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        required: ['kind'],
        properties: {
          kind: { enum: ['openai', 'anthropic', 'mock'] },
          base_url: { type: 'string', pattern: '^https?://' },
          api_key: { type: 'string', description: 'The credential of a provider with one account (exclusive with accounts)' },
          protocols: { type: 'array', items: protocol, minItems: 1, uniqueItems: true },
          headers: { type: 'object', additionalProperties: { type: 'string' } },
          timeout: duration,
          idle_timeout: duration,
          max_sockets: { type: 'integer', minimum: 1 },
          fixtures_dir: { type: 'string', description: 'mock only: folder the replay= directive may read' },
          accounts: {
            type: 'array',
            minItems: 1,
            description: 'A pool of upstream accounts the gateway chooses from per request (exclusive with api_key)',
            items: {
              type: 'object',
              additionalProperties: false,
              required: ['name'],
              properties: {
                name: { ...name, description: 'Unique within the provider; shown in logs, metrics and /admin/accounts (never the key)' },
                api_key: { type: 'string', description: "The account's credential" },
                base_url: { type: 'string', pattern: '^https?://', description: "Overrides the provider's base_url (a relay); not for mock providers" },
                headers: { type: 'object', additionalProperties: { type: 'string' }, description: "Extra upstream headers, over the provider's" },
                weight: { type: 'integer', minimum: 1, maximum: 1000000, default: 1, description: 'Share of new requests within its priority tier (1:4 gives about 20 % / 80 %)' },
                priority: { type: 'integer', minimum: 0, default: 0, description: 'Lower is served first; a higher tier only when every lower one is unavailable' },
                concurrency: { type: 'integer', minimum: 0, default: 0, description: 'Concurrent upstream requests across all instances; a full account is skipped (0 = unlimited)' },
                rpm: { type: 'integer', minimum: 0, default: 0, description: 'Upstream requests per clock minute across all instances (0 = unlimited)' },
                models: { type: 'array', items: { type: 'string' }, minItems: 1, uniqueItems: true, description: 'Model ids (of this provider) the account serves; default: all' },
              },
            },
          },
          scheduling: {
            type: 'object',
            additionalProperties: false,
            description: "How the provider's accounts are scheduled",
            properties: {
              sticky_ttl: { ...duration, description: 'How long a conversation stays on its account after its last request (default 1h)' },
              cooldown: { ...duration, description: 'First cooldown after a failure the provider gives no delay for; doubles per consecutive failure (default 30s)' },
              max_cooldown: { ...duration, description: 'Ceiling of every cooldown, provider-given delays included (default 1h)' },
              max_attempts: { type: 'integer', minimum: 1, maximum: 10, description: 'Accounts tried per model within one request before the fallback list (default 3)' },
              slow_factor: { type: 'number', minimum: 1, description: "Demote an account whose time to first token exceeds this multiple of its fastest peer's (default 3)" },
              slow_margin: { ...duration, description: '…and exceeds it by at least this much (default 1s)' },
            },
          },
        },
      },
    },
    models: {
      type: 'object',
      propertyNames: name,
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        required: ['provider', 'price'],
        properties: {
          provider: { type: 'string' },
          upstream: { type: 'string', minLength: 1, description: 'The name sent upstream (default: the id)' },
          owned_by: { type: 'string' },
          price,
          max_output_tokens: { type: 'integer', minimum: 1 },
        },
      },
    },
    groups: {
      type: 'object',
      propertyNames: name,
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        required: ['kind'],
        properties: {
          kind: { enum: ['chat', 'messages', 'responses'] },
          passthrough: { type: 'boolean' },
          allow_messages: { type: 'boolean' },
          builtin_tools: {
            enum: ['map', 'drop', 'reject'],
            description: 'Provider-side tools (web_search, file_search, Anthropic server tools) in requests converted for another protocol: map to the equivalent where there is one, else drop (map, the default); drop all (drop); map where possible, else 400 (reject)',
          },
          models: { type: 'array', items: { type: 'string' }, uniqueItems: true },
          multiplier: { anyOf: [{ type: 'number', minimum: 0 }, { type: 'string', pattern: '^[0-9]+(\\.[0-9]{1,6})?$' }] },
          billing: { enum: ['balance', 'plan'] },
          plan: {
            type: 'object',
            additionalProperties: false,
            properties: { daily: usd, weekly: usd, monthly: usd },
          },
          rpm: { type: 'integer', minimum: 0 },
        },
      },
    },
    users: {
      type: 'object',
      propertyNames: name,
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        properties: {
          status: { enum: ['active', 'inactive'] },
          balance: usd,
          rpm: { type: 'integer', minimum: 0 },
          concurrency: { type: 'integer', minimum: 0 },
          queue: {
            type: 'object',
            additionalProperties: false,
            properties: { size: { type: 'integer', minimum: 0 }, max_wait: duration },
          },
          spend_caps: {
            type: 'object',
            additionalProperties: false,
            properties: { weekly: usd, monthly: usd },
          },
          rates: { type: 'object', additionalProperties: { anyOf: [{ type: 'number', minimum: 0 }, { type: 'string' }] } },
          subscriptions: {
            type: 'array',
            items: {
              type: 'object',
              additionalProperties: false,
              required: ['group', 'expires_at'],
              properties: {
                group: { type: 'string' },
                expires_at: timestamp,
                status: { enum: ['active', 'suspended'] },
              },
            },
          },
        },
      },
    },
    keys: {
      type: 'array',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['user'],
        properties: {
          key: { type: 'string', minLength: 1, description: 'sk- + 64 hex, or a custom key of 16+ letters, digits, _ and -' },
          key_sha256: { type: 'string', pattern: '^[0-9a-fA-F]{64}$', description: 'The key stored only as its SHA-256 hex digest' },
          name: name,
          user: { type: 'string', minLength: 1 },
          group: { type: 'string', minLength: 1 },
          enabled: { type: 'boolean' },
          quota: usd,
          windows: {
            type: 'object',
            additionalProperties: false,
            properties: { '5h': usd, '1d': usd, '7d': usd },
          },
          expires_at: timestamp,
          ip_allow: ipList,
          ip_deny: ipList,
        },
      },
    },
    plugins: {
      type: 'object',
      propertyNames: name,
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        required: ['use'],
        properties: {
          use: { type: 'string', minLength: 1, description: 'A built-in plugin name, or a path to a plugin module (./…)' },
          with: { type: 'object', description: "The plugin's options (validated by the plugin's own schema)" },
        },
      },
    },
    chains: {
      type: 'object',
      propertyNames: name,
      additionalProperties: { type: 'array', items: { type: 'string' } },
    },
    routes: {
      type: 'array',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['path', 'chain'],
        properties: {
          path: { type: 'string', pattern: '^/' },
          method: { enum: ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD'] },
          protocol,
          chain: {
            anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }],
            description: 'A chain name, or a list of plugin instance names',
          },
          handler: { enum: ['models', 'usage', 'count-tokens'] },
        },
      },
    },
  },
} as const;
