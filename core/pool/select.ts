/**
 * Account selection: a pure function of the accounts, their live state and the request's sticky
 * binding. No I/O, no clock, no randomness of its own (the caller passes `random`), so every rule
 * below is unit-tested without sockets.
 *
 * The rules, in order:
 *  1. Usable: serves the model, not tried yet in this request, not disabled, not cooling down,
 *     not blocked (RPM used up this minute, refused a slot), not at its concurrency limit here.
 *  2. Tier: only the best (lowest) priority among the usable accounts takes part.
 *  3. Sticky: the bound account wins if it is in that tier and not demoted.
 *  4. Demoted (slow) accounts take new requests only when no other account of the tier is usable,
 *     or as a probe once their probe is due, so their figures stay fresh.
 *  5. Weighted random over what is left: weight × headroom, headroom = 1 − in flight / concurrency
 *     (1 without a limit). Weights alone set the share when the accounts are idle (any
 *     concurrency, low or high: 1:4 → 20 % / 80 %); headroom only steers away from an account
 *     that fills up faster than its share. Limits proportional to the weights keep the ratio.
 */

export interface Candidate {
  name: string;
  priority: number;
  weight: number;
  /** Concurrency limit (0 = none) and this instance's requests in flight to the account. */
  limit: number;
  inFlight: number;
  /** Serves the requested model. */
  serves: boolean;
  disabled: boolean;
  /** Epoch ms until which it cools down (0 = not cooling). */
  coolingUntil: number;
  /** Epoch ms until which it is blocked by its own limits (RPM this minute). */
  blockedUntil: number;
  /** Its time to first token is far above its fastest peer's. */
  demoted: boolean;
  /** A demoted account whose next probe request is due. */
  probeDue: boolean;
}

export interface SelectInput {
  now: number;
  /** The session's bound account, if any. */
  bound?: string;
  /** Accounts already tried in this request (or refused a slot just now): skipped. */
  exclude?: ReadonlySet<string>;
  /** Uniform in [0, 1). */
  random: number;
}

export type Selection =
  | { ok: true; account: string; sticky: boolean; probe: boolean }
  /**
   * Nothing usable. `waitMs`: every remaining account only waits out a cooldown or its RPM minute
   * (the shortest wait); `busy`: at least one is at its concurrency limit; `disabled`: all are.
   */
  | { ok: false; reason: 'cooling' | 'busy' | 'disabled' | 'none'; waitMs?: number };

export function isUsable(c: Candidate, now: number): boolean {
  return c.serves && !c.disabled && c.coolingUntil <= now && c.blockedUntil <= now && (c.limit <= 0 || c.inFlight < c.limit);
}

export function selectAccount(candidates: readonly Candidate[], input: SelectInput): Selection {
  const { now, exclude } = input;
  let tier = Infinity;
  const usable: Candidate[] = [];
  for (const c of candidates) {
    if (exclude?.has(c.name) || !isUsable(c, now)) continue;
    usable.push(c);
    if (c.priority < tier) tier = c.priority;
  }
  if (usable.length === 0) return whyNone(candidates, input);
  const inTier = usable.filter((c) => c.priority === tier);
  if (input.bound !== undefined) {
    const b = inTier.find((c) => c.name === input.bound);
    if (b && !b.demoted) return { ok: true, account: b.name, sticky: true, probe: false };
  }
  const healthy = inTier.filter((c) => !c.demoted);
  if (healthy.length === 0) return { ok: true, account: weighted(inTier, input.random).name, sticky: false, probe: false };
  const probe = inTier.find((c) => c.demoted && c.probeDue);
  if (probe) return { ok: true, account: probe.name, sticky: false, probe: true };
  return { ok: true, account: weighted(healthy, input.random).name, sticky: false, probe: false };
}

function share(c: Candidate): number {
  const headroom = c.limit > 0 ? Math.max(0, 1 - c.inFlight / c.limit) : 1;
  return c.weight * headroom;
}

function weighted(list: readonly Candidate[], random: number): Candidate {
  let total = 0;
  for (const c of list) total += share(c);
  let x = random * total;
  for (const c of list) {
    x -= share(c);
    if (x < 0) return c;
  }
  return list[list.length - 1];
}

/** Why nothing is usable: the answer the client gets depends on it (see core/pool/index.ts). */
function whyNone(candidates: readonly Candidate[], input: SelectInput): Selection {
  const { now, exclude } = input;
  let waitMs = Infinity;
  let busy = false;
  let disabled = 0;
  let considered = 0;
  for (const c of candidates) {
    if (!c.serves || exclude?.has(c.name)) continue;
    considered++;
    if (c.disabled) {
      disabled++;
      continue;
    }
    const until = Math.max(c.coolingUntil, c.blockedUntil);
    if (until > now) waitMs = Math.min(waitMs, until - now);
    else busy = true; // at its concurrency limit
  }
  if (considered === 0) return { ok: false, reason: 'none' };
  if (busy) return { ok: false, reason: 'busy' };
  if (disabled === considered) return { ok: false, reason: 'disabled' };
  return { ok: false, reason: 'cooling', waitMs };
}
