/**
 * The console's shell: who is signed in, the views (a hash route: `#/users/acme`, so that nothing
 * but the view's name reaches the address bar and the server never sees it), and the navigation.
 */
import type { ComponentChildren } from 'preact';
import { useEffect, useMemo, useState } from 'preact/hooks';
import { Admin } from './api';
import { go } from './nav';
import { loadSession, saveSession, type Session } from './session';
import { Login } from './views/login';
import { UsersView } from './views/users';
import { UserView } from './views/user';
import { KeysView } from './views/keys';
import { AccountsView } from './views/accounts';
import { AuditView } from './views/audit';
import { UsageView } from './views/usage';

type Route =
  | { view: 'users' }
  | { view: 'user'; name: string }
  | { view: 'keys' }
  | { view: 'accounts' }
  | { view: 'audit' }
  | { view: 'usage' }
  | { view: 'unknown'; path: string };

function parse(hash: string): Route | undefined {
  const path = hash.replace(/^#\/?/, '');
  if (path === '') return undefined;
  const [head, ...rest] = path.split('/');
  if (head === 'users' && rest.length === 0) return { view: 'users' };
  if (head === 'users' && rest.length === 1 && rest[0] !== '') {
    try {
      return { view: 'user', name: decodeURIComponent(rest[0]) };
    } catch {
      return { view: 'unknown', path };
    }
  }
  if (rest.length === 0 && (head === 'keys' || head === 'accounts' || head === 'audit' || head === 'usage')) return { view: head };
  return { view: 'unknown', path };
}

function useHash(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return hash;
}

const ADMIN_NAV: [string, string][] = [
  ['#/users', 'Users'],
  ['#/keys', 'Keys'],
  ['#/accounts', 'Upstream accounts'],
  ['#/audit', 'Audit log'],
];

export function App() {
  const [session, setSession] = useState<Session | undefined>(loadSession);
  const hash = useHash();
  const route = parse(hash);
  const admin = useMemo(() => (session?.kind === 'admin' ? new Admin(session.token) : undefined), [session]);

  // A new view: its heading takes the focus, so a screen reader announces where it is.
  useEffect(() => {
    document.querySelector<HTMLElement>('main h1')?.focus();
  }, [hash, session?.kind]);

  const signIn = (s: Session) => {
    saveSession(s);
    setSession(s);
    go(s.kind === 'admin' ? '#/users' : '#/usage');
  };
  const signOut = () => {
    saveSession(undefined);
    setSession(undefined);
    go('#/');
  };

  if (!session) {
    return (
      <Shell nav={[]} active="">
        <Login onSignIn={signIn} />
      </Shell>
    );
  }
  if (session.kind === 'key') {
    return (
      <Shell nav={[['#/usage', 'My usage']]} active="#/usage" onSignOut={signOut} who="Key holder">
        <UsageView apiKey={session.key} />
      </Shell>
    );
  }
  const r = route ?? { view: 'users' };
  const active = r.view === 'user' ? '#/users' : `#/${r.view}`;
  return (
    <Shell nav={ADMIN_NAV} active={active} onSignOut={signOut} who="Operator">
      {r.view === 'users' && <UsersView admin={admin!} />}
      {r.view === 'user' && <UserView admin={admin!} name={r.name} key={r.name} />}
      {r.view === 'keys' && <KeysView admin={admin!} />}
      {r.view === 'accounts' && <AccountsView admin={admin!} />}
      {r.view === 'audit' && <AuditView admin={admin!} />}
      {(r.view === 'usage' || r.view === 'unknown') && (
        <>
          <h1 tabIndex={-1}>Not found</h1>
          <p>There is no view at this address. Pick one above.</p>
        </>
      )}
    </Shell>
  );
}

function Shell(props: { nav: [string, string][]; active: string; onSignOut?: () => void; who?: string; children: ComponentChildren }) {
  return (
    <>
      <a class="skip" href="#main" onClick={(e) => (e.preventDefault(), document.getElementById('main')?.focus())}>
        Skip to content
      </a>
      <header class="top">
        <span class="brand">Gateway console</span>
        {props.nav.length > 0 && (
          <nav aria-label="Views">
            <ul>
              {props.nav.map(([href, label]) => (
                <li key={href}>
                  <a href={href} aria-current={props.active === href ? 'page' : undefined}>
                    {label}
                  </a>
                </li>
              ))}
            </ul>
          </nav>
        )}
        {props.onSignOut && (
          <span class="who">
            <span class="muted">{props.who}</span>
            <button type="button" onClick={props.onSignOut}>
              Sign out
            </button>
          </span>
        )}
      </header>
      <main id="main" tabIndex={-1}>
        {props.children}
      </main>
    </>
  );
}
