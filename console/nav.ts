/** Moving between views (hash routes, app.tsx) and naming them. */
import { useEffect } from 'preact/hooks';

export function go(hash: string): void {
  if (location.hash !== hash) location.hash = hash;
}

export const userLink = (name: string) => `#/users/${encodeURIComponent(name)}`;

export function useTitle(title: string): void {
  useEffect(() => {
    document.title = `${title} · Gateway console`;
  }, [title]);
}
