/**
 * One user: wallet and top-ups, plans, limits, keys, and what they spent by day and by model
 * (the ledger). A change anywhere on the page reloads every part it touches.
 */
import { useMemo, useRef, useState } from 'preact/hooks';
import type { Admin, LedgerRow, Topup, User } from '../api';
import { DayChart } from '../chart';
import { int, relative, time, usd } from '../format';
import { useTitle } from '../nav';
import { Badge, ConfirmButton, ErrorBox, Facts, Field, Form, Loading, Notice, num, Table, useAction, useLoad } from '../ui';
import * as v from '../validate';
import { CreateKey, KeyTable } from './keylist';
import { UserStatusButton } from './users';

export function UserView({ admin, name }: { admin: Admin; name: string }) {
  useTitle(`User ${name}`);
  const [version, setVersion] = useState(0);
  const changed = () => setVersion((x) => x + 1);
  const user = useLoad(() => admin.user(name), [name, version]);
  const u = user.data;
  return (
    <>
      <h1 tabIndex={-1}>
        User <span class="mono">{name}</span>
        {u && (
          <>
            {' '}
            <Badge ok={u.status === 'active'}>{u.status === 'active' ? 'active' : 'suspended'}</Badge>
          </>
        )}
      </h1>
      <p>
        <a href="#/users">All users</a>
      </p>
      <ErrorBox error={user.error} />
      {!u && user.loading && <Loading what="the user" />}
      {u && (
        <>
          <Header admin={admin} u={u} onChange={changed} />
          <div class="columns">
            <Wallet admin={admin} u={u} version={version} onChange={changed} />
            <Plans admin={admin} u={u} onChange={changed} />
          </div>
          <Spend admin={admin} user={name} version={version} />
          <Keys admin={admin} u={u} version={version} onChange={changed} />
          <Limits admin={admin} u={u} onChange={changed} />
        </>
      )}
    </>
  );
}

function Header({ admin, u, onChange }: { admin: Admin; u: User; onChange: () => void }) {
  const action = useAction();
  return (
    <section class="card" aria-label="About">
      <Facts
        items={[
          ['Note', u.note ?? '—', 'user-note'],
          ['Source', u.source === 'file' ? 'config file (change it there)' : 'admin API'],
          ['Created', time(u.created_at)],
          ['Updated', time(u.updated_at)],
        ]}
      />
      <UserStatusButton admin={admin} user={u} action={action} onChange={onChange} />
      <ErrorBox error={action.error} />
    </section>
  );
}

function Wallet({ admin, u, version, onChange }: { admin: Admin; u: User; version: number; onChange: () => void }) {
  const topups = useLoad(() => admin.topups(u.name, 10), [u.name, version]);
  return (
    <section class="card" aria-labelledby="wallet-h">
      <h2 id="wallet-h">Wallet</h2>
      <Facts
        label="Wallet"
        items={[
          ['Credit', usd(u.wallet.credit_usd), 'wallet-credit'],
          ['Spent', usd(u.wallet.spent_usd), 'wallet-spent'],
          ['Balance', usd(u.wallet.balance_usd), 'wallet-balance'],
        ]}
      />
      <TopupForm admin={admin} user={u.name} balance={u.wallet.balance_usd} onDone={onChange} />
      <h3>Recent top-ups</h3>
      <ErrorBox error={topups.error} />
      {topups.data && <TopupList items={topups.data.data} />}
    </section>
  );
}

/**
 * A top-up sends an Idempotency-Key made when the form is filled in: a second submission of the
 * same form (a double click, a retry after a lost answer) credits once. Editing a field makes a new
 * one. A top-up that went through keeps its form and key: emptying the form there turned the second
 * click of a double click, when it landed after the answer, into an empty submission whose error
 * replaced the "Credited" line.
 */
function TopupForm({ admin, user, balance, onDone }: { admin: Admin; user: string; balance: number; onDone: () => void }) {
  const [amount, setAmount] = useState('');
  const [reference, setReference] = useState('');
  const [errors, setErrors] = useState<v.Errors<'amount' | 'reference'>>({});
  const [done, setDone] = useState('');
  const idem = useRef(v.idempotencyKey());
  const action = useAction();
  const fresh = () => (idem.current = v.idempotencyKey());
  return (
    <Form
      label="Top up"
      onSubmit={() => {
        const e = v.clean({ amount: v.topupUsd(amount, Math.round(balance * 1e6)), reference: v.text(reference, 1, 200) });
        setErrors(e);
        setDone('');
        if (Object.keys(e).length > 0) return;
        const key = idem.current;
        void action
          .run(() => admin.topup(user, { amount_usd: amount.trim(), reference }, key))
          .then((r) => {
            if (!r) return;
            const t = r.value.data;
            setDone(
              `${r.value.headers.get('idempotent-replayed') === 'true' ? 'Already credited (sent twice, credited once)' : 'Credited'}: ${usd(t.amount_usd)} (${t.reference}). Balance ${usd(t.wallet.balance_usd)}.`,
            );
            onDone();
          });
      }}
    >
      <div class="row">
        <Field
          label="Amount, USD"
          inputMode="decimal"
          value={amount}
          placeholder="50.00"
          onInput={(x) => {
            setAmount(x);
            fresh();
          }}
          error={errors.amount}
          hint="Negative: a correction"
        />
        <Field
          label="Reference"
          value={reference}
          placeholder="invoice 1001"
          onInput={(x) => {
            setReference(x);
            fresh();
          }}
          error={errors.reference}
          wide
        />
      </div>
      <button type="submit" class="primary" disabled={action.busy}>
        Top up
      </button>
      <ErrorBox error={action.error} title="The top-up was not confirmed" />
      {action.error && (action.error.status === 0 || action.error.status >= 500) && (
        <p class="muted small">Submitting again is safe: the same submission credits once.</p>
      )}
      {done && <Notice text={done} />}
    </Form>
  );
}

function TopupList({ items }: { items: Topup[] }) {
  if (items.length === 0) return <p class="muted">None yet.</p>;
  return (
    <Table caption="Recent top-ups" hiddenCaption columns={['When', num('Amount'), 'Reference', 'By', num('Balance after')]}>
      {items.map((t) => (
        <tr key={t.id}>
          <td>{time(t.created_at)}</td>
          <td class="num">{usd(t.amount_usd)}</td>
          <td class="note">{t.reference}</td>
          <td>{t.actor}</td>
          <td class="num">{usd(t.wallet.balance_usd)}</td>
        </tr>
      ))}
    </Table>
  );
}

function Plans({ admin, u, onChange }: { admin: Admin; u: User; onChange: () => void }) {
  const action = useAction();
  const [group, setGroup] = useState('');
  const [days, setDays] = useState('30');
  const [errors, setErrors] = useState<v.Errors<'group' | 'days'>>({});
  const editable = u.source === 'store';
  return (
    <section class="card" aria-labelledby="plans-h">
      <h2 id="plans-h">Plans</h2>
      {u.subscriptions.length === 0 ? (
        <p class="muted">No plan: requests draw on the wallet.</p>
      ) : (
        <Table caption="Plans" hiddenCaption columns={['Group', 'Expires', 'State', editable && 'Actions']}>
          {u.subscriptions.map((s) => (
            <tr key={s.group}>
              <th scope="row">{s.group}</th>
              <td>
                {time(s.expires_at)} <span class="muted small">{relative(s.expires_at)}</span>
              </td>
              <td>
                <Badge ok={s.active}>{s.active ? 'active' : s.status === 'suspended' ? 'suspended' : 'expired'}</Badge>
              </td>
              {editable && (
                <td class="actions">
                  <button
                    type="button"
                    disabled={action.busy}
                    onClick={() =>
                      void action
                        .run(() => admin.updatePlan(u.name, s.group, { status: s.status === 'active' ? 'suspended' : 'active' }))
                        .then((r) => r && onChange())
                    }
                  >
                    {s.status === 'active' ? 'Suspend' : 'Resume'}
                    <span class="sr-only"> {s.group}</span>
                  </button>
                  <button
                    type="button"
                    disabled={action.busy}
                    onClick={() =>
                      void action.run(() => admin.updatePlan(u.name, s.group, { extend_days: 30 })).then((r) => r && onChange())
                    }
                  >
                    +30 days<span class="sr-only"> on {s.group}</span>
                  </button>
                  <ConfirmButton
                    label="Remove"
                    confirm={`Remove ${s.group}`}
                    danger
                    disabled={action.busy}
                    onConfirm={() => void action.run(() => admin.removePlan(u.name, s.group)).then((r) => r && onChange())}
                  />
                </td>
              )}
            </tr>
          ))}
        </Table>
      )}
      {editable ? (
        <Form
          label="Grant a plan"
          onSubmit={() => {
            const e = v.clean({ group: group.trim() === '' ? 'Required' : undefined, days: v.integer(days, 1, 36500) });
            setErrors(e);
            if (Object.keys(e).length > 0) return;
            void action
              .run(() => admin.grant(u.name, { group: group.trim(), days: Number(days) }))
              .then((r) => {
                if (!r) return;
                setGroup('');
                onChange();
              });
          }}
        >
          <div class="row">
            <Field label="Plan group" value={group} onInput={setGroup} error={errors.group} hint="A group with billing: plan" />
            <Field label="Days" inputMode="numeric" value={days} onInput={setDays} error={errors.days} />
          </div>
          <button type="submit" disabled={action.busy}>
            Grant plan
          </button>
        </Form>
      ) : (
        <p class="muted small">This user is declared in the config file: its plans are changed there.</p>
      )}
      <ErrorBox error={action.error} />
    </section>
  );
}

type LimitField = 'rpm' | 'concurrency' | 'weekly' | 'monthly';

function Limits({ admin, u, onChange }: { admin: Admin; u: User; onChange: () => void }) {
  const [editing, setEditing] = useState(false);
  const [f, setF] = useState<Record<LimitField, string>>({
    rpm: String(u.rpm),
    concurrency: String(u.concurrency),
    weekly: String(u.spend_caps.weekly_usd),
    monthly: String(u.spend_caps.monthly_usd),
  });
  const [errors, setErrors] = useState<v.Errors<LimitField>>({});
  const action = useAction();
  const set = (k: LimitField) => (x: string) => setF({ ...f, [k]: x });
  const rates = Object.entries(u.rates);
  return (
    <section class="card" aria-labelledby="limits-h">
      <h2 id="limits-h">Limits</h2>
      <Facts
        items={[
          ['Requests per minute', u.rpm > 0 ? int(u.rpm) : 'no limit'],
          ['Concurrent requests', u.concurrency > 0 ? int(u.concurrency) : 'no limit'],
          ['Queue', `${int(u.queue.size)} waiting, at most ${int(u.queue.max_wait_ms)} ms`],
          ['Weekly spend cap', u.spend_caps.weekly_usd > 0 ? usd(u.spend_caps.weekly_usd) : 'no limit'],
          ['Monthly spend cap', u.spend_caps.monthly_usd > 0 ? usd(u.spend_caps.monthly_usd) : 'no limit'],
          ['Personal rates', rates.length ? rates.map(([g, r]) => `${g} ×${r}`).join(', ') : 'the groups’ own'],
        ]}
      />
      {u.source === 'store' && !editing && (
        <button
          type="button"
          onClick={() => {
            setF({
              rpm: String(u.rpm),
              concurrency: String(u.concurrency),
              weekly: String(u.spend_caps.weekly_usd),
              monthly: String(u.spend_caps.monthly_usd),
            });
            setEditing(true);
          }}
        >
          Change limits
        </button>
      )}
      {editing && (
        <Form
          label="Change limits"
          onSubmit={() => {
            const e = v.clean<LimitField>({
              rpm: v.integer(f.rpm, 0),
              concurrency: v.integer(f.concurrency, 0),
              weekly: v.limitUsd(f.weekly),
              monthly: v.limitUsd(f.monthly),
            });
            setErrors(e);
            if (Object.keys(e).length > 0) return;
            void action
              .run(() =>
                admin.updateUser(u.name, {
                  rpm: Number(f.rpm),
                  concurrency: Number(f.concurrency),
                  spend_caps: { weekly_usd: f.weekly.trim(), monthly_usd: f.monthly.trim() },
                }),
              )
              .then((r) => {
                if (!r) return;
                setEditing(false);
                onChange();
              });
          }}
        >
          <div class="row">
            <Field label="Requests per minute (0: none)" inputMode="numeric" value={f.rpm} onInput={set('rpm')} error={errors.rpm} />
            <Field
              label="Concurrent requests (0: none)"
              inputMode="numeric"
              value={f.concurrency}
              onInput={set('concurrency')}
              error={errors.concurrency}
            />
            <Field label="Weekly cap, USD (0: none)" inputMode="decimal" value={f.weekly} onInput={set('weekly')} error={errors.weekly} />
            <Field
              label="Monthly cap, USD (0: none)"
              inputMode="decimal"
              value={f.monthly}
              onInput={set('monthly')}
              error={errors.monthly}
            />
          </div>
          <button type="submit" class="primary" disabled={action.busy}>
            Save limits
          </button>
          <button type="button" onClick={() => setEditing(false)}>
            Cancel
          </button>
        </Form>
      )}
      <ErrorBox error={action.error} />
    </section>
  );
}

function Keys({ admin, u, version, onChange }: { admin: Admin; u: User; version: number; onChange: () => void }) {
  const keys = useLoad(() => admin.keys({ user: u.name, limit: 200 }), [u.name, version]);
  const groups = useMemo(
    () =>
      [...new Set([...(keys.data?.data.map((k) => k.group ?? '') ?? []), ...u.subscriptions.map((s) => s.group)])].filter(Boolean).sort(),
    [keys.data, u],
  );
  return (
    <section class="card" aria-labelledby="keys-h">
      <h2 id="keys-h">Keys</h2>
      <ErrorBox error={keys.error} />
      {keys.data ? (
        <KeyTable admin={admin} keys={keys.data.data} onChange={onChange} caption={`Keys of ${u.name}`} />
      ) : (
        <Loading what="keys" />
      )}
      <h3>New key</h3>
      <CreateKey admin={admin} user={u.name} groups={groups} onCreated={onChange} />
    </section>
  );
}

/** Spend by day and by model: the ledger's totals of the user's requests over the last 30 days. */
function Spend({ admin, user, version }: { admin: Admin; user: string; version: number }) {
  const s = useLoad(() => admin.ledgerSummary({ by: 'day,model', user, type: 'request' }), [user, version]);
  const view = useMemo(() => (s.data ? shape(s.data.data) : undefined), [s.data]);
  return (
    <section class="card" aria-labelledby="spend-h">
      <h2 id="spend-h">Spend</h2>
      {s.data && (
        <p class="muted small">
          Charged per UTC day, {s.data.from} to {s.data.to}, from the ledger ({s.data.source}).
        </p>
      )}
      <ErrorBox error={s.error} title="The ledger did not answer" />
      {!s.data && s.loading && <Loading what="spend" />}
      {view && (
        <>
          <figure>
            <DayChart
              label={`Spend of ${user} by day`}
              from={s.data!.from}
              to={s.data!.to}
              series={[
                { label: 'Total', byDay: new Map(view.days.map((d) => [d, view.byDay.get(d)!.charged])), bars: true },
                ...view.models.map((m) => ({
                  label: m,
                  byDay: new Map(
                    view.days.filter((d) => view.cells.has(`${d}\u0000${m}`)).map((d) => [d, view.cells.get(`${d}\u0000${m}`)!]),
                  ),
                })),
              ]}
            />
            <figcaption class="sr-only">The same numbers are in the tables below.</figcaption>
          </figure>
          <p>
            Total charged: <strong data-testid="spend-total">{usd(view.total)}</strong> for {int(view.requests)} requests
          </p>
          {view.days.length > 0 && (
            <div class="columns">
              <Table caption="Spend by day" columns={['Day', num('Requests'), num('Charged')]}>
                {view.days.map((d) => (
                  <tr key={d}>
                    <th scope="row">{d}</th>
                    <td class="num">{int(view.byDay.get(d)!.requests)}</td>
                    <td class="num">{usd(view.byDay.get(d)!.charged)}</td>
                  </tr>
                ))}
              </Table>
              <Table caption="Spend by model" columns={['Model', num('Requests'), num('Tokens in / out'), num('Charged')]}>
                {view.models.map((m) => {
                  const x = view.byModel.get(m)!;
                  return (
                    <tr key={m}>
                      <th scope="row">{m}</th>
                      <td class="num">{int(x.requests)}</td>
                      <td class="num">
                        {int(x.input)} / {int(x.output)}
                      </td>
                      <td class="num">{usd(x.charged)}</td>
                    </tr>
                  );
                })}
              </Table>
            </div>
          )}
        </>
      )}
    </section>
  );
}

/** Sums in micro-USD (integers), shown in USD: the totals add up to the cent and below. */
function shape(rows: LedgerRow[]) {
  const micro = (n: number) => Math.round(n * 1e6);
  const byDay = new Map<string, { requests: number; charged: number }>();
  const byModel = new Map<string, { requests: number; input: number; output: number; charged: number }>();
  const cells = new Map<string, number>();
  let total = 0;
  let requests = 0;
  for (const r of rows) {
    const day = r.day ?? '';
    const model = r.model ?? '(none)';
    const d = byDay.get(day) ?? { requests: 0, charged: 0 };
    d.requests += r.requests;
    d.charged += micro(r.charged_usd);
    byDay.set(day, d);
    const m = byModel.get(model) ?? { requests: 0, input: 0, output: 0, charged: 0 };
    m.requests += r.requests;
    m.input += r.input_tokens ?? 0;
    m.output += r.output_tokens ?? 0;
    m.charged += micro(r.charged_usd);
    byModel.set(model, m);
    cells.set(`${day}\u0000${model}`, (cells.get(`${day}\u0000${model}`) ?? 0) + micro(r.charged_usd));
    total += micro(r.charged_usd);
    requests += r.requests;
  }
  const usdOf = (x: number) => x / 1e6;
  return {
    days: [...byDay.keys()].sort(),
    models: [...byModel.keys()].sort(),
    byDay: new Map([...byDay].map(([k, x]) => [k, { ...x, charged: usdOf(x.charged) }])),
    byModel: new Map([...byModel].map(([k, x]) => [k, { ...x, charged: usdOf(x.charged) }])),
    cells: new Map([...cells].map(([k, x]) => [k, usdOf(x)])),
    total: usdOf(total),
    requests,
  };
}
