/**
 * One base error for faults of the tool itself. A pair's outcome is data (a classification
 * with reasons), never an exception.
 */
export type ErrorCode =
  | 'E_USAGE'
  | 'E_MANIFEST_INVALID'
  | 'E_SPEC_INVALID'
  | 'E_ENV_MISSING'
  | 'E_OUTPUT_NOT_EMPTY'
  | 'E_ENGINE_UNAVAILABLE'
  | 'E_IMAGE_MISSING'
  | 'E_NVIDIA_RUNTIME_MISSING'
  | 'E_GPU_REQUEST_DROPPED'
  | 'E_PORT_ALLOCATED'
  | 'E_ENGINE'
  | 'E_IMAGE_BUILD'
  | 'E_STORE'
  | 'E_CLAIM_EXISTS'
  | 'E_REGISTRY'
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

export class RoboguideError extends Error {
  readonly code: ErrorCode;
  readonly context: Readonly<Record<string, unknown>>;
  readonly suggestions: readonly string[];
  readonly exitCode: ExitCode;

  constructor(code: ErrorCode, message: string, options: RoboguideErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
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
  constructor(code: ErrorCode, what: string, issues: readonly Issue[], options: RoboguideErrorOptions = {}) {
    super(code, `${what}:\n${issues.map((i) => `  ${i.path}: ${i.rule}`).join('\n')}`, {
      ...options,
      exitCode: ExitCode.invalidInput,
    });
    this.issues = issues;
  }
}

export function errorKind(err: unknown): string {
  if (err instanceof Error) return err.constructor.name || 'Error';
  return typeof err;
}
