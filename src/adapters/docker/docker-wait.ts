import type Docker from 'dockerode';
import type { WaitResult } from '../../app/ports/container-runtime.js';
import { sleep } from '../system-clock.js';
import { statusOf, toEngineError } from './engine-error.js';

/** How long one heartbeat inspect may take. */
const HEARTBEAT_TIMEOUT_MS = 5_000;

export interface WaitTiming {
  /** How often a waiting pair's container is inspected. */
  readonly heartbeatMs: number;
  /** A stopped container whose wait has not answered within this long: the wait's connection is dead. */
  readonly silentWaitGraceMs: number;
}

function isAbort(err: unknown): boolean {
  const e = err as { name?: string; code?: string };
  return e?.name === 'AbortError' || e?.code === 'ABORT_ERR';
}

/** Resolves `aborted` once the signal aborts (at once when it already has). */
function abortedBy(signal: AbortSignal | undefined): Promise<WaitResult> {
  return new Promise<WaitResult>((resolve) => {
    if (signal?.aborted) resolve({ kind: 'aborted' });
    signal?.addEventListener('abort', () => resolve({ kind: 'aborted' }), { once: true });
  });
}

/** One short inspect: is the container alive, stopped, or is the engine (or the container) gone? */
async function heartbeat(docker: Docker, id: string): Promise<'alive' | 'stopped' | 'lost' | 'unknown'> {
  try {
    const c = await docker
      .getContainer(id)
      .inspect({ abortSignal: AbortSignal.timeout(HEARTBEAT_TIMEOUT_MS) });
    const status = c.State.Status;
    return status === 'exited' || status === 'dead' || status === 'removing' ? 'stopped' : 'alive';
  } catch (err) {
    if (statusOf(err) === 404) return 'lost';
    // A slow answer from a busy engine is not a lost engine: only a refused or reset connection is.
    return toEngineError(err, 'inspect a container').fault === 'engine_unavailable' ? 'lost' : 'unknown';
  }
}

/**
 * ContainerRuntime.wait over dockerode: until the container exits, the deadline passes, the signal aborts,
 * or the engine is lost. The wait request can hang forever when dockerd dies (its chunked response is cut
 * without an error): a heartbeat inspect notices the engine going away, and an exit the wait did not report.
 */
export async function waitForContainer(
  docker: Docker,
  id: string,
  options: { deadlineMs: number; signal?: AbortSignal },
  timing: WaitTiming,
): Promise<WaitResult> {
  const controller = new AbortController();
  const onAbort = (): void => controller.abort();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  const never = new Promise<WaitResult>(() => undefined);
  let timer: NodeJS.Timeout | undefined;
  let lastSeenAliveMs = Date.now();
  const deadline = new Promise<WaitResult>((resolve) => {
    const delay = Math.max(0, options.deadlineMs - Date.now());
    timer = setTimeout(() => {
      resolve({ kind: 'deadline' });
      controller.abort();
    }, delay);
  });
  const aborted = abortedBy(options.signal);
  const exited = (async (): Promise<WaitResult> => {
    try {
      const r = (await docker.getContainer(id).wait({ abortSignal: controller.signal } as object)) as {
        StatusCode: number;
      };
      return { kind: 'exited', exitCode: r.StatusCode };
    } catch (err) {
      if (isAbort(err) || controller.signal.aborted) return never;
      const mapped = toEngineError(err, 'wait for a container');
      // A dropped connection or a container the engine forgot is not a verdict: the caller inspects again.
      if (mapped.fault === 'engine_unavailable' || mapped.statusCode === 404)
        return { kind: 'engine_lost', lastSeenAliveMs };
      throw mapped;
    }
  })();
  const watched = (async (): Promise<WaitResult> => {
    for (;;) {
      await sleep(timing.heartbeatMs, controller.signal);
      if (controller.signal.aborted) return never;
      const askedAt = Date.now();
      const seen = await heartbeat(docker, id);
      if (controller.signal.aborted) return never;
      if (seen === 'alive') lastSeenAliveMs = askedAt;
      else if (seen === 'stopped') {
        // An ordinary exit is reported by the wait within moments; one that stays silent lost its connection.
        await sleep(timing.silentWaitGraceMs, controller.signal);
        return controller.signal.aborted ? never : { kind: 'engine_lost', lastSeenAliveMs };
      } else if (seen === 'lost') return { kind: 'engine_lost', lastSeenAliveMs };
    }
  })();
  try {
    return await Promise.race([exited, watched, deadline, aborted]);
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', onAbort);
    controller.abort();
  }
}
