import { RoboguideError, errorKind } from './errors.js';

/**
 * The cause of a pause or of a harness failure, as the operator reads it in the journal, status, the report and
 * supervisor.log (issue 27): the error's stable code (`E_REGISTRY_UNAVAILABLE`, an errno such as `ENOSPC`, else
 * the error's class) and its message, masked and bounded. Pure.
 */
export interface PauseCause {
  readonly code: string;
  readonly message: string;
}

/** A message longer than this is cut (an error can quote a whole response). */
export const CAUSE_MESSAGE_MAX_CHARS = 500;

/** The cause of `err`, its message masked by `redact` (the batch's secrets) before it is cut. */
export function causeOf(err: unknown, redact: (text: string) => string = (text) => text): PauseCause {
  const code =
    err instanceof RoboguideError
      ? err.code
      : typeof err === 'object' &&
          err !== null &&
          'code' in err &&
          typeof err.code === 'string' &&
          /^[A-Z][A-Z0-9_]{1,40}$/.test(err.code)
        ? err.code
        : errorKind(err);
  const raw = err instanceof Error ? err.message : String(err);
  const message = redact(raw.replace(/\s+/g, ' ').trim());
  return {
    code,
    message:
      message.length > CAUSE_MESSAGE_MAX_CHARS
        ? `${message.slice(0, CAUSE_MESSAGE_MAX_CHARS - 1)}…`
        : message,
  };
}

/** The system error code (`ENOSPC`, `EIO`…) of `err` or of an error it wraps (its `cause` chain), if any. */
export function errnoOf(err: unknown): string | null {
  for (
    let e: unknown = err, depth = 0;
    typeof e === 'object' && e !== null && depth < 5;
    e = (e as { cause?: unknown }).cause, depth += 1
  ) {
    const code = 'code' in e ? e.code : undefined;
    if (typeof code === 'string' && /^E[A-Z0-9]+$/.test(code)) return code;
  }
  return null;
}
