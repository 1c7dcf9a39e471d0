import { errorDetail, errorKind } from '../../core/errors.js';
import { gpuRequestDropped } from '../../core/gpu/gpu-proof.js';
import { beginLifecycle, decide } from '../../core/pair-lifecycle-machine.js';
import { PhaseTimer } from '../../core/pair-phases.js';
import {
  isEngineCall,
  type CallFailure,
  type EngineCallEffect,
  type LifecycleEffect,
  type LifecycleEvent,
  type LifecycleFacts,
} from '../../core/pair-lifecycle-state.js';
import { Readable } from 'node:stream';
import { awaitEngineReturn } from './engine-return.js';
import { exitedBefore, findByClaim, unwatchedStop } from './pair-collection.js';
import { CollectionPhase } from './pair-collection-phase.js';
import { PairLogs } from './pair-logs.js';
import { LogOpenError } from './pair-log-types.js';
import type { PairExecution, PairLaunch, PairLifecycleDeps } from './pair-lifecycle-types.js';
import { EngineError } from '../ports/engine-error.js';
import type { ContainerOutput, ContainerSpec } from '../ports/container-runtime.js';
import { canProveGpuGrants } from '../ports/runtime-capabilities.js';
import { removeAndVerify } from './remove-and-verify.js';

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
  const phases = new PhaseTimer();
  try {
    for (let effect = queue.shift(); effect !== undefined; effect = queue.shift()) {
      const beganMs = deps.clock.now().getTime();
      const event = await run.perform(effect, state.facts);
      phases.add(effect.kind, deps.clock.now().getTime() - beganMs);
      ({ state, effects } = decide(state, event));
      queue.push(...effects);
    }
  } catch (err) {
    // A fault of this loop itself (never the pair's or the engine's): the container still goes, then the fault is raised.
    if (state.facts.containerId !== null)
      await removeAndVerify(deps, state.facts.containerId, launch.stopBudgetSec);
    throw err;
  }
  return { ...run.execution(state.facts), phases: phases.record() };
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
  #containerId: string | null = null;
  /** A start error the engine raised at the attach (Podman), raised again in place of the start. */
  #startError: EngineError | null = null;
  /** The logs were followed from the engine's log API (reattach, reconnect), not attached live. */
  #followed = false;
  /** The collection steps, from the logs' settle to their close, and what they found. */
  readonly #collection: CollectionPhase;

  constructor(
    private readonly deps: PairLifecycleDeps,
    private readonly launch: PairLaunch,
  ) {
    this.#startedAt = deps.clock.now();
    this.#logs = new PairLogs(deps, launch.secrets, () => this.#containerId);
    // A log that reaches its cap (or cannot be written) stops the pair the controlled way, like `stop --terminate`.
    // So does a limit the caller watches (the disk, issue 22).
    const stops = [launch.terminate, this.#logs.halt, launch.halt].filter(
      (s): s is AbortSignal => s !== undefined,
    );
    this.#stopSignal = stops.length === 1 ? this.#logs.halt : AbortSignal.any(stops);
    this.#collection = new CollectionPhase({
      deps,
      launch,
      logs: this.#logs,
      logsFollowed: () => this.#followed,
    });
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
        const found = await findByClaim(this.deps.runtime, this.launch.container.labels, this.deps.clock);
        return { kind: 'found', containerId: found.id, known: found.known };
      }
      case 'forgive_cut_logs':
        this.#logs.forgiveCut();
        return { kind: 'logs_forgiven' };
      default:
        return this.#collection.perform(effect, facts);
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
          await this.#stopOrKillNow(effect.containerId, effect.stopBudgetSec);
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
   * The controlled stop (SIGTERM, the stop budget, SIGKILL); `killNow` aborted before or during it cuts the budget
   * short: a stop with no budget is sent beside it, and the engine kills the container at once.
   */
  async #stopOrKillNow(containerId: string, stopBudgetSec: number): Promise<void> {
    const killNow = this.launch.killNow;
    if (killNow?.aborted === true) return this.deps.runtime.stop(containerId, 0);
    const kill = (): void => {
      this.deps.logger.warn({ container: containerId }, 'kill requested: stop budget cut short');
      this.deps.runtime.stop(containerId, 0).catch(() => undefined); // the stop below reports the engine's faults
    };
    killNow?.addEventListener('abort', kill, { once: true });
    try {
      await this.deps.runtime.stop(containerId, stopBudgetSec);
    } finally {
      killNow?.removeEventListener('abort', kill);
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
    const { runtime } = this.deps;
    if (requested.length === 0 || !canProveGpuGrants(runtime)) return null;
    const grant = await runtime.gpuGrantOf(containerId);
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
    const back = await awaitEngineReturn(this.deps, containerId, {
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

  execution(facts: LifecycleFacts): PairExecution {
    const found = this.#collection.findings();
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
      logs: found.logs,
      logFailure: facts.logFailure,
      logLimitExceeded: this.#logs.limitExceeded,
      outcome: found.outcome,
      sessions: found.sessions,
      providerFailure: found.providerFailure,
      providerFailureErrorKind: found.providerFailureErrorKind,
      cleanup: facts.cleanup,
      startedAt: this.#startedAt.toISOString(),
      finishedAt: this.deps.clock.now().toISOString(),
    };
  }
}
