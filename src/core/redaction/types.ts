/**
 * Shared shapes of the redaction matcher. All text is either a latin1 string (one char per
 * byte, for streams) or an ordinary JS string (for one-shot redaction of messages).
 */

/** How to keep masking after an open-ended match was emitted before it ended (idle, cap). */
export type Continuation =
  | { readonly kind: 'class'; readonly table: Uint8Array }
  | { readonly kind: 'value'; readonly quote: number; readonly escaped: boolean }
  | { readonly kind: 'pem'; readonly tail: string };

export interface DetectorMatch {
  readonly maskStart: number;
  readonly end: number;
  /** Non-null when the match touches the end of the text and more text could extend it. */
  readonly continuation: Continuation | null;
}

export const NO_MATCH = 'none';
/** The text ends inside something that may still become a match. */
export const PARTIAL = 'partial';

export type DetectorResult = typeof NO_MATCH | typeof PARTIAL | DetectorMatch;

/**
 * `prev` is the code of the char before `p` (-1 at stream start). `final` means no more text
 * will follow, so nothing is partial or open.
 */
export type MatchFn = (s: string, p: number, prev: number, final: boolean) => DetectorResult;

export type DetectorKind = 'openai' | 'github' | 'aws' | 'slack' | 'bearer' | 'authorization' | 'private_key';

export interface Detector {
  readonly kind: DetectorKind;
  /** Fixed text every match starts with; candidates are found by searching for it. */
  readonly keyword: string;
  /** The keyword matches in any letter case. */
  readonly ignoreCase: boolean;
  /** A char of this class right before the keyword means it sits inside a longer word. */
  readonly notAfter: Uint8Array | null;
  readonly match: MatchFn;
}
