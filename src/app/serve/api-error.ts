import type { z } from 'zod';
import { InvalidInputError, RoboguideError, ToolError, type Issue } from '../../core/errors.js';
import { EngineError } from '../ports/engine-error.js';
import { dedupeIssues, issuesFromZod, plainRule } from '../../core/manifest/zod-issues.js';
import { errnoOf } from '../../core/pause-cause.js';

/**
 * The HTTP statuses an API error maps to (issue 12): bad input, unknown id, conflict/capacity, too many concurrent
 * operations (429), internal, a dependency that cannot be reached right now (503: engine or registry), and the
 * server's own disk full (507).
 */
export type ApiStatus = 400 | 403 | 404 | 408 | 409 | 410 | 413 | 415 | 422 | 429 | 500 | 503 | 507;

/** The system error codes of a disk (or a quota) that cannot take more bytes. */
const NO_SPACE_CODES = new Set(['ENOSPC', 'EDQUOT']);

/** Seconds a client is told to wait (`Retry-After`) when the registry cannot be reached. */
export const REGISTRY_RETRY_AFTER_SEC = 5;

/**
 * An error meant for an API client: rendered as `{"error":{"code","message","issues"}}` with `status`.
 * Messages never include a resolved secret value (callers build them from field names and rules).
 */
export class ApiError extends ToolError {
  readonly status: ApiStatus;
  readonly issues: readonly Issue[];
  /** Sent as `Retry-After` (seconds): the request may succeed later as it is (429, 503). */
  readonly retryAfterSec: number | null;
  constructor(
    status: ApiStatus,
    code: string,
    message: string,
    issues: readonly Issue[] = [],
    options?: { cause?: unknown; retryAfterSec?: number },
  ) {
    super(code, message, { cause: options?.cause });
    this.status = status;
    this.issues = issues;
    this.retryAfterSec = options?.retryAfterSec ?? null;
  }

  static invalid(what: string, issues: readonly Issue[]): ApiError {
    return new ApiError(400, 'E_REQUEST_INVALID', `${what} is invalid`, issues);
  }

  static notFound(what: string): ApiError {
    return new ApiError(404, 'E_NOT_FOUND', `${what} does not exist`);
  }
}

/** Issues listed in one answer at most (the rest are counted in the last one). */
const MAX_ISSUES = 100;

/** Fields whose text is data for the command rather than something the engine is given: NUL is allowed there. */
const NUL_ALLOWED = new Set(['stdin']);

/**
 * The paths of strings (keys too) holding NUL, outside NUL_ALLOWED fields: no engine field (image, argv, working
 * directory, user, label) can carry one, and the engine's own error would echo the value, or a path of the host.
 */
export function nulIssues(value: unknown, path = '', found: Issue[] = []): Issue[] {
  const rule = 'must not contain NUL (U+0000, a control character)';
  if (found.length >= MAX_ISSUES) return found;
  if (typeof value === 'string') {
    if (value.includes('\0')) found.push({ path: path === '' ? '$' : path, rule });
  } else if (Array.isArray(value)) {
    value.forEach((item, index) => nulIssues(item, `${path}[${index}]`, found));
  } else if (typeof value === 'object' && value !== null) {
    for (const [key, item] of Object.entries(value)) {
      const at = path === '' ? key : `${path}.${key}`;
      if (key.includes('\0')) found.push({ path: at.replaceAll('\0', '\\0'), rule });
      else if (!(path === '' && NUL_ALLOWED.has(key))) nulIssues(item, at, found);
    }
  }
  return found;
}

/** At most MAX_ISSUES issues; more are summed up in a last one. */
function capped(issues: readonly Issue[]): Issue[] {
  if (issues.length <= MAX_ISSUES) return [...issues];
  const more = issues.length - MAX_ISSUES + 1;
  return [...issues.slice(0, MAX_ISSUES - 1), { path: '$', rule: `and ${more} more issues` }];
}

/**
 * Validate a decoded body: the parsed value, or an ApiError 400 listing the issues with their paths (at most
 * MAX_ISSUES). A string holding NUL is refused first, wherever it is (nulIssues).
 */
export function parseBody<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const nul = nulIssues(value);
  if (nul.length > 0) throw ApiError.invalid(what, nul);
  const parsed = schema.safeParse(value, { error: plainRule });
  if (parsed.success) return parsed.data;
  throw ApiError.invalid(what, capped(dedupeIssues(issuesFromZod(parsed.error))));
}

const STATUS_BY_CODE: Readonly<Record<string, ApiStatus>> = {
  E_ENGINE_UNAVAILABLE: 503,
  E_PORT_ALLOCATED: 409,
  E_NVIDIA_RUNTIME_MISSING: 409,
  E_GPU_REQUEST_DROPPED: 409,
  E_REGISTRY: 409,
  E_CAPACITY: 409,
  E_CLAIM_EXISTS: 409,
  E_IMAGE_MISSING: 400,
};

/**
 * Error codes of a registry that cannot be reached (rather than one that refused): node's socket errors for a
 * stopped, restarting or partitioned PostgreSQL (ENOENT: its Unix socket is gone), and PostgreSQL's own codes for a
 * server shutting down or starting (57P01-57P03) and lost connections (class 08).
 */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ENOENT',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  '57P01',
  '57P02',
  '57P03',
  '08000',
  '08001',
  '08003',
  '08006',
]);
/** The same in messages: pg's pool timeout and lost connections, SQLite's busy wait that ran out. */
const UNREACHABLE_MESSAGE =
  /timeout exceeded when trying to connect|Connection terminated|database is locked|SQLITE_BUSY/i;

function codeOf(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || !('code' in value)) return undefined;
  const code = value.code;
  return typeof code === 'string' ? code : undefined;
}

/**
 * True when `err` says the registry could not be reached in time (`E_REGISTRY_UNAVAILABLE`, or an `E_REGISTRY`
 * whose cause is a connection that failed or a busy wait that ran out): the same request may succeed later.
 */
export function isRegistryUnavailable(err: unknown): boolean {
  if (!(err instanceof RoboguideError)) return false;
  if (err.code === 'E_REGISTRY_UNAVAILABLE') return true;
  if (err.code !== 'E_REGISTRY') return false;
  const pgCode = (err.context as { pg_code?: unknown }).pg_code;
  if (typeof pgCode === 'string' && UNREACHABLE_CODES.has(pgCode)) return true;
  for (
    let cause: unknown = err.cause, depth = 0;
    cause !== undefined && cause !== null && depth < 5;
    cause = (cause as { cause?: unknown }).cause, depth++
  ) {
    const code = codeOf(cause);
    if (code !== undefined && UNREACHABLE_CODES.has(code)) return true;
  }
  return UNREACHABLE_MESSAGE.test(err.message);
}

/** Paths of two or more components (the engine's overlay folders, its data root) as `<path>`. */
export function withoutHostPaths(text: string): string {
  return text.replace(/\/(?:[^\s/:'"()[\]{},]+\/)+[^\s/:'"()[\]{},]*/g, '<path>');
}

/** runc's words for a bind source that is gone (`error mounting "SRC" to rootfs at "TARGET": … no such file …`). */
const MOUNT_SOURCE_GONE = /error mounting "[^"]*" to rootfs at "([^"]*)"[^\n]*no such file or directory/;

/**
 * The runtime's words, at a container's start, for a user or group its image does not know (`unable to find user
 * NAME: no matching entries in passwd file`): the request's `user`, not a fault of the engine's.
 */
const USER_UNKNOWN = /unable to find (user|group) /i;

/** What the engine was asked to do, from an EngineError's message (`… while trying to ACTION: …`). */
function actionOf(err: EngineError): string {
  return /while trying to ([a-z ]+)/.exec(err.message)?.[1] ?? 'an engine call';
}

/** Any error thrown by a use-case, as the API reports it. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof InvalidInputError)
    return new ApiError(400, err.code, err.message.split('\n')[0] ?? err.message, err.issues);
  if (err instanceof RoboguideError && isRegistryUnavailable(err)) {
    const message = `the capacity registry cannot be reached right now; retry later (${err.message})`;
    return new ApiError(503, 'E_REGISTRY_UNAVAILABLE', message, [], {
      retryAfterSec: REGISTRY_RETRY_AFTER_SEC,
    });
  }
  const gone = err instanceof EngineError ? MOUNT_SOURCE_GONE.exec(err.message) : null;
  if (gone !== null) {
    // A bind source removed after our checks (a pair's own folder, renamed or deleted by something racing the
    // create): the engine's runtime cannot mount it. The request was right when checked; the folder is gone now.
    const target = withoutHostPaths(gone[1] ?? '?');
    return new ApiError(
      409,
      'E_MOUNT_SOURCE_GONE',
      `a mount's source no longer exists: it was removed after it was checked, before the container started (target ${target})`,
      [{ path: 'mounts', rule: 'each source must still exist when the container starts' }],
      { cause: err },
    );
  }
  if (err instanceof EngineError && err.statusCode === 400 && STATUS_BY_CODE[err.code] === undefined) {
    // The engine found the request invalid: a value we let through. Our words, never the engine's (they may name a
    // path of the host, or quote the value).
    return new ApiError(
      400,
      'E_ENGINE_REFUSED',
      `the Docker engine refused the request as invalid (${actionOf(err)})`,
      [],
      {
        cause: err,
      },
    );
  }
  const unknown = err instanceof EngineError ? USER_UNKNOWN.exec(err.message) : null;
  if (unknown !== null) {
    // Our words: the engine's quote the name (the caller's value, which may be anything) and a path of the host.
    const which = unknown[1]?.toLowerCase() === 'group' ? 'group' : 'user';
    return new ApiError(
      400,
      'E_USER_UNKNOWN',
      `the image does not know the ${which} the container was to run as`,
      [
        {
          path: 'user',
          rule: 'must be a user the image knows (a name in its /etc/passwd, or a numeric uid[:gid])',
        },
      ],
      { cause: err },
    );
  }
  const errno = errnoOf(err);
  if (errno !== null && NO_SPACE_CODES.has(errno)) {
    // The server's own disk (its data folder: spooled uploads and downloads, evidence) is full: not the request's
    // fault, and not a fault of ours to hide behind a 500. Said by its code alone: the error's message names a path
    // of the host.
    return new ApiError(
      507,
      'E_NO_SPACE',
      `the server's disk is full (${errno}): the request could not be stored; free space in the server's data folder and retry`,
      [],
      { cause: err },
    );
  }
  if (err instanceof RoboguideError) {
    // An engine 409 (container not running) or 404 (container gone) is the session's state, not our fault.
    const engineStatus = (err.context as { statusCode?: unknown }).statusCode;
    const status =
      STATUS_BY_CODE[err.code] ?? (engineStatus === 409 ? 409 : engineStatus === 404 ? 404 : 500);
    return new ApiError(status, err.code, withoutHostPaths(err.message));
  }
  return new ApiError(500, 'E_INTERNAL', 'internal error', [], { cause: err });
}
