/**
 * The operations on an admission (ops.lua) as calls: the admission of one part, the settlement or
 * cancel of one part, and the instance index's entries. Shared by the request's own path (index.ts)
 * and crash recovery (reaper.ts), which settles or cancels a dead instance's admissions the same way.
 *
 * A part is what lives in one hash slot: on a single Redis everything (tag `q`, one call), on a
 * cluster the request's key, user and group (keys.ts). On a single Redis the instance index is
 * written by the scripts themselves (admit.lua, settle.lua, cancel.lua); on a cluster, where it sits
 * in another slot, by `indexAdd` and `indexDel` around them.
 */
import type { Clock } from '../../clock.js';
import type { AdmitRequest, Claim, Settlement, SlotRequest } from '../types.js';
import { check, type RedisClient } from './client.js';
import type { Keys } from './keys.js';
import type { LedgerStreams } from './ledger.js';
import { claimText, int, ledgerText, LIST, now, RECORD_TTL_MS, SEP } from './pack.js';
import { perObject } from '../../memo.js';

/** The concurrency slot an admission takes in the same script (AdmitRequest.slot) and its lease id. */
export interface PartSlot {
  req: SlotRequest;
  id: string;
}

export class Ops {
  private readonly cluster: boolean;
  /** This instance's index of admissions (single Redis: written by admit.lua). */
  private readonly ownIndex: string;

  /**
   * The admission text of each frozen claim (pack.ts `claimText`): the bundled plugins make theirs
   * once per key, user or group object, and freeze them. A claim not frozen may be changed by its
   * maker between requests, so its text is made every time.
   */
  private readonly frozenText = perObject((c: Claim) => claimText(this.keys, c));

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly instanceId: string,
    private readonly clock: Clock | undefined,
    private readonly ledger: LedgerStreams,
  ) {
    this.cluster = redis.cluster;
    this.ownIndex = keys.index(instanceId);
  }

  /** One part's admission: its claims (with their indexes in the request, or all of them), its slot; `indexEntry` for a single Redis. */
  async admit(
    req: AdmitRequest,
    tag: string,
    claims: readonly { index: number; claim: Claim }[] | readonly Claim[],
    sl: PartSlot | undefined,
    indexEntry: string,
  ): Promise<number[]> {
    const rec = this.keys.record(tag, req.requestId);
    const keys = [rec, this.keys.done(tag, req.requestId), this.cluster ? rec : this.ownIndex];
    const args = [now(this.clock), int(req.reserve), req.requestId, this.cluster ? '' : indexEntry];
    if (sl) args.push(this.keys.slotTag(sl.req.scope), sl.id, int(sl.req.limit), int(Math.max(0, sl.req.queueSize)));
    else args.push('', '', '', '');
    let spec = '';
    for (let i = 0; i < claims.length; i++) {
      const c = claims[i];
      const claim = 'claim' in c ? c.claim : c;
      const text = Object.isFrozen(claim) ? this.frozenText(claim) : claimText(this.keys, claim);
      spec += (i > 0 ? LIST : '') + ('claim' in c ? c.index : i) + SEP + text;
    }
    args.push(spec);
    return (await this.redis.op('a', 'admit', keys, args)) as number[];
  }

  /** The parts a cancel acts on. */
  cancelTags(id: string, tags: string[]): string[] {
    return this.cluster ? tags : [this.keys.request(id)];
  }

  /** The parts a settlement acts on: the admission's, and its key's and user's (counters, records). */
  settleTags(id: string, s: Settlement, tags?: string[]): string[] {
    if (!this.cluster) return [this.keys.request(id)];
    return [...new Set([...(tags ?? []), this.keys.apiKey(s.keyId), this.keys.user(s.user)])];
  }

  /** undo: 0 keep the counts, 1 take RPM counts back, 2 also unstart the windows it started (compensation). */
  async cancelPart(id: string, tag: string, undo: 0 | 1 | 2, instance: string): Promise<void> {
    const rec = this.keys.record(tag, id);
    await this.redis.op('c', 'cancel', [rec, this.keys.done(tag, id), this.cluster ? rec : this.keys.index(instance)], [String(undo), id]);
  }

  /**
   * Settles the part of a settlement that lives in `tag` (everything, on a single Redis); `packed`:
   * packSettlement(s); mode `s` a settlement, `r` crash recovery, `x` a correction on top of a
   * recovery (index.ts). Returns settle.lua's code. The part that holds the key's counters also
   * writes the ledger record (ledger.ts), `s` as it is.
   */
  async settlePart(id: string, tag: string, s: Settlement, packed: string, mode: 's' | 'r' | 'x', instance: string): Promise<number> {
    const k = this.keys;
    const rec = k.record(tag, id);
    const keyTag = k.apiKey(s.keyId);
    const userTag = k.user(s.user);
    const ofKey = !this.cluster || tag === keyTag;
    const effects = `${ofKey ? 1 : 0}${!this.cluster || tag === userTag ? 1 : 0}`;
    const stream = ofKey ? this.ledger.streamOf(keyTag) : rec;
    if (ofKey && this.cluster) await this.ledger.ensure(stream);
    const keys = [rec, k.done(tag, id), this.cluster ? rec : k.index(instance), this.cluster ? rec : k.registry(), stream];
    const args = [
      now(this.clock),
      mode,
      id,
      instance,
      effects,
      keyTag,
      userTag,
      packed,
      ofKey ? ledgerText(mode === 'x' ? `${id}:late` : id, s) : '',
    ];
    const code = (await this.redis.op('s', 'settle', keys, args)) as number;
    if (code === 1 && ofKey) this.ledger.wrote(stream);
    return code;
  }

  /** Cluster: lists an admission under this instance (its parts LIST-separated, PARTS, its packed recovery settlement). */
  async indexAdd(id: string, entry: string): Promise<void> {
    const index = this.keys.index(this.instanceId);
    await this.redis.cmd((c) => c.multi().hset(index, id, entry).pexpire(index, RECORD_TTL_MS).exec().then(check));
  }

  async indexDel(instance: string, id: string): Promise<void> {
    await this.redis.cmd((c) => c.hdel(this.keys.index(instance), id));
  }
}
