/**
 * Upstream accounts on Redis (core/pool): their shared health, and what their limits hold.
 *
 * - Health: one hash `{up}:health` (upstreams.lua): a record per account, and a version. A report
 *   applies its events in one script and announces cooldowns, disables and enables on a channel;
 *   each instance's pool follows the version (core/pool/replica.ts), so the request path reads no
 *   Redis for it. The hash lives a day past its last report (a cooldown lasts at most an hour; an
 *   account disabled and never reported on again for a day is served again).
 * - What limits hold (admin views): slots held in a scope (unexpired leases), requests counted in
 *   the current minute of an RPM counter (read.lua), one call per key.
 * - While Redis is away, both fail closed (Unavailable as the 503 billing_service_error): the
 *   pools keep their own figures meanwhile.
 */
import type { Clock } from '../../clock.js';
import type { AccountHealth, AccountHealthEvent, AccountHealthSnapshot, LimitsInUse, LimitsQuery } from '../types.js';
import { Notices, whileUp, type RedisClient, type Reply } from './client.js';
import type { Health } from './health.js';
import type { Keys } from './keys.js';
import { int, now, SEP } from './pack.js';

const HEALTH_TTL_MS = 86_400_000;
/** Control characters would break the packed fields (a provider's message may hold anything). */
const CONTROL = /[\x00-\x1f]/g;

function pack(e: AccountHealthEvent): string {
  const head = [e.account.replace(CONTROL, ' '), e.fp.replace(CONTROL, ' ')];
  switch (e.kind) {
    case 'failure':
      return ['f', ...head, int(e.until), e.reason.replace(CONTROL, ' ')].join(SEP);
    case 'success':
      return ['s', ...head].join(SEP);
    case 'disable':
      return ['d', ...head, int(e.at), e.status === undefined ? '' : int(e.status), e.message.replace(CONTROL, ' ').slice(0, 500)].join(
        SEP,
      );
    case 'enable':
      return ['e', ...head].join(SEP);
    case 'ttft':
      return ['t', ...head, int(e.at), int(Math.max(0, Math.round(e.ms)))].join(SEP);
  }
}

function unpack(text: string): AccountHealth {
  const f = text.split(SEP);
  const h: AccountHealth = { fp: f[0], coolingUntil: Number(f[1]) || 0, failures: Number(f[3]) || 0, ttft: [] };
  if (f[2]) h.coolReason = f[2];
  if (f[4]) h.disabled = { at: Number(f[4]), message: f[6] ?? '', ...(f[5] ? { status: Number(f[5]) } : {}) };
  for (const s of (f[7] ?? '').split(',')) {
    const i = s.indexOf(':');
    if (i > 0) h.ttft.push([Number(s.slice(0, i)), Number(s.slice(i + 1))]);
  }
  return h;
}

export class Upstreams {
  private readonly notices: Notices;

  constructor(
    private readonly redis: RedisClient,
    private readonly health: Health,
    private readonly keys: Keys,
    private readonly clock: Clock | undefined,
  ) {
    this.notices = new Notices(redis, keys.upstreamsChannel());
  }

  private call<T>(f: () => Promise<T>): Promise<T> {
    return whileUp(this.health, f);
  }

  async report(events: readonly AccountHealthEvent[]): Promise<number> {
    const args = ['report', int(HEALTH_TTL_MS), this.keys.upstreamsChannel(), ...events.map(pack)];
    return Number(await this.call(() => this.redis.run('upstreams', [this.keys.upstreamHealth()], args)));
  }

  async read(version?: number): Promise<AccountHealthSnapshot | undefined> {
    const r = (await this.call(() =>
      this.redis.run('upstreams', [this.keys.upstreamHealth()], ['read', version === undefined ? '' : String(version)]),
    )) as Reply[] | null;
    if (!r) return undefined;
    const out: AccountHealthSnapshot = { version: 0, accounts: {} };
    for (let i = 0; i + 1 < r.length; i += 2) {
      const field = String(r[i]);
      if (field === '_v') out.version = Number(r[i + 1]);
      else out.accounts[field] = unpack(String(r[i + 1]));
    }
    return out;
  }

  onChanged(listener: () => void): () => void {
    return this.notices.on(listener);
  }

  async limitsInUse(q: LimitsQuery): Promise<LimitsInUse> {
    return this.call(async () => {
      const t = now(this.clock);
      const [slots, rpm] = await Promise.all([
        Promise.all(q.slots.map(async (scope) => Number(await this.redis.run('read', [this.keys.slots(scope)[0]], [t, 'held'])))),
        Promise.all(q.rpm.map(async (c) => (await this.redis.run('read', [this.keys.rpm(c.scope, c.id)], [t, 'minute'])) as number[])),
      ]);
      const minuteLeftMs = rpm.length > 0 ? rpm[0][1] : 60_000 - ((this.clock ? this.clock.now() : Date.now()) % 60_000);
      return { slots, rpm: rpm.map((r) => r[0]), minuteLeftMs };
    });
  }
}
