import type { CompiledRedaction } from './compile.js';
import { SecretStage, SECRET_MASK } from './secret-stage.js';
import { swallow } from './continuation.js';
import type { Continuation, DetectorKind } from './types.js';
import { NO_MATCH, PARTIAL } from './types.js';

export function maskFor(kind: DetectorKind | 'secret'): string {
  return kind === 'secret' ? SECRET_MASK : `[REDACTED:${kind}]`;
}

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
 * The token-shape stage (detectors: `sk-…`, `Bearer …`, `Authorization:`, PEM blocks…) over
 * latin1 text. Emits everything that cannot be part of a match at once, holds back only a
 * suffix that could still become (or extend) a match, and never emits part of a match.
 *
 * While text is held, a push only appends to it until the held text has doubled since the last
 * scan (or the cap is near): each scan costs at most twice the text added since the one before,
 * so a match trickling in one byte at a time costs O(1) per byte, not a rescan per push.
 *
 * - `push(chunk)` returns the text that is safe to emit now (the very `chunk` string when it
 *   passes through unchanged: callers can reuse their buffer).
 * - `idle()` after a quiet period: open-ended matches that already qualify are emitted masked
 *   and the rest of them is dropped as it arrives; partial matches stay held.
 * - `end()` at stream end: everything left, with matches masked.
 */
class TokenStage {
  readonly #compiled: CompiledRedaction;
  /** Held length at which the next push rescans (0: at once). */
  #rescanAt = 0;
  #held = '';
  /** Code of the input char right before the held text (or before the next chunk); -1 at start. */
  #prev = -1;
  #continuation: Continuation | null = null;
  #triggerNext = -2;

  constructor(compiled: CompiledRedaction) {
    this.#compiled = compiled;
  }

  /** Chars held back because they may belong to a match not yet complete. */
  get pendingLength(): number {
    return this.#held.length;
  }

  reset(): void {
    this.#rescanAt = 0;
    this.#held = '';
    this.#prev = -1;
    this.#continuation = null;
    this.#triggerNext = -2;
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
    if (this.#held.length > 0) {
      const held = this.#held + text;
      if (held.length < this.#rescanAt && held.length <= this.#compiled.maxHeldChars) {
        this.#held = held;
        return '';
      }
      return this.#rescan(held, 'push');
    }
    return this.#rescan(text, 'push');
  }

  #rescan(s: string, mode: Mode): string {
    const out = this.#scan(s, mode);
    this.#rescanAt = 2 * this.#held.length;
    return out;
  }

  idle(): string {
    if (this.#held.length === 0) return '';
    return this.#rescan(this.#held, 'idle');
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
    const limit = mode === 'end' ? len : this.#partialStart(s);
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
    let kind: DetectorKind | null = null;
    const visit = (p: number) => {
      const code = s.charCodeAt(p);
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
    this.#triggerNext = -2;
  }

  /** Leftmost position >= from where a detector keyword starts; -1 if none. */
  #nextCandidate(s: string, from: number): number {
    let best = -1;
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

  /** Start of the longest suffix that is a proper prefix of a keyword; len if none. */
  #partialStart(s: string): number {
    const len = s.length;
    if (this.#compiled.tailChars[s.charCodeAt(len - 1)] !== 1) return len;
    let best = len;
    for (let q = Math.max(0, len - this.#compiled.keywordWindow); q < best; q++) {
      const detectors = this.#compiled.detectorsByFirstChar.get(s.charCodeAt(q));
      if (detectors === undefined) continue;
      const prev = q > 0 ? s.charCodeAt(q - 1) : this.#prev;
      if (detectors.some((d) => d.match(s, q, prev, false) === PARTIAL)) best = q;
    }
    return best;
  }
}

/**
 * Streaming redactor over latin1 text chunks (one char per byte): secret forms first (every
 * resolved value, raw and encoded, see secret-forms.ts), then token shapes. Emits everything
 * that cannot be part of a match at once and never emits part of a match.
 *
 * - `push(chunk)` returns the text that is safe to emit now (the very `chunk` string when it
 *   passes through unchanged: callers can reuse their buffer).
 * - `idle()` after a quiet period: open-ended token matches that already qualify are emitted
 *   masked and the rest of them is dropped as it arrives; partial matches stay held.
 * - `end()` at stream end: everything left, with matches masked (and a held tail of 4+ bytes
 *   that begins a secret form masked too).
 */
export class StreamRedactor {
  readonly #secrets: SecretStage;
  readonly #tokens: TokenStage;

  constructor(compiled: CompiledRedaction) {
    this.#secrets = new SecretStage(compiled.secretMachine);
    this.#tokens = new TokenStage(compiled);
  }

  /** Chars held back because they may belong to a match not yet complete. */
  get pendingLength(): number {
    return this.#secrets.pendingLength + this.#tokens.pendingLength;
  }

  /** Back to the state of a new redactor (for one-shot reuse: the automaton's arrays are kept). */
  reset(): void {
    this.#secrets.reset();
    this.#tokens.reset();
  }

  push(chunk: string): string {
    const clean = this.#secrets.push(chunk);
    return clean.length === 0 ? '' : this.#tokens.push(clean);
  }

  idle(): string {
    return this.#tokens.idle();
  }

  end(): string {
    const rest = this.#secrets.end();
    const out = rest.length > 0 ? this.#tokens.push(rest) : '';
    return out + this.#tokens.end();
  }
}
