import type { CompiledRedaction } from './compile.js';
import { swallow } from './continuation.js';
import type { Continuation, DetectorKind } from './types.js';
import { NO_MATCH, PARTIAL } from './types.js';

export const SECRET_MASK = '[REDACTED]';

export function maskFor(kind: DetectorKind | 'secret'): string {
  return kind === 'secret' ? SECRET_MASK : `[REDACTED:${kind}]`;
}

/** At stream end, a trailing prefix of a secret form this long is masked, not emitted. */
const MIN_MASKED_PREFIX = 8;

type Mode = 'push' | 'idle' | 'end';

interface Region {
  readonly maskStart: number;
  readonly end: number;
  readonly mask: string;
  readonly continuation: Continuation | null;
}

const HOLD = 'hold';
type Resolution = typeof NO_MATCH | typeof HOLD | Region;

/**
 * Streaming redactor over text chunks (latin1 strings for byte streams). Emits everything that
 * cannot be part of a match at once, holds back only a suffix that could still become (or
 * extend) a match, and never emits part of a match.
 *
 * - `push(chunk)` returns the text that is safe to emit now (the very `chunk` string when it
 *   passes through unchanged: callers can reuse their buffer).
 * - `idle()` after a quiet period: open-ended matches that already qualify are emitted masked
 *   and the rest of them is dropped as it arrives; partial matches stay held.
 * - `end()` at stream end: everything left, with matches masked.
 */
export class StreamRedactor {
  readonly #compiled: CompiledRedaction;
  #held = '';
  /** Code of the input char right before the held text (or before the next chunk); -1 at start. */
  #prev = -1;
  #continuation: Continuation | null = null;
  readonly #literalNext: Int32Array;
  #triggerNext = -2;

  constructor(compiled: CompiledRedaction) {
    this.#compiled = compiled;
    this.#literalNext = new Int32Array(compiled.literalSearches.length);
  }

  /** Chars held back because they may belong to a match not yet complete. */
  get pendingLength(): number {
    return this.#held.length;
  }

  push(chunk: string): string {
    if (chunk.length === 0) return '';
    let text = chunk;
    if (this.#continuation !== null) {
      const swallowed = swallow(this.#continuation, chunk);
      this.#continuation = swallowed.next;
      if (swallowed.consumed > 0) this.#prev = chunk.charCodeAt(swallowed.consumed - 1);
      if (swallowed.next !== null) return '';
      text = chunk.slice(swallowed.consumed);
    }
    return this.#scan(this.#held.length > 0 ? this.#held + text : text, 'push');
  }

  idle(): string {
    if (this.#held.length === 0) return '';
    return this.#scan(this.#held, 'idle');
  }

  end(): string {
    this.#continuation = null;
    if (this.#held.length === 0) return '';
    return this.#scan(this.#held, 'end');
  }

  #scan(s: string, mode: Mode): string {
    const len = s.length;
    if (len === 0) return '';
    this.#resetCandidates();
    const limit = mode === 'end' ? this.#longPrefixAtEnd(s) : this.#partialStart(s);
    let out = '';
    let emitted = 0;
    let search = 0;
    let holdAt = limit;
    while (search < limit) {
      const c = this.#nextCandidate(s, search);
      if (c < 0 || c >= limit) break;
      const region = this.#resolve(s, c, mode);
      if (region === NO_MATCH) {
        search = c + 1;
        continue;
      }
      if (region === HOLD || region.end > limit) {
        holdAt = c;
        break;
      }
      out += s.slice(emitted, region.maskStart) + region.mask;
      emitted = search = region.end;
      if (region.continuation !== null) this.#continuation = region.continuation;
    }
    if (holdAt < len && (mode === 'end' || (mode === 'push' && len - holdAt > this.#compiled.maxHeldChars))) {
      out += this.#forceMask(s, emitted, holdAt, mode === 'push');
      emitted = holdAt = len;
    }
    if (emitted === 0 && holdAt === len) {
      this.#held = '';
      this.#prev = s.charCodeAt(len - 1);
      return s;
    }
    out += s.slice(emitted, holdAt);
    this.#held = s.slice(holdAt);
    if (holdAt > 0) this.#prev = s.charCodeAt(holdAt - 1);
    return out;
  }

  /**
   * Masks [holdAt, end) without waiting any longer (stream end, or held text over the cap):
   * an open match keeps being dropped as it continues.
   */
  #forceMask(s: string, emitted: number, holdAt: number, streamGoesOn: boolean): string {
    this.#resetCandidates();
    const region = this.#resolve(s, holdAt, 'idle');
    if (typeof region === 'object' && region.end === s.length) {
      if (streamGoesOn) this.#continuation = region.continuation;
      return s.slice(emitted, region.maskStart) + region.mask;
    }
    return s.slice(emitted, holdAt) + SECRET_MASK;
  }

  /** Everything that starts at `c`, extended over any match starting inside it. */
  #resolve(s: string, c: number, mode: Mode): Resolution {
    const final = mode === 'end';
    const len = s.length;
    let end = -1;
    let maskStart = len;
    let partial = false;
    let continuation: Continuation | null = null;
    let kind: DetectorKind | 'secret' | null = null;
    const visit = (p: number) => {
      const code = s.charCodeAt(p);
      for (const literal of this.#compiled.literalsByFirstChar.get(code) ?? []) {
        if (!s.startsWith(literal, p)) continue;
        maskStart = Math.min(maskStart, p);
        kind = 'secret';
        if (p + literal.length > end) {
          end = p + literal.length;
          continuation = null;
        }
      }
      const prev = p > 0 ? s.charCodeAt(p - 1) : this.#prev;
      for (const detector of this.#compiled.detectorsByFirstChar.get(code) ?? []) {
        const result = detector.match(s, p, prev, final);
        if (result === NO_MATCH) continue;
        if (result === PARTIAL) {
          partial = true;
          continue;
        }
        maskStart = Math.min(maskStart, result.maskStart);
        kind ??= detector.kind;
        if (result.end > end || (result.end === end && result.continuation !== null)) {
          end = result.end;
          continuation = result.continuation;
        }
      }
    };
    visit(c);
    if (end < 0) return partial ? HOLD : NO_MATCH;
    for (let q = c + 1; !partial;) {
      const next = this.#nextCandidate(s, q);
      if (next < 0 || next >= end) break;
      visit(next);
      q = next + 1;
    }
    if (partial || (continuation !== null && mode === 'push')) return HOLD;
    return { maskStart, end, mask: maskFor(kind ?? 'secret'), continuation: final ? null : continuation };
  }

  #resetCandidates(): void {
    this.#literalNext.fill(-2);
    this.#triggerNext = -2;
  }

  /** Leftmost position >= from where a literal occurs or a detector keyword starts; -1 if none. */
  #nextCandidate(s: string, from: number): number {
    const searches = this.#compiled.literalSearches;
    const next = this.#literalNext;
    let best = -1;
    for (let i = 0; i < searches.length; i++) {
      let at = next[i] ?? -1;
      if (at !== -1 && at < from) {
        at = searches[i]?.next(s, from) ?? -1;
        next[i] = at;
      }
      if (at !== -1 && (best === -1 || at < best)) best = at;
    }
    let trigger = this.#triggerNext;
    if (trigger !== -1 && trigger < from) {
      const re = this.#compiled.trigger;
      re.lastIndex = from;
      trigger = re.exec(s)?.index ?? -1;
      this.#triggerNext = trigger;
    }
    if (trigger !== -1 && (best === -1 || trigger < best)) best = trigger;
    return best;
  }

  /** Start of the longest suffix that is a proper prefix of a literal or keyword; len if none. */
  #partialStart(s: string): number {
    const len = s.length;
    if (this.#compiled.tailChars[s.charCodeAt(len - 1)] !== 1) return len;
    let best = this.#literalPrefixAtEnd(s);
    for (let q = Math.max(0, len - this.#compiled.keywordWindow); q < best; q++) {
      const detectors = this.#compiled.detectorsByFirstChar.get(s.charCodeAt(q));
      if (detectors === undefined) continue;
      const prev = q > 0 ? s.charCodeAt(q - 1) : this.#prev;
      if (detectors.some((d) => d.match(s, q, prev, false) === PARTIAL)) best = q;
    }
    return best;
  }

  #literalPrefixAtEnd(s: string): number {
    const len = s.length;
    let best = len;
    for (const literal of this.#compiled.literals) {
      const first = literal.charAt(0);
      for (
        let q = s.indexOf(first, Math.max(0, len - literal.length + 1));
        q >= 0 && q < best;
        q = s.indexOf(first, q + 1)
      ) {
        if (literal.startsWith(s.slice(q))) {
          best = q;
          break;
        }
      }
    }
    return best;
  }

  /** At stream end, only a long trailing secret prefix is still worth masking. */
  #longPrefixAtEnd(s: string): number {
    const q = this.#literalPrefixAtEnd(s);
    return s.length - q >= MIN_MASKED_PREFIX ? q : s.length;
  }
}
