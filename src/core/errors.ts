/**
 * The tool's error family: every error the tool throws is a `ToolError` (a stable `code`, an ES2022 `cause`).
 * `RoboguideError` is the branch a command reports to the operator (with an exit code); the other branches are
 * faults caught and handled inside (a refused mount, an unopenable log, an API answer…). A pair's outcome is data
 * (a classification with reasons), never an exception.
 */
export type ErrorCode =
  | 'E_USAGE'
  | 'E_MANIFEST_INVALID'
  | 'E_SPEC_INVALID'
  | 'E_ENV_MISSING'
  | 'E_OUTPUT_NOT_EMPTY'
  /** The output folder, or a folder above it, could be steered by another local user (docs/secrets.md). */
  | 'E_OUTPUT_UNSAFE'
  /** The serve socket's folder could be used by another local user to take the socket over (docs/serve.md). */
  | 'E_SOCKET_UNSAFE'
  | 'E_ENGINE_UNAVAILABLE'
  | 'E_IMAGE_MISSING'
  /** Issue 43: a pair's image could not be pulled after retries (its registry's message). */
  | 'E_IMAGE_PULL_FAILED'
  /** Issue 43: an image's registry could not be reached (an outage): the batch pauses, resume pulls again. */
  | 'E_IMAGE_REGISTRY_UNAVAILABLE'
  | 'E_NVIDIA_RUNTIME_MISSING'
  | 'E_GPU_REQUEST_DROPPED'
  | 'E_PORT_ALLOCATED'
  | 'E_ENGINE'
  | 'E_IMAGE_BUILD'
  | 'E_STORE'
  | 'E_CLAIM_EXISTS'
  | 'E_REGISTRY'
  /** The host is at its reservation limit or GPU budget: a `pair run` (or `POST /v1/pairs`) is not started (exit 1, 409). */
  | 'E_CAPACITY'
  /** The registry did not answer within its deadline, or could not be reached: retry later (serve: 503). */
  | 'E_REGISTRY_UNAVAILABLE'
  | 'E_SUPERVISOR_ALIVE'
  | 'E_BATCH_STATE'
  | 'E_B1_CONFIG_INVALID'
  /** The guarded pairs network or its firewall rules could not be set up, checked or removed (docs/spec.md §5.1). */
  | 'E_NETWORK'
  | 'E_INTERNAL';

/** Process exit codes of SPEC §2. */
export const ExitCode = {
  ok: 0,
  runtime: 1,
  invalidInput: 2,
  engineUnavailable: 3,
  batchFailed: 4,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

export interface RoboguideErrorOptions {
  readonly cause?: unknown;
  readonly context?: Readonly<Record<string, unknown>>;
  readonly suggestions?: readonly string[];
  readonly exitCode?: ExitCode;
}

/**
 * The root of the family. `code` is stable and upper-case: an `E_…` word of this family, an errno (`EIO`) for a
 * fault that stands in for a system error, or an API code. Logs name an error by `errorDetail`, never by class alone.
 */
export class ToolError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options: { readonly cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
  }
}

/** An invariant of the tool's own code or of a dependency's answer did not hold (a bug, or a broken dependency). */
export class InternalError extends ToolError {
  constructor(message: string, options: { readonly cause?: unknown; readonly code?: string } = {}) {
    super(options.code ?? 'E_INTERNAL', message, options);
  }
}

export class RoboguideError extends ToolError {
  declare readonly code: ErrorCode;
  readonly context: Readonly<Record<string, unknown>>;
  readonly suggestions: readonly string[];
  readonly exitCode: ExitCode;

  constructor(code: ErrorCode, message: string, options: RoboguideErrorOptions = {}) {
    super(code, message, options);
    this.context = options.context ?? {};
    this.suggestions = options.suggestions ?? [];
    this.exitCode = options.exitCode ?? ExitCode.runtime;
  }
}

/** A validation problem located by a JSON path, e.g. `jobs[2].ports[0]`. */
export interface Issue {
  readonly path: string;
  readonly rule: string;
}

export class InvalidInputError extends RoboguideError {
  readonly issues: readonly Issue[];
  /**
   * `shown`: the lines the message prints, when they differ from `issues` (the same rule across jobs as one line with
   * the jobs counted: issue 40); `issues` (JSON) keeps every path.
   */
  constructor(
    code: ErrorCode,
    what: string,
    issues: readonly Issue[],
    options: RoboguideErrorOptions & { readonly shown?: readonly Issue[] } = {},
  ) {
    const { shown = issues, ...rest } = options;
    super(code, `${what}:\n${shown.map((i) => `  ${i.path}: ${i.rule}`).join('\n')}`, {
      ...rest,
      exitCode: ExitCode.invalidInput,
    });
    this.issues = issues;
  }
}

export function errorKind(err: unknown): string {
  if (err instanceof Error) return err.constructor.name || 'Error';
  return typeof err;
}

/** What a log line says about an error: its class, stable code, message and the chain of its causes. */
export interface ErrorDetail {
  readonly kind: string;
  readonly code?: string;
  readonly message: string;
  readonly cause?: ErrorDetail;
}

/** Causes deeper than this are left out (a cause chain can loop). */
export const ERROR_DETAIL_MAX_DEPTH = 5;

/**
 * The detail of `err` for a log line. Not masked here, and not cut (a cut could split a secret so the mask no
 * longer finds it): log it only through the masking logger (adapters/log-redaction.ts), never into evidence.
 */
export function errorDetail(err: unknown, depth = 0): ErrorDetail {
  const message = err instanceof Error ? err.message : String(err);
  const code = typeof err === 'object' && err !== null && 'code' in err ? err.code : undefined;
  const cause = err instanceof Error ? err.cause : undefined;
  return {
    kind: errorKind(err),
    ...(typeof code === 'string' || typeof code === 'number' ? { code: String(code) } : {}),
    message,
    ...(cause !== undefined && depth + 1 < ERROR_DETAIL_MAX_DEPTH
      ? { cause: errorDetail(cause, depth + 1) }
      : {}),
  };
}
