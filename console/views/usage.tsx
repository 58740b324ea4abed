/**
 * A key holder's view: what GET /v1/usage says about their key (spec §2.9) — what is left (the
 * wallet, the plan's allowances, the key's own quota and windows with their reset times), today's
 * and the range's usage, per model, and a daily chart: from `daily_usage` where the gateway sends
 * it, else today's row alone (said so under the chart).
 */
import type { ComponentChildren } from 'preact';
import { usage, type Counters, type KeyUsage } from '../api';
import { DayChart } from '../chart';
import { int, relative, time, today, usd } from '../format';
import { useTitle } from '../nav';
import { Badge, ErrorBox, Facts, Loading, num, Table, useLoad } from '../ui';

export function UsageView({ apiKey }: { apiKey: string }) {
  useTitle('My usage');
  const u = useLoad(() => usage(apiKey), [apiKey]);
  const d = u.data;
  return (
    <>
      <h1 tabIndex={-1}>My usage</h1>
      <div class="toolbar">
        <button type="button" onClick={u.reload}>
          Refresh
        </button>
      </div>
      <ErrorBox error={u.error} />
      {!d && u.loading && <Loading what="your usage" />}
      {d && (
        <>
          <div class="columns">
            <Left d={d} />
            <Limits d={d} />
          </div>
          <Totals d={d} />
          <Daily d={d} />
          <Models d={d} />
        </>
      )}
    </>
  );
}

function Left({ d }: { d: KeyUsage }) {
  const items: [string, ComponentChildren, string?][] = [];
  if (d.status) items.push(['Key', <Badge ok={d.status === 'active'}>{d.status.replace('_', ' ')}</Badge>, 'usage-status']);
  if (d.planName) items.push(['Billed to', d.planName === '钱包余额' ? 'wallet (钱包余额)' : `plan ${d.planName}`]);
  if (d.balance !== undefined) items.push(['Balance', usd(d.balance), 'usage-balance']);
  if (d.remaining !== undefined) items.push(['Remaining', d.remaining === -1 ? 'unlimited' : usd(d.remaining), 'usage-remaining']);
  if (d.expires_at) items.push(['Key expires', `${time(d.expires_at)} (${d.days_until_expiry ?? 0} days)`]);
  return (
    <section class="card" aria-labelledby="left-h">
      <h2 id="left-h">What is left</h2>
      <Facts items={items} />
    </section>
  );
}

function Limits({ d }: { d: KeyUsage }) {
  const rows: [string, number, number, string | null][] = [];
  if (d.quota) rows.push(['Key quota', d.quota.used, d.quota.limit, null]);
  for (const w of d.rate_limits ?? []) rows.push([`${w.window} window`, w.used, w.limit, w.reset_at]);
  const s = d.subscription;
  if (s) {
    rows.push(['Plan, today', s.daily_usage_usd, s.daily_limit_usd, null]);
    rows.push(['Plan, this week', s.weekly_usage_usd, s.weekly_limit_usd, null]);
    rows.push(['Plan, this month', s.monthly_usage_usd, s.monthly_limit_usd, null]);
  }
  return (
    <section class="card" aria-labelledby="limits-h">
      <h2 id="limits-h">Limits</h2>
      {s && <p class="small">Plan expires {s.expires_at ? `${time(s.expires_at)} (${relative(s.expires_at)})` : 'never'}.</p>}
      {rows.length === 0 ? (
        <p class="muted">This key has no limits of its own.</p>
      ) : (
        <Table caption="Limits" hiddenCaption columns={['Limit', num('Used'), num('Of'), 'Resets']}>
          {rows.map(([name, used, lim, reset]) => (
            <tr key={name}>
              <th scope="row">{name}</th>
              <td class="num">{usd(used)}</td>
              <td class="num">{lim > 0 ? usd(lim) : 'no limit'}</td>
              <td>{reset ? `${time(reset)} (${relative(reset)})` : name.endsWith('window') ? 'starts at first use' : '—'}</td>
            </tr>
          ))}
        </Table>
      )}
    </section>
  );
}

function Totals({ d }: { d: KeyUsage }) {
  if (!d.usage) return null;
  const row = (label: string, c: Counters, testid: string) => (
    <tr data-testid={testid}>
      <th scope="row">{label}</th>
      <td class="num">{int(c.requests)}</td>
      <td class="num">{int(c.input_tokens)}</td>
      <td class="num">{int(c.output_tokens)}</td>
      <td class="num">{int(c.cache_read_tokens + c.cache_creation_tokens)}</td>
      <td class="num">{usd(c.cost)}</td>
      <td class="num">{usd(c.actual_cost)}</td>
    </tr>
  );
  return (
    <section class="card" aria-labelledby="totals-h">
      <h2 id="totals-h">Usage</h2>
      <Table
        caption="Usage today and over the range"
        hiddenCaption
        columns={[
          <span class="sr-only">Period</span>,
          num('Requests'),
          num('Input tokens'),
          num('Output tokens'),
          num('Cache tokens'),
          num('List price'),
          num('Charged'),
        ]}
      >
        {row('Today', d.usage.today, 'usage-today')}
        {row('Last 30 days', d.usage.total, 'usage-total')}
      </Table>
      <p class="muted small">
        Now: {int(d.usage.rpm)} requests and {int(d.usage.tpm)} tokens per minute; {int(d.usage.average_duration_ms)} ms per request on
        average.
      </p>
    </section>
  );
}

function Daily({ d }: { d: KeyUsage }) {
  const fromDaily = Array.isArray(d.daily_usage);
  const rows = fromDaily
    ? d.daily_usage!.map((r) => ({ day: r.date, requests: r.requests, charged: r.actual_cost }))
    : d.usage
      ? [{ day: today(), requests: d.usage.today.requests, charged: d.usage.today.actual_cost }].filter(
          (r) => r.requests > 0 || r.charged > 0,
        )
      : [];
  return (
    <section class="card" aria-labelledby="daily-h">
      <h2 id="daily-h">By day</h2>
      <figure>
        <DayChart
          label="Charged per day"
          from={daysAgo(30)}
          to={today()}
          series={[{ label: 'Charged', byDay: new Map(rows.map((r) => [r.day, r.charged])), bars: true }]}
        />
        <figcaption class="muted small">
          Charged per UTC day.
          {!fromDaily && ' This gateway reports no per-day history (daily_usage) on /v1/usage: today only.'}
        </figcaption>
      </figure>
      {rows.length > 0 && (
        <Table caption="Charged per day" columns={['Day', num('Requests'), num('Charged')]}>
          {rows.map((r) => (
            <tr key={r.day}>
              <th scope="row">{r.day}</th>
              <td class="num">{int(r.requests)}</td>
              <td class="num">{usd(r.charged)}</td>
            </tr>
          ))}
        </Table>
      )}
    </section>
  );
}

/** The day `n` days before today (UTC): /v1/usage's range starts 30 days back. */
function daysAgo(n: number): string {
  return new Date(Date.parse(`${today()}T00:00:00Z`) - n * 86_400_000).toISOString().slice(0, 10);
}

function Models({ d }: { d: KeyUsage }) {
  const models = d.model_stats ?? [];
  return (
    <section class="card" aria-labelledby="models-h">
      <h2 id="models-h">By model</h2>
      {models.length === 0 ? (
        <p class="muted">No requests in the range.</p>
      ) : (
        <Table
          caption="Usage by model"
          hiddenCaption
          columns={['Model', num('Requests'), num('Input tokens'), num('Output tokens'), num('Charged')]}
        >
          {models.map((m) => (
            <tr key={m.model}>
              <th scope="row">{m.model}</th>
              <td class="num">{int(m.requests)}</td>
              <td class="num">{int(m.input_tokens)}</td>
              <td class="num">{int(m.output_tokens)}</td>
              <td class="num">{usd(m.actual_cost)}</td>
            </tr>
          ))}
        </Table>
      )}
    </section>
  );
}
