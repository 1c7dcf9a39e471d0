import { describe, expect, it } from 'vitest';
import { literalSearches } from '../../src/core/redaction/literal-search.js';
import { randomString, seededRandom } from './redaction.fixtures.js';

/** The multi-literal search must agree with the minimum over one indexOf per literal. */
function naive(literals: readonly string[], s: string, from: number): number {
  const hits = literals.map((l) => s.indexOf(l, from)).filter((i) => i >= 0);
  return hits.length === 0 ? -1 : Math.min(...hits);
}

function leftmost(literals: readonly string[], s: string, from: number): number {
  const hits = literalSearches(literals)
    .map((search) => search.next(s, from))
    .filter((i) => i >= 0);
  return hits.length === 0 ? -1 : Math.min(...hits);
}

describe('literalSearches', () => {
  it('finds the leftmost occurrence of any literal, like indexOf, on random texts', () => {
    const random = seededRandom(5);
    for (let round = 0; round < 300; round++) {
      const alphabet = round % 2 === 0 ? 'abc' : 'abcdefgh\u00e9\u4e2d';
      const literals = Array.from({ length: 1 + Math.floor(random() * 5) }, () =>
        randomString(random, alphabet, 4 + Math.floor(random() * 14)),
      );
      let text = randomString(random, alphabet, 200);
      for (const literal of literals) {
        const at = Math.floor(random() * text.length);
        if (random() < 0.7) text = text.slice(0, at) + literal + text.slice(at);
      }
      for (const from of [0, 1, Math.floor(random() * text.length), text.length - 3, text.length]) {
        expect(leftmost(literals, text, from)).toBe(naive(literals, text, from));
      }
    }
  });

  it('finds overlapping and adjacent literals at their starts', () => {
    const literals = ['abcdefghij', 'cdefghijkl', 'zzzzzzzzzz'];
    const text = 'xxabcdefghijklzzzzzzzzzzz';
    expect(leftmost(literals, text, 0)).toBe(2);
    expect(leftmost(literals, text, 3)).toBe(4);
    expect(leftmost(literals, text, 5)).toBe(14);
    expect(leftmost(literals, text, 16)).toBe(-1);
  });
});
