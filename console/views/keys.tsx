/** Every key: filter by user, group or state; enable, disable, limits, rotate, delete; a new key. */
import { useMemo, useState } from 'preact/hooks';
import type { Admin } from '../api';
import { useTitle } from '../nav';
import { ErrorBox, Field, Loading, Select, useLoad } from '../ui';
import { CreateKey, KeyTable } from './keylist';

export function KeysView({ admin }: { admin: Admin }) {
  useTitle('Keys');
  const [user, setUser] = useState('');
  const [group, setGroup] = useState('');
  const [enabled, setEnabled] = useState('');
  const [cursor, setCursor] = useState<string | null>(null);
  const [version, setVersion] = useState(0);
  const list = useLoad(
    () => admin.keys({ user: user.trim(), group: group.trim(), enabled, cursor, limit: 100 }),
    [user, group, enabled, cursor, version],
  );
  const groups = useMemo(() => [...new Set(list.data?.data.map((k) => k.group ?? '') ?? [])].filter(Boolean).sort(), [list.data]);
  const changed = () => setVersion((x) => x + 1);
  return (
    <>
      <h1 tabIndex={-1}>Keys</h1>
      <section class="card" aria-labelledby="keys-h">
        <h2 id="keys-h">All keys</h2>
        <div class="filters">
          <Field label="User" value={user} onInput={(x) => (setUser(x), setCursor(null))} />
          <Field label="Group" value={group} onInput={(x) => (setGroup(x), setCursor(null))} />
          <Select
            label="State"
            value={enabled}
            onChange={(x) => (setEnabled(x), setCursor(null))}
            options={[
              ['', 'Any'],
              ['true', 'Enabled'],
              ['false', 'Disabled'],
            ]}
          />
        </div>
        <ErrorBox error={list.error} />
        {list.data ? (
          <KeyTable admin={admin} keys={list.data.data} onChange={changed} showUser caption="Keys" />
        ) : (
          list.loading && <Loading what="keys" />
        )}
        <div class="pager">
          {cursor !== null && (
            <button type="button" onClick={() => setCursor(null)}>
              First page
            </button>
          )}
          {list.data?.next_cursor && (
            <button type="button" onClick={() => setCursor(list.data!.next_cursor)}>
              Next page
            </button>
          )}
        </div>
      </section>
      <section class="card" aria-labelledby="new-h">
        <h2 id="new-h">New key</h2>
        <CreateKey admin={admin} groups={groups} onCreated={changed} />
      </section>
    </>
  );
}
