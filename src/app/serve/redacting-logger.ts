import { redactJson } from '../../core/redaction/redact-json.js';
import { textRedactor } from '../../core/redaction/redact-text.js';
import type { Logger } from '../ports/logger.js';

/**
 * The server's own log with the callers' secrets masked (issue 23): secrets arrive with requests, after the log was
 * opened, so every line asks `secretSets()` for the current sets (the allowed variables' values, every live
 * session's set) and masks each, in all the encodings the redactor knows, in the message and in every field (an Error
 * field keeps its message, masked). Set by set, not all sessions' secrets as one set: each session's set is compiled
 * and held already (session-secrets.ts), and one set of every session's secrets would be compiled again, on the event
 * loop, whenever any session's changed (issue 39).
 */
export function redactingLogger(inner: Logger, secretSets: () => readonly (readonly string[])[]): Logger {
  const masked = (fields: Record<string, unknown>, message: string): [Record<string, unknown>, string] => {
    const sets = secretSets().filter((set) => set.length > 0);
    if (sets.length === 0) return [fields, message];
    const redactors = sets.map((set) => textRedactor(set));
    const redact = (text: string): string => redactors.reduce((masked, one) => one(masked), text);
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
    child: (bindings) => redactingLogger(inner.child(masked(bindings, '')[0]), secretSets),
  };
}
