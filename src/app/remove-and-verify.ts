import { errorKind } from '../core/errors.js';
import type { CleanupRecord } from '../core/result.js';
import { sleep as realSleep } from '../core/sleep.js';
import { systemClock, type Clock } from './ports/clock.js';
import type { ContainerRuntime } from './ports/container-runtime.js';
import type { Logger } from './ports/logger.js';
import { failpoint } from './failpoints.js';

const DEFAULT_VERIFY_ABSENT_MS = 15_000;
const REMOVE_ATTEMPTS = 3;
const POLL_MS = 100;

export interface RemoveAndVerifyDeps {
  readonly runtime: ContainerRuntime;
  readonly logger: Logger;
  /** How long to wait for the engine to confirm the container is gone (over all attempts). */
  readonly verifyAbsentTimeoutMs?: number;
  /** Default: the system clock. */
  readonly clock?: Clock;
  /** Default: a real timer. */
  readonly sleep?: (ms: number) => Promise<void>;
}

/** Stop if running, remove with force, then insist on the engine's 404. Never throws. */
export async function removeAndVerify(
  deps: RemoveAndVerifyDeps,
  containerId: string,
  stopBudgetSec: number,
): Promise<CleanupRecord> {
  const { runtime, logger } = deps;
  const clock = deps.clock ?? systemClock;
  const pause = deps.sleep ?? realSleep;
  const verifyMs = deps.verifyAbsentTimeoutMs ?? DEFAULT_VERIFY_ABSENT_MS;
  let removed = false;
  for (let attempts = 1; attempts <= REMOVE_ATTEMPTS; attempts++) {
    try {
      const state = await runtime.inspect(containerId);
      if (state === null) return { removed, verified_absent: true, attempts };
      if (state.status === 'running' || state.status === 'restarting' || state.status === 'paused') {
        await runtime.stop(containerId, stopBudgetSec);
      }
      removed = (await runtime.remove(containerId)) === 'removed' || removed;
      failpoint('remove:requested');
    } catch (err) {
      logger.warn(
        { container: containerId, attempt: attempts, err: errorKind(err) },
        'container removal failed',
      );
    }
    if (
      await goneWithin(runtime, containerId, clock.now().getTime() + verifyMs / REMOVE_ATTEMPTS, clock, pause)
    ) {
      return { removed, verified_absent: true, attempts };
    }
  }
  logger.error(
    { container: containerId, attempts: REMOVE_ATTEMPTS },
    'container still present after removal: keeping its reservation',
  );
  return { removed, verified_absent: false, attempts: REMOVE_ATTEMPTS };
}

/** Polls inspect until the engine says 404 or `untilMs` passes; an engine hiccup is polled through. */
async function goneWithin(
  runtime: ContainerRuntime,
  containerId: string,
  untilMs: number,
  clock: Clock,
  pause: (ms: number) => Promise<void>,
): Promise<boolean> {
  while (clock.now().getTime() < untilMs) {
    try {
      if ((await runtime.inspect(containerId)) === null) return true;
    } catch {
      // engine hiccup: keep polling until the deadline
    }
    await pause(POLL_MS);
  }
  return false;
}
