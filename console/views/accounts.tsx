/**
 * Upstream provider accounts (GET /admin/accounts): state, cooldowns, demotions, requests in
 * flight, recent time to first token. Refreshed every 10 s while the view is open. Fields this
 * view does not know (a newer gateway's) are shown as they come, under "More".
 */
import { useEffect, useState } from 'preact/hooks';
import type { Admin, UpstreamAccount } from '../api';
import { int, relative, time } from '../format';
import { useTitle } from '../nav';
import { Badge, ErrorBox, Loading, num, Table, useLoad } from '../ui';

const KNOWN = new Set([
  'name',
  'state',
  'available',
  'cooling_until',
  'cooldown_reason',
  'rpm_blocked_until',
  'disabled',
  'demoted',
  'in_flight',
  'ttft_ms',
  'consecutive_failures',
  'weight',
  'priority',
  'concurrency',
  'rpm',
  'models',
  'requests',
  'outcomes',
]);

export function AccountsView({ admin }: { admin: Admin }) {
  useTitle('Upstream accounts');
  const accounts = useLoad(() => admin.accounts(), []);
  const [auto, setAuto] = useState(true);
  useEffect(() => {
    if (!auto) return;
    const t = setInterval(accounts.reload, 10_000);
    return () => clearInterval(t);
  }, [auto, accounts.reload]);
  const d = accounts.data;
  const extra = d ? Object.entries(d).filter(([k]) => k !== 'providers') : [];
  return (
    <>
      <h1 tabIndex={-1}>Upstream accounts</h1>
      <div class="toolbar">
        <button type="button" onClick={accounts.reload}>
          Refresh now
        </button>
        <label class="check">
          <input type="checkbox" checked={auto} onChange={(e) => setAuto(e.currentTarget.checked)} /> Refresh every 10 s
        </label>
      </div>
      <ErrorBox error={accounts.error} />
      {!d && accounts.loading && <Loading what="accounts" />}
      {d && d.providers.length === 0 && <p class="muted">No provider accounts.</p>}
      {d?.providers.map((p) => (
        <section class="card" key={p.name} aria-labelledby={`p-${p.name}`}>
          <h2 id={`p-${p.name}`}>{p.name}</h2>
          <Table
            caption={`Accounts of ${p.name}`}
            hiddenCaption
            columns={[
              'Account',
              'State',
              'Cooldown',
              'Demoted',
              num('In flight'),
              num('TTFT (recent)'),
              num('Failures in a row'),
              num('Requests'),
              'Outcomes',
            ]}
          >
            {p.accounts.map((a) => (
              <Row key={a.name} a={a} />
            ))}
          </Table>
          {Object.keys(p).some((k) => k !== 'name' && k !== 'accounts') && <More value={omit(p, ['name', 'accounts'])} />}
        </section>
      ))}
      {extra.length > 0 && <More value={Object.fromEntries(extra)} />}
    </>
  );
}

function Row({ a }: { a: UpstreamAccount }) {
  const unknown = omit(a, [...KNOWN]);
  return (
    <tr>
      <th scope="row">{a.name}</th>
      <td>
        <Badge ok={a.available}>{a.state}</Badge>
        {!a.available && a.state === 'available' && <span class="muted small block">busy or rpm-blocked</span>}
        {a.disabled && (
          <span class="small block">
            since {time(a.disabled.since)}
            {a.disabled.status !== null ? ` (HTTP ${a.disabled.status})` : ''}: {a.disabled.message}
          </span>
        )}
      </td>
      <td>
        {a.cooling_until ? (
          <>
            until {time(a.cooling_until)} <span class="muted small">{relative(a.cooling_until)}</span>
            {a.cooldown_reason && <span class="small block">{a.cooldown_reason}</span>}
          </>
        ) : (
          '—'
        )}
        {a.rpm_blocked_until && <span class="small block">rpm-blocked until {time(a.rpm_blocked_until)}</span>}
      </td>
      <td>{a.demoted ? <Badge ok={false}>slow: demoted</Badge> : 'no'}</td>
      <td class="num">
        {int(a.in_flight)}
        {a.concurrency > 0 ? ` / ${int(a.concurrency)}` : ''}
      </td>
      <td class="num">{a.ttft_ms === null ? '—' : `${int(a.ttft_ms)} ms`}</td>
      <td class="num">{int(a.consecutive_failures)}</td>
      <td class="num">{int(a.requests)}</td>
      <td class="small">
        {Object.entries(a.outcomes ?? {})
          .filter(([, n]) => n > 0)
          .map(([k, n]) => `${k} ${int(n)}`)
          .join(', ') || '—'}
        {Object.keys(unknown).length > 0 && <More value={unknown} />}
      </td>
    </tr>
  );
}

function omit(o: Record<string, unknown>, keys: string[]): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).filter(([k]) => !keys.includes(k)));
}

/** Whatever else the gateway reported, as text. */
function More({ value }: { value: unknown }) {
  return (
    <details>
      <summary>More</summary>
      <pre tabIndex={0}>{JSON.stringify(value, null, 2)}</pre>
    </details>
  );
}
