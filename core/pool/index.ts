/**
 * Upstream account pools: each provider is a pool of accounts (provider keys, or relays with their
 * own base URL); the attempt loop asks its pool for an account per attempt and reports back.
 *
 * Where each piece of state lives:
 *  - Health, in the store (shared.ts follows it; state.ts holds it): cooldown until, disabled,
 *    consecutive failures, recent times to first token — what one instance learns, every instance
 *    on the store schedules by (a 429 costs one attempt in all, an account is demoted on all).
 *  - Per instance: requests in flight here (selection's headroom; the store's slots count every
 *    instance's), the RPM minute it saw used up, when it last chose each account (probes), counts.
 *  - Limits that must hold across instances, in the store: an account's `concurrency` is a slot
 *    scope `account:<provider>/<account>` taken with no queue (a full account is skipped, never
 *    waited for); its `rpm` is an `rpm` claim (scope `account`) admitted under its own ledger id
 *    and released at once with `keepCounts` (the count stays for the minute, nothing is reserved).
 *  - Sticky bindings, in the store's remember/recall cache: namespace `accounts:<key id>` (so two
 *    API keys never share a binding), id `<provider>|<session key>`, value `{"a":account,"t":ms}`,
 *    rewritten only when the account changes or half the TTL has passed.
 *
 * A provider with a single account (the implicit one of `api_key`, or a list of one) behaves as
 * before pools existed: no cooldown, no disabling, no sticky lookups — there is nowhere else to
 * send the request, and turning upstream errors into gateway refusals would help nobody. Its
 * `concurrency` and `rpm` still apply.
 *
 * Selection rules: select.ts. Health rules: health.ts. Session keys: session.ts.
 */
import { createHash } from 'node:crypto';
import type { AccountConfig, GatewayConfig, ModelConfig, ProviderConfig } from '../config/types.js';
import type { RequestContext } from '../context.js';
import { GatewayError } from '../errors.js';
import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import type { Store } from '../store/types.js';
import { selectAccount, type Candidate, type Selection } from './select.js';
import { classifyOutcome, cooldownMs, slowAccounts, type AttemptView, type OutcomeKind, type OutcomeReport } from './health.js';
import { sessionKey } from './session.js';
import { AccountState } from './state.js';
import { SharedHealth } from './shared.js';

/** A demoted account is offered one new request per this interval, so its figures stay fresh. */
export const PROBE_INTERVAL_MS = 30_000;

export interface PoolDeps {
  store: Store;
  clock: Clock;
  log: Logger;
  metrics?: Metrics;
  /** Uniform in [0, 1) (tests may pin it). */
  random?: () => number;
}

/** An account chosen for one attempt; `done()` exactly once when the attempt is over. */
export interface Lease {
  readonly account: AccountConfig;
  /**
   * Reports the attempt's outcome and releases the slot; the report says whether another account
   * may be tried. `undefined`: the attempt was never sent (only the slot is released).
   */
  done(attempt: AttemptView | undefined, ctx: RequestContext): OutcomeReport | undefined;
}

export type Pick = { ok: true; lease: Lease } | { ok: false; error?: GatewayError };

/** What GET /admin/accounts lists. */
export interface AccountView {
  name: string;
  state: 'available' | 'cooling' | 'disabled';
  available: boolean;
  cooling_until: string | null;
  cooldown_reason: OutcomeKind | null;
  /** Its RPM is used up until then. */
  rpm_blocked_until: string | null;
  disabled: { since: string; status: number | null; message: string } | null;
  demoted: boolean;
  /**
   * Requests in flight to it: every instance's for an account with a `concurrency` (the store's
   * slots; see AccountsView.counts), else this instance's.
   */
  in_flight: number;
  /** This instance's requests in flight to it. */
  in_flight_here: number;
  /** Requests counted this minute against its `rpm`, every instance's (null without an rpm). */
  rpm_used: number | null;
  ttft_ms: number | null;
  consecutive_failures: number;
  weight: number;
  priority: number;
  concurrency: number;
  rpm: number;
  models: readonly string[] | null;
  requests: number;
  outcomes: Partial<Record<OutcomeKind, number>>;
}

/** What GET /admin/accounts answers. */
export interface AccountsView {
  /**
   * `all_instances`: in-flight and RPM figures are the store's (every instance's); `this_instance`:
   * the store could not be read, they are this instance's. Health (cooling, disabled, demoted) is
   * the store's in both, as last followed.
   */
  counts: 'all_instances' | 'this_instance';
  providers: Array<{ name: string; accounts: AccountView[] }>;
}

export class AccountPools {
  private states = new Map<string, AccountState>();
  private readonly pools = new WeakMap<ProviderConfig, Pool>();
  private current: Pool[] = [];
  /** Health shared with the other instances on the store (shared.ts). */
  private readonly shared: SharedHealth;

  constructor(private readonly deps: PoolDeps) {
    if (deps.metrics) deps.metrics.accountStates = () => this.stateRows();
    this.shared = new SharedHealth(deps.store, deps.log, () => this.states);
  }

  /** Starts following the health the store shares (after the first configure). */
  start(): void {
    this.shared.start();
  }

  close(): void {
    this.shared.close();
  }

  /**
   * Builds the pools of a (re)loaded config. An account keeps its live state across a reload when
   * its name, key and URL are unchanged — except `disabled`, which a reload clears (that is how an
   * operator puts a fixed account back; on a shared store, for every instance).
   */
  configure(config: GatewayConfig): void {
    const next = new Map<string, AccountState>();
    const pools: Pool[] = [];
    for (const p of Object.values(config.providers)) {
      const states = new Map<string, AccountState>();
      for (const a of p.accounts) {
        const fp = fingerprint(p, a);
        let st = this.states.get(a.id);
        if (!st || st.fingerprint !== fp) st = new AccountState(fp);
        else if (st.disabled) {
          st.disabled = undefined;
          this.shared.report(a.id, st, { kind: 'enable' });
        }
        next.set(a.id, st);
        states.set(a.name, st);
      }
      const pool = new Pool(p, states, this.deps, this.shared);
      this.pools.set(p, pool);
      pools.push(pool);
    }
    this.states = next;
    this.current = pools;
  }

  /** The pool of a provider of the current or an earlier config (requests in flight keep theirs). */
  of(provider: ProviderConfig): Pool {
    let pool = this.pools.get(provider);
    if (!pool) {
      const states = new Map<string, AccountState>();
      for (const a of provider.accounts) states.set(a.name, this.states.get(a.id) ?? new AccountState(fingerprint(provider, a)));
      pool = new Pool(provider, states, this.deps, this.shared);
      this.pools.set(provider, pool);
    }
    return pool;
  }

  /**
   * Every account of the current config: its health as the store shares it, and what its limits
   * hold across instances (one store read for all; this instance's figures if that fails).
   */
  async view(): Promise<AccountsView> {
    const providers = this.current.map((p) => ({ name: p.provider.name, accounts: p.view(), config: p.provider.accounts }));
    const slots: { scope: string; v: AccountView }[] = [];
    const rpm: { scope: 'account'; id: string; v: AccountView; limit: number }[] = [];
    for (const p of providers) {
      p.accounts.forEach((v, i) => {
        const a = p.config[i];
        if (a.concurrency > 0) slots.push({ scope: `account:${a.id}`, v });
        if (a.rpm > 0) rpm.push({ scope: 'account', id: a.id, v, limit: a.rpm });
      });
    }
    let counts: AccountsView['counts'] = 'all_instances';
    if (slots.length + rpm.length > 0) {
      try {
        const use = await this.deps.store.limitsInUse({
          slots: slots.map((x) => x.scope),
          rpm: rpm.map(({ scope, id }) => ({ scope, id })),
        });
        const now = this.deps.clock.now();
        slots.forEach((x, i) => (x.v.in_flight = use.slots[i]));
        rpm.forEach((x, i) => {
          x.v.rpm_used = use.rpm[i];
          x.v.rpm_blocked_until = use.rpm[i] >= x.limit ? new Date(now + use.minuteLeftMs).toISOString() : null;
        });
        for (const p of providers) {
          p.accounts.forEach((v, i) => {
            const a = p.config[i];
            v.available = v.state === 'available' && v.rpm_blocked_until === null && (a.concurrency <= 0 || v.in_flight < a.concurrency);
          });
        }
      } catch (e) {
        counts = 'this_instance';
        this.deps.log.debug('accounts view: the store could not tell what the limits hold', { error: e as Error });
      }
    }
    return { counts, providers: providers.map(({ name, accounts }) => ({ name, accounts })) };
  }

  private *stateRows(): Iterable<{ provider: string; account: string; state: string }> {
    for (const p of this.current) {
      for (const a of p.view()) {
        yield { provider: p.provider.name, account: a.name, state: a.state };
        if (a.demoted) yield { provider: p.provider.name, account: a.name, state: 'demoted' };
      }
    }
  }
}

function fingerprint(p: ProviderConfig, a: AccountConfig): string {
  return createHash('sha256')
    .update(`${p.kind}\0${a.baseUrl ?? p.baseUrl}\0${a.apiKey}`)
    .digest('base64url')
    .slice(0, 16);
}

/** The release of an account without store-held limits. */
const NO_RELEASE = (): void => {};

/** The per-request state of choosing accounts for one model. */
interface Choosing {
  /** The model's id. */
  model: string;
  tried: Set<string>;
  /** Refused a slot by the store just now (full across instances). */
  refused: Set<string>;
  attempts: number;
  bound?: { a: string; t: number };
  session?: string;
  recalled: boolean;
}

interface AccountLabels {
  account: { provider: string; account: string };
  /** The series every request of the account updates, bound once (core/metrics.ts `series`). */
  inFlight?: { inc(): void; dec(): void };
  ttft?: { observe(v: number): void };
  requests: Partial<Record<OutcomeKind, { inc(): void }>>;
}

export class Pool {
  /** Health actions and sticky sessions need somewhere else to go. */
  readonly multi: boolean;
  /** An account of the provider has a limit the store holds (concurrency, RPM): choosing one waits for the store. */
  private readonly storeLimits: boolean;
  private readonly byName = new Map<string, AccountConfig>();
  private readonly random: () => number;
  /** Metric label objects per account, made once (they are only read). */
  private readonly labelSets = new Map<string, AccountLabels>();

  constructor(
    readonly provider: ProviderConfig,
    private readonly states: ReadonlyMap<string, AccountState>,
    private readonly deps: PoolDeps,
    private readonly shared: SharedHealth,
  ) {
    this.multi = provider.accounts.length > 1;
    this.storeLimits = provider.accounts.some((a) => a.concurrency > 0 || a.rpm > 0);
    for (const a of provider.accounts) this.byName.set(a.name, a);
    this.random = deps.random ?? Math.random;
  }

  private state(name: string): AccountState {
    return this.states.get(name)!;
  }

  private labels(account: string): AccountLabels {
    let l = this.labelSets.get(account);
    if (!l) this.labelSets.set(account, (l = { account: { provider: this.provider.name, account }, requests: {} }));
    return l;
  }

  /** The selection input for a model (or every account: `model` undefined). */
  candidates(model: string | undefined, now: number): Candidate[] {
    const slow = this.multi ? this.slow(now) : undefined;
    return this.provider.accounts.map((a) => {
      const st = this.state(a.name);
      const demoted = slow?.has(a.name) ?? false;
      return {
        name: a.name,
        priority: a.priority,
        weight: a.weight,
        limit: a.concurrency,
        inFlight: st.inFlight,
        serves: model === undefined || !a.models || a.models.includes(model),
        disabled: st.disabled !== undefined,
        coolingUntil: st.coolingUntil,
        blockedUntil: st.blockedUntil,
        demoted,
        probeDue: demoted && now - st.lastChosenAt >= PROBE_INTERVAL_MS,
      };
    });
  }

  private slow(now: number): Set<string> {
    const figures = new Map<string, number | undefined>();
    for (const a of this.provider.accounts) figures.set(a.name, this.state(a.name).ttft.figure(now));
    return slowAccounts(figures, this.provider.scheduling);
  }

  /**
   * A chooser for one model of one request: each `next()` picks an account not tried yet and takes
   * its store limits; at most `scheduling.max_attempts` accounts per model.
   */
  chooser(ctx: RequestContext, model: ModelConfig): () => Pick | Promise<Pick> {
    const c: Choosing = { model: model.id, tried: new Set(), refused: new Set(), attempts: 0, recalled: !this.multi };
    return () => this.next(ctx, model, c);
  }

  /**
   * The next account, at once (no promise) when nothing is asked of the store: the session's
   * account already recalled, and no account of the provider with a store-held limit.
   */
  private next(ctx: RequestContext, model: ModelConfig, c: Choosing): Pick | Promise<Pick> {
    if (c.attempts >= Math.min(this.provider.scheduling.maxAttempts, this.provider.accounts.length)) return { ok: false };
    if (!c.recalled || this.storeLimits) return this.nextWaiting(ctx, model, c);
    const now = this.deps.clock.now();
    // Nothing is refused without store limits: the accounts tried are the ones to leave out.
    const sel = selectAccount(this.candidates(model.id, now), { now, bound: c.bound?.a, exclude: c.tried, random: this.random() });
    if (!sel.ok) return { ok: false, error: c.attempts === 0 ? this.noAccount(model, sel, c.refused.size > 0) : undefined };
    const account = this.byName.get(sel.account)!;
    return this.chosen(account, this.state(account.name), NO_RELEASE, c, sel.probe, now);
  }

  /** `next()` when the store is asked: the session's account recalled, or the account's limits taken. */
  private async nextWaiting(ctx: RequestContext, model: ModelConfig, c: Choosing): Promise<Pick> {
    if (!c.recalled) await this.recall(ctx, c);
    const exclude = new Set([...c.tried, ...c.refused]);
    // Each pass either returns or takes one account out of the running (refused, or RPM-blocked).
    for (let pass = 0; pass <= this.provider.accounts.length; pass++) {
      const now = this.deps.clock.now();
      const sel = selectAccount(this.candidates(model.id, now), { now, bound: c.bound?.a, exclude, random: this.random() });
      if (!sel.ok) return { ok: false, error: c.attempts === 0 ? this.noAccount(model, sel, c.refused.size > 0) : undefined };
      const account = this.byName.get(sel.account)!;
      const st = this.state(account.name);
      const release = await this.takeLimits(ctx, account, st);
      if (release === 'aborted')
        return { ok: false, error: new GatewayError('UPSTREAM_ERROR', { message: 'client went away', status: 499 }) };
      if (release === 'full') {
        c.refused.add(account.name);
        exclude.add(account.name);
        continue;
      }
      if (release === 'blocked') continue; // its RPM is used up: blockedUntil now says so
      return this.chosen(account, st, release, c, sel.probe, now);
    }
    return { ok: false, error: c.attempts === 0 ? this.noAccount(model, { ok: false, reason: 'busy' }, true) : undefined };
  }

  /** An account chosen and its limits taken: counted as tried and in flight, leased to the attempt. */
  private chosen(account: AccountConfig, st: AccountState, release: () => void, c: Choosing, probe: boolean, now: number): Pick {
    c.tried.add(account.name);
    c.attempts++;
    st.inFlight++;
    st.lastChosenAt = now;
    const m = this.deps.metrics;
    if (m) {
      const l = this.labels(account.name);
      (l.inFlight ??= m.accountInFlight.series(l.account)).inc();
    }
    return { ok: true, lease: this.lease(account, st, release, c, probe) };
  }

  /** The store-held limits of an account: its slot (no queue) and its RPM count. */
  private async takeLimits(
    ctx: RequestContext,
    a: AccountConfig,
    st: AccountState,
  ): Promise<(() => void) | 'full' | 'blocked' | 'aborted'> {
    const { store, log } = this.deps;
    let release: () => void = () => {};
    if (a.concurrency > 0) {
      try {
        const r = await store.acquireSlot({
          scope: `account:${a.id}`,
          limit: a.concurrency,
          queueSize: 0,
          maxWaitMs: 0,
          signal: ctx.clientGone,
        });
        if (!r.ok) return r.reason === 'aborted' ? 'aborted' : 'full';
        release = r.release;
        // Fencing (a shared store): the account's slot went to another request while this instance could not renew it.
        r.onLost?.(() => ctx.stop(new GatewayError('SLOT_LOST')));
      } catch (e) {
        // Account limits protect the provider, not money: a store that cannot answer does not stop traffic.
        log.warn('account slot unavailable from the store; going ahead', { account: a.id, error: e as Error });
      }
    }
    if (a.rpm > 0) {
      // Its own ledger id per attempt: admitted, then released at once keeping the count.
      const requestId = `${ctx.ledgerId}:account:${ctx.attempts.length}:${a.name}`;
      try {
        const r = await store.admit({ requestId, reserve: 0, claims: [{ kind: 'rpm', scope: 'account', id: a.id, limit: a.rpm }] });
        if (!r.ok) {
          st.blockedUntil = this.deps.clock.now() + Math.max(1, r.retryAfterMs ?? 1000);
          release();
          return 'blocked';
        }
        await store.cancel(requestId, { keepCounts: true });
      } catch (e) {
        log.warn('account RPM unavailable from the store; going ahead', { account: a.id, error: e as Error });
      }
    }
    return release;
  }

  /** `probe`: a demoted account's probe request (it binds no session). */
  private lease(account: AccountConfig, st: AccountState, release: () => void, c: Choosing, probe: boolean): Lease {
    const started = Date.now();
    let finished = false;
    return {
      account,
      done: (attempt, ctx) => {
        if (finished) return undefined;
        finished = true;
        release();
        st.inFlight--;
        const m = this.deps.metrics;
        if (m) {
          const l = this.labels(account.name);
          (l.inFlight ??= m.accountInFlight.series(l.account)).dec();
        }
        if (!attempt) return undefined;
        const report = classifyOutcome(attempt, { committed: ctx.committed, now: this.deps.clock.now() });
        this.record(
          account,
          st,
          report,
          ctx.committedAt !== undefined && report.kind === 'ok' ? ctx.committedAt - started : undefined,
          attempt,
        );
        if (report.kind === 'ok' && this.multi && c.session !== undefined && !probe && !this.bindingHolds(c, account.name)) {
          this.bind(ctx, c, account.name);
        }
        return report;
      },
    };
  }

  /** Applies an outcome to the account's live state, metrics and logs. */
  private record(a: AccountConfig, st: AccountState, report: OutcomeReport, ttftMs: number | undefined, attempt: AttemptView): void {
    const { metrics, log, clock } = this.deps;
    const now = clock.now();
    const sets = this.labels(a.name);
    const labels = sets.account;
    st.requests++;
    st.outcomes[report.kind] = (st.outcomes[report.kind] ?? 0) + 1;
    if (metrics) (sets.requests[report.kind] ??= metrics.accountRequests.series({ ...labels, outcome: report.kind })).inc();
    if (report.health === 'success') {
      if (this.multi && st.failures > 0) this.shared.report(a.id, st, { kind: 'success' });
      st.failures = 0;
      if (ttftMs !== undefined) {
        st.ttft.add(now, ttftMs);
        if (this.multi) this.shared.report(a.id, st, { kind: 'ttft', at: now, ms: ttftMs });
        if (metrics) (sets.ttft ??= metrics.accountTtft.series(labels)).observe(ttftMs / 1000);
      }
      return;
    }
    if (!this.multi || report.health === 'none') return;
    if (report.health === 'disable') {
      if (st.disabled) return;
      const message = attempt.error?.message ?? '';
      st.disabled = { at: now, status: attempt.status, message };
      this.shared.report(a.id, st, { kind: 'disable', at: now, status: attempt.status, message });
      metrics?.accountCooldowns.inc({ ...labels, reason: 'disabled' });
      log.error('UPSTREAM ACCOUNT DISABLED: the provider rejected its credentials; it stays out of rotation until the config is reloaded', {
        account: a.id,
        status: attempt.status,
      });
      return;
    }
    st.failures++;
    const ms = cooldownMs(report, st.failures, this.provider.scheduling);
    // A later, shorter verdict (a request already in flight) never shortens a cooldown.
    st.coolingUntil = Math.max(st.coolingUntil, now + ms);
    st.coolReason = report.kind;
    this.shared.report(a.id, st, { kind: 'failure', until: now + ms, reason: report.kind });
    metrics?.accountCooldowns.inc({ ...labels, reason: report.kind });
    log.warn('upstream account cooling down', {
      account: a.id,
      reason: report.kind,
      status: attempt.status,
      cooldownMs: ms,
      failures: st.failures,
    });
  }

  /**
   * The session's bound account was passed over only for want of room (full, its RPM minute used
   * up) while another of no better tier answered: the binding stays, so the next turn goes back to
   * the account that holds the conversation's prompt cache instead of moving the session for good
   * (and back again, near capacity).
   */
  private bindingHolds(c: Choosing, served: string): boolean {
    const b = c.bound?.a;
    if (b === undefined || b === served) return false;
    const bound = this.byName.get(b);
    const st = this.states.get(b);
    if (!bound || !st) return false;
    const now = this.deps.clock.now();
    if ((bound.models && !bound.models.includes(c.model)) || st.disabled || st.coolingUntil > now) return false;
    if (this.slow(now).has(b)) return false;
    return bound.priority <= this.byName.get(served)!.priority;
  }

  /** Loads the session's binding (once per chooser). */
  private async recall(ctx: RequestContext, c: Choosing): Promise<void> {
    c.recalled = true;
    let json: Record<string, unknown> = {};
    try {
      json = (await ctx.body()).json;
    } catch {
      return;
    }
    const key = sessionKey(ctx.protocol, (n) => ctx.headerValues(n)[0], json);
    if (key === undefined) return;
    c.session = key;
    try {
      const [v] = await this.deps.store.recall(namespace(ctx), [`${this.provider.name}|${key}`]);
      if (v) {
        const b = JSON.parse(v) as { a?: unknown; t?: unknown };
        if (typeof b.a === 'string' && typeof b.t === 'number') c.bound = { a: b.a, t: b.t };
      }
    } catch (e) {
      this.deps.log.debug('sticky binding unavailable', { error: e as Error });
    }
  }

  /** Binds the session to the account that answered (rewritten only when it changed or half the TTL passed). */
  private bind(ctx: RequestContext, c: Choosing, account: string): void {
    const now = this.deps.clock.now();
    const ttl = this.provider.scheduling.stickyTtlMs;
    if (c.bound?.a === account && now - c.bound.t < ttl / 2) return;
    c.bound = { a: account, t: now };
    this.deps.store
      .remember(namespace(ctx), [[`${this.provider.name}|${c.session}`, JSON.stringify(c.bound)]], ttl)
      .catch((e) => this.deps.log.debug('could not keep a sticky binding', { error: e as Error }));
  }

  /** The error a request gets when no account of its model can take it. */
  private noAccount(model: ModelConfig, sel: Extract<Selection, { ok: false }>, refused: boolean): GatewayError {
    const m = model.id;
    if (refused || sel.reason === 'busy') {
      return new GatewayError('ACCOUNTS_BUSY', {
        message: `No available accounts for model '${m}' right now: every account is at its concurrency limit, please retry shortly`,
      });
    }
    if (sel.reason === 'cooling') {
      const ms = Math.max(1, Math.ceil(sel.waitMs ?? 1000));
      const s = Math.max(1, Math.ceil(ms / 1000));
      return new GatewayError('ACCOUNTS_COOLING', {
        message: `No available accounts for model '${m}' right now: every account is cooling down after provider rate limits or errors; retry after ${s} s`,
        retryAfter: s,
        retryAfterMs: ms,
      });
    }
    if (sel.reason === 'disabled') {
      return new GatewayError('ACCOUNTS_DISABLED', {
        message: `No available accounts for model '${m}': the provider rejected the credentials of every account (see the gateway log; reload the config once fixed)`,
      });
    }
    return new GatewayError('NO_ACCOUNTS', { message: `No available accounts support the model '${m}'` });
  }

  /**
   * An account for a call that takes no slot and counts toward no RPM (count_tokens): a plain
   * weighted choice among the usable ones.
   */
  pickQuiet(model: ModelConfig): { ok: true; account: AccountConfig } | { ok: false; error: GatewayError } {
    const now = this.deps.clock.now();
    const sel = selectAccount(this.candidates(model.id, now), { now, random: this.random() });
    if (!sel.ok) return { ok: false, error: this.noAccount(model, sel, false) };
    return { ok: true, account: this.byName.get(sel.account)! };
  }

  /** Reports a quiet call's outcome (health only: a 401 still disables the account). */
  reportQuiet(account: AccountConfig, attempt: AttemptView): void {
    const report = classifyOutcome(attempt, { committed: false, now: this.deps.clock.now() });
    this.record(account, this.state(account.name), report, undefined, attempt);
  }

  view(): AccountView[] {
    const now = this.deps.clock.now();
    const slow = this.multi ? this.slow(now) : new Set<string>();
    const iso = (t: number) => new Date(t).toISOString();
    return this.provider.accounts.map((a) => {
      const st = this.state(a.name);
      const cooling = st.coolingUntil > now;
      const state = st.disabled ? 'disabled' : cooling ? 'cooling' : 'available';
      return {
        name: a.name,
        state,
        available: state === 'available' && st.blockedUntil <= now && (a.concurrency <= 0 || st.inFlight < a.concurrency),
        cooling_until: cooling ? iso(st.coolingUntil) : null,
        cooldown_reason: cooling ? (st.coolReason ?? null) : null,
        rpm_blocked_until: st.blockedUntil > now ? iso(st.blockedUntil) : null,
        disabled: st.disabled ? { since: iso(st.disabled.at), status: st.disabled.status ?? null, message: st.disabled.message } : null,
        demoted: slow.has(a.name),
        in_flight: st.inFlight,
        in_flight_here: st.inFlight,
        rpm_used: null,
        ttft_ms: st.ttft.figure(now) ?? null,
        consecutive_failures: st.failures,
        weight: a.weight,
        priority: a.priority,
        concurrency: a.concurrency,
        rpm: a.rpm,
        models: a.models ?? null,
        requests: st.requests,
        outcomes: { ...st.outcomes },
      };
    });
  }
}

function namespace(ctx: RequestContext): string {
  return `accounts:${ctx.key?.id ?? '-'}`;
}
