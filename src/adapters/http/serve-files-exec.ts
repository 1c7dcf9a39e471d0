import { Transform, type Readable } from 'node:stream';
import { ApiError } from '../../app/serve/api-error.js';
import type { ExecHandle, SessionEngine } from '../../app/ports/container-runtime.js';
import { redactText } from '../../core/redaction/redact-text.js';

/** The shared parts of a session's file I/O (serve-files.ts): the user parameter, running a script in the container as that user, and the errors its stderr maps to. */
export interface FileTarget {
  readonly engine: Pick<SessionEngine, 'exec'>;
  readonly containerId: string;
  /** The user the command runs as ('' = the container's default). */
  readonly user: string;
  /** Absolute, normalized. */
  readonly path: string;
  readonly secrets: readonly string[];
}

const STDERR_KEPT_BYTES = 8192;
/** English messages from busybox and GNU tools, whatever the image's locale says. */
const LOCALE = { LC_ALL: 'C', LANG: 'C' };
/** A user name or uid, optionally with a group: what `docker exec --user` takes. */
const USER_PATTERN = /^[A-Za-z0-9_][A-Za-z0-9_.-]*(?::[A-Za-z0-9_][A-Za-z0-9_.-]*)?$/;

/** The `user` query parameter: absent, or a user (name or uid, optionally `:group`). */
export function userParam(query: URLSearchParams): string | undefined {
  const user = query.get('user');
  if (user === null) return undefined;
  if (!USER_PATTERN.test(user) || user.length > 256) {
    throw ApiError.invalid('the request', [
      { path: 'user', rule: 'must be a user name or uid, optionally with :group' },
    ]);
  }
  return user;
}

export function run(
  target: FileTarget,
  script: string,
  args: readonly string[],
  stdin?: Readable,
): Promise<ExecHandle> {
  return target.engine.exec(target.containerId, {
    argv: ['/bin/sh', '-c', script, 'sh', ...args],
    env: LOCALE,
    ...(target.user !== '' ? { user: target.user } : {}),
    ...(stdin !== undefined ? { stdin } : {}),
  });
}

export async function keepText(stream: Readable): Promise<string> {
  const parts: Buffer[] = [];
  let kept = 0;
  for await (const chunk of stream) {
    const buffer = chunk as Buffer;
    if (kept < STDERR_KEPT_BYTES) parts.push(buffer.subarray(0, STDERR_KEPT_BYTES - kept));
    kept += buffer.length;
  }
  return Buffer.concat(parts).toString('utf8');
}

const CLASSES: readonly {
  readonly test: RegExp;
  readonly status: 400 | 403 | 404 | 409 | 422 | 507;
  readonly code: string;
  readonly what: string;
}[] = [
  {
    test: /Permission denied|Operation not permitted|Read-only file system/i,
    status: 403,
    code: 'E_PERMISSION_DENIED',
    what: 'permission denied',
  },
  {
    test: /Not a directory|File exists/i,
    status: 409,
    code: 'E_NOT_A_DIRECTORY',
    what: 'a part of the path is not a directory',
  },
  { test: /Is a directory/i, status: 409, code: 'E_IS_A_DIRECTORY', what: 'is a directory' },
  // The path joined to the session's working directory passed Linux's limits (each part alone was within them).
  {
    test: /File name too long/i,
    status: 400,
    code: 'E_PATH_TOO_LONG',
    what: 'the path is too long for Linux',
  },
  {
    test: /No such file or directory|can't stat|Cannot stat/i,
    status: 404,
    code: 'E_FILE_NOT_FOUND',
    what: 'no such file or directory',
  },
  // The two below only in the words of the container's own tools (`cat: …`, `tar: …`, `sh: …`), never the engine's
  // (an exec the engine could not start says why on the output, in Go's words: its "invalid argument" is no fault of
  // the caller's path).
  // No room left where the container writes (its layer, a tmpfs, a quota, /dev/full; the layer may lie on the
  // host's disk): no storage for the request, as 507 says, and no fault of the server's code.
  {
    test: toolSaid(/No space left on device|Disk quota exceeded|File too large/),
    status: 507,
    code: 'E_CONTAINER_FULL',
    what: "no room in the container's file system",
  },
  // A path the kernel will not read or write this way (/proc/self/mem, a terminal, a busy binary, a loop of links):
  // what the caller asked for, at a path of their choosing, cannot be done; the same request fails the same way again.
  {
    test: toolSaid(
      /Input\/output error|No such device|Bad address|Invalid argument|Text file busy|Device or resource busy|Too many levels of symbolic links|Operation not supported|Function not implemented/,
    ),
    status: 422,
    code: 'E_FILE_UNUSABLE',
    what: 'the kernel refused this operation on it',
  },
];

/**
 * `message` (the C library's words, in its case) on a line of one of the tools the file routes run in the container:
 * `cat: read error: Input/output error`, `sh: write error: …`, `bash: line 1: …`, `tar: ./x: Cannot write: …`.
 */
function toolSaid(message: RegExp): RegExp {
  const tools = String.raw`(?:\S*/)?(?:cat|tar|sh|ash|dash|bash|busybox|mkdir|chmod|touch|dd|ln|mv|cp|rm|head|tee)`;
  return new RegExp(String.raw`^${tools}(?:\[\d+\])?: .*(?:` + message.source + ')');
}

/** The API error a failed file command means, from its standard error (first line that says which wins). */
export function fileError(stderr: string, target: FileTarget): ApiError {
  const who = target.user === '' ? "the session's user" : `user ${target.user}`;
  const path = redactText(target.path, target.secrets);
  if (/unable to find (user|group)|no matching entries in (passwd|group)/i.test(stderr)) {
    return new ApiError(
      400,
      'E_USER_UNKNOWN',
      `${who} does not exist in the container (no such entry in its /etc/passwd or /etc/group); give a uid[:gid]`,
      [{ path: 'user', rule: 'must exist in the container' }],
    );
  }
  const missing =
    /(?:^|\s)(tar|cat|mkdir|chmod|sh)(?::| ):? ?(?:not found|command not found)|executable file not found/i.exec(
      stderr,
    );
  if (missing !== null) {
    return new ApiError(
      409,
      'E_TOOL_MISSING',
      `${path}: the container lacks ${missing[1] ?? 'a tool'} (file transfers run /bin/sh, tar, cat, mkdir inside the container as the user)`,
    );
  }
  for (const line of stderr.split('\n')) {
    const found = CLASSES.find((c) => c.test.test(line));
    if (found !== undefined)
      return new ApiError(
        found.status,
        found.code,
        `${path}: ${found.what} (as ${who}): ${redactText(line.trim(), target.secrets).slice(0, 300)}`,
      );
  }
  const detail = redactText(stderr.trim().split('\n')[0] ?? '', target.secrets).slice(0, 300);
  return new ApiError(
    500,
    'E_FILE_IO',
    `${path}: the file operation failed in the container (as ${who})${detail === '' ? '' : `: ${detail}`}`,
  );
}

/** `source` passed through, its first bytes kept (what an exec the engine could not start says is on stdout). */
export function headOf(source: Readable): { stream: Readable; text: () => string } {
  const parts: Buffer[] = [];
  let kept = 0;
  const stream = new Transform({
    transform(chunk: Buffer, _encoding, done): void {
      if (kept < STDERR_KEPT_BYTES) {
        parts.push(chunk.subarray(0, STDERR_KEPT_BYTES - kept));
        kept += chunk.length;
      }
      done(null, chunk);
    },
  });
  source.pipe(stream);
  return { stream, text: () => Buffer.concat(parts).toString('utf8') };
}

/** Runs a script to its end with output discarded; an ApiError from its stderr when it fails. */
export async function check(
  target: FileTarget,
  script: string,
  args: readonly string[],
  stdin?: Readable,
): Promise<void> {
  const handle = await run(target, script, args, stdin);
  const [stderr, stdout, code] = await Promise.all([
    keepText(handle.stderr),
    keepText(handle.stdout),
    handle.done,
  ]);
  // An exec the engine could not start (e.g. an unknown user) reports on its output stream.
  if (code !== 0) throw fileError(`${stderr}\n${stdout}`, target);
}
