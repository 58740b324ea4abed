/**
 * Who is signed in: an operator (an admin token) or a key holder (an API key). Kept in this tab's
 * sessionStorage — gone when the tab closes, never in a URL, a cookie or localStorage — and sent
 * only as an Authorization header to this origin.
 */
export type Session = { kind: 'admin'; token: string } | { kind: 'key'; key: string };

const SLOT = 'gateway-console-session';

export function loadSession(): Session | undefined {
  try {
    const raw = sessionStorage.getItem(SLOT);
    if (!raw) return undefined;
    const s = JSON.parse(raw) as Session;
    if (s.kind === 'admin' && typeof s.token === 'string') return s;
    if (s.kind === 'key' && typeof s.key === 'string') return s;
  } catch {
    /* storage off or garbled: signed out */
  }
  return undefined;
}

export function saveSession(s: Session | undefined): void {
  try {
    if (s) sessionStorage.setItem(SLOT, JSON.stringify(s));
    else sessionStorage.removeItem(SLOT);
  } catch {
    /* storage off: the session lives in memory only */
  }
}
