import type { CompiledRedaction } from './compile.js';
import { StreamRedactor } from './stream-redactor.js';

/** Redacts a complete text (a log line, an error message) in one pass. */
export function redactOnce(compiled: CompiledRedaction, text: string): string {
  const redactor = new StreamRedactor(compiled);
  return redactor.push(text) + redactor.end();
}
