// One exec request on a live session: its environment and stdin, the run within the limits, and its execs.jsonl line.
import type { Readable } from 'node:stream';
import { redactText } from '../../core/redaction/redact-text.js';
import { callerEnvironment } from './caller-secrets.js';
import type { ExecRequest, ExecResult } from './schemas.js';
import { execResult, runExec, type ExecObserver } from './session-exec.js';
import { sessionRel, type Session, type SessionManagerDeps } from './session-state.js';

/** The exec's standard input: the streamed body, else the JSON's text or base64 bytes. */
function stdinOf(body: ExecRequest, streamed: Readable | undefined): Buffer | Readable | undefined {
  if (streamed !== undefined) return streamed;
  if (body.stdin_base64 !== undefined) return Buffer.from(body.stdin_base64, 'base64');
  return body.stdin !== undefined ? Buffer.from(body.stdin, 'utf8') : undefined;
}

/**
 * The body of SessionManager.exec once the session is found live and `cwd` resolved: `hooks.acquire` admits the exec
 * within the limits (returns its end), `hooks.touch` renews the TTL when it is over.
 */
export async function execInSession(
  deps: SessionManagerDeps,
  session: Session,
  body: ExecRequest,
  options: { observer?: ExecObserver; signal?: AbortSignal; stdin?: Readable },
  hooks: { cwd: string | undefined; acquire: () => () => void; touch: () => void },
): Promise<ExecResult> {
  const { cwd } = hooks;
  const containerId = session.record.container_id ?? '';
  const sessionId = session.record.session_id;
  let env: Record<string, string> | undefined;
  if (body.env !== undefined) {
    const resolved = callerEnvironment(body.env, body.secret_env ?? [], deps.environment, deps.allowedEnv, {
      env: 'env',
      secretEnv: 'secret_env',
    });
    env = resolved.values;
    // Masked from now on in everything of this session (a file the exec writes, a later exec's output), memory only.
    for (const secret of resolved.secrets)
      if (!session.secrets.includes(secret)) session.secrets.push(secret);
  }
  const secrets = [...session.secrets];
  const argv = body.argv ?? ['/bin/sh', '-c', body.command ?? ''];
  const started = process.hrtime.bigint();
  const done = hooks.acquire();
  let outcome;
  try {
    const handle = await deps.engine.exec(containerId, {
      argv,
      cwd,
      env,
      user: body.user,
      stdin: stdinOf(body, options.stdin),
    });
    session.execs.add(handle);
    try {
      outcome = await runExec({
        observer: options.observer,
        signal: options.signal,
        handle,
        secrets,
        timeoutSec: body.timeout_sec,
        createRedactor: deps.createRedactor,
        maxOutputBytes: deps.maxOutputBytes,
        logger: deps.logger,
        sessionId,
      });
    } finally {
      session.execs.delete(handle);
    }
  } finally {
    done();
    hooks.touch();
  }
  const result = execResult(outcome, Number(process.hrtime.bigint() - started) / 1e6);
  const line = {
    at: deps.clock.now().toISOString(),
    argv: argv.map((a) => redactText(a, secrets)),
    return_code: result.return_code,
    timed_out: outcome.timedOut,
    client_gone: options.signal?.aborted === true,
    ...(outcome.stoppedFor !== null ? { killed: outcome.stoppedFor } : {}),
    duration_ms: result.duration_ms,
    stdout_bytes: outcome.stdout.bytes,
    stderr_bytes: outcome.stderr.bytes,
  };
  await deps.fs
    .appendFile(
      deps.store.resolve(sessionRel(sessionId, 'execs.jsonl')),
      new TextEncoder().encode(`${JSON.stringify(line)}\n`),
      0o600,
    )
    .catch(() => undefined);
  return result;
}
