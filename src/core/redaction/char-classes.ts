/**
 * ASCII character classes as lookup tables (index = char code, value 1 = member). Codes >= 128
 * are never members: every detector pattern is ASCII, and byte-mode text (latin1) keeps
 * multi-byte UTF-8 out of every class.
 */
export type CharClass = Uint8Array;

function classOf(...ranges: readonly string[]): CharClass {
  const table = new Uint8Array(128);
  for (const range of ranges) {
    if (range.length === 3 && range[1] === '-') {
      for (let code = range.charCodeAt(0); code <= range.charCodeAt(2); code++) table[code] = 1;
    } else {
      for (let i = 0; i < range.length; i++) table[range.charCodeAt(i)] = 1;
    }
  }
  return table;
}

export function inClass(table: CharClass, code: number): boolean {
  return code >= 0 && code < 128 && table[code] === 1;
}

export const ALNUM = classOf('A-Z', 'a-z', '0-9');
export const UPPER_ALNUM = classOf('A-Z', '0-9');
export const WORD = classOf('A-Z', 'a-z', '0-9', '_');
export const TOKEN = classOf('A-Z', 'a-z', '0-9', '_-');
export const SLACK_BODY = classOf('A-Z', 'a-z', '0-9', '-');
/** RFC 6750 b64token plus `=` padding. */
export const BEARER_BODY = classOf('A-Z', 'a-z', '0-9', '-._~+/=');
export const PEM_LABEL = classOf('A-Z', '0-9', ' ');
export const HORIZONTAL_SPACE = classOf(' \t');

export function isDigit(code: number): boolean {
  return code >= 48 && code <= 57;
}

export function isLetter(code: number): boolean {
  return (code >= 65 && code <= 90) || (code >= 97 && code <= 122);
}
