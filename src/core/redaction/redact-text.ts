import { compileRedaction } from './compile.js';
import { redactJson } from './redact-json.js';
import { redactOnce } from './redact-once.js';

/** Masks secret values, their encodings and token formats in a message shown to a user. */
export function redactText(text: string, secrets: readonly string[]): string {
  return redactOnce(compileRedaction(secrets, 'text'), text);
}

/** `redactText` for many texts with the same secrets: compiled once. */
export function textRedactor(secrets: readonly string[]): (text: string) => string {
  const compiled = compileRedaction(secrets, 'text');
  return (text) => redactOnce(compiled, text);
}

/**
 * The parsed outcome as result.json and `pair run --json` show it: every string, key and number
 * that holds a secret (in any form) masked, and how many had to be.
 */
export function redactOutcome(
  raw: unknown,
  secrets: readonly string[],
): { outcome: unknown; redactions: number } {
  const { value, redactions } = redactJson(raw, textRedactor(secrets));
  return { outcome: value, redactions };
}
