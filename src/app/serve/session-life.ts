// A session is as alive as its container (issue 39): the engine's word that it exited or was removed ends the session,
// and the clients of an ended session are told so (410) for as long as the server remembers it.
import type { Clock } from '../ports/clock.js';
import type { ContainerEndEvent, ContainerEngine } from '../ports/container-runtime.js';
import { ApiError } from './api-error.js';
import type { Session, SessionEnd, SessionManagerDeps } from './session-state.js';

export function sessionEndOf(event: Pick<ContainerEndEvent, 'action' | 'exitCode'>, at: Date): SessionEnd {
  return event.action === 'destroy'
    ? { reason: 'gone', exitCode: null, at: at.toISOString() }
    : { reason: 'exited', exitCode: event.exitCode, at: at.toISOString() };
}

/**
 * After an engine failure on a session's container: the end the engine shows (removed: `destroy`; not running:
 * `die` with its exit code), or null when it still runs or cannot be asked.
 */
export async function containerEndOf(
  engine: Pick<ContainerEngine, 'inspect'>,
  session: Session,
): Promise<ContainerEndEvent | null> {
  const containerId = session.record.container_id ?? '';
  const state = await engine.inspect(containerId).catch(() => undefined);
  if (state === undefined || (state !== null && (state.status === 'running' || state.status === 'paused')))
    return null;
  const sessionId = session.record.session_id;
  // `removing`: a `docker rm -f` marks the container before it kills it, so its `die` comes before its `destroy`.
  return state === null || state.status === 'removing' || state.status === 'dead'
    ? { sessionId, containerId, action: 'destroy', exitCode: null }
    : { sessionId, containerId, action: 'die', exitCode: state.exitCode };
}

/**
 * The end a session's container had, as the engine shows it now: a `die` whose container is being removed or is
 * gone was a removal (`docker rm -f` kills before it removes), and the session reads `gone`, not `exited`.
 */
export async function confirmedEnd(
  engine: Pick<ContainerEngine, 'inspect'>,
  session: Session,
  end: SessionEnd,
): Promise<SessionEnd> {
  if (end.reason === 'gone') return end;
  const now = await containerEndOf(engine, session);
  return now?.action === 'destroy' ? { reason: 'gone', exitCode: null, at: end.at } : end;
}

/**
 * A live session's container ended (`session.ended` is set): its execs are told at once (they answer `interrupted:
 * session_ended`), the end is confirmed with the engine (a `die` of a container being removed reads `gone`), and the
 * session is deleted (verified), which releases its slot.
 */
export function endSession(
  deps: Pick<SessionManagerDeps, 'engine' | 'logger'>,
  session: Session,
  remove: (sessionId: string, reason: SessionEnd['reason']) => Promise<unknown>,
): void {
  const sessionId = session.record.session_id;
  session.stopExecs.abort('session_ended');
  void confirmedEnd(deps.engine, session, session.ended as SessionEnd)
    .then((confirmed) => {
      if (confirmed.reason === 'gone') session.ended = confirmed; // never back from gone to exited
      const end = session.ended as SessionEnd;
      deps.logger.warn(
        { session: sessionId, reason: end.reason, exit_code: end.exitCode },
        'session ended by its container; deleting it',
      );
      return remove(sessionId, end.reason);
    })
    .catch((err: unknown) =>
      deps.logger.warn(
        { session: sessionId, error: (err as Error).message },
        'ended session: deletion not finished; the reaper retries',
      ),
    );
}

/** How long an exec killed by SIGKILL waits for the engine's word that its container ended (the two race). */
const CUT_GRACE_MS = 1_000;
const SIGKILL_CODE = 137;

/**
 * Whether an exec that ended without the server stopping it was cut by its container's end (`docker rm -f`, `docker
 * kill`, the main process exiting): the session ended, or the engine shows the container stopped or removed. An exec
 * that exited with its own code (below 128) was not. An exec killed by SIGKILL in a container the engine still shows
 * running waits (bounded) for the container's `die`: the exec's end and the container's reach us in either order.
 */
export async function execCutByEnd(
  engine: Pick<ContainerEngine, 'inspect'>,
  session: Session,
  code: number | null,
  onEnd: (event: ContainerEndEvent) => void,
  clock: Pick<Clock, 'sleep'>,
): Promise<boolean> {
  if (code !== null && code < 128) return false;
  const ended = async (): Promise<boolean> => {
    if (session.ended !== null) return true;
    const end = await containerEndOf(engine, session);
    if (end !== null) onEnd(end);
    return end !== null;
  };
  if (await ended()) return true;
  if (code !== null && code !== SIGKILL_CODE) return false;
  await clock.sleep(CUT_GRACE_MS, session.stopExecs.signal);
  return ended();
}

/** 410 for a session whose container ended: what happened and what the client can do. */
export function endedError(sessionId: string, end: SessionEnd): ApiError {
  const what =
    end.reason === 'gone'
      ? 'its container was removed outside roboguide-eval'
      : `its container exited${end.exitCode === null ? '' : ` with code ${end.exitCode}`}`;
  return new ApiError(
    410,
    'E_SESSION_ENDED',
    `session ${sessionId} has ended: ${what} at ${end.at}; its slot is released (create a new session)`,
    [{ path: 'session', rule: end.reason }],
  );
}

/** 503 while the server shuts down: every session is being deleted. */
export function stoppingError(): ApiError {
  return new ApiError(
    503,
    'E_SERVER_STOPPING',
    'the server is shutting down (SIGTERM): every session is being deleted; start a new session on the next server',
  );
}

/**
 * Sessions that ended by their container, after they left the server's map: their ids answer 410 rather than 404.
 * Bounded: the oldest are forgotten first (they then answer 404, as a deleted session does).
 */
export class EndedSessions {
  readonly #ends = new Map<string, SessionEnd>();
  constructor(readonly capacity = 4096) {}

  add(sessionId: string, end: SessionEnd): void {
    this.#ends.delete(sessionId);
    this.#ends.set(sessionId, end);
    while (this.#ends.size > this.capacity) {
      const oldest = this.#ends.keys().next().value;
      if (oldest === undefined) break;
      this.#ends.delete(oldest);
    }
  }

  get(sessionId: string): SessionEnd | undefined {
    return this.#ends.get(sessionId);
  }

  get size(): number {
    return this.#ends.size;
  }
}
