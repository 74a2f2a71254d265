/**
 * The one wait of the tests: until a condition holds, within a deadline. A test waits for the state it needs (a
 * log line, a status field, a packet), never for a fixed time, which is too short on a busy machine and too long on
 * a quiet one. Deadlines are generous, since meeting one early costs nothing.
 */

/** A condition's answer: a value (the wait resolves with it) or nothing yet. */
export type Pending = undefined | null | false;

export interface WaitOptions {
  /** ms before the wait fails (default 20 s) */
  timeout?: number;
  /** ms between checks (default 20) */
  interval?: number;
  /** what was awaited, for the failure; a function is called then, so it can show the last state seen */
  message?: string | (() => string);
  /**
   * Subscribes a wake-up to the events that can make the condition hold (a request, a datagram) and returns the
   * unsubscription: the condition is then checked on each event as well as every `interval`.
   */
  wake?: (check: () => void) => () => void;
}

/**
 * Resolves with the condition's first value that is not `undefined`, `null` or `false` (`true` for a plain
 * predicate); a condition that throws fails the wait at once. Rejects after `timeout` ms, with `message`.
 */
export async function waitFor<T>(
  condition: () => T | Pending | Promise<T | Pending>,
  opts: WaitOptions = {},
): Promise<T> {
  const timeout = opts.timeout ?? 20_000;
  const interval = opts.interval ?? 20;
  const deadline = performance.now() + timeout;
  let wakeUp: (() => void) | undefined;
  // an event while the condition is being checked: check again at once rather than after `interval`
  let woken = false;
  const unsubscribe = opts.wake?.(() => {
    woken = true;
    wakeUp?.();
  });
  try {
    for (;;) {
      woken = false;
      const value = await condition();
      if (value !== undefined && value !== null && value !== false) return value;
      const left = deadline - performance.now();
      if (left <= 0) {
        const what = typeof opts.message === 'function' ? opts.message() : (opts.message ?? 'condition');
        throw new Error(`waited ${timeout} ms in vain for: ${what}`);
      }
      if (woken) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(interval, left));
        wakeUp = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wakeUp = undefined;
    }
  } finally {
    unsubscribe?.();
  }
}
