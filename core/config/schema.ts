/**
 * JSON Schema of gateway.yaml — the one description of every setting. The loader validates with
 * it (after `${VAR}` interpolation); `npm run schema` derives from it `gateway.schema.json` (for
 * editors: interpolations accepted wherever the loader takes them, plugin options wired in) and
 * the reference tables of `docs/config.md`; a test fails when either is out of step.
 *
 * Every property carries a `description` (a test checks it) and, where the loader has one, its
 * `default`. Defaults here are documentation: the loader applies its own (it validates this schema
 * without inserting defaults), so keep both in step when changing one.
 * Each plugin's `with:` options are validated against that plugin's own schema at load time.
 */
import { DURATION_PATTERN, SIZE_PATTERN } from '../units.js';
import { tracingSchema } from './tracing.js';

// `title` names a value's shape in the generated reference (the type column) and in editor hovers.
const duration = { title: 'duration', type: 'string', pattern: DURATION_PATTERN, description: 'A duration: 250ms, 30s, 5m, 5h, 1d, 7d' };
const size = {
  title: 'size',
  anyOf: [
    { type: 'string', pattern: SIZE_PATTERN },
    { type: 'integer', minimum: 1 },
  ],
  description: 'A size: 512KiB, 256MiB, 1GiB, or bytes',
};
const usd = {
  title: 'USD',
  anyOf: [
    { type: 'number', minimum: 0 },
    { type: 'string', pattern: '^[0-9]+(\\.[0-9]{1,6})?$' },
  ],
  description: 'USD, at most 6 decimals',
};
const price = {
  title: 'price',
  type: 'object',
  additionalProperties: false,
  required: ['input', 'output'],
  description: 'USD per million tokens. All zero: a free model',
  properties: {
    input: { ...usd, description: 'Input tokens, USD per million' },
    output: { ...usd, description: 'Output tokens, USD per million' },
    cache_read: {
      ...usd,
      description:
        "Tokens read from the prompt cache, USD per million (default: the input price, so cached tokens are never free by omission; set the provider's cache price, or 0 explicitly)",
    },
    cache_write: { ...usd, description: 'Tokens written to the prompt cache, USD per million (default: the input price)' },
  },
};
const protocol = { enum: ['openai-chat', 'anthropic-messages', 'openai-responses'] };
const name = { type: 'string', minLength: 1, pattern: '^[A-Za-z0-9][A-Za-z0-9._:/-]*$' };
const ipList = { title: 'IPs/CIDRs', type: 'array', items: { type: 'string', minLength: 1 }, description: 'IPs or CIDRs, IPv4 or IPv6' };
const timestamp = {
  title: 'date-time',
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
    $schema: {
      type: 'string',
      description: 'The JSON Schema editors check this file with (the `# yaml-language-server: $schema=…` first line does the same)',
    },
    version: { const: 1, description: 'The config format: always 1' },
    server: {
      type: 'object',
      additionalProperties: false,
      description: 'The HTTP listener, timeouts and shutdown',
      properties: {
        host: { type: 'string', minLength: 1, default: '127.0.0.1', description: 'Listen address' },
        port: { type: 'integer', minimum: 0, maximum: 65535, default: 8080, description: 'Listen port (0: any free port)' },
        body_limit: {
          ...size,
          default: '256MiB',
          description:
            'Largest request body, as a size (512KiB, 256MiB) or bytes: larger bodies get 413, and an oversized Content-Length is refused before reading',
        },
        trusted_proxies: {
          ...ipList,
          default: [],
          description:
            'IPs or CIDRs whose X-Forwarded-For is believed, walked right to left (`ip:port` and `[v6]:port` hops are read as their address; an unreadable or empty hop makes the client unknown, which every IP allow or deny list refuses); empty: the socket address is the client',
        },
        headers_timeout: {
          ...duration,
          default: '20s',
          description:
            'The request headers must arrive within this (checked every 500 ms, so a slow sender is closed within it + 1s); then 400 request_timeout and the connection closes',
        },
        body_timeout: {
          ...duration,
          default: '30s',
          description:
            'A request body must arrive within this once its headers did (checked every 500 ms, so a stalled body is answered within it + 0.5s); then 400 request_timeout and the connection closes',
        },
        body_memory: {
          ...size,
          description:
            'Request body bytes held in flight across all requests, as a size or bytes; past it a request waits up to 2s for room (in arrival order; a body of at most 1MiB that fits never waits behind larger ones), then gets 503 body_memory_exhausted with Retry-After: 1. Default: a quarter of the V8 heap limit (at least 16MiB)',
        },
        upstream_timeout: {
          ...duration,
          default: '600s',
          description: "A whole upstream attempt, request to last byte, including the wait for the upstream's response headers",
        },
        upstream_idle_timeout: {
          ...duration,
          default: '300s',
          description: 'Longest upstream silence once it began answering (after its response headers)',
        },
        on_client_abort: {
          enum: ['abort'],
          default: 'abort',
          description: 'A client that disconnects aborts the upstream; what was generated is billed (the only mode)',
        },
        workers: {
          type: 'integer',
          minimum: 1,
          default: 1,
          description: 'Worker processes; more than 1 requires a shared store (store.kind: redis)',
        },
        admin_token: { type: 'string', description: 'Bearer token of the /admin API (docs/operations.md); the API is off without one' },
        drain_timeout: {
          ...duration,
          default: '30s',
          description:
            'On shutdown, how long requests in flight may finish; then the gateway ends them: a stream with its protocol error event (billed what it streamed), a request not yet answered with a retryable 503 server_shutting_down',
        },
        shutdown_delay: {
          ...duration,
          default: '0s',
          description:
            'On shutdown, how long /readyz answers 503 while everything is still served, before the listener closes: give load balancers time to stop sending traffic (a second SIGTERM cuts it short)',
        },
        preamble_hold: {
          ...duration,
          default: '10s',
          description:
            "A stream's preamble (message_start, response.created, Chat's role chunk) is held until content begins, at most this long, so a failure right after it is still a real HTTP error that fallback can retry",
        },
        stream_keepalive: {
          ...duration,
          default: '15s',
          description:
            'On a committed stream, upstream silence this long is bridged with an SSE comment (`: keepalive`), which every SDK ignores',
        },
      },
    },
    store: {
      type: 'object',
      additionalProperties: false,
      description: 'Where balances, usage, spend windows and quotas live',
      properties: {
        kind: {
          enum: ['memory', 'redis'],
          default: 'memory',
          description: 'memory: the embedded store (one process); redis: the shared store for several processes or instances',
        },
        path: {
          type: 'string',
          default: './data',
          description: 'memory: where state persists (relative to this file); "" keeps nothing on disk',
        },
        url: {
          type: 'string',
          description: 'redis (required): redis://[user:password@]host:port[/db]; with cluster: true, seed nodes separated by commas',
        },
        cluster: { type: 'boolean', default: false, description: 'redis: a Redis Cluster rather than one server' },
        prefix: {
          type: 'string',
          pattern: '^[^{}\\u0000-\\u001f]*$',
          default: 'gw:',
          description:
            'redis: prefix of every key the gateway writes (no { or }, no control characters); gateways with other prefixes can share one Redis',
        },
        flush_interval: {
          ...duration,
          default: '1s',
          description:
            'memory: journal fsync interval, the most a power loss can lose (a kill -9 loses nothing settled: the journal reaches the OS every event-loop turn)',
        },
        instances_hint: {
          type: 'integer',
          minimum: 1,
          default: 1,
          description:
            'redis: gateway instances (machines, pods) sharing the Redis; while it is unreachable each process enforces 1/(instances_hint × server.workers) of every RPM and concurrency limit, rounded up',
        },
        timeout: {
          ...duration,
          default: '500ms',
          description: 'redis: longest wait for one Redis call; a money check that cannot complete in time gets 503 billing_service_error',
        },
        lease: {
          ...duration,
          default: '15s',
          description:
            "redis: lease of an instance and of its concurrency slots, renewed every third of it; within it a dead instance's slots come back and its reservations are resolved; an instance paused or cut off for longer is taken for dead, and ends those of its requests whose slots went to others (1s to 30s)",
        },
      },
    },
    metrics: {
      type: 'object',
      additionalProperties: false,
      description: 'Prometheus metrics (docs/operations.md lists them)',
      properties: {
        path: {
          title: 'path or null',
          anyOf: [{ type: 'string', pattern: '^/' }, { type: 'null' }],
          default: '/metrics',
          description: 'Where the Prometheus text is served, without an API key; null: nowhere',
        },
        listen: {
          title: 'host:port',
          type: 'string',
          minLength: 1,
          description:
            'host:port of a separate listener for the metrics path and the /healthz and /readyz probes (the API port then serves no metrics), e.g. 127.0.0.1:9464; read at start',
        },
        token: { type: 'string', description: 'When set, a scrape must send `Authorization: Bearer <token>`' },
        key_labels: {
          type: 'boolean',
          default: false,
          description:
            'Also count requests and charges per key and user (gateway_key_* series): one series per key, so only for a bounded number of keys',
        },
      },
    },
    ledger: {
      type: 'object',
      additionalProperties: false,
      description:
        'The usage ledger (docs/ledger.md): a record per billed request and per top-up, in day files (JSON Lines) and, optionally, PostgreSQL',
      properties: {
        enabled: {
          type: 'boolean',
          default: true,
          description: 'Keep the ledger (off: no record is written; the counters and /v1/usage are unaffected)',
        },
        dir: {
          type: 'string',
          description:
            "Folder of the day files (relative to this file). Default: the store folder's `ledger/` (memory store), else ./data/ledger. With the memory store and no store folder there is no ledger",
        },
        retention: { ...duration, default: '400d', description: 'Day files older than this are deleted' },
        postgres: {
          type: 'object',
          additionalProperties: false,
          required: ['url'],
          description:
            'Also write every record to PostgreSQL (and answer ledger queries from it); the day files are its outbox while it is unreachable',
          properties: {
            url: { type: 'string', description: 'postgres://user:password@host:5432/db (e.g. ${LEDGER_DATABASE_URL})' },
            table: {
              type: 'string',
              pattern: '^[a-z_][a-z0-9_]{0,62}$',
              default: 'ledger_records',
              description: 'The table (created by the migrations at start)',
            },
            batch_size: { type: 'integer', minimum: 1, maximum: 10000, default: 500, description: 'Records per INSERT' },
          },
        },
      },
    },
    admin: {
      type: 'object',
      additionalProperties: false,
      description: 'The admin API under /admin/ (docs/accounts.md): its tokens and its audit trail',
      properties: {
        tokens: {
          type: 'array',
          description:
            'Named bearer tokens of the admin API, besides server.admin_token (named `admin`); the name is what the audit trail records as the actor',
          items: {
            type: 'object',
            additionalProperties: false,
            required: ['name'],
            properties: {
              name: { type: 'string', pattern: '^[A-Za-z0-9_.-]{1,64}$', description: 'Who this token is, in the audit trail and logs' },
              token: { type: 'string', minLength: 16, description: 'The token itself (e.g. ${ADMIN_TOKEN_OPS}); only its SHA-256 is kept' },
              token_sha256: {
                type: 'string',
                pattern: '^[0-9a-fA-F]{64}$',
                description: 'The SHA-256 (hex) of the token instead of the token (`gateway keygen` prints both)',
              },
            },
          },
        },
        audit_retention: { ...duration, default: '90d', description: 'Audit entries older than this are dropped' },
        auth_failures_per_minute: {
          type: 'integer',
          minimum: 1,
          default: 10,
          description: 'Failed admin authentications allowed per client IP and minute; past it 429 until the minute ends',
        },
      },
    },
    console: {
      type: 'object',
      additionalProperties: false,
      description:
        'The web console at /console/ (docs/console.md): operators sign in with an admin token, key holders with their API key; it calls the admin API and /v1/usage like any client',
      properties: {
        enabled: {
          type: 'boolean',
          default: false,
          description:
            'Serve the console at /console/ (its static files, built with the gateway into dist/console/); off: /console/ is not served',
        },
      },
    },
    tracing: tracingSchema,
    failed_requests: {
      type: 'object',
      additionalProperties: false,
      description: 'Keeping the bodies of failed requests for inspection',
      properties: {
        dir: {
          type: 'string',
          description:
            "Where the bodies of failed requests (status ≥ 400, or a stream that failed) are kept: one JSON file per request in a folder per UTC day (dir/YYYY-MM-DD/); headers, query parameters and body fields named like credentials are removed, and so is every configured client or provider key wherever it appears; refusals by the gateway's own rules (limits, keys, balance, the billing service: nothing was sent upstream) are sampled, 10 a minute per error code, and requests refused before their key was known 10 a minute, both without their body; bodies over 1 MiB are cut. Unset: off",
        },
        retention: { ...duration, default: '30d', description: 'Day folders older than this are deleted (hourly)' },
        max_size: {
          ...size,
          default: '1GiB',
          description: 'Most bytes the folder may hold, writes in progress included: the oldest files are deleted first to make room',
        },
        max_files: {
          type: 'integer',
          minimum: 1,
          default: 100000,
          description: 'Most files the folder may hold, writes in progress included: the oldest files are deleted first to make room',
        },
      },
    },
    limits: {
      type: 'object',
      additionalProperties: false,
      description: 'Gateway-wide limits',
      properties: {
        free_rpm_at_zero_balance: {
          type: 'integer',
          minimum: 0,
          default: 10,
          description: 'Per user, requests per minute allowed to models priced at $0 when the wallet is at or below zero (0: unlimited)',
        },
      },
    },
    providers: {
      type: 'object',
      propertyNames: name,
      description: 'A map of provider name → provider: the upstreams models are served from',
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        required: ['kind'],
        properties: {
          kind: {
            enum: ['openai', 'anthropic', 'mock'],
            description:
              'openai (Chat Completions, Responses), anthropic (Messages, count_tokens) or mock (the built-in mock upstream, all protocols; docs/mock.md)',
          },
          base_url: {
            type: 'string',
            pattern: '^https?://',
            description:
              'The upstream URL (default https://api.openai.com/v1 for openai, https://api.anthropic.com for anthropic; none for mock)',
          },
          api_key: {
            type: 'string',
            description:
              'The credential of a provider with one account, sent as `Authorization: Bearer` on OpenAI protocols and `x-api-key` on Messages (exclusive with accounts)',
          },
          protocols: {
            type: 'array',
            items: protocol,
            minItems: 1,
            uniqueItems: true,
            description:
              'Which of openai-chat, anthropic-messages, openai-responses the upstream serves (default by kind), e.g. a vLLM server: [openai-chat]',
          },
          headers: { type: 'object', additionalProperties: { type: 'string' }, default: {}, description: 'Extra headers sent upstream' },
          timeout: { ...duration, description: "This provider's server.upstream_timeout" },
          idle_timeout: { ...duration, description: "This provider's server.upstream_idle_timeout" },
          max_sockets: { type: 'integer', minimum: 1, default: 256, description: 'Keep-alive connection pool size, per account' },
          fixtures_dir: { type: 'string', description: 'mock only: the folder the replay= directive may read' },
          accounts: {
            type: 'array',
            minItems: 1,
            description:
              'A pool of upstream accounts the gateway chooses from per request (exclusive with api_key; see "Upstream accounts" below)',
            items: {
              type: 'object',
              additionalProperties: false,
              required: ['name'],
              properties: {
                name: {
                  ...name,
                  description: 'Unique within the provider; logs, metrics and /admin/accounts show provider/name, never the key',
                },
                api_key: { type: 'string', description: "The account's credential" },
                base_url: {
                  type: 'string',
                  pattern: '^https?://',
                  description: "A relay's address, instead of the provider's base_url (not for mock providers)",
                },
                headers: {
                  type: 'object',
                  additionalProperties: { type: 'string' },
                  default: {},
                  description: "Extra upstream headers, on top of the provider's",
                },
                weight: {
                  type: 'integer',
                  minimum: 1,
                  maximum: 1000000,
                  default: 1,
                  description: 'Share of new requests within its priority tier: weights 1 and 4 give about 20 % / 80 %, at any concurrency',
                },
                priority: {
                  type: 'integer',
                  minimum: 0,
                  default: 0,
                  description: 'Lower is served first; a higher tier takes requests only while no account of a lower one can',
                },
                concurrency: {
                  type: 'integer',
                  minimum: 0,
                  default: 0,
                  description:
                    'Upstream requests in flight, across all instances (store slots); a full account is skipped, never waited for (0: unlimited)',
                },
                rpm: {
                  type: 'integer',
                  minimum: 0,
                  default: 0,
                  description:
                    'Upstream requests per clock minute, across all instances (store counters); each attempt counts (0: unlimited)',
                },
                models: {
                  type: 'array',
                  items: { type: 'string' },
                  minItems: 1,
                  uniqueItems: true,
                  description: 'Model ids (of this provider) the account serves (default: all); every model needs at least one account',
                },
              },
            },
          },
          scheduling: {
            type: 'object',
            additionalProperties: false,
            description: "How the provider's accounts are scheduled",
            properties: {
              sticky_ttl: {
                ...duration,
                default: '1h',
                description: 'How long a conversation stays bound to its account after its last request',
              },
              cooldown: {
                ...duration,
                default: '30s',
                description: 'The first cooldown after a failure the provider gives no delay for; doubles per consecutive failure',
              },
              max_cooldown: { ...duration, default: '1h', description: 'Ceiling of every cooldown, provider-given delays included' },
              max_attempts: {
                type: 'integer',
                minimum: 1,
                maximum: 10,
                default: 3,
                description: 'Accounts tried per model within one request before the fallback list',
              },
              slow_factor: {
                type: 'number',
                minimum: 1,
                default: 3,
                description:
                  "Demote an account whose time to first token (median of its last 8 within 10 min, 3 at least) is above this multiple of its fastest peer's…",
              },
              slow_margin: { ...duration, default: '1s', description: '…and at least this much above it' },
            },
          },
        },
      },
    },
    models: {
      type: 'object',
      propertyNames: name,
      description:
        'A map of model id (what clients send) → model. Clients may also name a model provider/model (by id or upstream name), within their group',
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        required: ['provider', 'price'],
        properties: {
          provider: { type: 'string', description: 'A provider name' },
          upstream: { type: 'string', minLength: 1, description: 'The name sent upstream (default: the id)' },
          owned_by: { type: 'string', description: 'Shown in /v1/models (default: the provider name)' },
          price,
          max_output_tokens: {
            type: 'integer',
            minimum: 1,
            default: 8192,
            description:
              'The provider\'s output ceiling for this model: sizes the worst-case reservation when a request sets no cap (set it to the real ceiling, see limits.md "Admission"), and is sent as max_tokens when converting to Messages',
          },
        },
      },
    },
    groups: {
      type: 'object',
      propertyNames: name,
      description: 'A map of group name → group. Every key belongs to one group, which decides the models, endpoints and price multiplier',
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        required: ['kind'],
        properties: {
          kind: {
            enum: ['chat', 'messages', 'responses'],
            description:
              'chat (Chat Completions only), messages (Messages native, count_tokens; Chat and Responses converted), responses (Responses and Chat; Messages converted if allowed)',
          },
          passthrough: {
            type: 'boolean',
            default: false,
            description: "The body goes upstream unchanged but for `model`; the group's models must be on providers speaking its protocol",
          },
          allow_messages: {
            type: 'boolean',
            default: false,
            description: 'responses groups: /v1/messages is converted (else 403 permission_error)',
          },
          builtin_tools: {
            enum: ['map', 'drop', 'reject'],
            default: 'map',
            description:
              "Provider-side tools (Responses web_search, file_search…, Anthropic server tools) in a request converted for another protocol: map sends the target's equivalent where it has one (web_search → Anthropic web search) and drops the rest; drop drops them all (nothing runs, or costs, provider-side); reject maps where possible and answers 400 for the rest. Dropped tools are named in the x-gateway-dropped-tools response header (docs/conversion.md)",
          },
          models: {
            type: 'array',
            items: { type: 'string' },
            uniqueItems: true,
            default: [],
            description: 'Model ids served; empty: every configured model (and /v1/models shows them unless configured_only=true)',
          },
          multiplier: {
            title: 'decimal',
            anyOf: [
              { type: 'number', minimum: 0 },
              { type: 'string', pattern: '^[0-9]+(\\.[0-9]{1,6})?$' },
            ],
            default: 1,
            description: "Charge = list price × multiplier (a user's personal rate replaces it)",
          },
          billing: {
            enum: ['balance', 'plan'],
            default: 'balance',
            description: "balance (the user's wallet) or plan (a subscription with allowances)",
          },
          plan: {
            type: 'object',
            additionalProperties: false,
            description: 'billing: plan — USD allowances per UTC calendar day, ISO week from Monday, and month; 0: none',
            properties: {
              daily: { ...usd, default: 0, description: 'USD per UTC day' },
              weekly: { ...usd, default: 0, description: 'USD per ISO week (from Monday)' },
              monthly: { ...usd, default: 0, description: 'USD per calendar month' },
            },
          },
          rpm: { type: 'integer', minimum: 0, default: 0, description: 'Requests per minute for the whole group; 0: unlimited' },
        },
      },
    },
    users: {
      type: 'object',
      propertyNames: name,
      description:
        "A map of user name → user (users can also be made through the admin API: docs/accounts.md; a name declared here is the file's, read-only there). The store keeps a user's spend, top-ups, plan usage and caps under the name: renaming a user starts a fresh wallet",
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        properties: {
          status: { enum: ['active', 'inactive'], default: 'active', description: "inactive users' keys get 401 USER_INACTIVE" },
          balance: { ...usd, default: 0, description: 'USD credited to the wallet; the gateway tracks spend, so raising this is a top-up' },
          rpm: { type: 'integer', minimum: 0, default: 0, description: 'Requests per minute for the user; 0: unlimited' },
          concurrency: { type: 'integer', minimum: 0, default: 0, description: 'Simultaneous requests; 0: unlimited' },
          queue: {
            type: 'object',
            additionalProperties: false,
            description: 'Requests beyond `concurrency` wait here; a full queue or a long wait is a 429',
            properties: {
              size: { type: 'integer', minimum: 0, default: 16, description: 'Requests that may wait' },
              max_wait: { ...duration, default: '30s', description: 'Longest wait for a slot' },
            },
          },
          spend_caps: {
            type: 'object',
            additionalProperties: false,
            description: 'Balance spend caps (402 spend_cap_reached); 0: none',
            properties: {
              weekly: { ...usd, default: 0, description: 'USD per ISO week' },
              monthly: { ...usd, default: 0, description: 'USD per calendar month' },
            },
          },
          rates: {
            type: 'object',
            additionalProperties: { anyOf: [{ type: 'number', minimum: 0 }, { type: 'string' }] },
            default: {},
            title: 'map: group → rate',
            description: "Personal rate per group name, replacing that group's multiplier",
          },
          subscriptions: {
            type: 'array',
            default: [],
            description: 'Subscriptions to plan groups',
            items: {
              type: 'object',
              additionalProperties: false,
              required: ['group', 'expires_at'],
              properties: {
                group: { type: 'string', description: 'A group with billing: plan' },
                expires_at: { ...timestamp, description: 'When the subscription ends (ISO 8601)' },
                status: { enum: ['active', 'suspended'], default: 'active', description: 'suspended: the plan serves no requests' },
              },
            },
          },
        },
      },
    },
    keys: {
      type: 'array',
      description:
        "API keys (keys can also be made through the admin API: docs/accounts.md; a name declared here is the file's, read-only there). Each has exactly one of `key` and `key_sha256`; the gateway keeps only digests and looks keys up by digest",
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['user'],
        properties: {
          key: {
            type: 'string',
            minLength: 1,
            description: 'The key: sk- + 64 hex (`gateway keygen`), or a custom key of 16+ letters, digits, _ and -',
          },
          key_sha256: {
            type: 'string',
            pattern: '^[0-9a-fA-F]{64}$',
            description: 'The key stored only as its SHA-256 hex digest (`gateway keygen` prints both)',
          },
          name: {
            ...name,
            description:
              "The key's identity in the store, logs, metrics and /admin (default key-<12 hex of the digest>): its used quota, windows and usage are kept under this name, so renaming a key starts it afresh (and rotating the secret under the same name keeps them)",
          },
          user: { type: 'string', minLength: 1, description: 'The owner (a missing user is a warning; requests get 401 USER_NOT_FOUND)' },
          group: { type: 'string', minLength: 1, description: 'The group; without one, requests get 403 permission_error' },
          enabled: { type: 'boolean', default: true, description: 'false: 401 API_KEY_DISABLED' },
          quota: { ...usd, default: 0, description: "USD over the key's life (0: unlimited); raising it clears exhaustion" },
          windows: {
            type: 'object',
            additionalProperties: false,
            description: 'USD per fixed window starting at first use (0: unlimited)',
            properties: {
              '5h': { ...usd, default: 0, description: 'USD per 5-hour window' },
              '1d': { ...usd, default: 0, description: 'USD per 1-day window' },
              '7d': { ...usd, default: 0, description: 'USD per 7-day window' },
            },
          },
          expires_at: { ...timestamp, description: 'After it, 403 API_KEY_EXPIRED (/v1/usage still answers)' },
          ip_allow: { ...ipList, default: [], description: 'Only these IPs or CIDRs may use the key (v4, v6)' },
          ip_deny: { ...ipList, default: [], description: 'These IPs or CIDRs may not use the key; deny wins' },
        },
      },
    },
    plugins: {
      type: 'object',
      propertyNames: name,
      description: 'A map of instance name → plugin instance; chains list instances by these names',
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        required: ['use'],
        properties: {
          use: {
            type: 'string',
            minLength: 1,
            description:
              'A built-in plugin name (built-ins win), a path to a plugin module (./…, relative to this file), or an installed package (found from this file as Node finds an import: node_modules, its exports)',
          },
          with: { type: 'object', description: "The plugin's options (validated by the plugin's own schema, defaults applied)" },
        },
      },
    },
    chains: {
      type: 'object',
      propertyNames: name,
      description:
        'A map of chain name → ordered list of plugin instance names; a plugin whose `requires` is not met earlier in the chain is a config error',
      additionalProperties: { type: 'array', items: { type: 'string' } },
    },
    routes: {
      type: 'array',
      description: 'Routes match on the path (query strings are ignored); model-call routes have no handler and name their client protocol',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['path', 'chain'],
        properties: {
          path: { type: 'string', pattern: '^/', description: 'The request path, e.g. /v1/chat/completions' },
          method: { enum: ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD'], default: 'POST', description: 'The HTTP method' },
          protocol: {
            ...protocol,
            description: 'The client protocol: openai-chat, anthropic-messages or openai-responses (count-tokens: anthropic-messages)',
          },
          chain: {
            title: 'chain name or list',
            anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }],
            description: 'A chain name, or a list of plugin instance names',
          },
          handler: {
            enum: ['models', 'usage', 'count-tokens'],
            description: 'models (GET /v1/models), usage (GET /v1/usage) or count-tokens; none: a model call',
          },
        },
      },
    },
  },
} as const;
