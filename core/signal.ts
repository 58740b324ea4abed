/**
 * A minimal abort signal: `aborted`, `abort` listeners, `abort()`. What the core, the bundled
 * plugins and the stores use (the store's `ClientSignal`) instead of an AbortController: on Node 20
 * creating an AbortSignal costs microseconds (and listeners on it more), once or twice per request.
 * Listeners run once, in the order added; one added twice runs once, one added after the abort
 * never runs; a throwing one stops neither the others nor the caller (as with an EventTarget).
 * `signal()` gives a real AbortSignal that follows it, made on first call.
 */
import type { ClientSignal } from './store/types.js';

export class Abort implements ClientSignal {
  aborted = false;
  private controller?: AbortController;
  private listeners?: Array<() => void>;

  signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort();
    }
    return this.controller.signal;
  }

  addEventListener(_type: 'abort', listener: () => void, _options?: { once?: boolean }): void {
    if (this.aborted) return;
    const l = (this.listeners ??= []);
    if (!l.includes(listener)) l.push(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const l = this.listeners;
    if (!l) return;
    const i = l.indexOf(listener);
    if (i >= 0) l.splice(i, 1);
  }

  /** Later calls do nothing. */
  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    const l = this.listeners;
    this.listeners = undefined;
    if (l) {
      for (const fn of l) {
        try {
          fn();
        } catch (e) {
          process.nextTick(() => {
            throw e;
          });
        }
      }
    }
    this.controller?.abort();
  }
}
