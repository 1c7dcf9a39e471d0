/**
 * The forms under which a resolved secret value can appear in output, as byte patterns with
 * per-position alternatives (so one pattern stands for every mix of escaped and plain bytes):
 *
 * - `percent`: each UTF-8 byte as itself or `%XX` (hex digits in either case); a space also as
 *   `+`. With no byte escaped this is the raw value.
 * - `json`: each character as itself (unless JSON forbids it), its short escape (`\"`, `\\`,
 *   `\/`, `\b`, `\f`, `\n`, `\r`, `\t`) or `\uXXXX` (either case; astral characters as a
 *   surrogate pair) — what any JSON encoder writes, Go's HTML-safe `\u003c` included.
 * - `hex`: the UTF-8 bytes as hex digits, either case.
 * - `base64`: the chars that depend only on the value, at each of the 3 byte alignments;
 *   standard or url-safe alphabet (`+`/`-`, `/`/`_`); a line break (LF or CRLF) may sit between
 *   any two chars (MIME wrapping at 64 or 76 columns; a break right after the first char is
 *   matched by the form without that char: 6 bits stay visible). Padding lies outside these chars.
 * - `utf16le`/`utf16be`: the UTF-16 code units as raw bytes.
 *
 * Patterns are over bytes (codes 0..255); text is matched as its UTF-8 bytes.
 */

/** Bytes accepted at one position: one code, or two (the two cases of a letter, `+`/`-`, `/`/`_`). */
export type ByteSet = readonly number[];
/** One way to write a unit: a sequence of positions. */
export type Alternative = readonly ByteSet[];
/** One character or byte of the value, with every way to write it. */
export type Unit = readonly Alternative[];

export type FormKind = 'percent' | 'json' | 'hex' | 'base64' | 'utf16le' | 'utf16be';

export interface SecretForm {
  readonly kind: FormKind;
  readonly units: readonly Unit[];
  /**
   * A line break (LF or CRLF) may sit between two units, except right after the first: a match
   * never starts with a char and a line break (so a line's last char is not held back), and a
   * break there is covered by the same form without its first char.
   */
  readonly lineBreaks: boolean;
}

/**
 * An encoded form shorter than this is not matched (masking every `YW` in a log protects nothing):
 * values this short are masked only as themselves (`percent`, `json`) and as UTF-16.
 */
export const MIN_ENCODED_FORM_LENGTH = 4;

export function utf8Bytes(text: string): number[] {
  return [...new TextEncoder().encode(text)];
}

/** Text as byte streams are scanned: one latin1 char per UTF-8 byte. */
export function utf8AsLatin1(text: string): string {
  let out = '';
  for (const byte of new TextEncoder().encode(text)) out += String.fromCharCode(byte);
  return out;
}

const code = (ch: string): number => ch.charCodeAt(0);
const HEX = '0123456789abcdef';

/** A hex digit in either case. */
function hexDigit(value: number): ByteSet {
  const lower = HEX.charAt(value);
  const upper = lower.toUpperCase();
  return lower === upper ? [code(lower)] : [code(lower), code(upper)];
}

function hexByte(byte: number): ByteSet[] {
  return [hexDigit(byte >> 4), hexDigit(byte & 15)];
}

function literal(text: string): ByteSet[] {
  return [...text].map((ch) => [code(ch)]);
}

function percentForm(bytes: readonly number[]): SecretForm {
  const units = bytes.map((byte): Unit => {
    const alternatives: Alternative[] = [[[byte]], [[code('%')], ...hexByte(byte)]];
    if (byte === 0x20) alternatives.push([[code('+')]]);
    return alternatives;
  });
  return { kind: 'percent', units, lineBreaks: false };
}

const SHORT_ESCAPES: Readonly<Record<number, string>> = {
  0x22: '\\"',
  0x5c: '\\\\',
  0x2f: '\\/',
  0x08: '\\b',
  0x0c: '\\f',
  0x0a: '\\n',
  0x0d: '\\r',
  0x09: '\\t',
};

function unicodeEscape(codeUnit: number): ByteSet[] {
  return [[code('\\')], [code('u')], ...[12, 8, 4, 0].map((shift) => hexDigit((codeUnit >> shift) & 15))];
}

function jsonForm(secret: string): SecretForm {
  const units: Unit[] = [];
  for (const ch of secret) {
    const point = ch.codePointAt(0) ?? 0;
    const alternatives: Alternative[] = [];
    if (point >= 0x20 && point !== 0x22 && point !== 0x5c) alternatives.push(utf8Bytes(ch).map((b) => [b]));
    const short = SHORT_ESCAPES[point];
    if (short !== undefined) alternatives.push(literal(short));
    const escaped: ByteSet[] = [];
    for (let i = 0; i < ch.length; i++) escaped.push(...unicodeEscape(ch.charCodeAt(i)));
    alternatives.push(escaped);
    units.push(alternatives);
  }
  return { kind: 'json', units, lineBreaks: false };
}

function hexForm(bytes: readonly number[]): SecretForm {
  return { kind: 'hex', units: bytes.map((byte) => [hexByte(byte)]), lineBreaks: false };
}

const BASE64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const URL_SAFE: Readonly<Record<string, string>> = { '+': '-', '/': '_' };

function base64(bytes: readonly number[]): string {
  let out = '';
  for (let i = 0; i < bytes.length; i += 3) {
    const triple = ((bytes[i] ?? 0) << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
    for (let k = 0; k < 4; k++) out += BASE64.charAt((triple >> (18 - 6 * k)) & 63);
  }
  return out;
}

/**
 * For the value at byte offset k (0, 1, 2) inside a base64 triple, the output chars whose 6 bits
 * all come from the value do not depend on its neighbours: that inner substring is what appears.
 */
export function base64Alignments(bytes: readonly number[]): string[] {
  const n = bytes.length;
  const forms: string[] = [];
  for (let k = 0; k < 3; k++) {
    const encoded = base64([...new Array<number>(k).fill(0), ...bytes]);
    forms.push(encoded.slice(Math.ceil((8 * k) / 6), Math.floor((8 * (k + n)) / 6)));
  }
  return forms;
}

function base64Form(inner: string): SecretForm {
  const units = [...inner].map((ch): Unit => {
    const safe = URL_SAFE[ch];
    return [[safe === undefined ? [code(ch)] : [code(ch), code(safe)]]];
  });
  return { kind: 'base64', units, lineBreaks: true };
}

function utf16Form(secret: string, littleEndian: boolean): SecretForm {
  const units: Unit[] = [];
  for (let i = 0; i < secret.length; i++) {
    const unit = secret.charCodeAt(i);
    const [first, second] = littleEndian ? [unit & 0xff, unit >> 8] : [unit >> 8, unit & 0xff];
    units.push([[[first]]], [[[second]]]);
  }
  return { kind: littleEndian ? 'utf16le' : 'utf16be', units, lineBreaks: false };
}

/** Fewest bytes a form can match. */
export function minLength(form: SecretForm): number {
  let total = 0;
  for (const unit of form.units) total += Math.min(...unit.map((alternative) => alternative.length));
  return total;
}

const ALWAYS_KEPT: ReadonlySet<FormKind> = new Set(['percent', 'json', 'utf16le', 'utf16be']);

/** Every form of one value; an empty value has none. */
export function secretForms(secret: string): SecretForm[] {
  if (secret.length === 0) return [];
  const bytes = utf8Bytes(secret);
  const forms = [
    percentForm(bytes),
    jsonForm(secret),
    hexForm(bytes),
    // Without its first char too: MIME wrapping may break the line right after it.
    ...base64Alignments(bytes).flatMap((inner) => [base64Form(inner), base64Form(inner.slice(1))]),
    utf16Form(secret, true),
    utf16Form(secret, false),
  ];
  return forms.filter((form) => ALWAYS_KEPT.has(form.kind) || minLength(form) >= MIN_ENCODED_FORM_LENGTH);
}
