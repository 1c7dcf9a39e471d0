import { AUTHORIZATION, PRIVATE_KEY_BLOCK } from './header-detectors.js';
import type { SecretMachine } from './secret-machine.js';
import { compileSecretMachine } from './secret-machine.js';
import { TOKEN_DETECTORS } from './token-detectors.js';
import type { Detector } from './types.js';

/** Default cap on held-back text; an open match longer than this is emitted masked. */
export const DEFAULT_MAX_HELD_CHARS = 64 * 1024;

export const DETECTORS: readonly Detector[] = [...TOKEN_DETECTORS, AUTHORIZATION, PRIVATE_KEY_BLOCK];

/** Everything the scanner needs, built once per secret set. */
export interface CompiledRedaction {
  /** How one-shot redaction reads its input (streams are always latin1 bytes). */
  readonly mode: TextMode;
  /** Every form of every secret value, as one automaton. */
  readonly secretMachine: SecretMachine;
  /** Detectors by the char code their keyword starts with (both cases when case-insensitive). */
  readonly detectorsByFirstChar: ReadonlyMap<number, readonly Detector[]>;
  /** Finds the keyword of any detector. */
  readonly trigger: RegExp;
  /** Longest keyword length - 1: how far back a keyword cut by the text end can start. */
  readonly keywordWindow: number;
  /** 1 for each char code that can end a proper prefix of a keyword. */
  readonly tailChars: Uint8Array;
  readonly maxHeldChars: number;
}

/**
 * `latin1-bytes`: text is a latin1 string holding raw bytes (one char per byte), as streams
 * are scanned. `text`: ordinary JS strings (log lines, error messages), redacted as their UTF-8.
 */
export type TextMode = 'latin1-bytes' | 'text';

export interface CompileOptions {
  readonly maxHeldChars?: number;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
}

/** `[...]` with runs of 3+ codes written as ranges. */
function classSource(table: Uint8Array): string {
  let members = '';
  for (let code = 0; code < table.length; code++) {
    if (table[code] !== 1) continue;
    let last = code;
    while (table[last + 1] === 1) last++;
    const first = escapeRegExp(String.fromCharCode(code));
    members += last - code >= 2 ? `${first}-${escapeRegExp(String.fromCharCode(last))}` : first;
    if (last - code === 1) members += escapeRegExp(String.fromCharCode(last));
    code = last;
  }
  return `[${members}]`;
}

/**
 * One case-insensitive regex for all keywords (measured faster than spelling out `[Bb]…`
 * classes; matchers re-check the case). Keywords sharing a word-boundary class sit behind one
 * negative lookbehind, so `task-1` never even becomes a candidate; matchers check the boundary
 * again for a keyword at the start of a chunk.
 */
function triggerOf(detectors: readonly Detector[]): RegExp {
  const groups = new Map<Uint8Array | null, string[]>();
  for (const detector of detectors) {
    groups.set(detector.notAfter, [...(groups.get(detector.notAfter) ?? []), escapeRegExp(detector.keyword)]);
  }
  const sources = [...groups].map(([notAfter, keywords]) => {
    const alternatives = `(?:${keywords.join('|')})`;
    return notAfter === null ? alternatives : `(?<!${classSource(notAfter)})${alternatives}`;
  });
  return new RegExp(sources.join('|'), 'gi');
}

function caseVariants(text: string, ignoreCase: boolean): string {
  return ignoreCase ? text.toLowerCase() + text.toUpperCase() : text;
}

function indexByFirstChar(detectors: readonly Detector[]): Map<number, Detector[]> {
  const byChar = new Map<number, Detector[]>();
  for (const detector of detectors) {
    for (const ch of new Set(caseVariants(detector.keyword.charAt(0), detector.ignoreCase))) {
      const code = ch.charCodeAt(0);
      byChar.set(code, [...(byChar.get(code) ?? []), detector]);
    }
  }
  return byChar;
}

function tailCharsOf(detectors: readonly Detector[]): Uint8Array {
  const table = new Uint8Array(65536);
  const mark = (text: string) => {
    for (let i = 0; i < text.length - 1; i++) table[text.charCodeAt(i)] = 1;
  };
  for (const detector of detectors) {
    if (detector.ignoreCase) {
      mark(detector.keyword.toLowerCase());
      mark(detector.keyword.toUpperCase());
    } else {
      mark(detector.keyword);
    }
  }
  return table;
}

export function compileRedaction(
  secrets: readonly string[],
  mode: TextMode,
  options: CompileOptions = {},
): CompiledRedaction {
  return {
    mode,
    secretMachine: compileSecretMachine(secrets),
    detectorsByFirstChar: indexByFirstChar(DETECTORS),
    trigger: triggerOf(DETECTORS),
    keywordWindow: Math.max(...DETECTORS.map((d) => d.keyword.length)) - 1,
    tailChars: tailCharsOf(DETECTORS),
    maxHeldChars: options.maxHeldChars ?? DEFAULT_MAX_HELD_CHARS,
  };
}
