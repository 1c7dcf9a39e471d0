import { engineProbeDelayMs } from '../../core/engine-loss.js';
import type { Clock } from '../ports/clock.js';
import { EngineError } from '../ports/engine-error.js';
import type { ContainerRuntime, ContainerState } from '../ports/container-runtime.js';

/** What probing an engine that went away found. */
export type EngineReturn =
  | { readonly kind: 'answered'; readonly state: ContainerState | null; readonly answeredAtMs: number }
  | { readonly kind: 'deadline' }
  | { readonly kind: 'aborted' };

export interface EngineReturnDeps {
  readonly runtime: ContainerRuntime;
  /** The probes' deadline and the backoff between them (an abort ends a wait early). */
  readonly clock: Clock;
}

/** A failure that means "the engine did not answer" (refused, reset, no socket), as opposed to an engine verdict. */
export function isEngineUnavailable(err: unknown): boolean {
  return err instanceof EngineError && err.fault === 'engine_unavailable';
}

/**
 * Inspect the container as soon as the engine answers again: probes with backoff (250 ms doubling to 2 s) until an
 * answer, `untilMs`, or the signal. The answer is the record; nothing else (events, streams) is trusted for it.
 */
export async function awaitEngineReturn(
  deps: EngineReturnDeps,
  containerId: string,
  options: { readonly untilMs: number; readonly signal?: AbortSignal },
): Promise<EngineReturn> {
  const nowMs = (): number => deps.clock.now().getTime();
  for (let attempt = 0; ; attempt++) {
    if (options.signal?.aborted === true) return { kind: 'aborted' };
    if (nowMs() >= options.untilMs) return { kind: 'deadline' };
    try {
      const state = await deps.runtime.inspect(containerId);
      return { kind: 'answered', state, answeredAtMs: nowMs() };
    } catch {
      // not answering yet (or answering badly): probe again after the backoff
    }
    await deps.clock.sleep(
      Math.min(engineProbeDelayMs(attempt), Math.max(0, options.untilMs - nowMs())),
      options.signal,
    );
  }
}
