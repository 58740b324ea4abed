/**
 * A real browser for the console's tests: Debian's Chromium at /usr/bin/chromium (installed by
 * scripts/ensure-chromium.sh when missing; never a downloaded browser), driven by playwright-core,
 * headless, with a fresh profile folder per launch. axe-core is run inside the page; screenshots of
 * the views go to docs/console/.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { ROOT, type TapTest } from '../helpers/gateway.js';

export const CHROMIUM = '/usr/bin/chromium';
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export interface Browser {
  context: BrowserContext;
  page: Page;
  /** Every dialog the pages opened (an alert would be an XSS that ran). */
  dialogs: string[];
  /** Uncaught errors in the pages. */
  errors: string[];
  newPage(): Promise<Page>;
  close(): Promise<void>;
}

export async function launch(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    const r = spawnSync('bash', [path.join(ROOT, 'scripts/ensure-chromium.sh')], { stdio: 'inherit' });
    if (r.status !== 0) throw new Error('Chromium is missing and scripts/ensure-chromium.sh could not install it');
  }
  const profile = mkdtempSync(path.join(tmpdir(), 'console-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1100, height: 760 },
    permissions: ['clipboard-read', 'clipboard-write'],
    locale: 'en-US',
    timezoneId: 'UTC',
    // Generous: the machine may be loaded; every wait is for an event, these only bound a failure.
    timeout: 120_000,
  });
  context.setDefaultTimeout(60_000);
  const dialogs: string[] = [];
  const errors: string[] = [];
  const watched = new WeakSet<Page>();
  const watch = (p: Page) => {
    if (watched.has(p)) return;
    watched.add(p);
    p.on('dialog', (d) => {
      dialogs.push(`${d.type()}: ${d.message()}`);
      void d.dismiss();
    });
    p.on('pageerror', (e) => errors.push(e.message));
  };
  context.on('page', watch);
  for (const p of context.pages()) watch(p);
  const page = context.pages()[0] ?? (await context.newPage());
  watch(page);
  return {
    context,
    page,
    dialogs,
    errors,
    newPage: () => context.newPage(),
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** axe-core inside the page: no serious or critical violation (WCAG 2.x A and AA rules, best practices). */
export async function axe(t: TapTest, page: Page, view: string): Promise<void> {
  if (!(await page.evaluate('typeof window.axe !== "undefined"'))) await page.evaluate(AXE);
  const found = await page.evaluate<unknown[]>(`axe.run(document, { resultTypes: ['violations'] }).then((r) =>
      r.violations
        .filter((v) => v.impact === 'serious' || v.impact === 'critical')
        .map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' ') + ' ' + n.failureSummary) })))`);
  t.same(found, [], `axe: no serious or critical accessibility violation on ${view}`);
  // Tables whose header does not line up with their rows read wrongly cell by cell in a screen
  // reader, which axe does not catch: every header cell named, as many as every row has cells
  // (tables hidden from assistive technology, as the chart's legend, left out).
  const tables = await page.evaluate<
    string[]
  >(`[...document.querySelectorAll('table')].filter((tb) => !tb.closest('[aria-hidden="true"]')).flatMap((tb) => {
      const name = tb.caption ? tb.caption.textContent : '(no caption)';
      const width = (row) => [...row.cells].reduce((n, c) => n + c.colSpan, 0);
      const head = tb.tHead && tb.tHead.rows[0];
      if (!head) return [name + ': no header row'];
      const out = [...head.cells].filter((c) => c.textContent.trim() === '').map(() => name + ': a header cell without a name');
      for (const body of tb.tBodies)
        for (const row of body.rows)
          if (width(row) !== width(head)) out.push(name + ': a row of ' + width(row) + ' cells under a header of ' + width(head));
      return out;
    })`);
  t.same(tables, [], `tables on ${view}: each header cell named, each row as wide as its header`);
}

export const SHOTS = path.join(ROOT, 'docs/console');

/**
 * A screenshot of a view. Always taken (a view that cannot be drawn fails here); written to
 * docs/console/<name>.png when that file is missing or CONSOLE_SCREENSHOTS=1 (so a test run leaves
 * the committed pictures alone unless asked to refresh them).
 */
export async function screenshot(page: Page, name: string): Promise<void> {
  const png = await page.screenshot({ fullPage: false, animations: 'disabled', caret: 'hide' });
  const file = path.join(SHOTS, `${name}.png`);
  if (process.env.CONSOLE_SCREENSHOTS === '1' || !existsSync(file)) {
    mkdirSync(SHOTS, { recursive: true });
    writeFileSync(file, png);
  }
}

/** Polls `f` until it returns something other than undefined (an event-driven wait would need a hook the page lacks). */
export async function until<T>(f: () => Promise<T | undefined>, what: string, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  let last: unknown;
  while (Date.now() < end) {
    try {
      const v = await f();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what}: not within ${ms} ms${last ? ` (last error: ${(last as Error).message})` : ''}`);
}

/** `$1,234.500001` → 1234.500001 */
export const usdNumber = (s: string | null): number => Number((s ?? '').replace(/[$,]/g, '').replace('−', '-'));
