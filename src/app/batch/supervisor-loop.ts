import type { PauseReason } from '../../core/pause-rules.js';
import { causeOf, type PauseCause } from '../../core/pause-cause.js';
import {
  decide,
  performEffect,
  type PairOutcome,
  type SupervisorEffect,
  type SupervisorEffectHandlers,
  type SupervisorEvent,
  type SupervisorJournal,
  type SupervisorState,
} from '../../core/supervisor-machine.js';
import type { Clock } from '../ports/clock.js';
import type { Logger } from '../ports/logger.js';
import type { RunningHandle } from '../pair/claimed-pair-types.js';

/** What the loop does in the world; each call is one effect of `core/supervisor-machine.ts`. */
export interface SupervisorLoopPorts {
  readonly clock: Clock;
  readonly logger: Logger;
  /** The GPU peaks the dispatch rule reads now (the ledger's). */
  readonly gpuPeaksMib: () => readonly number[];
  /** Append one record (the loop makes it best effort). */
  readonly journal: (event: SupervisorJournal) => Promise<void>;
  /**
   * Ask for status.json now. The loop never waits for the write (issue 26: it is off the pairs' critical path): writes
   * are serialised and each builds the newest state when it starts; the supervisor waits for them before it exits.
   */
  readonly writeStatus: () => Promise<void>;
  readonly statusSoon: () => void;
  /** Check the source pins and journal the check; true when they match. */
  readonly checkSources: (phase: 'before_first_dispatch' | 'drain') => Promise<boolean>;
  /**
   * Start one pair: reserve, claim, run, finish (`dispatch`), or finish a claimed one found at start (`recover`).
   * Called synchronously: a throw is a fault of the supervisor; a rejection is the pair's (it fails, the batch pauses).
   */
  readonly dispatch: (jobId: string, onRunning: (handle: RunningHandle) => void) => Promise<PairOutcome>;
  readonly recover: (jobId: string, onRunning: (handle: RunningHandle) => void) => Promise<PairOutcome>;
  /** Swarm: learn where a pair was placed (optional: the local executor places nothing). */
  readonly watchPlacement?: (handle: RunningHandle, stillRunning: () => boolean) => void;
  /** Masks the batch's secrets in a cause's message before it is journalled or logged (default: none to mask). */
  readonly redact?: (text: string) => string;
}

/**
 * The supervisor's imperative shell: holds the machine's state, performs its effects in order, and feeds back what
 * happens (a pair's handle, its end, a stop, the loop's turn) as events. The running pairs' handles (their
 * containers, their terminate switches) live here: they are things of the world, not decisions.
 */
export class SupervisorLoop {
  #state: SupervisorState;
  readonly #ports: SupervisorLoopPorts;
  readonly #handles = new Map<string, RunningHandle>();
  readonly #tasks = new Map<string, Promise<void>>();
  readonly #wakeup: Wakeup;
  #left = false;

  constructor(ports: SupervisorLoopPorts, initial: SupervisorState) {
    this.#ports = ports;
    this.#state = initial;
    this.#wakeup = new Wakeup(ports.clock);
  }

  get state(): SupervisorState {
    return this.#state;
  }

  /** The pairs running now, as status shows them. */
  handles(): RunningHandle[] {
    return [...this.#handles.values()];
  }

  /**
   * One event: decide, then perform each effect in order. Synchronous effects run before `feed` returns its promise
   * (a pair's terminate switch is thrown in the same turn as its handle arrives).
   */
  async feed(event: SupervisorEvent): Promise<void> {
    const { state, effects } = decide(this.#state, event);
    this.#state = state;
    for (const effect of effects) {
      const pending = this.#perform(effect);
      if (pending !== undefined) await pending;
    }
  }

  /** The dispatch loop: turns until the machine says leave (drained, or paused/stopped with nothing in flight). */
  async run(): Promise<void> {
    while (!this.#left)
      await this.feed({
        type: 'next',
        nowMs: this.#ports.clock.now().getTime(),
        gpuPeaksMib: this.#ports.gpuPeaksMib(),
      });
  }

  /** Every launched pair has ended and its end was performed. */
  async settled(): Promise<void> {
    await Promise.allSettled(this.#tasks.values());
  }

  #perform(effect: SupervisorEffect): Promise<void> | undefined {
    return performEffect(this.#handlers, effect);
  }

  /**
   * One handler per effect kind of the machine (a kind without one does not compile). A handler returns the promise
   * to await before the next effect, or nothing: the effect was performed synchronously.
   */
  readonly #handlers = {
    journal: (effect) =>
      this.#bestEffort(`journal ${effect.event.type}`, () => this.#ports.journal(effect.event)),
    log_pause: (effect) => {
      this.#logPause(effect.reasons, effect.jobId, effect.cause);
    },
    // Never awaited (issue 26: off the pairs' critical path); the supervisor waits for pending writes before it exits.
    write_status: () => {
      void this.#bestEffort('status.json', () => this.#ports.writeStatus());
    },
    status_soon: () => {
      this.#ports.statusSoon();
    },
    terminate: (effect) => {
      for (const jobId of effect.jobIds) this.#handles.get(jobId)?.terminate.abort();
    },
    kill: (effect) => {
      for (const jobId of effect.jobIds) this.#handles.get(jobId)?.killNow.abort();
    },
    watch_placement: (effect) => {
      this.#watchPlacement(effect.jobId);
    },
    wake: () => {
      this.#wakeup.notify();
    },
    check_sources: (effect) =>
      this.#ports.checkSources(effect.phase).then((ok) => this.feed({ type: 'sources_checked', ok })),
    dispatch: (effect) => {
      this.#launch(effect.jobId, this.#ports.dispatch(effect.jobId, this.#onRunning));
    },
    recover: (effect) => {
      this.#launch(effect.jobId, this.#ports.recover(effect.jobId, this.#onRunning));
    },
    wait: (effect) => this.#wakeup.wait(effect.ms),
    leave: () => {
      this.#left = true;
    },
  } satisfies SupervisorEffectHandlers<Promise<void> | undefined>;

  readonly #onRunning = (handle: RunningHandle): void => {
    this.#handles.set(handle.jobId, handle);
    void this.feed({ type: 'pair_running', jobId: handle.jobId }).catch(() => undefined);
  };

  #launch(jobId: string, work: Promise<PairOutcome>): void {
    const task = work
      .catch((err: unknown): PairOutcome => {
        const cause = this.#causeOf(err);
        this.#ports.logger.error(
          { job: jobId, err: cause.code, cause },
          'pair task failed: pausing the batch',
        );
        return { kind: 'failed', cause };
      })
      .then((outcome) => {
        this.#handles.delete(jobId);
        return this.feed({ type: 'pair_done', jobId, nowMs: this.#ports.clock.now().getTime(), outcome });
      })
      .catch((err: unknown) => {
        const cause = this.#causeOf(err);
        this.#ports.logger.error({ job: jobId, err: cause.code, cause }, 'pair end not recorded');
      })
      .finally(() => this.#tasks.delete(jobId));
    this.#tasks.set(jobId, task);
  }

  #watchPlacement(jobId: string): void {
    const handle = this.#handles.get(jobId);
    if (handle === undefined || this.#ports.watchPlacement === undefined) return;
    this.#ports.watchPlacement(handle, () => this.#handles.get(jobId) === handle);
  }

  #logPause(reasons: readonly PauseReason[], jobId: string | null, cause: PauseCause | undefined): void {
    this.#ports.logger.warn(
      { reasons, job: jobId, ...(cause !== undefined ? { cause } : {}) },
      'batch paused',
    );
  }

  /** An error as the operator reads it: its code and its message, masked (never only the class name). */
  #causeOf(err: unknown): PauseCause {
    return causeOf(err, this.#ports.redact);
  }

  async #bestEffort(what: string, work: () => Promise<unknown>): Promise<void> {
    try {
      await work();
    } catch (err) {
      const cause = this.#causeOf(err);
      this.#ports.logger.error({ err: cause.code, cause, what }, 'write failed; continuing fail-closed');
    }
  }
}

/** A wake-up that is never lost: a notify before the wait makes the wait return at once. */
class Wakeup {
  #pending = false;
  #resolve: (() => void) | undefined;
  readonly #clock: Pick<Clock, 'sleep'>;

  constructor(clock: Pick<Clock, 'sleep'>) {
    this.#clock = clock;
  }

  notify(): void {
    this.#pending = true;
    this.#resolve?.();
  }

  async wait(ms: number): Promise<void> {
    if (!this.#pending) {
      // A wake-up ends the delay too: no timer is left pending to hold the process.
      const woken = new AbortController();
      const delayed = this.#clock.sleep(ms, woken.signal);
      await Promise.race([new Promise<void>((resolve) => (this.#resolve = resolve)), delayed]);
      woken.abort();
    }
    this.#resolve = undefined;
    this.#pending = false;
  }
}
