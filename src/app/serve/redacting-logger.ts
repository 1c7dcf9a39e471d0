import { redactJson } from '../../core/redaction/redact-json.js';
import { textRedactor } from '../../core/redaction/redact-text.js';
import type { Logger } from '../ports/logger.js';

/**
 * The server's own log with the callers' secrets masked (issue 23): secrets arrive with requests, after the log was
 * opened, so every line asks `secrets()` for the current set (every live session's) and masks them, in all the
 * encodings the redactor knows, in the message and in every field (an Error field keeps its message, masked).
 */
export function redactingLogger(inner: Logger, secrets: () => readonly string[]): Logger {
  const masked = (fields: Record<string, unknown>, message: string): [Record<string, unknown>, string] => {
    const current = secrets();
    if (current.length === 0) return [fields, message];
    const redact = textRedactor(current);
    const plain: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(fields)) {
      plain[key] =
        value instanceof Error ? { type: value.name, message: value.message, stack: value.stack } : value;
    }
    return [redactJson(plain, redact).value as Record<string, unknown>, redact(message)];
  };
  return {
    info: (fields, message) => inner.info(...masked(fields, message)),
    warn: (fields, message) => inner.warn(...masked(fields, message)),
    error: (fields, message) => inner.error(...masked(fields, message)),
    debug: (fields, message) => inner.debug(...masked(fields, message)),
    child: (bindings) => redactingLogger(inner.child(masked(bindings, '')[0]), secrets),
  };
}
