/** Users: search, list (a page at a time), create, suspend or reactivate. */
import { useState } from 'preact/hooks';
import type { Admin, User } from '../api';
import { usd } from '../format';
import { go, userLink, useTitle } from '../nav';
import { Badge, ErrorBox, Field, Form, Loading, Notice, num, Select, Table, useAction, useLoad } from '../ui';
import * as v from '../validate';

export function UsersView({ admin }: { admin: Admin }) {
  useTitle('Users');
  const [q, setQ] = useState('');
  const [status, setStatus] = useState('');
  const [cursor, setCursor] = useState<string | null>(null);
  const [older, setOlder] = useState<(string | null)[]>([]);
  const list = useLoad(() => admin.users({ q, status, cursor, limit: 50 }), [q, status, cursor]);
  const reset = () => {
    setCursor(null);
    setOlder([]);
  };
  return (
    <>
      <h1 tabIndex={-1}>Users</h1>
      <section class="card" aria-labelledby="list-h">
        <h2 id="list-h">All users</h2>
        <div class="filters">
          <Field
            label="Search name or note"
            type="search"
            inputMode="search"
            value={q}
            onInput={(x) => {
              setQ(x);
              reset();
            }}
          />
          <Select
            label="Status"
            value={status}
            onChange={(x) => {
              setStatus(x);
              reset();
            }}
            options={[
              ['', 'Any'],
              ['active', 'Active'],
              ['inactive', 'Suspended'],
            ]}
          />
        </div>
        <ErrorBox error={list.error} />
        {list.loading && !list.data && <Loading what="users" />}
        {list.data && <UserTable admin={admin} users={list.data.data} onChange={list.reload} />}
        <div class="pager">
          {older.length > 0 && (
            <button
              type="button"
              onClick={() => {
                setCursor(older[older.length - 1]);
                setOlder(older.slice(0, -1));
              }}
            >
              Previous page
            </button>
          )}
          {list.data?.next_cursor && (
            <button
              type="button"
              onClick={() => {
                setOlder([...older, cursor]);
                setCursor(list.data!.next_cursor);
              }}
            >
              Next page
            </button>
          )}
        </div>
      </section>
      <CreateUser admin={admin} />
    </>
  );
}

function UserTable({ admin, users, onChange }: { admin: Admin; users: User[]; onChange: () => void }) {
  const action = useAction();
  if (users.length === 0) return <p class="muted">No user matches.</p>;
  return (
    <>
      <ErrorBox error={action.error} />
      <Table
        caption="Users"
        hiddenCaption
        columns={['Name', 'Status', 'Note', num('Balance'), 'Plans', num('Keys'), 'Source', <span class="sr-only">Actions</span>]}
      >
        {users.map((u) => (
          <tr key={u.name}>
            <th scope="row">
              <a href={userLink(u.name)}>{u.name}</a>
            </th>
            <td>
              <Badge ok={u.status === 'active'}>{u.status === 'active' ? 'active' : 'suspended'}</Badge>
            </td>
            <td class="note">{u.note ?? ''}</td>
            <td class="num">{usd(u.wallet.balance_usd)}</td>
            <td>{u.subscriptions.map((s) => s.group).join(', ') || '—'}</td>
            <td class="num">{u.keys.length}</td>
            <td>{u.source === 'file' ? 'config file' : 'admin API'}</td>
            <td>
              <UserStatusButton admin={admin} user={u} action={action} onChange={onChange} inList />
            </td>
          </tr>
        ))}
      </Table>
    </>
  );
}

type F = 'name' | 'note' | 'rpm' | 'concurrency';

function CreateUser({ admin }: { admin: Admin }) {
  const [f, setF] = useState<Record<F, string>>({ name: '', note: '', rpm: '0', concurrency: '0' });
  const [errors, setErrors] = useState<v.Errors<F>>({});
  const [done, setDone] = useState('');
  const action = useAction();
  const set = (k: F) => (x: string) => setF({ ...f, [k]: x });
  return (
    <section class="card" aria-labelledby="create-h">
      <h2 id="create-h">New user</h2>
      <p class="muted">Its wallet starts at zero: top it up on its page.</p>
      <Form
        label="New user"
        onSubmit={() => {
          const e = v.clean<F>({
            name: v.name(f.name),
            note: v.text(f.note, 0, 500),
            rpm: v.integer(f.rpm, 0),
            concurrency: v.integer(f.concurrency, 0),
          });
          setErrors(e);
          setDone('');
          if (Object.keys(e).length > 0) return;
          void action
            .run(() =>
              admin.createUser({
                name: f.name,
                ...(f.note !== '' ? { note: f.note } : {}),
                rpm: Number(f.rpm),
                concurrency: Number(f.concurrency),
              }),
            )
            .then((r) => {
              if (!r) return;
              setDone(`User ${r.value.name} created.`);
              go(userLink(r.value.name));
            });
        }}
      >
        <div class="row">
          <Field label="Name" value={f.name} onInput={set('name')} error={errors.name} hint="Letters, digits, _ . @ -" />
          <Field label="Note" value={f.note} onInput={set('note')} error={errors.note} wide />
          <Field label="Requests per minute (0: no limit)" inputMode="numeric" value={f.rpm} onInput={set('rpm')} error={errors.rpm} />
          <Field
            label="Concurrent requests (0: no limit)"
            inputMode="numeric"
            value={f.concurrency}
            onInput={set('concurrency')}
            error={errors.concurrency}
          />
        </div>
        <button type="submit" class="primary" disabled={action.busy}>
          Create user
        </button>
        <ErrorBox error={action.error} />
        {done && <Notice text={done} />}
      </Form>
    </section>
  );
}

/**
 * Suspends an active user or reactivates a suspended one; nothing for a user of the config file
 * (changed there). In a list its accessible name says whom it acts on.
 */
export function UserStatusButton(props: {
  admin: Admin;
  user: User;
  action: ReturnType<typeof useAction>;
  onChange: () => void;
  inList?: boolean;
}) {
  const { admin, user, action } = props;
  if (user.source !== 'store') return null;
  const verb = user.status === 'active' ? 'Suspend' : 'Reactivate';
  return (
    <button
      type="button"
      disabled={action.busy}
      aria-label={props.inList ? `${verb} ${user.name}` : undefined}
      onClick={() =>
        void action
          .run(() => admin.updateUser(user.name, { status: user.status === 'active' ? 'inactive' : 'active' }))
          .then((r) => r && props.onChange())
      }
    >
      {props.inList ? verb : `${verb} user`}
    </button>
  );
}
