import type { Clock, TimerHandle } from '../ports/clock.js';

/**
 * How often status.json may be rewritten for changes that can wait (a pair started). Changes that matter (a pair
 * finished, a pause, a stop) and the exit are written at once.
 */
export const STATUS_MIN_INTERVAL_MS = 250;

/**
 * Writes a derived file at a bounded rate. `soon()` asks for a write at most once per `minIntervalMs` (requests in
 * between coalesce into one); `now()` asks for one at once. Writes never overlap and each one builds what it writes
 * when it starts, so the last write is always of the newest state; a request made while a write waits to start
 * joins it. A failed write goes to `onError` and never to the caller. After `close()` requests are ignored.
 */
export class CoalescingWriter {
  readonly #write: () => Promise<void>;
  readonly #clock: Clock;
  readonly #minIntervalMs: number;
  readonly #onError: (err: unknown) => void;
  #chain: Promise<void> = Promise.resolve();
  #queued: Promise<void> | undefined;
  #timer: TimerHandle | undefined;
  #lastStartMs = -Infinity;
  #closed = false;

  constructor(
    write: () => Promise<void>,
    clock: Clock,
    minIntervalMs: number,
    onError: (err: unknown) => void = () => undefined,
  ) {
    this.#write = write;
    this.#clock = clock;
    this.#minIntervalMs = minIntervalMs;
    this.#onError = onError;
  }

  soon(): void {
    if (this.#closed || this.#timer !== undefined || this.#queued !== undefined) return;
    const wait = this.#lastStartMs + this.#minIntervalMs - this.#clock.now().getTime();
    if (wait <= 0) {
      void this.#enqueue();
      return;
    }
    this.#timer = this.#clock.setTimer(
      wait,
      () => {
        this.#timer = undefined;
        void this.#enqueue();
      },
      { unref: true },
    );
  }

  now(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#timer?.cancel();
    this.#timer = undefined;
    return this.#enqueue();
  }

  /** Waits for the writes already asked for; later requests are ignored. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#timer?.cancel();
    this.#timer = undefined;
    await this.#chain;
  }

  #enqueue(): Promise<void> {
    if (this.#queued !== undefined) return this.#queued;
    const run = this.#chain.then(async () => {
      this.#queued = undefined;
      this.#lastStartMs = this.#clock.now().getTime();
      try {
        await this.#write();
      } catch (err) {
        this.#onError(err);
      }
    });
    this.#queued = run;
    this.#chain = run;
    return run;
  }
}
