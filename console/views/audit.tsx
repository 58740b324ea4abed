/** The audit trail, newest first: who changed what, when, from where; filter by actor or target. */
import { useState } from 'preact/hooks';
import type { Admin, AuditEntry } from '../api';
import { time } from '../format';
import { useTitle } from '../nav';
import { ErrorBox, Field, Loading, Table, useLoad } from '../ui';

export function AuditView({ admin }: { admin: Admin }) {
  useTitle('Audit log');
  const [actor, setActor] = useState('');
  const [target, setTarget] = useState('');
  const [cursor, setCursor] = useState<string | null>(null);
  const list = useLoad(() => admin.audit({ actor: actor.trim(), target: target.trim(), cursor, limit: 50 }), [actor, target, cursor]);
  return (
    <>
      <h1 tabIndex={-1}>Audit log</h1>
      <div class="filters">
        <Field label="Actor (token name)" value={actor} onInput={(x) => (setActor(x), setCursor(null))} />
        <Field label="Target (user:name or key:name)" value={target} onInput={(x) => (setTarget(x), setCursor(null))} />
      </div>
      <ErrorBox error={list.error} />
      {!list.data && list.loading && <Loading what="the audit log" />}
      {list.data && (list.data.data.length === 0 ? <p class="muted">No entries.</p> : <Entries items={list.data.data} />)}
      <div class="pager">
        {cursor !== null && (
          <button type="button" onClick={() => setCursor(null)}>
            Newest
          </button>
        )}
        {list.data?.next_cursor && (
          <button type="button" onClick={() => setCursor(list.data!.next_cursor)}>
            Older entries
          </button>
        )}
      </div>
    </>
  );
}

function Entries({ items }: { items: AuditEntry[] }) {
  return (
    <Table
      caption="Audit entries"
      hiddenCaption
      columns={['When', 'Who', 'Action', 'Target', 'Request', 'Change', <span class="sr-only">Records</span>]}
    >
      {items.map((e) => (
        <tr key={e.id}>
          <td>{time(e.at)}</td>
          <td>
            {e.actor}
            <span class="muted small block">{e.ip}</span>
          </td>
          <td>{e.action}</td>
          <td class="mono">{e.target}</td>
          <td class="mono small">
            {e.method} {e.path}
          </td>
          <td class="note small">{summary(e.before, e.after)}</td>
          <td>
            {e.before === null && e.after === null ? (
              '—'
            ) : (
              <details>
                <summary>Before and after</summary>
                <div class="diff">
                  <pre aria-label="Before" tabIndex={0}>
                    {JSON.stringify(e.before, null, 2)}
                  </pre>
                  <pre aria-label="After" tabIndex={0}>
                    {JSON.stringify(e.after, null, 2)}
                  </pre>
                </div>
              </details>
            )}
          </td>
        </tr>
      ))}
    </Table>
  );
}

const HIDDEN = new Set(['updatedAt', 'createdAt']);
const short = (v: unknown) => {
  const s = JSON.stringify(v) ?? 'undefined';
  return s.length > 40 ? `${s.slice(0, 39)}…` : s;
};

/** What changed, in a line: the fields that differ (or, for a new record, what it was made with). */
function summary(before: unknown, after: unknown): string {
  const obj = (v: unknown): Record<string, unknown> | undefined =>
    v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  const b = obj(before);
  const a = obj(after);
  if (!a && !b) return '';
  if (!a) return 'removed';
  const fields = Object.keys(b ? { ...b, ...a } : a).filter((k) => !HIDDEN.has(k) && (!b || JSON.stringify(b[k]) !== JSON.stringify(a[k])));
  const parts = fields.slice(0, 4).map((k) => (b ? `${k}: ${short(b[k])} → ${short(a[k])}` : `${k}: ${short(a[k])}`));
  if (fields.length > 4) parts.push(`and ${fields.length - 4} more`);
  return parts.join('; ');
}
