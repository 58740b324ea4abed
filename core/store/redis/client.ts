/**
 * The connections to Redis, and how every call reaches it. The other modules call Redis only
 * through here: `run` (a script), `op` (an admission, settlement or cancel: batched), `cmd` (plain
 * commands); `client` and `sub` (the subscriber connection, slots.ts) for what ioredis does itself.
 *
 * - Faults: every call is bounded by `timeoutMs`, and ioredis keeps no offline queue. A failure
 *   that means "Redis cannot serve" (no answer in time, lost connection, a busy reply) reaches the
 *   caller as `Unavailable`; timeouts and lost connections are also told to `faults` (health.ts),
 *   which decides when Redis is away. Any other error (a bug in the call) passes through as it is.
 * - Batching: on a single Redis the admissions, settlements and cancels of one event-loop turn go
 *   as one batch.lua call (`op`; the rule is at BATCHES_IN_FLIGHT). The scripts are defined on the
 *   client once, at construction (scripts.ts).
 * - An operation's `timeoutMs` runs from its call, not from when its batch leaves: one that waited
 *   behind a batch Redis does not answer (a frozen Redis) gets what is left of it, and none when
 *   nothing is left, so no request waits two timeouts for its 503.
 */
import { Cluster, Redis } from 'ioredis';
import { GatewayError } from '../../errors.js';
import { OP } from './pack.js';
import { SCRIPT_NAMES, type ScriptName } from './scripts.js';

/** Most operations in one batch.lua call (each runs for tens of microseconds in Redis). */
const BATCH_MAX = 32;
/**
 * Batches in Redis at once. One, plus a second only when a full batch (BATCH_MAX) waits behind it:
 * operations that arrive while a batch is in Redis wait for its reply and go together in the next.
 * A script call costs Redis a fixed part (loading and writing each counter hash, the script's own
 * set-up) whatever its size, so small batches cost more per operation — on a loaded Redis, and in
 * the bench's on the core it shares with the upstream. Measured in the bench's Redis chain
 * (A/B, eight rounds): against sending a second batch of any size at once, +6 % requests/s,
 * -4 % gateway and -22 % Redis CPU per request, scripts per request 0.08 instead of 0.15; against
 * strictly one at a time, the second batch under a backlog is worth +13 %. Four in flight did no
 * better; a BATCH_MAX of 64 no better either.
 */
const BATCHES_IN_FLIGHT = 2;

export type Client = Redis | Cluster;
export type Reply = string | number | null | Reply[];

/** Redis is unreachable or did not answer in time: the outcome of the call is unknown. */
export class Unavailable extends Error {}

/** Replies that mean "Redis cannot serve right now" rather than a bug in the call. */
const BUSY_REPLY = /^(LOADING|BUSY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|READONLY|OOM|NOREPLICAS)\b/;

export function isUnavailable(e: unknown): boolean {
  if (e instanceof Unavailable) return true;
  const msg = (e as Error)?.message ?? '';
  if ((e as Error)?.name === 'ReplyError') return BUSY_REPLY.test(msg);
  return true; // connection errors, timeouts, cluster failures
}

/** What a money path or a read answers while Redis cannot serve it: 503 billing_service_error. */
export function refuse(e?: unknown): GatewayError {
  return new GatewayError('BILLING_SERVICE', { cause: e });
}

/** Runs `f` while Redis is up (`health.state`); Redis away, before or during it, becomes 503 billing_service_error. */
export async function whileUp<T>(health: { readonly state: string }, f: () => Promise<T>): Promise<T> {
  if (health.state !== 'up') throw refuse(new Unavailable('Redis unreachable'));
  try {
    return await f();
  } catch (e) {
    if (e instanceof Unavailable) throw refuse(e);
    throw e;
  }
}

/**
 * The listeners of one pub/sub channel whose messages say "shared state changed, read it again"
 * (the accounts' and the upstream accounts' health): each is called on every message; a
 * listener's failure is its own.
 */
export class Notices {
  private readonly listeners = new Set<() => void>();

  constructor(redis: RedisClient, channel: string) {
    redis.sub.on('message', (ch: string) => {
      if (ch !== channel) return;
      for (const l of this.listeners) {
        try {
          l();
        } catch {
          // a listener's failure is its own
        }
      }
    });
    redis.sub.subscribe(channel).catch(() => undefined);
  }

  /** Adds a listener; the function returned removes it. */
  on(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

/** Throws the first error of a MULTI's replies (none: the transaction was aborted). */
export function check(results: [Error | null, unknown][] | null): void {
  if (!results) throw new Unavailable('transaction aborted');
  for (const [err] of results) if (err) throw err;
}

/** Told of the calls that failed for want of Redis (health.ts). */
export interface Faults {
  /** The connection is gone: Redis is away until a probe succeeds. */
  fault(e: unknown): void;
  /** A call timed out: Redis is away only if a heartbeat fails too. */
  confirmDown(e: unknown): void;
}

/** An admission, settlement or cancel waiting for this turn's batch (single Redis). */
interface BatchOp {
  kind: 'a' | 's' | 'c';
  name: ScriptName;
  keys: string[];
  args: string[];
  /** performance.now() by which it must be answered: `timeoutMs` from its call, however long it waited for a batch. */
  deadline: number;
  resolve: (r: Reply) => void;
  reject: (e: unknown) => void;
}

/** The message of ioredis's command timeout: `classify` treats it as a timeout (confirmDown). */
const TIMED_OUT = 'Command timed out';
/** A call with less than `timeoutMs` minus this left is bounded by its own timer; otherwise ioredis's timeout is as good. */
const BUDGET_SLACK_MS = 5;

export interface ClientOptions {
  /** `redis://[user:pass@]host:port[/db]`; for a cluster, seed nodes separated by commas. */
  url: string;
  cluster: boolean;
  /** Longest wait for any call. */
  timeoutMs: number;
}

export class RedisClient {
  readonly client: Client;
  /** Subscriber connection (wake-ups of queued slots): no timeout, its own offline queue. */
  readonly sub: Client;
  readonly cluster: boolean;
  readonly timeoutMs: number;
  /** Set by health.ts when it is constructed, before any call. */
  faults!: Faults;

  /** Operations waiting for the next batch.lua call; at most BATCHES_IN_FLIGHT batches in Redis. */
  private batchOps: BatchOp[] = [];
  private batchArmed = false;
  private readonly batchesInFlight = new Set<Promise<void>>();

  constructor(opts: ClientOptions, scripts: Record<ScriptName, string>) {
    this.cluster = opts.cluster;
    this.timeoutMs = opts.timeoutMs;
    const base = {
      commandTimeout: this.timeoutMs,
      connectTimeout: Math.max(this.timeoutMs, 1_000),
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      retryStrategy: (times: number) => Math.min(50 * times, 1_000),
      lazyConnect: false,
      // Off: ioredis's automatic pipelines run one at a time, which would hold the second batch
      // (BATCHES_IN_FLIGHT) until the first is answered; the batches already make one command of
      // the waiting operations.
      enableAutoPipelining: false,
    };
    if (this.cluster) {
      const nodes = opts.url
        .split(',')
        .map((u) => u.trim())
        .filter(Boolean)
        .map((u) => {
          const url = new URL(u.includes('://') ? u : `redis://${u}`);
          return { host: url.hostname, port: Number(url.port || 6379) };
        });
      const first = new URL(opts.url.split(',')[0].includes('://') ? opts.url.split(',')[0] : `redis://${opts.url.split(',')[0]}`);
      const redisOptions = {
        commandTimeout: this.timeoutMs,
        connectTimeout: base.connectTimeout,
        maxRetriesPerRequest: 0,
        autoResendUnfulfilledCommands: false,
        username: first.username ? decodeURIComponent(first.username) : undefined,
        password: first.password ? decodeURIComponent(first.password) : undefined,
      };
      this.client = new Cluster(nodes, {
        redisOptions,
        enableOfflineQueue: false,
        clusterRetryStrategy: (times: number) => Math.min(100 * times, 1_000),
        slotsRefreshTimeout: Math.max(this.timeoutMs, 1_000),
        maxRedirections: 8,
        // Not on a cluster: ioredis refuses to auto-pipeline scripts whose slots differ.
        enableAutoPipelining: false,
      });
      this.sub = new Cluster(nodes, {
        redisOptions: { ...redisOptions, commandTimeout: undefined, maxRetriesPerRequest: null },
        enableOfflineQueue: true,
      });
    } else {
      this.client = new Redis(opts.url, base);
      this.sub = new Redis(opts.url, {
        ...base,
        commandTimeout: undefined,
        enableOfflineQueue: true,
        maxRetriesPerRequest: null,
        enableAutoPipelining: false,
      });
    }
    // Prefixed: a command named `slots` would replace the cluster client's slot table.
    for (const name of SCRIPT_NAMES) this.client.defineCommand(`gw_${name}`, { lua: scripts[name] });

    this.client.on('error', () => undefined); // reported through `faults` by the calls that fail
    this.sub.on('error', () => undefined);
  }

  /**
   * Runs a script; failures that mean "Redis away" become Unavailable and mark the store down.
   * `budgetMs`: the call's share of its timeout left (a batched operation that waited).
   */
  async run(name: ScriptName, keys: string[], args: string[], budgetMs?: number): Promise<Reply> {
    try {
      const fn = (this.client as unknown as Record<string, (n: number, ...a: string[]) => Promise<Reply>>)[`gw_${name}`];
      const call = fn.call(this.client, keys.length, ...keys, ...args);
      if (budgetMs === undefined || budgetMs >= this.timeoutMs - BUDGET_SLACK_MS) return await call;
      return await this.within(call, budgetMs);
    } catch (e) {
      throw this.classify(e);
    }
  }

  /** `p`, or ioredis's timeout error once `ms` have passed (the call itself still ends by ioredis's own timeout). */
  private within<T>(p: Promise<T>, ms: number): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(TIMED_OUT)), Math.max(0, ms));
    });
    p.catch(() => undefined);
    return Promise.race([p, limit]).finally(() => clearTimeout(timer));
  }

  /**
   * An admission, settlement or cancel. On a single Redis the operations of one event-loop turn
   * (and those that arrive while a batch is in flight: BATCHES_IN_FLIGHT) go to Redis as one batch.lua call: still at
   * most one round trip each, and Redis reads and writes each hash they share once. A batch of one
   * runs its own script. On a cluster each runs at once (its keys are in its own hash slot).
   */
  op(kind: BatchOp['kind'], name: ScriptName, keys: string[], args: string[]): Promise<Reply> {
    if (this.cluster) return this.run(name, keys, args);
    return new Promise<Reply>((resolve, reject) => {
      this.batchOps.push({ kind, name, keys, args, deadline: performance.now() + this.timeoutMs, resolve, reject });
      this.armBatch();
    });
  }

  private armBatch(): void {
    const inFlight = this.batchesInFlight.size;
    if (this.batchArmed || inFlight >= BATCHES_IN_FLIGHT || this.batchOps.length === 0) return;
    // Behind a batch in Redis, only a full one goes at once; fewer wait for its reply (armBatch
    // runs again when it settles).
    if (inFlight > 0 && this.batchOps.length < BATCH_MAX) return;
    this.batchArmed = true;
    setImmediate(this.flushBatch);
  }

  private readonly flushBatch = (): void => {
    this.batchArmed = false;
    const ops = this.batchOps.length <= BATCH_MAX ? this.batchOps : this.batchOps.slice(0, BATCH_MAX);
    this.batchOps = ops === this.batchOps ? [] : this.batchOps.slice(BATCH_MAX);
    if (ops.length === 0) return;
    const sent: Promise<void> = this.sendBatch(ops).finally(() => {
      this.batchesInFlight.delete(sent);
      this.armBatch();
    });
    this.batchesInFlight.add(sent);
    this.armBatch(); // a full batch left over beyond BATCH_MAX goes as the second
  };

  private async sendBatch(all: BatchOp[]): Promise<void> {
    // What waited past its deadline fails now, as its own call would have; the rest go with the
    // time the first of them has left.
    const now = performance.now();
    let ops = all;
    let budget = Infinity;
    for (const o of all) if (o.deadline - now < budget) budget = o.deadline - now;
    if (budget <= 0) {
      const late = all.filter((o) => o.deadline <= now);
      ops = all.filter((o) => o.deadline > now);
      const e = this.classify(new Error(TIMED_OUT));
      for (const o of late) o.reject(e);
      budget = Infinity;
      for (const o of ops) if (o.deadline - now < budget) budget = o.deadline - now;
      if (ops.length === 0) return;
    }
    if (ops.length === 1) {
      const o = ops[0];
      try {
        o.resolve(await this.run(o.name, o.keys, o.args, budget));
      } catch (e) {
        o.reject(e);
      }
      return;
    }
    // One argument per operation (its fields OP-separated): a client library's cost is per argument.
    const args: string[] = new Array(ops.length);
    for (let i = 0; i < ops.length; i++) {
      const o = ops[i];
      let text = o.kind + OP + o.keys.length;
      for (const k of o.keys) text += OP + k;
      for (const a of o.args) text += OP + a;
      args[i] = text;
    }
    let replies: Reply[];
    try {
      replies = (await this.run('batch', [], args, budget)) as Reply[];
    } catch (e) {
      for (const o of ops) o.reject(e);
      return;
    }
    for (let i = 0; i < ops.length; i++) {
      const r = replies[i];
      if (ops[i].kind === 'a' && r === -1) ops[i].reject(new Error('ERR request already admitted'));
      else ops[i].resolve(r);
    }
  }

  /** Resolves once no batched operation waits or runs (close()). */
  async batchesDone(): Promise<void> {
    while (this.batchOps.length > 0 || this.batchesInFlight.size > 0) {
      if (this.batchesInFlight.size > 0) await Promise.all(this.batchesInFlight);
      else await new Promise((r) => setImmediate(r));
    }
  }

  /** Plain commands; failures classified as `run`'s. */
  async cmd<T>(f: (c: Client) => Promise<T>): Promise<T> {
    try {
      return await f(this.client);
    } catch (e) {
      throw this.classify(e);
    }
  }

  private classify(e: unknown): Error {
    if (!isUnavailable(e)) return e as Error;
    const msg = (e as Error)?.message ?? String(e);
    if ((e as Error)?.name === 'ReplyError') {
      // A busy reply (out of memory, loading) did not run the call: this call fails, nothing more.
    } else if (msg === TIMED_OUT) {
      // One slow answer may be a blip: Redis is marked away only if a heartbeat times out too.
      this.faults.confirmDown(e);
    } else {
      this.faults.fault(e); // the connection is gone
    }
    return new Unavailable(msg, { cause: e });
  }

  /** Both connections, at once (close, crash). */
  disconnect(): void {
    this.client.disconnect();
    this.sub.disconnect();
  }
}
