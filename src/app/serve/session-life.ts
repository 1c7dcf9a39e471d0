// A session is as alive as its container (issue 39): the engine's word that it exited or was removed ends the session,
// and the clients of an ended session are told so (410) for as long as the server remembers it.
import type { ContainerEndEvent, ContainerEngine } from '../ports/container-runtime.js';
import { ApiError } from './api-error.js';
import type { Session, SessionEnd } from './session-state.js';

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
  return state === null
    ? { sessionId, containerId, action: 'destroy', exitCode: null }
    : { sessionId, containerId, action: 'die', exitCode: state.exitCode };
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
