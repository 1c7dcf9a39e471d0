import type { CharClass } from './char-classes.js';
import {
  ALNUM,
  BEARER_BODY,
  HORIZONTAL_SPACE,
  SLACK_BODY,
  TOKEN,
  UPPER_ALNUM,
  WORD,
  inClass,
  isDigit,
  isLetter,
} from './char-classes.js';
import type { Detector, DetectorResult, DetectorKind } from './types.js';
import { NO_MATCH, PARTIAL } from './types.js';

/**
 * Detectors for token formats with a fixed prefix and a run of body chars: OpenAI `sk-…`,
 * GitHub `ghp_…`/`github_pat_…`, AWS `AKIA…`/`ASIA…`, Slack `xox?-…`, `Bearer <token>`.
 * A match needs a boundary before it (so `task-123` or `ghost_` never qualify) and a body long
 * enough to look random; when the body reaches the end of the text the token is open-ended.
 */

/** Result of comparing a fixed keyword at `p`: index after it, or a verdict. */
type KeywordResult = number | typeof NO_MATCH | typeof PARTIAL;

function matchExact(s: string, p: number, keyword: string, final: boolean): KeywordResult {
  for (let i = 0; i < keyword.length; i++) {
    if (p + i >= s.length) return final ? NO_MATCH : PARTIAL;
    if (s.charCodeAt(p + i) !== keyword.charCodeAt(i)) return NO_MATCH;
  }
  return p + keyword.length;
}

/** `keyword` is lower-case ASCII letters; `c | 0x20` folds exactly A-Z onto a-z. */
export function matchKeywordIgnoreCase(s: string, p: number, keyword: string, final: boolean): KeywordResult {
  for (let i = 0; i < keyword.length; i++) {
    if (p + i >= s.length) return final ? NO_MATCH : PARTIAL;
    if ((s.charCodeAt(p + i) | 0x20) !== keyword.charCodeAt(i)) return NO_MATCH;
  }
  return p + keyword.length;
}

interface BodyScan {
  readonly end: number;
  readonly digits: number;
  readonly uppers: number;
  readonly nonLetters: number;
}

function scanBody(s: string, start: number, body: CharClass, maxLength: number): BodyScan {
  let j = start;
  let digits = 0;
  let uppers = 0;
  let nonLetters = 0;
  const stop = Math.min(s.length, start + maxLength);
  while (j < stop) {
    const code = s.charCodeAt(j);
    if (!inClass(body, code)) break;
    if (isDigit(code)) digits++;
    if (code >= 65 && code <= 90) uppers++;
    if (!isLetter(code)) nonLetters++;
    j++;
  }
  return { end: j, digits, uppers, nonLetters };
}

interface PrefixedTokenSpec {
  readonly kind: DetectorKind;
  readonly prefix: string;
  /** A char of this class right before the prefix means we are inside a longer word. */
  readonly notAfter: CharClass;
  readonly body: CharClass;
  readonly qualifies: (scan: BodyScan, bodyLength: number) => boolean;
}

function prefixedToken(spec: PrefixedTokenSpec): Detector {
  const match = (s: string, p: number, prev: number, final: boolean): DetectorResult => {
    if (inClass(spec.notAfter, prev)) return NO_MATCH;
    const start = matchExact(s, p, spec.prefix, final);
    if (typeof start !== 'number') return start;
    const scan = scanBody(s, start, spec.body, Number.MAX_SAFE_INTEGER);
    const ok = spec.qualifies(scan, scan.end - start);
    if (scan.end === s.length && !final) {
      return ok
        ? { maskStart: p, end: scan.end, continuation: { kind: 'class', table: spec.body } }
        : PARTIAL;
    }
    return ok ? { maskStart: p, end: scan.end, continuation: null } : NO_MATCH;
  };
  return { kind: spec.kind, keyword: spec.prefix, ignoreCase: false, notAfter: spec.notAfter, match };
}

const atLeast = (min: number) => (_scan: BodyScan, length: number) => length >= min;
const atLeastWithDigit = (min: number) => (scan: BodyScan, length: number) =>
  length >= min && scan.digits > 0;
/** Random base62 keys have both; kebab-case words like `sk-learn-compat-v2` do not. */
const randomLooking = (min: number) => (scan: BodyScan, length: number) =>
  length >= min && scan.digits > 0 && scan.uppers > 0;

export const OPENAI = prefixedToken({
  kind: 'openai',
  prefix: 'sk-',
  notAfter: TOKEN,
  body: TOKEN,
  qualifies: randomLooking(20),
});
export const SLACK_PREFIXES = ['xoxb-', 'xoxa-', 'xoxp-', 'xoxr-', 'xoxs-'] as const;
export const GITHUB_PREFIXES = ['ghp_', 'gho_', 'ghu_', 'ghs_', 'ghr_'] as const;

const githubClassic = GITHUB_PREFIXES.map((prefix) =>
  prefixedToken({ kind: 'github', prefix, notAfter: WORD, body: ALNUM, qualifies: atLeast(30) }),
);
const githubFineGrained = prefixedToken({
  kind: 'github',
  prefix: 'github_pat_',
  notAfter: WORD,
  body: WORD,
  qualifies: atLeast(22),
});
const slack = SLACK_PREFIXES.map((prefix) =>
  prefixedToken({
    kind: 'slack',
    prefix,
    notAfter: TOKEN,
    body: SLACK_BODY,
    qualifies: atLeastWithDigit(10),
  }),
);

const AWS_BODY_LENGTH = 16;

/** `AKIA`/`ASIA` + exactly 16 of [A-Z0-9], not inside a longer alphanumeric word. */
function awsKey(prefix: string): Detector {
  const match = (s: string, p: number, prev: number, final: boolean): DetectorResult => {
    if (inClass(ALNUM, prev)) return NO_MATCH;
    const start = matchExact(s, p, prefix, final);
    if (typeof start !== 'number') return start;
    const scan = scanBody(s, start, UPPER_ALNUM, AWS_BODY_LENGTH);
    const end = scan.end;
    if (end - start < AWS_BODY_LENGTH) return end === s.length && !final ? PARTIAL : NO_MATCH;
    if (end === s.length) {
      return { maskStart: p, end, continuation: final ? null : { kind: 'class', table: ALNUM } };
    }
    return inClass(ALNUM, s.charCodeAt(end)) ? NO_MATCH : { maskStart: p, end, continuation: null };
  };
  return { kind: 'aws', keyword: prefix, ignoreCase: false, notAfter: ALNUM, match };
}

const MAX_GAP = 16;
const BEARER_MIN = 8;
const BEARER_PLAIN_MIN = 20;

/**
 * `Bearer <token>`, keyword in any case. Only the token is masked. A token needs 8+ chars and
 * a non-letter (digit, `.`, `-`, …), or 20+ chars: "bearer authentication" stays readable.
 */
export const BEARER: Detector = {
  kind: 'bearer',
  keyword: 'bearer',
  ignoreCase: true,
  notAfter: WORD,
  match(s, p, prev, final) {
    if (inClass(WORD, prev)) return NO_MATCH;
    const afterKeyword = matchKeywordIgnoreCase(s, p, 'bearer', final);
    if (typeof afterKeyword !== 'number') return afterKeyword;
    const gap = scanBody(s, afterKeyword, HORIZONTAL_SPACE, MAX_GAP + 1);
    if (gap.end - afterKeyword > MAX_GAP) return NO_MATCH;
    if (gap.end === s.length) return final ? NO_MATCH : PARTIAL;
    if (gap.end === afterKeyword) return NO_MATCH;
    const start = gap.end;
    const scan = scanBody(s, start, BEARER_BODY, Number.MAX_SAFE_INTEGER);
    const length = scan.end - start;
    const ok = length >= BEARER_MIN && (scan.nonLetters > 0 || length >= BEARER_PLAIN_MIN);
    if (scan.end === s.length && !final) {
      return ok
        ? { maskStart: start, end: scan.end, continuation: { kind: 'class', table: BEARER_BODY } }
        : PARTIAL;
    }
    return ok ? { maskStart: start, end: scan.end, continuation: null } : NO_MATCH;
  },
};

export const TOKEN_DETECTORS: readonly Detector[] = [
  OPENAI,
  ...githubClassic,
  githubFineGrained,
  awsKey('AKIA'),
  awsKey('ASIA'),
  ...slack,
  BEARER,
];
