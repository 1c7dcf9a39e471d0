// One exec request on a live session: its environment and stdin, the run within the limits, and its execs.jsonl line.
import { once } from 'node:events';
import type { Readable, Transform } from 'node:stream';
import type { Clock } from '../ports/clock.js';
import { ApiError } from './api-error.js';
import { callerEnvironment, sessionSecretsProblem } from './caller-secrets.js';
import { addSessionSecrets } from './session-secrets.js';
import { holdRedaction } from '../../core/redaction/compile.js';
import type { ExecRequest, ExecResult } from './exec-schemas.js';
import { execResult, runExec, type ExecObserver, type ExecOutcome } from './session-exec.js';
import { sessionRel, type Session, type SessionManagerDeps } from './session-state.js';

/** The exec's standard input: the streamed body, else the JSON's text or base64 bytes. */
function stdinOf(body: ExecRequest, streamed: Readable | undefined): Buffer | Readable | undefined {
  if (streamed !== undefined) return streamed;
  if (body.stdin_base64 !== undefined) return Buffer.from(body.stdin_base64, 'base64');
  return body.stdin !== undefined ? Buffer.from(body.stdin, 'utf8') : undefined;
}

/** Bytes of argv given to the redactor at a time; the event loop runs between two pieces. */
const REDACT_PIECE_BYTES = 16 * 1024;

/**
 * The argv as execs.jsonl keeps it: redacted once for the whole request (one redactor over the entries joined by NUL,
 * which no entry holds), fed in pieces with a turn of the event loop between them, so a long argv never holds the
 * server (issue 39: one redaction per entry held it 10.9 s for 100,000 entries).
 */
export async function redactedArgv(
  argv: readonly string[],
  secrets: readonly string[],
  createRedactor: (secrets: readonly string[]) => Transform,
  clock: Pick<Clock, 'nextTurn'>,
): Promise<string[]> {
  const joined = Buffer.from(argv.join('\0'));
  const redactor = createRedactor(secrets);
  const out: Buffer[] = [];
  redactor.on('data', (chunk: Buffer) => out.push(chunk));
  const ended = once(redactor, 'end');
  for (let at = 0; at < joined.length; at += REDACT_PIECE_BYTES) {
    redactor.write(joined.subarray(at, at + REDACT_PIECE_BYTES));
    if (at + REDACT_PIECE_BYTES < joined.length) await clock.nextTurn();
  }
  redactor.end();
  await ended;
  return Buffer.concat(out).toString('utf8').split('\0');
}

/** Why an exec was cut short by the server, from the reason its signal aborted with (null: not by the server). */
export type ExecInterruption = 'server_stopping' | 'session_ended';

function interruptionOf(stoppedFor: string | null): ExecInterruption | null {
  return stoppedFor === 'server_stopping' || stoppedFor === 'session_ended' ? stoppedFor : null;
}

type ExecOptions = { observer?: ExecObserver; signal?: AbortSignal; stdin?: Readable };
type ExecHooks = {
  cwd: string | undefined;
  acquire: () => () => void;
  touch: () => void;
  /** Whether an exec that ended with this code was cut by its container's end (docker rm -f, kill). */
  cutByEnd?: (code: number | null) => Promise<boolean>;
};

/**
 * The body of SessionManager.exec once the session is found live and `cwd` resolved: `hooks.acquire` admits the exec
 * within the limits (returns its end), `hooks.touch` renews the TTL when it succeeded (a failed exec does not keep a session alive).
 */
export async function execInSession(
  deps: SessionManagerDeps,
  session: Session,
  body: ExecRequest,
  options: ExecOptions,
  hooks: ExecHooks,
): Promise<ExecResult> {
  const env = await execEnvironment(deps, session, body);
  const secrets = [...session.secrets];
  // The set as it is now, held until the exec's line is written: the session's may change meanwhile (another exec
  // adds a secret), and this one's must not be compiled again on the loop at the end (session-secrets.ts).
  const release = await holdRedaction(secrets, deps.clock.nextTurn);
  try {
    return await execWith(deps, session, { body, options, hooks, env, secrets });
  } finally {
    release();
  }
}

async function execWith(
  deps: SessionManagerDeps,
  session: Session,
  run: {
    body: ExecRequest;
    options: ExecOptions;
    hooks: ExecHooks;
    env: Record<string, string> | undefined;
    secrets: string[];
  },
): Promise<ExecResult> {
  const { body, options, hooks, env, secrets } = run;
  const sessionId = session.record.session_id;
  const argv = body.argv ?? ['/bin/sh', '-c', body.command ?? ''];
  const started = deps.clock.monotonicMs();
  const outcome = await runAdmitted(deps, session, { argv, env, secrets, body, options, hooks });
  const cut = await cutByContainerEnd(outcome, options.signal, hooks);
  const stoppedFor = cut ? 'session_ended' : outcome.stoppedFor;
  if (!cut) hooks.touch();
  const interrupted = interruptionOf(stoppedFor);
  const result = { ...execResult(outcome, deps.clock.monotonicMs() - started), interrupted };
  await appendExecLine(deps, sessionId, {
    at: deps.clock.now().toISOString(),
    argv: await redactedArgv(argv, secrets, deps.createRedactor, deps.clock),
    return_code: result.return_code,
    timed_out: outcome.timedOut,
    client_gone: options.signal?.aborted === true,
    ...(stoppedFor !== null ? { killed: stoppedFor } : {}),
    duration_ms: result.duration_ms,
    stdout_bytes: outcome.stdout.bytes,
    stderr_bytes: outcome.stderr.bytes,
  });
  return result;
}

/**
 * The exec's environment: the caller's `env` resolved (its secrets masked from now on in everything of this session),
 * under it the egress proxy's variables while the session is allowlisted; undefined: the container's own.
 */
async function execEnvironment(
  deps: SessionManagerDeps,
  session: Session,
  body: ExecRequest,
): Promise<Record<string, string> | undefined> {
  let env: Record<string, string> | undefined;
  if (body.env !== undefined) {
    const resolved = callerEnvironment(body.env, body.secret_env ?? [], deps.environment, deps.allowedEnv, {
      env: 'env',
      secretEnv: 'secret_env',
    });
    env = resolved.values;
    // Masked from now on in everything of this session (a file the exec writes, a later exec's output), memory only;
    // compiled in steps before the exec starts (session-secrets.ts), the cap judged with any addition made meanwhile.
    await addSessionSecrets(session, resolved.secrets, deps.clock, (held) => {
      const problem = sessionSecretsProblem(held, resolved.secrets);
      return problem === null ? null : ApiError.invalid('the exec request', [{ path: 'env', rule: problem }]);
    });
  }
  // The proxy's variables while the session is allowlisted (emptied after): the caller's own `env` wins.
  const egressEnv = session.egress?.execEnv() ?? {};
  if (Object.keys(egressEnv).length > 0) env = { ...egressEnv, ...env };
  return env;
}

/** The exec run in the container while it holds its place within the limits (`hooks.acquire`), tracked by the session. */
async function runAdmitted(
  deps: SessionManagerDeps,
  session: Session,
  run: {
    argv: string[];
    env: Record<string, string> | undefined;
    secrets: string[];
    body: ExecRequest;
    options: ExecOptions;
    hooks: ExecHooks;
  },
): Promise<ExecOutcome> {
  const { body, options } = run;
  const done = run.hooks.acquire();
  try {
    const handle = await deps.engine.exec(session.record.container_id ?? '', {
      argv: run.argv,
      cwd: run.hooks.cwd,
      env: run.env,
      user: body.user,
      stdin: stdinOf(body, options.stdin),
    });
    session.execs.add(handle);
    try {
      return await runExec({
        observer: options.observer,
        signal: options.signal,
        handle,
        secrets: run.secrets,
        timeoutSec: body.timeout_sec,
        createRedactor: deps.createRedactor,
        maxOutputBytes: deps.maxOutputBytes,
        logger: deps.logger,
        sessionId: session.record.session_id,
        clock: deps.clock,
      });
    } finally {
      session.execs.delete(handle);
    }
  } finally {
    done();
  }
}

/**
 * An exec that ended on its own may have been cut by its container's end, which can reach us just after it (then
 * the signal says so); the engine is asked only when nothing of ours stopped it (timeout, client gone, shutdown).
 */
async function cutByContainerEnd(
  outcome: ExecOutcome,
  signal: AbortSignal | undefined,
  hooks: ExecHooks,
): Promise<boolean> {
  const reason: unknown = signal?.aborted === true ? signal.reason : null;
  return (
    outcome.stoppedFor === null &&
    !outcome.timedOut &&
    (reason === 'session_ended' || (reason === null && (await hooks.cutByEnd?.(outcome.code)) === true))
  );
}

/** One line of the session's execs.jsonl; best effort (a failed append loses the line, never the exec's answer). */
export async function appendExecLine(
  deps: Pick<SessionManagerDeps, 'fs' | 'store'>,
  sessionId: string,
  line: Record<string, unknown>,
): Promise<void> {
  await deps.fs
    .appendFile(
      deps.store.resolve(sessionRel(sessionId, 'execs.jsonl')),
      new TextEncoder().encode(`${JSON.stringify(line)}\n`),
      0o600,
    )
    .catch(() => undefined);
}
