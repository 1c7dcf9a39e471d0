import { inClass } from './char-classes.js';
import { PEM_TAIL_CHARS, findPemEnd, scanValue } from './header-detectors.js';
import type { Continuation } from './types.js';

export interface Swallowed {
  /** Chars of the chunk that belong to the already-masked match (dropped from the output). */
  readonly consumed: number;
  /** Still inside the match after this chunk, or null when it ended. */
  readonly next: Continuation | null;
}

/**
 * Drops the rest of an open-ended match that was emitted as masked before it ended (at idle or
 * when the held-back tail hit its cap). Memory stays constant: only the PEM END-line window.
 */
export function swallow(continuation: Continuation, chunk: string): Swallowed {
  switch (continuation.kind) {
    case 'class': {
      let i = 0;
      while (i < chunk.length && inClass(continuation.table, chunk.charCodeAt(i))) i++;
      return { consumed: i, next: i === chunk.length ? continuation : null };
    }
    case 'value': {
      const value = scanValue(chunk, 0, continuation.quote, continuation.escaped);
      if (value.end < chunk.length) return { consumed: value.end, next: null };
      return { consumed: chunk.length, next: { ...continuation, escaped: value.escaped } };
    }
    case 'pem': {
      const text = continuation.tail + chunk;
      const end = findPemEnd(text, 0);
      if (end >= 0) return { consumed: Math.max(0, end - continuation.tail.length), next: null };
      return { consumed: chunk.length, next: { kind: 'pem', tail: text.slice(-PEM_TAIL_CHARS) } };
    }
  }
}
