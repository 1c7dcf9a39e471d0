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
  /**
   * How many units the form has; unit u is `unitAt(u)`, made when asked. A form of a 4 KB secret is thousands of
   * units: a compile takes them one at a time and keeps none, so they die young instead of filling the heap (issue 39:
   * whole forms held at once made the garbage collector's pauses the longest part of a compile).
   */
  readonly unitCount: number;
  readonly unitAt: (u: number) => Unit;
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

const ENCODER = new TextEncoder();

/** How many bytes `text` is in UTF-8. */
export function utf8Length(text: string): number {
  return ENCODER.encode(text).length;
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

/** Every unit of a form, made at once (tests, and what reads a form whole). */
export function unitsOf(form: SecretForm): Unit[] {
  return Array.from({ length: form.unitCount }, (_, u) => form.unitAt(u));
}

function percentForm(bytes: readonly number[]): SecretForm {
  const unitAt = (u: number): Unit => {
    const byte = bytes[u] ?? 0;
    const alternatives: Alternative[] = [[[byte]], [[code('%')], ...hexByte(byte)]];
    if (byte === 0x20) alternatives.push([[code('+')]]);
    return alternatives;
  };
  return { kind: 'percent', unitCount: bytes.length, unitAt, lineBreaks: false };
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
  const chars = [...secret];
  const unitAt = (u: number): Unit => {
    const ch = chars[u] ?? '';
    const point = ch.codePointAt(0) ?? 0;
    const alternatives: Alternative[] = [];
    if (point >= 0x20 && point !== 0x22 && point !== 0x5c) alternatives.push(utf8Bytes(ch).map((b) => [b]));
    const short = SHORT_ESCAPES[point];
    if (short !== undefined) alternatives.push(literal(short));
    const escaped: ByteSet[] = [];
    for (let i = 0; i < ch.length; i++) escaped.push(...unicodeEscape(ch.charCodeAt(i)));
    alternatives.push(escaped);
    return alternatives;
  };
  return { kind: 'json', unitCount: chars.length, unitAt, lineBreaks: false };
}

function hexForm(bytes: readonly number[]): SecretForm {
  const unitAt = (u: number): Unit => [hexByte(bytes[u] ?? 0)];
  return { kind: 'hex', unitCount: bytes.length, unitAt, lineBreaks: false };
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
  // The leading edge, the inner chars (base64 is ASCII: one char a unit), then the trailing edge and its padding.
  const lead = edges.lead === '' ? 0 : 1;
  const required = lead + inner.length;
  const unitAt = (u: number): Unit =>
    u < lead
      ? base64Unit(edges.lead)
      : u < required
        ? base64Unit(inner.charAt(u - lead))
        : u === required
          ? base64Unit(edges.trail)
          : base64Unit('=');
  if (edges.trail === '') return { kind: 'base64', unitCount: required, unitAt, lineBreaks: true };
  const unitCount = required + 1 + edges.padding.length;
  return { kind: 'base64', unitCount, unitAt, lineBreaks: true, optionalFrom: required };
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
  // Two units per UTF-16 code unit: its two bytes in the form's order.
  const unitAt = (u: number): Unit => {
    const unit = secret.charCodeAt(u >> 1);
    const [first, second] = littleEndian ? [unit & 0xff, unit >> 8] : [unit >> 8, unit & 0xff];
    return [[[(u & 1) === 0 ? first : second]]];
  };
  return {
    kind: littleEndian ? 'utf16le' : 'utf16be',
    unitCount: secret.length * 2,
    unitAt,
    lineBreaks: false,
  };
}

/** Fewest bytes a form can match. */
export function minLength(form: SecretForm): number {
  let total = 0;
  for (let u = 0; u < (form.optionalFrom ?? form.unitCount); u++)
    total += Math.min(...form.unitAt(u).map((alternative) => alternative.length));
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
  return [...secretFormsOf(secret)];
}

/** `secretForms`, one form at a time (a compile in steps takes them as it goes: each is some thousands of nodes). */
export function* secretFormsOf(secret: string): Generator<SecretForm, void, void> {
  if (secret.length === 0) return;
  const bytes = utf8Bytes(secret);
  const kept = (form: SecretForm): boolean =>
    ALWAYS_KEPT.has(form.kind) || minLength(form) >= MIN_ENCODED_FORM_LENGTH;
  yield percentForm(bytes);
  yield jsonForm(secret);
  const hex = hexForm(bytes);
  if (kept(hex)) yield hex;
  // Without its first char too: MIME wrapping may break the line right after it.
  const alignments = base64Alignments(bytes);
  for (let k = 0; k < alignments.length; k++)
    for (const form of base64FormsAt(bytes, alignments[k] ?? '', k)) if (kept(form)) yield form;
  yield utf16Form(secret, true);
  yield utf16Form(secret, false);
}
