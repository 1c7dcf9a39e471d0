import type { CompiledRedaction } from './compile.js';
import { utf8AsLatin1 } from './secret-forms.js';
import { StreamRedactor } from './stream-redactor.js';

const UTF8 = new TextDecoder('utf-8');
/** One redactor per compiled set, reset per call: one-shot redaction is synchronous, so never shared mid-use. */
const REDACTORS = new WeakMap<CompiledRedaction, StreamRedactor>();

function redactorFor(compiled: CompiledRedaction): StreamRedactor {
  let redactor = REDACTORS.get(compiled);
  if (redactor === undefined) {
    redactor = new StreamRedactor(compiled);
    REDACTORS.set(compiled, redactor);
  } else {
    redactor.reset();
  }
  return redactor;
}

/**
 * Redacts a complete text (a log line, an error message, a file name) in one pass. In `text`
 * mode the text is matched as its UTF-8 bytes: masks start and end on character boundaries, so
 * decoding the result gives back every character outside the masks.
 */
export function redactOnce(compiled: CompiledRedaction, text: string): string {
  const redactor = redactorFor(compiled);
  if (compiled.mode === 'latin1-bytes') return redactor.push(text) + redactor.end();
  const bytes = utf8AsLatin1(text);
  const out = redactor.push(bytes) + redactor.end();
  if (out === bytes) return text;
  const decoded = new Uint8Array(out.length);
  for (let i = 0; i < out.length; i++) decoded[i] = out.charCodeAt(i);
  return UTF8.decode(decoded);
}
