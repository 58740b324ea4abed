/**
 * The read side: balances, key quotas and windows, plan and spend-cap usage, usage statistics
 * (`/v1/usage`, admin views), the operator's quota reset, and the remembered items.
 *
 * Reads go straight to Redis: read.lua for those that depend on the server's clock (periods,
 * windows, the last 60 s), plain commands for the others.
 * While Redis is away (health.ts) they fail closed (503 billing_service_error) — all but the
 * remembered items, a cache: what cannot be kept is simply not found later.
 */
import type { Clock } from '../../clock.js';
import type { Logger } from '../../log.js';
import { WINDOWS, WINDOW_MS, type Window } from '../../config/types.js';
import type { KeyState, KeyStats, PeriodUsage, UsageCounters, Wallet, WindowState } from '../types.js';
import { check, refuse, Unavailable, type RedisClient, type Reply } from './client.js';
import type { Health } from './health.js';
import type { Keys } from './keys.js';
import { now } from './pack.js';

const WINDOW_SPEC = WINDOWS.map((w) => `${w}:${WINDOW_MS[w]}`).join(',');

const zeroCounters = (): UsageCounters => ({
  requests: 0,
  input: 0,
  output: 0,
  cacheRead: 0,
  cacheWrite: 0,
  cost: 0,
  actual: 0,
  durationMs: 0,
});
const COUNTER_NAMES = Object.keys(zeroCounters()) as (keyof UsageCounters)[];

export class Reads {
  constructor(
    private readonly redis: RedisClient,
    private readonly health: Health,
    private readonly keys: Keys,
    private readonly clock: Clock | undefined,
    private readonly log: Logger,
  ) {}

  private async read<T>(f: () => Promise<T>): Promise<T> {
    if (this.health.state !== 'up') throw refuse(new Unavailable('Redis unreachable'));
    try {
      return await f();
    } catch (e) {
      if (e instanceof Unavailable) throw refuse(e);
      throw e;
    }
  }

  async balanceSpent(user: string): Promise<number> {
    return this.read(async () => Number((await this.redis.cmd((c) => c.hget(this.keys.wallet(user), 'spent'))) ?? 0));
  }

  async wallet(user: string): Promise<Wallet> {
    return this.read(async () => {
      const [credit, spent] = await this.redis.cmd((c) => c.hmget(this.keys.wallet(user), 'credit', 'spent'));
      return { credit: Number(credit ?? 0), spent: Number(spent ?? 0) };
    });
  }

  async keyState(keyId: string): Promise<KeyState> {
    return this.read(async () => {
      const r = (await this.redis.run('read', [this.keys.counters(keyId)], [now(this.clock), 'key', WINDOW_SPEC])) as number[];
      const windows = {} as Record<Window, WindowState>;
      WINDOWS.forEach((w, i) => {
        const [start, used, reserved] = r.slice(2 + 3 * i, 5 + 3 * i);
        windows[w] = start < 0 ? { used, reserved } : { start, used, reserved };
      });
      return { used: r[0], reserved: r[1], windows };
    });
  }

  async planUsage(user: string, group: string): Promise<PeriodUsage> {
    return this.read(async () => {
      const r = (await this.redis.run('read', [this.keys.plan(user, group)], [now(this.clock), 'plan'])) as number[];
      return { daily: r[0], weekly: r[1], monthly: r[2] };
    });
  }

  async spendCapUsage(user: string): Promise<{ weekly: number; monthly: number }> {
    return this.read(async () => {
      const r = (await this.redis.run('read', [this.keys.caps(user)], [now(this.clock), 'cap'])) as number[];
      return { weekly: r[0], monthly: r[1] };
    });
  }

  async keyStats(keyId: string, fromDay: string, toDay: string): Promise<KeyStats> {
    return this.read(async () => {
      const k = this.keys;
      const r = (await this.redis.run(
        'read',
        [k.totals(keyId), k.days(keyId), k.ring(keyId)],
        [now(this.clock), 'stats', fromDay, toDay, k.dayPrefix(keyId)],
      )) as Reply[];
      const total = zeroCounters();
      const flat = r[0] as string[];
      for (let i = 0; i < flat.length; i += 2) {
        const f = flat[i] as keyof UsageCounters;
        if (COUNTER_NAMES.includes(f)) total[f] = Number(flat[i + 1]);
      }
      const today = zeroCounters();
      for (const [, c] of Object.entries(byModel(r[1] as string[]))) addCounters(today, c);
      const models: Record<string, UsageCounters> = {};
      const days: Record<string, UsageCounters> = {};
      for (let i = 4; i < r.length; i += 2) {
        const day = String(r[i]);
        for (const [model, c] of Object.entries(byModel(r[i + 1] as string[]))) {
          addCounters((models[model] ??= zeroCounters()), c);
          addCounters((days[day] ??= zeroCounters()), c);
        }
      }
      return { today, total, byModel: models, byDay: days, rpm: r[2] as number, tpm: r[3] as number };
    });
  }

  async resetKeyQuota(keyId: string): Promise<void> {
    this.health.assertOpen();
    const kc = this.keys.counters(keyId);
    const fields: string[] = ['used', '0'];
    for (const w of WINDOWS) fields.push(`${w}:u`, '0');
    await this.read(() =>
      this.redis.cmd((c) =>
        c
          .multi()
          .hset(kc, ...fields)
          .hdel(kc, ...WINDOWS.map((w) => `${w}:s`))
          .exec()
          .then(check),
      ),
    );
  }

  // ---- remembered items -------------------------------------------------------------------------

  async remember(namespace: string, entries: ReadonlyArray<readonly [string, string]>, ttlMs: number): Promise<void> {
    if (this.health.state !== 'up' || entries.length === 0) return;
    try {
      await this.redis.cmd((c) => {
        const m = c.multi();
        for (const [id, value] of entries) m.set(this.keys.remembered(namespace, id), value, 'PX', Math.max(1, Math.round(ttlMs)));
        return m.exec().then(check);
      });
    } catch (e) {
      // A cache: what cannot be kept now is simply not found later.
      if (!(e instanceof Unavailable)) this.log.warn('store: remember failed', { error: e as Error });
    }
  }

  async recall(namespace: string, ids: readonly string[]): Promise<Array<string | undefined>> {
    if (this.health.state !== 'up' || ids.length === 0) return ids.map(() => undefined);
    try {
      const values = await this.redis.cmd((c) => c.mget(...ids.map((id) => this.keys.remembered(namespace, id))));
      return values.map((v) => v ?? undefined);
    } catch {
      return ids.map(() => undefined);
    }
  }
}

function addCounters(into: UsageCounters, c: UsageCounters): void {
  for (const n of COUNTER_NAMES) into[n] += c[n];
}

/** `<model>|<counter>` fields of a day record → counters per model. */
function byModel(flat: string[]): Record<string, UsageCounters> {
  const out: Record<string, UsageCounters> = {};
  for (let i = 0; i < flat.length; i += 2) {
    const sep = flat[i].lastIndexOf('|');
    const model = flat[i].slice(0, sep);
    const f = flat[i].slice(sep + 1) as keyof UsageCounters;
    if (!COUNTER_NAMES.includes(f)) continue;
    (out[model] ??= zeroCounters())[f] = Number(flat[i + 1]);
  }
  return out;
}
