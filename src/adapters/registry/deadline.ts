/**
 * Every registry call ends within a deadline (issue 27): a frozen, stopped or unreachable server must never hang a
 * supervisor, a `stop` or a command. A call past its deadline, or one that cannot reach its server, fails with
 * `E_REGISTRY_UNAVAILABLE` naming the operation and the deadline (the batch pauses with `registry_unavailable` and
 * `resume` retries it; `serve` answers 503).
 */
import { InvalidInputError, RoboguideError } from '../../core/errors.js';

/** The environment variable that sets the deadline of every registry operation, in milliseconds. */
export const REGISTRY_DEADLINE_ENV = 'ROBOGUIDE_REGISTRY_DEADLINE_MS';
/** The default deadline of one registry operation (PostgreSQL: connect, queries and commit; SQLite: its busy wait). */
export const DEFAULT_REGISTRY_DEADLINE_MS = 10_000;
export const MIN_REGISTRY_DEADLINE_MS = 100;
export const MAX_REGISTRY_DEADLINE_MS = 600_000;

/** The deadline the environment sets, or the default; anything but an integer in range is refused (exit 2). */
export function registryDeadlineMs(env: Readonly<Record<string, string | undefined>>): number {
  const raw = env[REGISTRY_DEADLINE_ENV];
  if (raw === undefined || raw.trim() === '') return DEFAULT_REGISTRY_DEADLINE_MS;
  const value = Number(raw.trim());
  if (
    !/^\d+$/.test(raw.trim()) ||
    !Number.isSafeInteger(value) ||
    value < MIN_REGISTRY_DEADLINE_MS ||
    value > MAX_REGISTRY_DEADLINE_MS
  ) {
    throw new InvalidInputError('E_USAGE', `invalid ${REGISTRY_DEADLINE_ENV}`, [
      {
        path: REGISTRY_DEADLINE_ENV,
        rule: `an integer number of milliseconds from ${MIN_REGISTRY_DEADLINE_MS} to ${MAX_REGISTRY_DEADLINE_MS} (got ${JSON.stringify(raw)})`,
      },
    ]);
  }
  return value;
}

/** The error of a registry operation that did not finish within its deadline. */
export function registryTimedOut(
  operation: string,
  deadlineMs: number,
  registry: string,
  cause?: unknown,
): RoboguideError {
  return new RoboguideError(
    'E_REGISTRY_UNAVAILABLE',
    `registry ${operation} did not finish within its deadline of ${deadlineMs} ms (${registry})`,
    {
      ...(cause !== undefined ? { cause } : {}),
      context: { registry, operation, deadline_ms: deadlineMs },
      suggestions: [
        `check that the registry answers; \`e1-batch resume\` retries; ${REGISTRY_DEADLINE_ENV} sets the deadline`,
      ],
    },
  );
}

/** The error of a registry operation that could not reach its server (refused, reset, no socket). */
export function registryUnreachable(
  operation: string,
  deadlineMs: number,
  registry: string,
  cause: unknown,
): RoboguideError {
  const detail = cause instanceof Error ? cause.message : String(cause);
  return new RoboguideError(
    'E_REGISTRY_UNAVAILABLE',
    `registry ${operation} could not reach its server (deadline ${deadlineMs} ms, ${registry}): ${detail}`,
    {
      cause,
      context: { registry, operation, deadline_ms: deadlineMs },
      suggestions: ['start the registry server or restore the network; `e1-batch resume` retries'],
    },
  );
}

/**
 * Runs `work` and settles within `deadlineMs`: past it, `onTimeout` runs (it must free what the work holds: destroy
 * its connection) and the call rejects with `E_REGISTRY_UNAVAILABLE`. The late work's own settlement is ignored.
 */
export function withDeadline<T>(
  what: { readonly operation: string; readonly registry: string; readonly deadlineMs: number },
  work: () => Promise<T>,
  onTimeout: () => void,
  timers: {
    readonly set: (fn: () => void, ms: number) => unknown;
    readonly clear: (handle: unknown) => void;
  } = realTimers,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const handle = timers.set(() => {
      if (settled) return;
      settled = true;
      try {
        onTimeout();
      } finally {
        reject(registryTimedOut(what.operation, what.deadlineMs, what.registry));
      }
    }, what.deadlineMs);
    let started: Promise<T>;
    try {
      started = work();
    } catch (err) {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passes on whatever the work threw
      started = Promise.reject(err);
    }
    started.then(
      (value) => {
        if (settled) return;
        settled = true;
        timers.clear(handle);
        resolve(value);
      },
      (err: unknown) => {
        if (settled) return;
        settled = true;
        timers.clear(handle);
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passes on the work's own error
        reject(err);
      },
    );
  });
}

const realTimers = {
  set: (fn: () => void, ms: number): unknown => setTimeout(fn, ms),
  clear: (handle: unknown): void => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** Network and server-state errors that mean the server cannot be reached now (not a refusal of the request). */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ENOENT',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EHOSTDOWN',
  'ENETDOWN',
  'EAI_AGAIN',
]);
/** PostgreSQL SQLSTATEs of a server going away or not ready, a statement or lock past its timeout. */
const UNAVAILABLE_SQLSTATES = new Set([
  '57P01',
  '57P02',
  '57P03',
  '57014',
  '55P03',
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
]);
const UNREACHABLE_MESSAGE =
  /connection terminated|timeout exceeded when trying to connect|query read timeout|connection timeout|client has encountered a connection error|Client was closed/i;

/** True when `error` says the server could not be reached or answered too late. */
export function isUnreachable(error: unknown): boolean {
  if (error instanceof RoboguideError) return error.code === 'E_REGISTRY_UNAVAILABLE';
  const code = typeof error === 'object' && error !== null && 'code' in error ? String(error.code) : '';
  if (UNREACHABLE_CODES.has(code) || UNAVAILABLE_SQLSTATES.has(code)) return true;
  return error instanceof Error && UNREACHABLE_MESSAGE.test(error.message);
}
