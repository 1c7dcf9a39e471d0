import type { LoggerOptions } from 'pino';
import { errorDetail } from '../core/errors.js';
import { compileRedaction } from '../core/redaction/compile.js';
import type { CompiledRedaction } from '../core/redaction/compile.js';
import { redactOnce } from '../core/redaction/redact-once.js';
import { SECRET_MASK } from '../core/redaction/secret-stage.js';
import { jsonTerminalSafe } from '../core/terminal-text.js';

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

export type PinoRedactionOptions = Required<Pick<LoggerOptions, 'redact' | 'hooks' | 'serializers'>>;

/**
 * Options to spread into `pino({...})`: `redact` censors authorization headers and `env`
 * objects; `hooks.streamWrite` masks resolved secret values (and their encodings), bearer
 * tokens and token formats anywhere in the serialized line, whatever field they hide in.
 * Masks contain no quote or backslash, so the line stays valid JSON. The line is then made inert for a terminal
 * (core/terminal-text.ts `jsonTerminalSafe`: the same values, no raw DEL, C1 or reordering character). An `err` field is an error's detail
 * (core/errors.ts `errorDetail`: kind, code, message, causes), never pino's error serializer, which would fold the
 * causes into one message and add stacks.
 */
export function pinoRedactionOptions(secrets: readonly string[]): PinoRedactionOptions {
  const compiled = compileRedaction(secrets, 'text');
  return {
    redact: { paths: [...REDACTED_LOG_PATHS], censor: SECRET_MASK },
    // Then made inert for a terminal (our stderr): JSON escapes C0 controls, DEL, C1 and bidi become \u escapes.
    hooks: { streamWrite: (line: string) => jsonTerminalSafe(redactLine(compiled, line)) },
    serializers: { err: (value: unknown) => (value instanceof Error ? errorDetail(value) : value) },
  };
}

function redactLine(compiled: CompiledRedaction, line: string): string {
  return redactOnce(compiled, line);
}

/** Masks secret values, their encodings and token formats in raw bytes (any encoding; matched byte for byte). */
export function redactBytes(bytes: Uint8Array, secrets: readonly string[]): Buffer {
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1');
  return Buffer.from(redactOnce(compileRedaction(secrets, 'latin1-bytes'), text), 'latin1');
}
