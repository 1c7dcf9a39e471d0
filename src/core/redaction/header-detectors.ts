import { HORIZONTAL_SPACE, PEM_LABEL, WORD, inClass } from './char-classes.js';
import { matchKeywordIgnoreCase } from './token-detectors.js';
import type { Continuation, Detector, DetectorResult } from './types.js';
import { NO_MATCH, PARTIAL } from './types.js';

const LF = 10;
const CR = 13;
const BACKSLASH = 92;
const DOUBLE_QUOTE = 34;
const SINGLE_QUOTE = 39;
const MAX_GAP = 16;

export interface ValueEnd {
  /** Index of the terminator (EOL or closing quote), or s.length when unterminated. */
  readonly end: number;
  /** Escape state at s.length when unterminated. */
  readonly escaped: boolean;
}

/**
 * A header value ends at the end of the line or at an unescaped `quote`. Unquoted values stop
 * at `"` too, so a value inside a JSON string (`{"msg":"Authorization: Basic …"}`) keeps the
 * line valid JSON.
 */
export function scanValue(s: string, start: number, quote: number, escaped: boolean): ValueEnd {
  let inEscape = escaped;
  for (let j = start; j < s.length; j++) {
    const code = s.charCodeAt(j);
    if (inEscape) {
      inEscape = false;
    } else if (code === BACKSLASH) {
      inEscape = true;
    } else if (code === quote || code === LF || code === CR) {
      return { end: j, escaped: false };
    }
  }
  return { end: s.length, escaped: inEscape };
}

function skipSpace(s: string, i: number): number {
  let j = i;
  while (j < s.length && j - i <= MAX_GAP && inClass(HORIZONTAL_SPACE, s.charCodeAt(j))) j++;
  return j;
}

/** A value that is already a mask (ours, or pino's censor) is left alone: redaction is idempotent. */
const ALREADY_MASKED = /^\[(?:REDACTED(?::[a-z_]+)?|Redacted)\]$/;

/** `authorization` (any case) `["']? [ \t]* [:=] [ \t]* ["']?` then the value is masked. */
function matchAuthorization(s: string, p: number, prev: number, final: boolean): DetectorResult {
  if (inClass(WORD, prev)) return NO_MATCH;
  const afterKeyword = matchKeywordIgnoreCase(s, p, 'authorization', final);
  if (typeof afterKeyword !== 'number') return afterKeyword;
  let i = afterKeyword;
  if (i < s.length && (s.charCodeAt(i) === DOUBLE_QUOTE || s.charCodeAt(i) === SINGLE_QUOTE)) i++;
  i = skipSpace(s, i);
  if (i >= s.length) return final ? NO_MATCH : PARTIAL;
  const separator = s.charCodeAt(i);
  if (separator !== 58 && separator !== 61) return NO_MATCH; // ':' '='
  i = skipSpace(s, i + 1);
  if (i >= s.length) return final ? NO_MATCH : PARTIAL;
  let quote = DOUBLE_QUOTE;
  const opening = s.charCodeAt(i);
  if (opening === DOUBLE_QUOTE || opening === SINGLE_QUOTE) {
    quote = opening;
    i++;
  }
  const value = scanValue(s, i, quote, false);
  if (value.end < s.length || final) {
    const empty = value.end === i || ALREADY_MASKED.test(s.slice(i, value.end));
    return empty ? NO_MATCH : { maskStart: i, end: value.end, continuation: null };
  }
  if (value.end === i) return PARTIAL;
  const continuation: Continuation = { kind: 'value', quote, escaped: value.escaped };
  return { maskStart: i, end: value.end, continuation };
}

export const AUTHORIZATION: Detector = {
  kind: 'authorization',
  keyword: 'authorization',
  ignoreCase: true,
  notAfter: WORD,
  match: matchAuthorization,
};

const BEGIN = '-----BEGIN ';
const END = '-----END ';
const DASHES = '-----';
const PRIVATE_KEY = 'PRIVATE KEY';
const MAX_LABEL = 48;
/** Enough to hold any END line split across chunks. */
export const PEM_TAIL_CHARS = END.length + MAX_LABEL + DASHES.length;

function labelEnd(s: string, start: number): number {
  let j = start;
  while (j < s.length && j - start <= MAX_LABEL && inClass(PEM_LABEL, s.charCodeAt(j))) j++;
  return j;
}

/** End index of the first complete `-----END … PRIVATE KEY…-----` at or after `from`, or -1. */
export function findPemEnd(s: string, from: number): number {
  for (let i = s.indexOf(END, from); i >= 0; i = s.indexOf(END, i + 1)) {
    const start = i + END.length;
    const end = labelEnd(s, start);
    if (end - start <= MAX_LABEL && s.startsWith(DASHES, end) && s.slice(start, end).includes(PRIVATE_KEY)) {
      return end + DASHES.length;
    }
  }
  return -1;
}

/** PEM private key block from the BEGIN line to the END line, across lines and chunks. */
function matchPem(s: string, p: number, _prev: number, final: boolean): DetectorResult {
  for (let i = 0; i < BEGIN.length; i++) {
    if (p + i >= s.length) return final ? NO_MATCH : PARTIAL;
    if (s.charCodeAt(p + i) !== BEGIN.charCodeAt(i)) return NO_MATCH;
  }
  const labelStart = p + BEGIN.length;
  const label = labelEnd(s, labelStart);
  if (label - labelStart > MAX_LABEL) return NO_MATCH;
  if (label === s.length) return final ? NO_MATCH : PARTIAL;
  if (!s.slice(labelStart, label).includes(PRIVATE_KEY)) return NO_MATCH;
  for (let i = 0; i < DASHES.length; i++) {
    if (label + i >= s.length) return final ? NO_MATCH : PARTIAL;
    if (s.charCodeAt(label + i) !== 45) return NO_MATCH;
  }
  const bodyStart = label + DASHES.length;
  const end = findPemEnd(s, bodyStart);
  if (end >= 0) return { maskStart: p, end, continuation: null };
  if (final) return { maskStart: p, end: s.length, continuation: null };
  const tail = s.slice(Math.max(bodyStart, s.length - PEM_TAIL_CHARS));
  return { maskStart: p, end: s.length, continuation: { kind: 'pem', tail } };
}

export const PRIVATE_KEY_BLOCK: Detector = {
  kind: 'private_key',
  keyword: BEGIN,
  ignoreCase: false,
  notAfter: null,
  match: matchPem,
};
