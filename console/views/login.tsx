/**
 * Signing in: an operator with an admin token (checked by listing one user), or a key holder with
 * an API key (checked by reading its /v1/usage). What the gateway answers is shown as it is.
 */
import { useState } from 'preact/hooks';
import { Admin, usage } from '../api';
import { useTitle } from '../nav';
import type { Session } from '../session';
import { ErrorBox, Field, Form, useAction } from '../ui';

export function Login({ onSignIn }: { onSignIn: (s: Session) => void }) {
  useTitle('Sign in');
  return (
    <>
      <h1 tabIndex={-1}>Sign in</h1>
      <div class="columns">
        <section class="card" aria-labelledby="op-h">
          <h2 id="op-h">Operator</h2>
          <p class="muted">Users, keys, top-ups, upstream accounts and the audit log, with an admin token.</p>
          <TokenForm
            label="Admin token"
            button="Sign in as operator"
            check={async (token) => {
              await new Admin(token).users({ limit: 1 });
              onSignIn({ kind: 'admin', token });
            }}
          />
        </section>
        <section class="card" aria-labelledby="kh-h">
          <h2 id="kh-h">Key holder</h2>
          <p class="muted">What is left on your API key, and where it went.</p>
          <TokenForm
            label="API key"
            button="Show my usage"
            check={async (key) => {
              await usage(key);
              onSignIn({ kind: 'key', key });
            }}
          />
        </section>
      </div>
      <p class="muted small">
        Kept in this browser tab only (session storage), sent only to this gateway, never put in an address. Sign out or close the tab to
        forget it.
      </p>
    </>
  );
}

function TokenForm(props: { label: string; button: string; check: (token: string) => Promise<void> }) {
  const [value, setValue] = useState('');
  const [missing, setMissing] = useState(false);
  const { busy, error, run } = useAction();
  return (
    <Form
      label={props.button}
      onSubmit={() => {
        const token = value.trim();
        setMissing(token === '');
        if (token !== '') void run(() => props.check(token));
      }}
    >
      <Field label={props.label} type="password" value={value} onInput={setValue} error={missing ? 'Required' : undefined} wide />
      <button type="submit" class="primary" disabled={busy}>
        {props.button}
      </button>
      <ErrorBox error={error} />
    </Form>
  );
}
