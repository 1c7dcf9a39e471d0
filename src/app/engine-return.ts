import {
  describeEngineLoss,
  engineProbeDelayMs,
  judgeEngineReturn,
  type EngineLoss,
} from '../core/engine-loss.js';
import { EngineError } from './ports/engine-error.js';
import type { ContainerRuntime, ContainerState } from './ports/container-runtime.js';
import type { Logger } from './ports/logger.js';
import { sleep } from '../core/sleep.js';

/** What probing an engine that went away found. */
export type EngineReturn =
  | { readonly kind: 'answered'; readonly state: ContainerState | null; readonly answeredAtMs: number }
  | { readonly kind: 'deadline' }
  | { readonly kind: 'aborted' };

/** A failure that means "the engine did not answer" (refused, reset, no socket), as opposed to an engine verdict. */
export function isEngineUnavailable(err: unknown): boolean {
  return err instanceof EngineError && err.fault === 'engine_unavailable';
}

/**
 * Inspect the container as soon as the engine answers again: probes with backoff (250 ms doubling to 2 s) until an
 * answer, `untilMs`, or the signal. The answer is the record; nothing else (events, streams) is trusted for it.
 */
export async function awaitEngineReturn(
  runtime: ContainerRuntime,
  containerId: string,
  options: { readonly untilMs: number; readonly signal?: AbortSignal },
): Promise<EngineReturn> {
  for (let attempt = 0; ; attempt++) {
    if (options.signal?.aborted === true) return { kind: 'aborted' };
    if (Date.now() >= options.untilMs) return { kind: 'deadline' };
    try {
      const state = await runtime.inspect(containerId);
      return { kind: 'answered', state, answeredAtMs: Date.now() };
    } catch {
      // not answering yet (or answering badly): probe again after the backoff
    }
    await sleep(
      Math.min(engineProbeDelayMs(attempt), Math.max(0, options.untilMs - Date.now())),
      options.signal,
    );
  }
}

/** How the wait phase of a pair ended. */
export type WaitPhaseEnd =
  | { readonly kind: 'exited' }
  | { readonly kind: 'deadline' }
  | { readonly kind: 'aborted' }
  | { readonly kind: 'engine_loss'; readonly loss: EngineLoss; readonly message: string };

export interface WaitPhaseDeps {
  readonly runtime: ContainerRuntime;
  readonly logger: Logger;
  /**
   * The engine is back and the container exists: reconnect the log streams if the engine cut them, re-reading from
   * the first byte and skipping what is on disk (`neverStarted`: there is no output; the log files are just
   * completed empty). May throw; the phase goes on.
   */
  readonly reconnectLogs: (neverStarted: boolean) => Promise<void>;
}

/**
 * Wait for the container through engine faults (issue 10): a lost connection is followed by a fresh inspect as soon
 * as the engine answers; a container still running is waited for again, one that is gone or stopped ends the pair
 * now with the reason that says so; an engine that never answers again ends it at the deadline (`engine_unreachable`).
 * `lostSinceMs`: the engine was already lost before the wait (attach/start failed), last seen answering then.
 */
export async function waitThroughEngineLoss(
  deps: WaitPhaseDeps,
  containerId: string,
  options: { readonly deadlineMs: number; readonly signal?: AbortSignal; readonly lostSinceMs?: number },
): Promise<WaitPhaseEnd> {
  const { runtime, logger } = deps;
  let lastSeenAliveMs = options.lostSinceMs;
  for (;;) {
    if (lastSeenAliveMs === undefined) {
      const waited = await runtime.wait(containerId, {
        deadlineMs: options.deadlineMs,
        ...(options.signal ? { signal: options.signal } : {}),
      });
      if (waited.kind === 'node_lost') {
        logger.warn({ container: containerId, node: waited.node }, 'node lost while the pair ran');
        return { kind: 'engine_loss', loss: 'node_lost', message: waited.message };
      }
      if (waited.kind !== 'engine_lost')
        return waited.kind === 'exited' ? { kind: 'exited' } : { kind: waited.kind };
      lastSeenAliveMs = waited.lastSeenAliveMs;
    }
    const lostAt = new Date().toISOString();
    logger.warn(
      { container: containerId },
      'engine connection lost: inspecting again once the engine answers',
    );
    const back = await awaitEngineReturn(runtime, containerId, {
      untilMs: options.deadlineMs,
      ...(options.signal ? { signal: options.signal } : {}),
    });
    if (back.kind === 'aborted') return { kind: 'aborted' };
    if (back.kind === 'deadline') {
      const message = describeEngineLoss({
        loss: 'engine_unreachable',
        lostAt,
        answeredAt: null,
        finishedAt: null,
        exitCode: null,
      });
      return { kind: 'engine_loss', loss: 'engine_unreachable', message };
    }
    const { state } = back;
    const verdict = judgeEngineReturn(state, lastSeenAliveMs);
    logger.warn(
      { container: containerId, status: state?.status ?? 'absent', verdict: verdict.kind },
      'engine answered again',
    );
    if (state !== null) {
      await deps.reconnectLogs(state.status === 'created').catch((err: unknown) => {
        logger.warn(
          { container: containerId, err: err instanceof Error ? err.name : 'unknown' },
          'log reconnection failed',
        );
      });
    }
    if (verdict.kind === 'still_running') {
      lastSeenAliveMs = undefined;
      continue;
    }
    if (verdict.kind === 'exited_before_loss') return { kind: 'exited' };
    const message = describeEngineLoss({
      loss: verdict.loss,
      lostAt,
      answeredAt: new Date(back.answeredAtMs).toISOString(),
      finishedAt: state?.finishedAt ?? null,
      exitCode: verdict.exitCode,
    });
    return { kind: 'engine_loss', loss: verdict.loss, message };
  }
}
