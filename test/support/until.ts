import { setTimeout as sleep } from 'node:timers/promises';

export interface UntilOptions {
  /** How long to keep asking (default 60 s). */
  readonly timeoutMs?: number;
  /** The pause between two probes (default 100 ms). */
  readonly intervalMs?: number;
  /** A probe that throws counts as "not yet" (an engine restarting, a file half-written); default: the error fails. */
  readonly ignoreErrors?: boolean;
}

/**
 * Waits for an observable condition: calls `probe` until it returns something other than `undefined` and returns
 * that; throws `gave up waiting: WHAT` after the timeout. The one polling helper of the tests (never a blind sleep).
 */
export async function until<T>(
  probe: () => Promise<T | undefined> | T | undefined,
  what: string,
  options: UntilOptions = {},
): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? 60_000);
  for (;;) {
    const value =
      options.ignoreErrors === true
        ? await Promise.resolve()
            .then(probe)
            .catch(() => undefined)
        : await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await sleep(options.intervalMs ?? 100);
  }
}
