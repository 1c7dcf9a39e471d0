/**
 * Finds the leftmost occurrence of any of several literals in one pass (Wu-Manber: a shift
 * table over 2-char blocks lets the scan skip up to `window - 1` chars per step), instead of
 * one `indexOf` pass per literal. Literals shorter than MIN_WINDOW chars use `indexOf`.
 */
const BLOCK = 2;
const MIN_WINDOW = 8;
const MAX_WINDOW = 64;

export interface LiteralSearch {
  /** Leftmost index >= from where some literal starts; -1 if none. */
  next(s: string, from: number): number;
}

function blockHash(s: string, i: number): number {
  return ((s.charCodeAt(i) & 0xff) << 8) | (s.charCodeAt(i + 1) & 0xff);
}

class ShiftTableSearch implements LiteralSearch {
  readonly #window: number;
  readonly #shift: Uint8Array;
  readonly #byLastBlock = new Map<number, string[]>();

  constructor(literals: readonly string[]) {
    this.#window = Math.min(MAX_WINDOW, ...literals.map((l) => l.length));
    const window = this.#window;
    this.#shift = new Uint8Array(65536).fill(window - BLOCK + 1);
    for (const literal of literals) {
      for (let j = 0; j <= window - BLOCK; j++) {
        const hash = blockHash(literal, j);
        this.#shift[hash] = Math.min(this.#shift[hash] ?? 0, window - BLOCK - j);
      }
      const last = blockHash(literal, window - BLOCK);
      this.#byLastBlock.set(last, [...(this.#byLastBlock.get(last) ?? []), literal]);
    }
  }

  next(s: string, from: number): number {
    const window = this.#window;
    const shift = this.#shift;
    for (let pos = from + window - 1; pos < s.length;) {
      const hash = ((s.charCodeAt(pos - 1) & 0xff) << 8) | (s.charCodeAt(pos) & 0xff);
      const step = shift[hash] ?? 1;
      if (step !== 0) {
        pos += step;
        continue;
      }
      const start = pos - window + 1;
      for (const literal of this.#byLastBlock.get(hash) ?? []) {
        if (s.startsWith(literal, start)) return start;
      }
      pos++;
    }
    return -1;
  }
}

class IndexOfSearch implements LiteralSearch {
  constructor(private readonly literal: string) {}

  next(s: string, from: number): number {
    return s.indexOf(this.literal, from);
  }
}

/** Searches for literals: one shift-table pass for the long ones, `indexOf` for short ones. */
export function literalSearches(literals: readonly string[]): LiteralSearch[] {
  const long = literals.filter((l) => l.length >= MIN_WINDOW);
  const short = literals.filter((l) => l.length < MIN_WINDOW);
  const searches: LiteralSearch[] = short.map((l) => new IndexOfSearch(l));
  if (long.length === 1 && long[0] !== undefined) searches.push(new IndexOfSearch(long[0]));
  else if (long.length > 1) searches.push(new ShiftTableSearch(long));
  return searches;
}
