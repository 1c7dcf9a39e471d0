import type { EngineFault } from '../../core/engine-fault.js';
import type { CleanupRecord } from '../../core/cleanup-record.js';
import type { Clock } from '../ports/clock.js';
import type { ContainerEngine } from '../ports/container-runtime.js';
import { EngineError } from '../ports/engine-error.js';
import type { Logger } from '../ports/logger.js';
import { failpoint } from '../ports/failpoints.js';

/**
 * The retry policy, whole: up to REMOVE_ATTEMPTS rounds of (inspect; stop if it runs; force-remove),
 * each followed by up to `verifyAbsentTimeoutMs / REMOVE_ATTEMPTS / POLL_MS` inspects POLL_MS apart
 * until the engine answers 404.
 * Bounded by counts, not by a clock: about 3 × 50 × 100 ms by default, whatever the injected clock says.
 */
const DEFAULT_VERIFY_ABSENT_MS = 15_000;
const REMOVE_ATTEMPTS = 3;
const POLL_MS = 100;

export interface RemoveAndVerifyDeps {
  /** The shared engine port: a pair's runtime or the sessions' engine. */
  readonly runtime: Pick<ContainerEngine, 'inspect' | 'stop' | 'remove'>;
  readonly logger: Logger;
  /** About how long to insist on the engine's 404, over all attempts (default 15 s). */
  readonly verifyAbsentTimeoutMs?: number | undefined;
  /** The pause between the looks (bounded by counts, not by the time it reads). */
  readonly clock: Pick<Clock, 'sleep'>;
}

/** Why a step of the removal failed: the engine's typed fault, never its text matched. */
export interface RemovalFailure {
  readonly step: 'inspect' | 'stop' | 'remove' | 'verify';
  /** The engine's fault; null when the failure was not an EngineError (a fault of ours). */
  readonly fault: EngineFault | null;
  /** For the record only (the caller masks it before it is written). */
  readonly message: string;
}

export interface Removal extends CleanupRecord {
  /** Nothing runs in it any more: a stop was not needed, or it was asked for and answered. */
  readonly stopped: boolean;
  /** The last failure on the way, even when the 404 came in the end; null when none. */
  readonly failure: RemovalFailure | null;
}

/** `step: fault: message`, the text a cleanup record keeps of a failure. */
export function describeRemovalFailure(failure: RemovalFailure | null): string | null {
  if (failure === null) return null;
  return `${failure.step}: ${failure.fault !== null ? `${failure.fault}: ` : ''}${failure.message}`;
}

function failureOf(step: RemovalFailure['step'], err: unknown): RemovalFailure {
  const fault = err instanceof EngineError ? err.fault : null;
  return { step, fault, message: err instanceof Error ? err.message : String(err) };
}

/**
 * Stop if running, remove with force, then insist on the engine's 404: the one removal of pairs and sessions.
 * Never throws.
 */
export async function verifiedRemoval(
  deps: RemoveAndVerifyDeps,
  containerId: string,
  stopBudgetSec: number,
  /**
   * `exited`: the caller's own inspect found the container exited, so the first round removes without looking first
   * (a stop is only for a running container, and the removal is forced whatever its state: issue 39, one round trip
   * of a pair's end). Every later round looks as usual.
   */
  known: { readonly exited?: boolean } = {},
): Promise<Removal> {
  const { runtime, logger } = deps;
  const polls = Math.max(
    1,
    Math.ceil((deps.verifyAbsentTimeoutMs ?? DEFAULT_VERIFY_ABSENT_MS) / REMOVE_ATTEMPTS / POLL_MS),
  );
  let removed = false;
  let stopped = true;
  let failure: RemovalFailure | null = null;
  for (let attempts = 1; attempts <= REMOVE_ATTEMPTS; attempts++) {
    let step: RemovalFailure['step'] = 'inspect';
    try {
      // The first round for a container the caller saw exited does not look: there is nothing to stop.
      const look = attempts > 1 || known.exited !== true;
      const state = look ? await runtime.inspect(containerId) : undefined;
      if (state === null) return { removed, verified_absent: true, attempts, stopped, failure };
      if (
        state !== undefined &&
        (state.status === 'running' || state.status === 'restarting' || state.status === 'paused')
      ) {
        step = 'stop';
        stopped = false;
        await runtime.stop(containerId, stopBudgetSec);
      }
      stopped = true;
      step = 'remove';
      removed = (await runtime.remove(containerId)) === 'removed' || removed;
      failpoint('remove:requested');
    } catch (err) {
      // Not removed in this round (nor when the inspect or the stop failed): its looks, then the next round.
      failure = failureOf(step, err);
      logger.warn({ container: containerId, attempt: attempts, ...failure }, 'container removal failed');
    }
    for (let poll = 0; poll < polls; poll++) {
      try {
        if ((await runtime.inspect(containerId)) === null)
          return { removed, verified_absent: true, attempts, stopped, failure };
      } catch (err) {
        failure = failureOf('verify', err); // an engine hiccup: polled through
      }
      await deps.clock.sleep(POLL_MS);
    }
  }
  logger.error(
    { container: containerId, attempts: REMOVE_ATTEMPTS },
    'container still present after removal: keeping its reservation',
  );
  return { removed, verified_absent: false, attempts: REMOVE_ATTEMPTS, stopped, failure };
}

/** The removal as a pair's result records it (result.json `cleanup`). */
export async function removeAndVerify(
  deps: RemoveAndVerifyDeps,
  containerId: string,
  stopBudgetSec: number,
  known: { readonly exited?: boolean } = {},
): Promise<CleanupRecord> {
  const { removed, verified_absent, attempts } = await verifiedRemoval(
    deps,
    containerId,
    stopBudgetSec,
    known,
  );
  return { removed, verified_absent, attempts };
}
