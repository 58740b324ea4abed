/**
 * The pieces every view uses. Everything is rendered through Preact's text nodes and attributes:
 * no view ever writes HTML (the page's CSP requires Trusted Types, so it could not).
 */
import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from './api';

/** A value loaded by `fn`, reloaded when `deps` change or `reload()` is called. */
export function useLoad<T>(fn: () => Promise<T>, deps: unknown[]) {
  const [state, setState] = useState<{ data?: T; error?: ApiError; loading: boolean }>({ loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    fn().then(
      (data) => live && setState({ data, loading: false }),
      (error) => live && setState({ error: asApiError(error), loading: false }),
    );
    return () => {
      live = false;
    };
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, reload };
}

export function asApiError(e: unknown): ApiError {
  return e instanceof ApiError ? e : new ApiError(e instanceof Error ? e.message : String(e), 0, 'console_error');
}

/** What the gateway said, plainly: its message, code, status, and each field it refused. */
export function ErrorBox({ error, title }: { error?: ApiError; title?: string }) {
  if (!error) return null;
  return (
    <div class="error" role="alert">
      <p class="error-title">
        {title ? `${title}: ` : ''}
        {error.message}
      </p>
      <p class="error-meta">
        <code>{error.code}</code>
        {error.status ? ` · HTTP ${error.status}` : ''}
        {error.requestId ? ` · request ${error.requestId}` : ''}
      </p>
      {error.details.length > 0 && (
        <ul class="error-details">
          {error.details.map((d) => (
            <li key={d.path + d.message}>
              <code>{d.path || 'body'}</code> {d.message}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="muted" role="status">
      Loading {what}…
    </p>
  );
}

let fieldIds = 0;

/** A labelled input with its error (announced, and tied to the input by aria-describedby). */
export function Field(props: {
  label: string;
  value: string;
  onInput: (v: string) => void;
  error?: string;
  hint?: string;
  type?: 'text' | 'password' | 'search';
  inputMode?: 'decimal' | 'numeric' | 'text' | 'search';
  placeholder?: string;
  autoComplete?: string;
  list?: string;
  name?: string;
  wide?: boolean;
}) {
  const id = useRef(`f${++fieldIds}`).current;
  const describedBy = [props.error ? `${id}-err` : '', props.hint ? `${id}-hint` : ''].filter(Boolean).join(' ') || undefined;
  const attrs = {
    id,
    name: props.name,
    inputMode: props.inputMode,
    value: props.value,
    placeholder: props.placeholder,
    autoComplete: props.autoComplete ?? 'off',
    spellcheck: false,
    'aria-invalid': props.error ? ('true' as const) : undefined,
    'aria-describedby': describedBy,
    onInput: (e: { currentTarget: HTMLInputElement }) => props.onInput(e.currentTarget.value),
  };
  return (
    <div class={`field${props.wide ? ' wide' : ''}`}>
      <label for={id}>{props.label}</label>
      {props.type === 'password' ? (
        <input {...attrs} type="password" />
      ) : props.type === 'search' ? (
        <input {...attrs} type="search" />
      ) : (
        <input {...attrs} type="text" list={props.list} />
      )}
      {props.hint && (
        <span id={`${id}-hint`} class="hint">
          {props.hint}
        </span>
      )}
      {props.error && (
        <span id={`${id}-err`} class="field-error">
          {props.error}
        </span>
      )}
    </div>
  );
}

export function Select(props: { label: string; value: string; onChange: (v: string) => void; options: [string, string][] }) {
  const id = useRef(`f${++fieldIds}`).current;
  return (
    <div class="field">
      <label for={id}>{props.label}</label>
      <select id={id} value={props.value} onChange={(e) => props.onChange(e.currentTarget.value)}>
        {props.options.map(([v, l]) => (
          <option key={v} value={v}>
            {l}
          </option>
        ))}
      </select>
    </div>
  );
}

/**
 * A form whose submission the page handles (the CSP forbids the browser's own: nothing typed here
 * can end up in a URL). `busy` disables its buttons while a call is out.
 */
export function Form(props: { onSubmit: () => void; label: string; children: ComponentChildren; class?: string }) {
  return (
    <form
      class={props.class ?? 'form'}
      aria-label={props.label}
      noValidate
      onSubmit={(e) => {
        e.preventDefault();
        props.onSubmit();
      }}
    >
      {props.children}
    </form>
  );
}

/** A button that asks once more before it acts (rotating or deleting a key cannot be undone). */
export function ConfirmButton(props: { label: string; confirm: string; onConfirm: () => void; disabled?: boolean; danger?: boolean }) {
  const [asking, setAsking] = useState(false);
  if (!asking) {
    return (
      <button type="button" class={props.danger ? 'danger' : undefined} disabled={props.disabled} onClick={() => setAsking(true)}>
        {props.label}
      </button>
    );
  }
  return (
    <span class="confirm">
      <button
        type="button"
        class="danger"
        onClick={() => {
          setAsking(false);
          props.onConfirm();
        }}
      >
        {props.confirm}
      </button>
      <button type="button" onClick={() => setAsking(false)}>
        Cancel
      </button>
    </span>
  );
}

/** A secret shown once (a new or rotated key), with a copy button. */
export function Secret({ value, name, onDone }: { value: string; name: string; onDone: () => void }) {
  const [copied, setCopied] = useState<string>('');
  const input = useRef<HTMLInputElement>(null);
  return (
    <div class="secret" role="region" aria-label={`The secret of key ${name}`}>
      <p>
        <strong>The secret of key {name}.</strong> It is shown now and never again: copy it and hand it over.
      </p>
      <div class="secret-row">
        <input
          ref={input}
          readOnly
          value={value}
          aria-label="Key secret"
          data-testid="secret"
          class="mono"
          onFocus={(e) => e.currentTarget.select()}
        />
        <button
          type="button"
          onClick={() => {
            if (!navigator.clipboard) {
              input.current?.select();
              setCopied('Copying needs HTTPS here: the secret is selected, press Ctrl+C');
              return;
            }
            navigator.clipboard.writeText(value).then(
              () => setCopied('Copied'),
              () => {
                input.current?.select();
                setCopied('Could not copy: the secret is selected, press Ctrl+C');
              },
            );
          }}
        >
          Copy
        </button>
        <button type="button" onClick={onDone}>
          Done
        </button>
      </div>
      <p class="muted" role="status">
        {copied}
      </p>
    </div>
  );
}

/** A definition list of label → value pairs. */
export function Facts({ items, label }: { items: [string, ComponentChildren, string?][]; label?: string }) {
  return (
    <dl class="facts" aria-label={label}>
      {items.map(([k, v, testid]) => (
        <div key={k}>
          <dt>{k}</dt>
          <dd data-testid={testid}>{v}</dd>
        </div>
      ))}
    </dl>
  );
}

/** A table's column: its name, right-aligned with `num` (figures); `false`, `undefined` or `null` leaves it out. */
export type Column = ComponentChildren | { name: ComponentChildren; num: true } | false;

/** A column of figures. */
export const num = (name: ComponentChildren): Column => ({ name, num: true });

/** A table with its caption (for screen readers only with `hiddenCaption`), a header row, and `children` as its rows. */
export function Table(props: { caption: string; hiddenCaption?: boolean; columns: Column[]; children: ComponentChildren }) {
  return (
    <table>
      <caption class={props.hiddenCaption ? 'sr-only' : undefined}>{props.caption}</caption>
      <thead>
        <tr>
          {props.columns.map((c, i) =>
            c === false || c === undefined || c === null ? null : typeof c === 'object' && 'num' in c ? (
              <th key={i} scope="col" class="num">
                {c.name}
              </th>
            ) : (
              <th key={i} scope="col">
                {c}
              </th>
            ),
          )}
        </tr>
      </thead>
      <tbody>{props.children}</tbody>
    </table>
  );
}

export function Badge({ ok, children }: { ok: boolean; children: ComponentChildren }) {
  return <span class={`badge ${ok ? 'ok' : 'bad'}`}>{children}</span>;
}

/** A result line after an action ("Credited $5.00"), announced politely. */
export function Notice({ text }: { text: string }) {
  return (
    <p class="notice" role="status">
      {text}
    </p>
  );
}

/** Runs a call for a form or button: whether it is out, and its error. `{ value }` when it succeeded. */
export function useAction() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | undefined>();
  const run = useCallback(async <T,>(fn: () => Promise<T>): Promise<{ value: T } | undefined> => {
    setBusy(true);
    setError(undefined);
    try {
      return { value: await fn() };
    } catch (e) {
      setError(asApiError(e));
      return undefined;
    } finally {
      setBusy(false);
    }
  }, []);
  return { busy, error, run, setError };
}
