import type { z } from 'zod';
import { InvalidInputError, RoboguideError, type Issue } from '../../core/errors.js';
import { dedupeIssues, issuesFromZod, plainRule } from '../../core/manifest/zod-issues.js';

/** The HTTP statuses an API error maps to (issue 12): bad input, unknown id, conflict/capacity, no engine. */
export type ApiStatus = 400 | 404 | 409 | 500 | 503;

/**
 * An error meant for an API client: rendered as `{"error":{"code","message","issues"}}` with `status`.
 * Messages never include a resolved secret value (callers build them from field names and rules).
 */
export class ApiError extends Error {
  readonly status: ApiStatus;
  readonly code: string;
  readonly issues: readonly Issue[];
  constructor(status: ApiStatus, code: string, message: string, issues: readonly Issue[] = [], options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.issues = issues;
  }

  static invalid(what: string, issues: readonly Issue[]): ApiError {
    return new ApiError(400, 'E_REQUEST_INVALID', `${what} is invalid`, issues);
  }

  static notFound(what: string): ApiError {
    return new ApiError(404, 'E_NOT_FOUND', `${what} does not exist`);
  }
}

/** Validate a decoded body: the parsed value, or an ApiError 400 listing every issue with its path. */
export function parseBody<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const parsed = schema.safeParse(value, { error: plainRule });
  if (parsed.success) return parsed.data;
  throw ApiError.invalid(what, dedupeIssues(issuesFromZod(parsed.error)));
}

const STATUS_BY_CODE: Readonly<Record<string, ApiStatus>> = {
  E_ENGINE_UNAVAILABLE: 503,
  E_PORT_ALLOCATED: 409,
  E_NVIDIA_RUNTIME_MISSING: 409,
  E_REGISTRY: 409,
  E_CLAIM_EXISTS: 409,
  E_IMAGE_MISSING: 400,
};

/** Any error thrown by a use-case, as the API reports it. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof InvalidInputError) return new ApiError(400, err.code, err.message.split('\n')[0] ?? err.message, err.issues);
  if (err instanceof RoboguideError) {
    // An engine 409 (container not running) or 404 (container gone) is the session's state, not our fault.
    const engineStatus = (err.context as { statusCode?: unknown }).statusCode;
    const status = STATUS_BY_CODE[err.code] ?? (engineStatus === 409 ? 409 : engineStatus === 404 ? 404 : 500);
    return new ApiError(status, err.code, err.message);
  }
  return new ApiError(500, 'E_INTERNAL', 'internal error', [], { cause: err });
}
