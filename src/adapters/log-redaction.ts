import type { LoggerOptions } from 'pino';
import { compileRedaction } from '../core/redaction/compile.js';
import type { CompiledRedaction } from '../core/redaction/compile.js';
import { redactJson } from '../core/redaction/redact-json.js';
import { redactOnce } from '../core/redaction/redact-once.js';
import { SECRET_MASK } from '../core/redaction/stream-redactor.js';

/** Paths masked by pino's own redaction before a line is serialized. */
export const REDACTED_LOG_PATHS: readonly string[] = [
  'authorization',
  'Authorization',
  'headers.authorization',
  'headers.Authorization',
  '*.authorization',
  '*.Authorization',
  '*.headers.authorization',
  '*.headers.Authorization',
  'env',
  '*.env',
];

export type PinoRedactionOptions = Required<Pick<LoggerOptions, 'redact' | 'hooks'>>;

/**
 * Options to spread into `pino({...})`: `redact` censors authorization headers and `env`
 * objects; `hooks.streamWrite` masks resolved secret values (and their encodings), bearer
 * tokens and token formats anywhere in the serialized line, whatever field they hide in.
 * Masks contain no quote or backslash, so the line stays valid JSON.
 */
export function pinoRedactionOptions(secrets: readonly string[]): PinoRedactionOptions {
  const compiled = compileRedaction(secrets, 'text');
  return {
    redact: { paths: [...REDACTED_LOG_PATHS], censor: SECRET_MASK },
    hooks: { streamWrite: (line: string) => redactLine(compiled, line) },
  };
}

function redactLine(compiled: CompiledRedaction, line: string): string {
  return redactOnce(compiled, line);
}

/** Masks secret values, their encodings and token formats in a message shown to a user. */
export function redactText(text: string, secrets: readonly string[]): string {
  return redactOnce(compileRedaction(secrets, 'text'), text);
}

/** Masks secret values, their encodings and token formats in raw bytes (any encoding; matched byte for byte). */
export function redactBytes(bytes: Uint8Array, secrets: readonly string[]): Buffer {
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1');
  return Buffer.from(redactOnce(compileRedaction(secrets, 'latin1-bytes'), text), 'latin1');
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
export function redactOutcome(raw: unknown, secrets: readonly string[]): { outcome: unknown; redactions: number } {
  const { value, redactions } = redactJson(raw, textRedactor(secrets));
  return { outcome: value, redactions };
}
