/** A timer set through the `Clock`; cancelling one that already fired does nothing. */
export interface TimerHandle {
  cancel(): void;
}

/** How a timer treats the process: `unref` lets it exit while the timer is pending (default: it keeps it alive). */
export interface TimerOptions {
  readonly unref?: boolean;
}

/**
 * Time, the one port for it (docs/architecture.md, "Where time lives"): the time of day, waits and timers. The
 * use-cases and the pure core never read the clock or set a timer themselves; every deps type that needs time takes
 * a `clock: Clock`, required (no fallback to the real one): the composition roots wire the system clock
 * (`src/adapters/system-clock.ts`), tests a fake (`test/support/fake-time.ts`) that moves time instead of waiting.
 * Function properties (not methods): a member may be handed on alone.
 */
export interface Clock {
  /** The time of day. */
  readonly now: () => Date;
  /** A monotonic reading in milliseconds (fractional), for durations only: not the time of day. */
  readonly monotonicMs: () => number;
  /** Resolves after `ms`, or sooner when `signal` aborts; never rejects (an abort ends the wait, it is no error). */
  readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Calls `fn` once after `ms` unless cancelled first. */
  readonly setTimer: (ms: number, fn: () => void, options?: TimerOptions) => TimerHandle;
  /** Calls `fn` every `ms` until cancelled. */
  readonly setInterval: (ms: number, fn: () => void, options?: TimerOptions) => TimerHandle;
  /**
   * Resolves after one turn of the event loop (the I/O callbacks already pending run first): a yield to other work,
   * not a wait for time, so a fake clock runs it for real.
   */
  readonly nextTurn: () => Promise<void>;
}
