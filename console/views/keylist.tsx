/**
 * Keys, wherever they are listed (a user's page, the keys view): enable or disable, limits,
 * rotate, delete, what is used of them; and a new key, whose secret is shown once. Keys of the
 * config file are read-only here, as the API has them.
 */
import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import type { Admin, Key } from '../api';
import { limit, time, usd } from '../format';
import { userLink } from '../nav';
import { Badge, ConfirmButton, ErrorBox, Facts, Field, Form, Loading, num, Secret, Table, useAction, useLoad } from '../ui';
import * as v from '../validate';

const WINDOWS = ['5h', '1d', '7d'] as const;

export function KeyTable(props: { admin: Admin; keys: Key[]; onChange: () => void; showUser?: boolean; caption: string }) {
  const [secret, setSecret] = useState<{ name: string; key: string } | undefined>();
  const [open, setOpen] = useState<{ name: string; what: 'limits' | 'usage' } | undefined>();
  const action = useAction();
  const { admin, keys, onChange } = props;
  /** The button that opens (or closes) a key's usage or limits row below it. */
  const opener = (name: string, what: 'limits' | 'usage', label: string) => (
    <button
      type="button"
      aria-expanded={open?.name === name && open.what === what}
      onClick={() => setOpen(open?.name === name && open.what === what ? undefined : { name, what })}
    >
      {label}
      <span class="sr-only"> of {name}</span>
    </button>
  );
  return (
    <>
      {secret && <Secret name={secret.name} value={secret.key} onDone={() => setSecret(undefined)} />}
      <ErrorBox error={action.error} />
      {keys.length === 0 ? (
        <p class="muted">No keys.</p>
      ) : (
        <Table
          caption={props.caption}
          hiddenCaption
          columns={['Key', props.showUser && 'User', 'Group', 'State', num('Quota'), 'Windows (5h / 1d / 7d)', 'Expires', 'Actions']}
        >
          {keys.map((k) => (
            <Fragment key={k.name}>
              <tr>
                <th scope="row">
                  {k.name}
                  {k.hint && <span class="mono muted small block">{k.hint}</span>}
                </th>
                {props.showUser && (
                  <td>
                    <a href={userLink(k.user)}>{k.user}</a>
                  </td>
                )}
                <td>{k.group ?? '—'}</td>
                <td>
                  <Badge ok={k.enabled}>{k.enabled ? 'enabled' : 'disabled'}</Badge>
                </td>
                <td class="num">{limit(k.quota_usd)}</td>
                <td>{WINDOWS.map((w) => (k.windows_usd[w] > 0 ? usd(k.windows_usd[w]) : '—')).join(' / ')}</td>
                <td>{time(k.expires_at)}</td>
                <td class="actions">
                  {opener(k.name, 'usage', 'Usage')}
                  {k.source === 'file' ? (
                    <span class="muted small">config file</span>
                  ) : (
                    <>
                      <button
                        type="button"
                        disabled={action.busy}
                        onClick={() => void action.run(() => admin.updateKey(k.name, { enabled: !k.enabled })).then((r) => r && onChange())}
                      >
                        {k.enabled ? 'Disable' : 'Enable'}
                        <span class="sr-only"> {k.name}</span>
                      </button>
                      {opener(k.name, 'limits', 'Limits')}
                      <ConfirmButton
                        label={`Rotate`}
                        confirm={`Rotate ${k.name}: the old secret stops`}
                        disabled={action.busy}
                        onConfirm={() =>
                          void action
                            .run(() => admin.rotateKey(k.name))
                            .then((r) => {
                              if (!r) return;
                              setSecret({ name: k.name, key: r.value.key });
                              onChange();
                            })
                        }
                      />
                      <ConfirmButton
                        label="Delete"
                        confirm={`Delete ${k.name}`}
                        danger
                        disabled={action.busy}
                        onConfirm={() => void action.run(() => admin.deleteKey(k.name)).then((r) => r && onChange())}
                      />
                    </>
                  )}
                </td>
              </tr>
              {open?.name === k.name && (
                <tr class="more">
                  <td colSpan={props.showUser ? 8 : 7}>
                    {open.what === 'limits' ? (
                      <KeyLimits
                        admin={admin}
                        k={k}
                        onSaved={() => {
                          setOpen(undefined);
                          onChange();
                        }}
                      />
                    ) : (
                      <KeyUsage admin={admin} name={k.name} />
                    )}
                  </td>
                </tr>
              )}
            </Fragment>
          ))}
        </Table>
      )}
    </>
  );
}

type LimitField = 'quota' | '5h' | '1d' | '7d' | 'expires';

function KeyLimits({ admin, k, onSaved }: { admin: Admin; k: Key; onSaved: () => void }) {
  const [f, setF] = useState<Record<LimitField, string>>({
    quota: String(k.quota_usd),
    '5h': String(k.windows_usd['5h']),
    '1d': String(k.windows_usd['1d']),
    '7d': String(k.windows_usd['7d']),
    expires: k.expires_at ? k.expires_at.slice(0, 10) : '',
  });
  const [errors, setErrors] = useState<v.Errors<LimitField>>({});
  const action = useAction();
  const set = (x: LimitField) => (val: string) => setF({ ...f, [x]: val });
  return (
    <Form
      label={`Limits of ${k.name}`}
      onSubmit={() => {
        const e = v.clean<LimitField>({
          quota: v.limitUsd(f.quota),
          '5h': v.limitUsd(f['5h']),
          '1d': v.limitUsd(f['1d']),
          '7d': v.limitUsd(f['7d']),
          expires: v.date(f.expires),
        });
        setErrors(e);
        if (Object.keys(e).length > 0) return;
        void action
          .run(() =>
            admin.updateKey(k.name, {
              quota_usd: f.quota.trim(),
              windows_usd: { '5h': f['5h'].trim(), '1d': f['1d'].trim(), '7d': f['7d'].trim() },
              expires_at: f.expires === '' ? null : `${f.expires}T00:00:00Z`,
            }),
          )
          .then((r) => r && onSaved());
      }}
    >
      <div class="row">
        <Field label="Quota, USD (0: none)" inputMode="decimal" value={f.quota} onInput={set('quota')} error={errors.quota} />
        {WINDOWS.map((w) => (
          <Field key={w} label={`${w} window, USD (0: none)`} inputMode="decimal" value={f[w]} onInput={set(w)} error={errors[w]} />
        ))}
        <Field
          label="Expires on (UTC; empty: never)"
          placeholder="YYYY-MM-DD"
          value={f.expires}
          onInput={set('expires')}
          error={errors.expires}
        />
      </div>
      <button type="submit" class="primary" disabled={action.busy}>
        Save limits
      </button>
      <ErrorBox error={action.error} />
    </Form>
  );
}

/** GET /admin/keys/{name}/usage: what is used of the key's limits, its wallet or plan, its usage. */
function KeyUsage({ admin, name }: { admin: Admin; name: string }) {
  const u = useLoad(() => admin.keyUsage(name), [name]);
  if (u.error) return <ErrorBox error={u.error} />;
  if (!u.data) return <Loading what="usage" />;
  const d = u.data;
  return (
    <Facts
      label={`Usage of ${name}`}
      items={[
        ['Quota used', d.quota.limit > 0 ? `${usd(d.quota.used)} of ${usd(d.quota.limit)}` : `${usd(d.quota.used)} (no quota)`],
        ...Object.entries(d.windows).map(([w, x]): [string, string] => [
          `${w} window`,
          `${usd(x.used)} of ${usd(x.limit)}${x.reset_at ? `, resets ${time(x.reset_at)}` : ''}`,
        ]),
        ...(d.balance ? [['Wallet balance', usd(d.balance.remaining)] as [string, string]] : []),
        ...(d.plan ? [['Plan', d.plan.group] as [string, string]] : []),
        ['Today', `${d.usage.today.requests} requests, ${usd(d.usage.today.actual_cost)}`],
        ['Last 30 days', `${d.usage.total.requests} requests, ${usd(d.usage.total.actual_cost)}`],
      ]}
    />
  );
}

type NewField = 'user' | 'group' | 'name' | 'quota' | 'day' | 'days';

/** A new key for `user` (or a user typed in); its secret is shown once. */
export function CreateKey(props: { admin: Admin; user?: string; groups: string[]; onCreated: () => void }) {
  const [f, setF] = useState<Record<NewField, string>>({ user: props.user ?? '', group: '', name: '', quota: '0', day: '0', days: '' });
  const [errors, setErrors] = useState<v.Errors<NewField>>({});
  const [secret, setSecret] = useState<{ name: string; key: string } | undefined>();
  const action = useAction();
  const set = (x: NewField) => (val: string) => setF({ ...f, [x]: val });
  const listId = `groups-${props.user ?? 'any'}`;
  return (
    <>
      {secret && <Secret name={secret.name} value={secret.key} onDone={() => setSecret(undefined)} />}
      <Form
        label="New key"
        onSubmit={() => {
          const e = v.clean<NewField>({
            user: props.user ? undefined : v.name(f.user),
            group: f.group.trim() === '' ? 'Required' : undefined,
            name: f.name === '' ? undefined : v.name(f.name),
            quota: v.limitUsd(f.quota),
            day: v.limitUsd(f.day),
            days: f.days === '' ? undefined : v.integer(f.days, 1, 36500),
          });
          setErrors(e);
          if (Object.keys(e).length > 0) return;
          setSecret(undefined);
          void action
            .run(() =>
              props.admin.createKey({
                user: props.user ?? f.user,
                group: f.group.trim(),
                ...(f.name !== '' ? { name: f.name } : {}),
                quota_usd: f.quota.trim(),
                windows_usd: { '1d': f.day.trim() },
                ...(f.days !== '' ? { expires_in_days: Number(f.days) } : {}),
              }),
            )
            .then((r) => {
              if (!r) return;
              setSecret({ name: r.value.name, key: r.value.key });
              setF({ ...f, name: '' });
              props.onCreated();
            });
        }}
      >
        <div class="row">
          {!props.user && <Field label="User" value={f.user} onInput={set('user')} error={errors.user} />}
          <Field label="Group" value={f.group} onInput={set('group')} error={errors.group} list={listId} hint="A group of gateway.yaml" />
          <datalist id={listId}>
            {props.groups.map((g) => (
              <option key={g} value={g} />
            ))}
          </datalist>
          <Field label="Name (optional)" value={f.name} onInput={set('name')} error={errors.name} />
          <Field label="Quota, USD (0: none)" inputMode="decimal" value={f.quota} onInput={set('quota')} error={errors.quota} />
          <Field label="Per day, USD (0: none)" inputMode="decimal" value={f.day} onInput={set('day')} error={errors.day} />
          <Field label="Expires in days (optional)" inputMode="numeric" value={f.days} onInput={set('days')} error={errors.days} />
        </div>
        <button type="submit" class="primary" disabled={action.busy}>
          Create key
        </button>
        <ErrorBox error={action.error} />
      </Form>
    </>
  );
}
