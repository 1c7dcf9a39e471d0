import type { Readable, Transform } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import type { Clock } from '../ports/clock.js';
import type { Logger } from '../ports/logger.js';
import type { ExecResult } from './exec-schemas.js';
import type { ExecHandle } from '../ports/container-runtime.js';

const TIMEOUT_RETURN_CODE = 124;

/** After a timeout kill, how long the output may take to end before the connection is abandoned. */
const KILL_GRACE_MS = 2_000;

export interface ExecObserver {
  /**
   * One piece of output, in order. The exec's output is not read further until the returned promise settles
   * (backpressure: a slow client pauses the exec). `stopped` aborts once the exec is being killed (timeout, client
   * gone): stop waiting then; later output is dropped.
   */
  onOutput(stream: 'stdout' | 'stderr', text: string, stopped: AbortSignal): void | Promise<void>;
}

export interface CollectedOutput {
  readonly text: string;
  readonly bytes: number;
}

/** What one exec needs besides its handle: redaction, the output cap, where kill failures are logged. */
export interface ExecRun {
  readonly handle: ExecHandle;
  readonly secrets: readonly string[];
  readonly createRedactor: (secrets: readonly string[]) => Transform;
  /** Per stream: output beyond this is dropped (`truncated`), unless an observer streams it. */
  readonly maxOutputBytes: number;
  readonly timeoutSec: number | undefined;
  readonly observer?: ExecObserver | undefined;
  readonly signal?: AbortSignal | undefined;
  readonly logger: Logger;
  readonly sessionId: string;
  /** The exec's timeout and kill grace. */
  readonly clock: Clock;
}

export interface ExecOutcome {
  readonly stdout: CollectedOutput;
  readonly stderr: CollectedOutput;
  readonly code: number | null;
  readonly timedOut: boolean;
  readonly truncated: boolean;
  /** Why the caller's signal stopped the exec, when it gave a reason (e.g. `slow_reader`); null otherwise. */
  readonly stoppedFor: string | null;
}

/**
 * Kills the exec's process tree once (a timeout or the client going away); output still open after the kill
 * belongs to a process that left the group, so reading stops after a grace period.
 */
function killerOf(run: ExecRun, stopped: AbortController): () => void {
  let killed = false;
  return () => {
    if (killed) return;
    killed = true;
    stopped.abort();
    run.handle
      .killTree()
      .catch((err: unknown) =>
        run.logger.warn({ session: run.sessionId, error: (err as Error).message }, 'cannot kill an exec'),
      )
      .finally(() => run.clock.setTimer(KILL_GRACE_MS, () => run.handle.abandon(), { unref: true }));
  };
}

/** Redacted output of one stream: streamed to the observer, or kept up to the cap (`onTruncated` past it). */
async function collect(
  run: ExecRun,
  source: Readable,
  name: 'stdout' | 'stderr',
  onTruncated: () => void,
  stopped: AbortSignal,
): Promise<CollectedOutput> {
  const redactor = run.createRedactor(run.secrets);
  source.pipe(redactor);
  const decoder = new StringDecoder('utf8');
  const parts: string[] = [];
  let kept = 0;
  let bytes = 0;
  let cut = false;
  for await (const chunk of redactor) {
    const buffer = chunk as Buffer;
    bytes += buffer.length;
    if (run.observer) {
      const text = decoder.write(buffer);
      if (text.length > 0 && !stopped.aborted) await run.observer.onOutput(name, text, stopped);
      continue;
    }
    // Kept to the cap's byte (the chunk that crosses it in part), the rest counted only.
    const room = run.maxOutputBytes - kept;
    if (buffer.length > room) {
      cut = true;
      onTruncated();
    }
    if (room <= 0) continue;
    const taken = buffer.length > room ? buffer.subarray(0, room) : buffer;
    kept += taken.length;
    parts.push(decoder.write(taken));
  }
  // A character the cap cut in two is left out, not shown as U+FFFD.
  const tail = cut ? '' : decoder.end();
  if (tail.length > 0) {
    if (run.observer) {
      if (!stopped.aborted) await run.observer.onOutput(name, tail, stopped);
    } else parts.push(tail);
  }
  return { text: parts.join(''), bytes };
}

/**
 * How the engine begins the error of an exec it could not start, on the exec's stream: the runtime's (runc, crun), or
 * its own for a user it could not look up (`unable to find user 0: read /var/lib/docker/…/etc/passwd: …`).
 */
const RUNTIME_FAILED = /^(OCI runtime exec failed|unable to find (user|group) )/i;

/**
 * Why the runtime did not start a command, in our words, from its own error. Never quoted whole (it names the
 * engine's config and, for a user it could not look up, the container's files by their path on the host): only what
 * the caller gave, the user or the working directory, printable and bounded.
 */
export function notStartedWords(runtimeError: string): CollectedOutput {
  // From the output as collected, so already redacted; JSON quoting escapes any control character.
  const given = (value: string | undefined): string =>
    value === undefined ? '' : ` ${JSON.stringify(value.slice(0, 200))}`;
  const cwd = /chdir to cwd \("([^"]*)"\)/i.exec(runtimeError);
  const user = /unable to find (user|group) ([^:\s]+)/i.exec(runtimeError);
  // Permission first: an executable named /etc/passwd is no user lookup.
  const why =
    cwd !== null || /chdir to cwd/i.test(runtimeError)
      ? `its working directory (cwd)${given(cwd?.[1])} does not exist in the container, or is not a directory`
      : /permission denied/i.test(runtimeError)
        ? 'permission denied: its executable may not be run'
        : user !== null || /no matching entries in (passwd|group)/i.test(runtimeError)
          ? `its ${user?.[1] ?? 'user'}${given(user?.[2])} could not be looked up in the container (its /etc/passwd or /etc/group has no such entry, or is not a readable file)`
          : /executable file not found|no such file or directory/i.test(runtimeError)
            ? 'its executable was not found in the container'
            : "the container's runtime could not start it";
  const text = `roboguide-eval: the command was not started: ${why}\n`;
  return { text, bytes: Buffer.byteLength(text) };
}

/** Reads both streams to their end and waits for the exit code, killing the tree on timeout or abort. */
export async function runExec(run: ExecRun): Promise<ExecOutcome> {
  let timedOut = false;
  let truncated = false;
  const stopped = new AbortController();
  const kill = killerOf(run, stopped);
  const timer =
    run.timeoutSec !== undefined
      ? run.clock.setTimer(run.timeoutSec * 1000, () => {
          timedOut = true;
          kill();
        })
      : undefined;
  const onAbort = (): void => kill();
  if (run.signal?.aborted === true) kill();
  else run.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const onTruncated = (): void => {
      truncated = true;
    };
    const [stdout, stderr] = await Promise.all([
      collect(run, run.handle.stdout, 'stdout', onTruncated, stopped.signal),
      collect(run, run.handle.stderr, 'stderr', onTruncated, stopped.signal),
    ]);
    const code = await run.handle.done;
    const reason: unknown = run.signal?.aborted === true ? run.signal.reason : null;
    // Not started: the output is the runtime's error (engine internals, at times a path of the host), said in our
    // words instead; the exit code stays the engine's (126, 127). A streamed exec has sent it already.
    const ours =
      run.observer === undefined &&
      !(await (run.handle.started ?? Promise.resolve(true))) &&
      RUNTIME_FAILED.test(stdout.text);
    return {
      stdout: ours ? { text: '', bytes: 0 } : stdout,
      stderr: ours ? notStartedWords(`${stdout.text}\n${stderr.text}`) : stderr,
      code,
      timedOut,
      truncated,
      stoppedFor: typeof reason === 'string' ? reason : null,
    };
  } finally {
    timer?.cancel();
    run.signal?.removeEventListener('abort', onAbort);
  }
}

/** The API's answer: a timed-out exec returns 124 (its tree was killed), one without an exit code -1. */
export function execResult(outcome: ExecOutcome, durationMs: number): ExecResult {
  return {
    stdout: outcome.stdout.text,
    stderr: outcome.stderr.text,
    return_code: outcome.timedOut ? TIMEOUT_RETURN_CODE : (outcome.code ?? -1),
    timed_out: outcome.timedOut,
    duration_ms: Math.round(durationMs * 1000) / 1000,
    truncated: outcome.truncated,
    interrupted: null,
  };
}
