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
 *   matched by the form without that char: 6 bits stay visible). The edge chars that carry only
 *   some of the value's bits (any char whose value bits match: the rest are the neighbours') are
 *   masked with it, and the padding after a value that ends the data (issue 40: `[REDACTED]Q=`
 *   left a tail that told 2 or 4 bits of the key and its length modulo 3).
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
  /**
   * Units from this index on are optional as a suffix: a match may end after any of them (the
   * edge char and padding of a base64 form). Absent: every unit is required.
   */
  readonly optionalFrom?: number;
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

function base64Unit(chars: string): Unit {
  const codes: number[] = [];
  for (const ch of chars) {
    codes.push(code(ch));
    const safe = URL_SAFE[ch];
    if (safe !== undefined) codes.push(code(safe));
  }
  // A node accepts at most two bytes: one alternative (of one position) per pair of codes.
  const alternatives: Alternative[] = [];
  for (let i = 0; i < codes.length; i += 2) alternatives.push([codes.slice(i, i + 2)]);
  return alternatives;
}

function base64Form(inner: string, edges: Base64Edges = NO_EDGES): SecretForm {
  const units = [
    ...(edges.lead === '' ? [] : [base64Unit(edges.lead)]),
    ...[...inner].map((ch) => base64Unit(ch)),
  ];
  if (edges.trail === '') return { kind: 'base64', units, lineBreaks: true };
  const optionalFrom = units.length;
  units.push(base64Unit(edges.trail), ...[...edges.padding].map(() => base64Unit('=')));
  return { kind: 'base64', units, lineBreaks: true, optionalFrom };
}

/** The chars at the edges of one alignment's encoding that carry some of the value's bits. */
export interface Base64Edges {
  /** Every char the leading edge can be (its high bits are the byte before's); '' when none. */
  readonly lead: string;
  /** Every char the trailing edge can be (its low bits are the byte after's); '' when none. */
  readonly trail: string;
  /** The padding after the trailing edge when the value ends the data. */
  readonly padding: string;
}

const NO_EDGES: Base64Edges = { lead: '', trail: '', padding: '' };

/** Every char whose 6 bits hold `bits` (of `count` bits) at `shift`, any bits elsewhere. */
function charsWith(bits: number, count: number, shift: number): string {
  let out = '';
  for (let free = 0; free < 1 << (6 - count); free++) {
    const high = shift === 0 ? free << count : 0;
    const low = shift === 0 ? 0 : free;
    out += BASE64.charAt(high | (bits << shift) | low);
  }
  return out;
}

export function base64Edges(bytes: readonly number[], k: number): Base64Edges {
  const first = bytes[0] ?? 0;
  const last = bytes[bytes.length - 1] ?? 0;
  const leadBits = (6 - ((8 * k) % 6)) % 6; // value bits in the leading edge char (its low bits)
  const trailBits = (8 * (k + bytes.length)) % 6; // value bits in the trailing edge char (its high bits)
  return {
    lead: leadBits === 0 ? '' : charsWith(first >> (8 - leadBits), leadBits, 0),
    trail: trailBits === 0 ? '' : charsWith(last & ((1 << trailBits) - 1), trailBits, 6 - trailBits),
    padding: trailBits === 2 ? '==' : trailBits === 4 ? '=' : '',
  };
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
  for (const unit of form.units.slice(0, form.optionalFrom ?? form.units.length))
    total += Math.min(...unit.map((alternative) => alternative.length));
  return total;
}

const ALWAYS_KEPT: ReadonlySet<FormKind> = new Set(['percent', 'json', 'utf16le', 'utf16be']);

/**
 * One alignment's forms: the inner chars with the trailing edge and padding optional after them;
 * without the first char too (a MIME break right after it); the leading edge and the inner chars.
 * Overlapping matches merge into one mask. Too short an inner run is not matched at all.
 */
function base64FormsAt(bytes: readonly number[], inner: string, k: number): SecretForm[] {
  if (inner.length < MIN_ENCODED_FORM_LENGTH) return [];
  const edges = base64Edges(bytes, k);
  const tail = { ...edges, lead: '' };
  const forms = [base64Form(inner, tail), base64Form(inner.slice(1), tail)];
  if (edges.lead !== '') forms.push(base64Form(inner, { ...edges, trail: '', padding: '' }));
  return forms.filter((form) => minLength(form) >= MIN_ENCODED_FORM_LENGTH);
}

/** Every form of one value; an empty value has none. */
export function secretForms(secret: string): SecretForm[] {
  if (secret.length === 0) return [];
  const bytes = utf8Bytes(secret);
  const forms = [
    percentForm(bytes),
    jsonForm(secret),
    hexForm(bytes),
    // Without its first char too: MIME wrapping may break the line right after it.
    ...base64Alignments(bytes).flatMap((inner, k) => base64FormsAt(bytes, inner, k)),
    utf16Form(secret, true),
    utf16Form(secret, false),
  ];
  return forms.filter((form) => ALWAYS_KEPT.has(form.kind) || minLength(form) >= MIN_ENCODED_FORM_LENGTH);
}
