// Execs that a killed server left running in a session it adopts: nobody reads them any more, so they are ended
// (their process tree killed inside the container) and each gets its line in execs.jsonl (issue 39).
import { appendExecLine, redactedArgv } from './session-exec-request.js';
import type { Session, SessionManagerDeps } from './session-state.js';

/** Ends every exec running in the adopted session's container; returns how many. A failure is logged, never thrown. */
export async function endOrphanedExecs(deps: SessionManagerDeps, session: Session): Promise<number> {
  const sessionId = session.record.session_id;
  const containerId = session.record.container_id ?? '';
  let running;
  try {
    running = await deps.engine.runningExecs(containerId);
  } catch (err) {
    deps.logger.warn(
      { session: sessionId, error: (err as Error).message },
      'adoption: cannot list its execs',
    );
    return 0;
  }
  let ended = 0;
  for (const exec of running) {
    let killed = true;
    await deps.engine.killExec(containerId, exec.id).catch((err: unknown) => {
      killed = false;
      deps.logger.warn(
        { session: sessionId, exec: exec.id, error: (err as Error).message },
        'adoption: cannot end an exec left by the previous server',
      );
    });
    if (killed) ended += 1;
    const line = {
      at: deps.clock.now().toISOString(),
      argv: await redactedArgv(exec.argv, session.secrets, deps.createRedactor, deps.clock),
      exec_id: exec.id,
      orphaned: true,
      killed: killed ? 'server_restarted' : null,
      return_code: null,
    };
    await appendExecLine(deps, sessionId, line);
  }
  if (running.length > 0)
    deps.logger.warn(
      { session: sessionId, execs: running.length, ended },
      'adoption: execs left running by the previous server were ended (nobody could read them)',
    );
  return ended;
}
