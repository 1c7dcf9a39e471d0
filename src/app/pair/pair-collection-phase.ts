import { errorDetail, errorKind } from '../../core/errors.js';
import type { EngineLoss } from '../../core/engine-loss.js';
import type { OutcomeRead } from '../../core/outcome.js';
import type {
  CollectEffect,
  LifecycleEffectOf,
  LifecycleEvent,
  LifecycleFacts,
} from '../../core/pair-lifecycle-state.js';
import type { ProviderFailure } from '../../core/result.js';
import type { FilesystemChanges } from '../../core/sessions-skip.js';
import { failpoint, pausepoint } from '../ports/failpoints.js';
import {
  collectMounts,
  collectSessions,
  COLLECTION_ENGINE_WAIT_MS,
  filesystemChangesOrNull,
  inspectExit,
  type SessionsReport,
} from './pair-collection.js';
import type { PairExecution, PairLaunch, PairLifecycleDeps } from './pair-lifecycle-types.js';
import type { PairLogs } from './pair-logs.js';
import { removeAndVerify } from './remove-and-verify.js';

/*
 * The collection phase of a pair's lifecycle (docs/spec.md section 7), from the logs' settle to their close: the
 * exit, the mounts, the outcome, the sessions, the diagnosis, the drain before the removal, the verified removal.
 * Each step is isolated, so none can skip the ones after it; what they find is kept for the pair's report.
 */

/** After the removal the streams are already drained; any still open get this long to end. */
const DEFAULT_LOG_DRAIN_MS = 10_000;
/** The drain before the removal stops when no byte arrived for this long (docs/spec.md 6.6). */
const DEFAULT_LOG_STALL_MS = 30_000;
/** ... or at the later of the wall-budget deadline and this long after the drain began. */
const DEFAULT_LOG_DRAIN_AFTER_DEADLINE_MS = 600_000;
const LOG_DRAIN_POLL_MS = 1_000;
/** Logs normally end with the container's output; they get this long before collection starts. */
const LOG_SETTLE_MS = 2_000;

/** What the collection found, for the pair's report (`PairExecution`). */
export type CollectionFindings = Pick<
  PairExecution,
  'logs' | 'outcome' | 'sessions' | 'providerFailure' | 'providerFailureErrorKind'
>;

/** What the collection works with, handed over by the lifecycle run. */
export interface CollectionInputs {
  readonly deps: PairLifecycleDeps;
  readonly launch: Pick<PairLaunch, 'outcomePath' | 'sessionsDir'>;
  /** The pair's logs (attached or followed by the run phase). */
  readonly logs: PairLogs;
  /** Whether the logs came from the engine's log API (reattach, reconnect), not attached live. */
  readonly logsFollowed: () => boolean;
}

/** The collection steps of one pair, performed through the ports, and what they found. */
export class CollectionPhase {
  readonly #deps: PairLifecycleDeps;
  readonly #launch: CollectionInputs['launch'];
  readonly #logs: PairLogs;
  readonly #logsFollowed: () => boolean;
  #changes: Promise<FilesystemChanges | null> = Promise.resolve(null);
  /** The collection's inspect found the container exited (or dead): the removal need not look before it removes. */
  #exitedAtInspect = false;
  #outcome: OutcomeRead = { state: 'missing' };
  #sessions: SessionsReport = { files: 0, bytes: 0, refusals: [] };
  #providerFailure: ProviderFailure | null = null;
  #providerFailureErrorKind: string | null = null;
  #logReport: PairExecution['logs'] = {
    stdout: { bytes: 0, closed: false },
    stderr: { bytes: 0, closed: false },
  };

  constructor(inputs: CollectionInputs) {
    this.#deps = inputs.deps;
    this.#launch = inputs.launch;
    this.#logs = inputs.logs;
    this.#logsFollowed = inputs.logsFollowed;
  }

  findings(): CollectionFindings {
    return {
      logs: this.#logReport,
      outcome: this.#outcome,
      sessions: this.#sessions,
      providerFailure: this.#providerFailure,
      providerFailureErrorKind: this.#providerFailureErrorKind,
    };
  }

  #nowMs(): number {
    return this.#deps.clock.now().getTime();
  }

  /** Performs one step (or the logs' settle before them); what happened comes back as the machine's event. */
  async perform(
    effect: CollectEffect | LifecycleEffectOf<'settle_logs'>,
    facts: LifecycleFacts,
  ): Promise<LifecycleEvent> {
    switch (effect.kind) {
      case 'settle_logs':
        return this.#settle(effect.probeChangesOf, facts);
      case 'inspect_exit': {
        const waitMs = effect.waitForEngine
          ? (this.#deps.collectionEngineWaitMs ?? COLLECTION_ENGINE_WAIT_MS)
          : 0;
        return {
          kind: 'exit_inspected',
          exit: await inspectExit(this.#deps, effect.containerId, waitMs, (state) => {
            this.#exitedAtInspect = state.status === 'exited' || state.status === 'dead';
          }),
        };
      }
      case 'collect_mounts':
        await collectMounts(this.#deps, effect.containerId);
        return { kind: 'step_done' };
      case 'read_outcome':
        await this.#readOutcome();
        return { kind: 'step_done' };
      case 'collect_sessions':
        await this.#collectSessions(effect.containerId, effect.engineLoss);
        return { kind: 'step_done' };
      case 'diagnose':
        await this.#diagnose(facts.containerId);
        return { kind: 'step_done' };
      case 'drain_logs':
        await this.#drainLogs(effect.containerId, effect.deadlineMs);
        return { kind: 'logs_drained' };
      case 'remove':
        return {
          kind: 'removed',
          cleanup: await removeAndVerify(this.#deps, effect.containerId, effect.stopBudgetSec, {
            exited: this.#exitedAtInspect,
          }),
        };
      case 'close_logs': {
        const closed = await this.#logs.close(
          this.#deps.logDrainTimeoutMs ?? DEFAULT_LOG_DRAIN_MS,
          effect.containerExisted,
        );
        this.#logReport = closed.logs;
        return { kind: 'logs_closed', failure: closed.failure };
      }
    }
  }

  /** Reads the logs to their end before the removal, bounded by progress and the wall budget (never a fixed cut). */
  async #drainLogs(containerId: string, deadlineMs: number): Promise<void> {
    const startMs = this.#nowMs();
    failpoint('log_drain:begin');
    const bounds = {
      stallMs: this.#deps.logStallMs ?? DEFAULT_LOG_STALL_MS,
      untilMs: Math.max(
        deadlineMs,
        startMs + (this.#deps.logDrainAfterDeadlineMs ?? DEFAULT_LOG_DRAIN_AFTER_DEADLINE_MS),
      ),
      pollMs: LOG_DRAIN_POLL_MS,
      clock: this.#deps.clock,
    };
    await this.#logs.drain(bounds);
    if (await this.#followEndedEarlyMaybe(containerId)) {
      await this.#logs.catchUp(() => this.#deps.runtime.follow(containerId));
      await this.#logs.drain(bounds);
    }
    failpoint('log_drain:done');
  }

  /**
   * Whether the logs came from a follow (reattach, reconnect) and the container has stopped: that follow may have
   * ended before the engine's copy did (PairLogs.catchUp). Not judged from the engine's `FinishedAt` against our
   * clock (two clocks): a reattached pair's log is simply read once more, a cost only crash recovery pays.
   */
  async #followEndedEarlyMaybe(containerId: string): Promise<boolean> {
    if (!this.#logsFollowed()) return false;
    const state = await this.#deps.runtime.inspect(containerId).catch(() => null);
    return (
      state !== null &&
      state.status !== 'running' &&
      state.status !== 'restarting' &&
      state.status !== 'paused'
    );
  }

  async #settle(probeChangesOf: string | null, facts: LifecycleFacts): Promise<LifecycleEvent> {
    if (facts.engineLoss !== null)
      this.#deps.logger.warn(
        { container: facts.containerId, reason: facts.engineLoss },
        'pair ended by an engine fault',
      );
    // The container's layer changes (can its sessions dir hold anything?), asked alongside the collection's inspect.
    if (probeChangesOf !== null && this.#deps.imageSessions !== undefined)
      this.#changes = filesystemChangesOrNull(this.#deps.runtime, probeChangesOf, this.#launch.sessionsDir);
    await this.#logs.settle(LOG_SETTLE_MS);
    await pausepoint('before_collection');
    return { kind: 'settled' };
  }

  async #readOutcome(): Promise<void> {
    try {
      this.#outcome = await this.#deps.readOutcome(this.#launch.outcomePath);
    } catch (err) {
      this.#outcome = { state: 'unreadable', code: errorKind(err) };
    }
  }

  async #collectSessions(containerId: string, engineLoss: EngineLoss | null): Promise<void> {
    try {
      this.#sessions = await collectSessions(
        this.#deps,
        containerId,
        this.#launch.sessionsDir,
        engineLoss,
        await this.#changes,
      );
    } catch (err) {
      this.#sessions = { files: 0, bytes: 0, refusals: [`collection failed: ${errorKind(err)}`] };
      this.#deps.logger.warn({ container: containerId, err: errorDetail(err) }, 'session collection failed');
    }
  }

  async #diagnose(containerId: string | null): Promise<void> {
    try {
      this.#providerFailure = await this.#deps.diagnose();
    } catch (err) {
      this.#providerFailureErrorKind = errorKind(err);
      this.#deps.logger.warn(
        { container: containerId, err: this.#providerFailureErrorKind },
        'provider-failure diagnosis failed',
      );
    }
  }
}
