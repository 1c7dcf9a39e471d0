import { describe, expect, it } from 'vitest';
import { jsonTerminalSafe, terminalSafe } from '../../../src/core/terminal-text.js';
import { seededRandom } from '../../support/seeded-random.js';

/** What a terminal would act on: C0 but tab and newline, DEL, C1, bidi overrides and isolates, U+2028/2029. */
// eslint-disable-next-line no-control-regex -- control characters are what is escaped
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/u;

/** Undoes terminalSafe for text that held no backslash: proves nothing was lost or merged. */
function unescape(text: string): string {
  return text.replace(
    /\\x([0-9a-f]{2})|\\u\{([0-9a-f]+)\}/g,
    (_m, x: string | undefined, u: string | undefined) => String.fromCodePoint(parseInt(x ?? u ?? '0', 16)),
  );
}

/** Random text biased toward the characters that matter: controls, ESC sequences, C1, bidi, plain and astral. */
function randomText(random: () => number): string {
  const pool = [
    () => String.fromCharCode(Math.floor(random() * 0x20)),
    () => String.fromCharCode(0x7f + Math.floor(random() * 0x21)),
    () => '\u001b[2K\r',
    () => '\u001b]0;title\u0007',
    () => String.fromCharCode(0x202a + Math.floor(random() * 5)),
    () => String.fromCharCode(0x2066 + Math.floor(random() * 4)),
    () => 'pair x completed',
    () => 'é😀ß',
    () => String.fromCharCode(0x20 + Math.floor(random() * 0x5c)).replace('\\', '/'),
  ];
  let text = '';
  const length = Math.floor(random() * 40);
  for (let i = 0; i < length; i++) text += pool[Math.floor(random() * pool.length)]!();
  return text;
}

describe('terminalSafe (the one printer of the commands)', () => {
  it('shows ESC, CR, BEL, DEL and C1 as \\xHH and bidi controls as \\u{…}; keeps tab, newline and other text', () => {
    expect(terminalSafe('\u001b[2K\rpair x completed')).toBe('\\x1b[2K\\x0dpair x completed');
    expect(terminalSafe('a\tb\nc\u0007\u007f\u009b31m')).toBe('a\tb\nc\\x07\\x7f\\x9b31m');
    expect(terminalSafe('txt.\u202eexe\u2066')).toBe('txt.\\u{202e}exe\\u{2066}');
    expect(terminalSafe('plain é 😀 /path')).toBe('plain é 😀 /path');
  });

  it('property (2,000 seeded texts): nothing unsafe remains, nothing is lost (it round-trips), and it is idempotent', () => {
    const random = seededRandom(20261204);
    for (let i = 0; i < 2000; i++) {
      const text = randomText(random);
      const safe = terminalSafe(text);
      expect(safe, JSON.stringify(text)).not.toMatch(UNSAFE);
      expect(unescape(safe)).toBe(text);
      expect(terminalSafe(safe)).toBe(safe);
    }
  });

  it('property: JSON made inert still parses to the same value, with no raw DEL, C1 or bidi control', () => {
    const random = seededRandom(7);
    for (let i = 0; i < 500; i++) {
      const value = { message: randomText(random), list: [randomText(random)], [randomText(random)]: 1 };
      const json = jsonTerminalSafe(JSON.stringify(value, null, 2));
      expect(json).not.toMatch(UNSAFE);
      expect(JSON.parse(json)).toEqual(value);
    }
  });
});
