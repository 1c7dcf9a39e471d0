import { errorDetail, errorKind } from '../core/errors.js';
import type { OutcomeRead } from '../core/outcome.js';
import { beginLifecycle, decide } from '../core/pair-lifecycle-machine.js';
import {
  isEngineCall,
  type CallFailure,
  type CollectEffect,
  type EngineCallEffect,
  type LifecycleEffect,
  type LifecycleEffectOf,
  type LifecycleEvent,
  type LifecycleFacts,
} from '../core/pair-lifecycle-state.js';
import type { ProviderFailure } from '../core/result.js';
import type { FilesystemChanges } from '../core/sessions-skip.js';
import type { EngineLoss } from '../core/engine-loss.js';
import { systemClock } from './ports/clock.js';
import { awaitEngineReturn } from './engine-return.js';
import { failpoint, pausepoint } from './failpoints.js';
import {
  collectMounts,
  collectSessions,
  COLLECTION_ENGINE_WAIT_MS,
  inspectExit,
  exitedBefore,
  filesystemChangesOrNull,
  findByClaim,
  unwatchedStop,
  type SessionsReport,
} from './pair-collection.js';
import { PairLogs } from './pair-logs.js';
import { LogOpenError } from './pair-log-types.js';
import type { PairExecution, PairLaunch, PairLifecycleDeps } from './pair-lifecycle-types.js';
import { EngineError } from './ports/engine-error.js';
import type { ContainerOutput, ContainerSpec } from './ports/container-runtime.js';
import { gpuRequestDropped } from '../core/gpu/gpu-proof.js';
import { Readable } from 'node:stream';
import { removeAndVerify } from './remove-and-verify.js';

export type { LogTarget } from './pair-log-types.js';
export type { SessionsReport } from './pair-collection.js';
export type { PairExecution, PairLaunch, PairLifecycleDeps } from './pair-lifecycle-types.js';
export { removeAndVerify } from './remove-and-verify.js';

/** After the removal the streams are already drained; any still open get this long to end. */
const DEFAULT_LOG_DRAIN_MS = 10_000;
/** The drain before the removal stops when no byte arrived for this long (docs/spec.md 6.6). */
const DEFAULT_LOG_STALL_MS = 30_000;
/** ... or at the later of the wall-budget deadline and this long after the drain began. */
const DEFAULT_LOG_DRAIN_AFTER_DEADLINE_MS = 600_000;
const LOG_DRAIN_POLL_MS = 1_000;
/** Logs normally end with the container's output; they get this long before collection starts. */
const LOG_SETTLE_MS = 2_000;

/**
 * One pair, from container creation to verified removal (docs/spec.md section 7). The phases are decided by the pure
 * machine (src/core/pair-lifecycle-machine.ts); this loop performs its effects and feeds back what happened. Never
 * throws for anything the pair or the engine does: every observation is returned as data for classification, and
 * collection, diagnosis and removal run whatever happened before them.
 */
export async function runPairLifecycle(deps: PairLifecycleDeps, launch: PairLaunch): Promise<PairExecution> {
  const run = new LifecycleRun(deps, launch);
  let { state, effects } = beginLifecycle({
    deadlineMs: launch.deadlineMs,
    stopBudgetSec: launch.stopBudgetSec,
    reattachTo: launch.reattach?.containerId ?? null,
  });
  const queue = [...effects];
  try {
    for (let effect = queue.shift(); effect !== undefined; effect = queue.shift()) {
      const event = await run.perform(effect, state.facts);
      ({ state, effects } = decide(state, event));
      queue.push(...effects);
    }
  } catch (err) {
    // A fault of this loop itself (never the pair's or the engine's): the container still goes, then the fault is raised.
    if (state.facts.containerId !== null)
      await removeAndVerify(deps, state.facts.containerId, launch.stopBudgetSec);
    throw err;
  }
  return run.execution(state.facts);
}

/** What a thrown error means for the pair (the engine's typed fault, a log file, or a fault of the tool). */
function failureOf(err: unknown): CallFailure {
  if (err instanceof LogOpenError) return { kind: 'log_open', code: err.code };
  if (err instanceof EngineError)
    return { kind: 'engine', fault: err.fault, message: err.engineMessage, statusCode: err.statusCode };
  return { kind: 'internal', errorKind: errorKind(err) };
}

/** The effects of one pair's lifecycle, performed through the ports, and what they gathered besides the machine's facts. */
class LifecycleRun {
  readonly #startedAt: Date;
  readonly #logs: PairLogs;
  readonly #stopSignal: AbortSignal;
  readonly #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  #containerId: string | null = null;
  /** A start error the engine raised at the attach (Podman), raised again in place of the start. */
  #startError: EngineError | null = null;
  /** The logs were followed from the engine's log API (reattach, reconnect), not attached live. */
  #followed = false;
  #changes: Promise<FilesystemChanges | null> = Promise.resolve(null);
  #outcome: OutcomeRead = { state: 'missing' };
  #sessions: SessionsReport = { files: 0, bytes: 0, refusals: [] };
  #providerFailure: ProviderFailure | null = null;
  #providerFailureErrorKind: string | null = null;
  #logReport: PairExecution['logs'] = {
    stdout: { bytes: 0, closed: false },
    stderr: { bytes: 0, closed: false },
  };

  constructor(
    private readonly deps: PairLifecycleDeps,
    private readonly launch: PairLaunch,
  ) {
    this.#startedAt = deps.clock.now();
    this.#sleep = deps.sleep ?? systemClock.sleep;
    this.#logs = new PairLogs(deps, launch.secrets, () => this.#containerId);
    // A log that reaches its cap (or cannot be written) stops the pair the controlled way, like `stop --terminate`.
    // So does a limit the caller watches (the disk, issue 22).
    const stops = [launch.terminate, this.#logs.halt, launch.halt].filter(
      (s): s is AbortSignal => s !== undefined,
    );
    this.#stopSignal = stops.length === 1 ? this.#logs.halt : AbortSignal.any(stops);
  }

  #nowMs(): number {
    return this.deps.clock.now().getTime();
  }

  /** Performs one effect; what happened comes back as the machine's event. */
  async perform(effect: LifecycleEffect, facts: LifecycleFacts): Promise<LifecycleEvent> {
    this.#containerId = facts.containerId;
    if (isEngineCall(effect)) return this.#engineCall(effect);
    switch (effect.kind) {
      case 'check_unwatched_stop':
        return {
          kind: 'unwatched_stop',
          message: await this.#unwatchedStop(effect.containerId, effect.deadlineMs),
        };
      case 'check_exited_in_time':
        return {
          kind: 'exited_in_time',
          exited: await exitedBefore(this.deps.runtime, effect.containerId, effect.deadlineMs),
        };
      case 'await_engine':
        return this.#awaitEngine(effect.containerId, effect.deadlineMs);
      case 'reconnect_logs':
        return this.#reconnectLogs(effect.containerId, effect.neverStarted);
      case 'find_by_claim': {
        const found = await findByClaim(this.deps.runtime, this.launch.container.labels, (ms) =>
          this.#sleep(ms),
        );
        return { kind: 'found', containerId: found.id, known: found.known };
      }
      case 'forgive_cut_logs':
        this.#logs.forgiveCut();
        return { kind: 'logs_forgiven' };
      default:
        return this.#collect(effect, facts);
    }
  }

  /** The calls whose failure is the pair's (or the tool's) to report: a throw becomes a `failed` event. */
  async #engineCall(effect: EngineCallEffect): Promise<LifecycleEvent> {
    const { runtime, logger } = this.deps;
    try {
      switch (effect.kind) {
        case 'create': {
          const { id } = await runtime.create(this.launch.container);
          logger.info({ container: id }, 'container created');
          return { kind: 'created', containerId: id, atMs: this.#nowMs() };
        }
        case 'record_created':
          return await this.#recordCreated(effect.containerId);
        case 'attach':
          await this.#logs.connect(await this.#attachOrEmpty(effect.containerId), false);
          return { kind: 'attached' };
        case 'start':
          // A start error the attach kept (Podman), or a GPU request the engine dropped: the start is not made.
          if (this.#startError !== null) throw this.#startError;
          await runtime.start(effect.containerId);
          return { kind: 'started' };
        case 'follow':
          this.#followed = true;
          await this.#logs.connect(await runtime.follow(effect.containerId), true);
          return { kind: 'followed' };
        case 'stop':
          logger.warn(
            { container: effect.containerId, stopBudgetSec: effect.stopBudgetSec },
            effect.why === 'deadline'
              ? 'wall budget spent: controlled stop'
              : 'terminate requested: controlled stop',
          );
          await runtime.stop(effect.containerId, effect.stopBudgetSec);
          return { kind: 'stopped' };
        case 'wait':
          return await this.#wait(effect.containerId, effect.deadlineMs);
      }
    } catch (err) {
      const failure = failureOf(err);
      logger.warn(
        { container: this.#containerId, fault: failure.kind === 'engine' ? failure.fault : failure.kind },
        'pair did not run to completion',
      );
      return { kind: 'failed', failure, atMs: this.#nowMs() };
    }
  }

  /**
   * Podman prepares a container (its ports, rlimits) when the attach is made, so a start error (a taken port…) comes
   * from the attach there, where Docker raises it at the start. Such an error is kept for the start: the logs get
   * empty streams (the container never ran and printed nothing), and the start that follows is not made — the pair
   * fails with the same reason as on Docker (`port_allocated`, infrastructure), not as a log it could not write.
   */
  async #attachOrEmpty(containerId: string): Promise<ContainerOutput> {
    // A container that will not start is not attached: an attach to it never ends on Podman (the drain would stall).
    const dropped = await this.#droppedGpus(containerId);
    if (dropped !== null) {
      this.#startError = dropped;
      return { stdout: Readable.from([]), stderr: Readable.from([]) };
    }
    try {
      return await this.deps.runtime.attach(containerId);
    } catch (err) {
      // An answer of the engine (not a lost connection, which the machine probes): the start error it stands for.
      if (!(err instanceof EngineError) || err.statusCode === null || err.fault === 'engine_unavailable')
        throw err;
      this.#startError = err;
      this.deps.logger.warn(
        { container: containerId, fault: err.fault },
        'the engine raised a start error at the attach (Podman): kept for the start',
      );
      return { stdout: Readable.from([]), stderr: Readable.from([]) };
    }
  }

  /**
   * A pair that asked for GPUs starts only when the created container's inspect still holds the request (issue 28):
   * an engine that dropped it (Podman 4 with DeviceRequests) would run the driver without a GPU, scored as if it had
   * one. Checked before the attach; the error is raised in place of the start.
   */
  async #droppedGpus(containerId: string): Promise<EngineError | null> {
    // Read defensively: a launch built outside the manifest (a test, a serve session) may carry none.
    const requested =
      (this.launch.container.deviceRequests as ContainerSpec['deviceRequests'] | undefined) ?? [];
    if (requested.length === 0 || this.deps.runtime.gpuGrantOf === undefined) return null;
    const grant = await this.deps.runtime.gpuGrantOf(containerId);
    const dropped = grant === null ? null : gpuRequestDropped(requested, grant);
    if (dropped === null) return null;
    return new EngineError('gpu_request_dropped', `GPU request dropped by the engine: ${dropped}`, {
      statusCode: null,
      engineMessage: `${dropped} (Podman drops Docker DeviceRequests: docs/podman.md)`,
    });
  }

  async #recordCreated(containerId: string): Promise<LifecycleEvent> {
    if (!this.launch.onCreated) return { kind: 'recorded' };
    try {
      await this.launch.onCreated(containerId);
      return { kind: 'recorded' };
    } catch (err) {
      this.deps.logger.error(
        { container: containerId, err: errorDetail(err) },
        'recording the container id failed',
      );
      return { kind: 'failed', failure: { kind: 'receipt' }, atMs: this.#nowMs() };
    }
  }

  async #wait(containerId: string, deadlineMs: number): Promise<LifecycleEvent> {
    const waited = await this.deps.runtime.wait(containerId, { deadlineMs, signal: this.#stopSignal });
    switch (waited.kind) {
      case 'node_lost':
        this.deps.logger.warn({ container: containerId, node: waited.node }, 'node lost while the pair ran');
        return { kind: 'node_lost', message: waited.message };
      case 'engine_lost':
        return { kind: 'engine_lost', lastSeenAliveMs: waited.lastSeenAliveMs, atMs: this.#nowMs() };
      default:
        return { kind: 'wait_ended', end: waited.kind, byTerminate: this.launch.terminate?.aborted === true };
    }
  }

  async #unwatchedStop(containerId: string, deadlineMs: number): Promise<string | null> {
    const claimedAtMs = this.launch.reattach?.claimedAtMs ?? deadlineMs;
    const message = await unwatchedStop(this.deps, containerId, { claimedAtMs, deadlineMs });
    if (message !== null)
      this.deps.logger.warn(
        { container: containerId },
        'container was stopped by an engine restart while no supervisor watched it',
      );
    return message;
  }

  async #awaitEngine(containerId: string, deadlineMs: number): Promise<LifecycleEvent> {
    this.deps.logger.warn(
      { container: containerId },
      'engine connection lost: inspecting again once the engine answers',
    );
    const back = await awaitEngineReturn({ ...this.deps, sleep: this.#sleep }, containerId, {
      untilMs: deadlineMs,
      signal: this.#stopSignal,
    });
    if (back.kind === 'aborted')
      return { kind: 'wait_ended', end: 'aborted', byTerminate: this.launch.terminate?.aborted === true };
    if (back.kind === 'deadline') return { kind: 'engine_silent' };
    this.deps.logger.warn(
      { container: containerId, status: back.state?.status ?? 'absent' },
      'engine answered again',
    );
    return { kind: 'engine_back', container: back.state, atMs: back.answeredAtMs };
  }

  async #reconnectLogs(containerId: string, neverStarted: boolean): Promise<LifecycleEvent> {
    try {
      await this.#logs.reconnect(() => {
        this.#followed = true;
        return this.deps.runtime.follow(containerId);
      }, neverStarted);
    } catch (err) {
      this.deps.logger.warn({ container: containerId, err: errorDetail(err) }, 'log reconnection failed');
    }
    return { kind: 'logs_reconnected' };
  }

  /** Collection, diagnosis, removal and the logs' close: each isolated, so none can skip the ones after it. */
  async #collect(
    effect: CollectEffect | LifecycleEffectOf<'settle_logs'>,
    facts: LifecycleFacts,
  ): Promise<LifecycleEvent> {
    switch (effect.kind) {
      case 'settle_logs':
        return this.#settle(effect.probeChangesOf, facts);
      case 'inspect_exit': {
        const waitMs = effect.waitForEngine
          ? (this.deps.collectionEngineWaitMs ?? COLLECTION_ENGINE_WAIT_MS)
          : 0;
        return {
          kind: 'exit_inspected',
          exit: await inspectExit({ ...this.deps, sleep: this.#sleep }, effect.containerId, waitMs),
        };
      }
      case 'collect_mounts':
        await collectMounts(this.deps, effect.containerId);
        return { kind: 'step_done' };
      case 'read_outcome':
        await this.#readOutcome();
        return { kind: 'step_done' };
      case 'collect_sessions':
        await this.#collectSessions(effect.containerId, effect.engineLoss);
        return { kind: 'step_done' };
      case 'diagnose':
        await this.#diagnose();
        return { kind: 'step_done' };
      case 'drain_logs':
        await this.#drainLogs(effect.containerId, effect.deadlineMs);
        return { kind: 'logs_drained' };
      case 'remove':
        return {
          kind: 'removed',
          cleanup: await removeAndVerify(
            { ...this.deps, sleep: (ms) => this.#sleep(ms) },
            effect.containerId,
            effect.stopBudgetSec,
          ),
        };
      case 'close_logs': {
        const closed = await this.#logs.close(
          this.deps.logDrainTimeoutMs ?? DEFAULT_LOG_DRAIN_MS,
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
      stallMs: this.deps.logStallMs ?? DEFAULT_LOG_STALL_MS,
      untilMs: Math.max(
        deadlineMs,
        startMs + (this.deps.logDrainAfterDeadlineMs ?? DEFAULT_LOG_DRAIN_AFTER_DEADLINE_MS),
      ),
      pollMs: LOG_DRAIN_POLL_MS,
      nowMs: () => this.#nowMs(),
      sleep: this.#sleep,
    };
    await this.#logs.drain(bounds);
    if (await this.#followEndedEarlyMaybe(containerId)) {
      await this.#logs.catchUp(() => this.deps.runtime.follow(containerId));
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
    if (!this.#followed) return false;
    const state = await this.deps.runtime.inspect(containerId).catch(() => null);
    return (
      state !== null &&
      state.status !== 'running' &&
      state.status !== 'restarting' &&
      state.status !== 'paused'
    );
  }

  async #settle(probeChangesOf: string | null, facts: LifecycleFacts): Promise<LifecycleEvent> {
    if (facts.engineLoss !== null)
      this.deps.logger.warn(
        { container: facts.containerId, reason: facts.engineLoss },
        'pair ended by an engine fault',
      );
    // The container's layer changes (can its sessions dir hold anything?), asked alongside the collection's inspect.
    if (probeChangesOf !== null && this.deps.imageSessions !== undefined)
      this.#changes = filesystemChangesOrNull(this.deps.runtime, probeChangesOf);
    await this.#logs.settle(LOG_SETTLE_MS);
    await pausepoint('before_collection');
    return { kind: 'settled' };
  }

  async #readOutcome(): Promise<void> {
    try {
      this.#outcome = await this.deps.readOutcome(this.launch.outcomePath);
    } catch (err) {
      this.#outcome = { state: 'unreadable', code: errorKind(err) };
    }
  }

  async #collectSessions(containerId: string, engineLoss: EngineLoss | null): Promise<void> {
    try {
      this.#sessions = await collectSessions(
        { ...this.deps, sleep: this.#sleep },
        containerId,
        this.launch.sessionsDir,
        engineLoss,
        await this.#changes,
      );
    } catch (err) {
      this.#sessions = { files: 0, bytes: 0, refusals: [`collection failed: ${errorKind(err)}`] };
      this.deps.logger.warn({ container: containerId, err: errorDetail(err) }, 'session collection failed');
    }
  }

  async #diagnose(): Promise<void> {
    try {
      this.#providerFailure = await this.deps.diagnose();
    } catch (err) {
      this.#providerFailureErrorKind = errorKind(err);
      this.deps.logger.warn(
        { container: this.#containerId, err: this.#providerFailureErrorKind },
        'provider-failure diagnosis failed',
      );
    }
  }

  execution(facts: LifecycleFacts): PairExecution {
    return {
      container: {
        id: facts.containerId,
        exit_code: facts.exitCode,
        timed_out: facts.timedOut,
        oom_killed: facts.oomKilled,
      },
      timedOut: facts.timedOut,
      terminated: facts.terminated,
      engineFault: facts.engineFault,
      engineLoss: facts.engineLoss,
      engineError: facts.engineError,
      receiptUpdateFailed: facts.receiptUpdateFailed,
      logs: this.#logReport,
      logFailure: facts.logFailure,
      logLimitExceeded: this.#logs.limitExceeded,
      outcome: this.#outcome,
      sessions: this.#sessions,
      providerFailure: this.#providerFailure,
      providerFailureErrorKind: this.#providerFailureErrorKind,
      cleanup: facts.cleanup,
      startedAt: this.#startedAt.toISOString(),
      finishedAt: this.deps.clock.now().toISOString(),
    };
  }
}
