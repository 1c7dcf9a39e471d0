/**
 * The literal forms under which a resolved secret value can appear in output: raw, base64 in
 * the three byte alignments, URL-encoded, JSON-escaped (also with `\uXXXX` for non-ASCII, as
 * Python's json.dumps writes it).
 *
 * Secrets shorter than MIN_SECRET_LENGTH chars are ignored for value matching: masking every
 * `abc` in a log would destroy it and protect nothing.
 */
export const MIN_SECRET_LENGTH = 4;

/**
 * `latin1-bytes`: text is a latin1 string holding raw bytes (one char per byte), as streams
 * are scanned. `text`: ordinary JS strings (log lines, error messages).
 */
export type TextMode = 'latin1-bytes' | 'text';

export function utf8AsLatin1(text: string): string {
  const bytes = new TextEncoder().encode(text);
  let out = '';
  for (const byte of bytes) out += String.fromCharCode(byte);
  return out;
}

/**
 * For `bytes` at offset k (0, 1, 2) inside a base64 triple, the output chars whose 6 bits all
 * come from `bytes` do not depend on the neighbours: that inner substring is what appears.
 */
export function base64Alignments(bytesLatin1: string): string[] {
  const n = bytesLatin1.length;
  const forms: string[] = [];
  for (let k = 0; k < 3; k++) {
    const encoded = btoa('\0'.repeat(k) + bytesLatin1);
    const first = Math.ceil((8 * k) / 6);
    const last = Math.floor((8 * (k + n)) / 6);
    forms.push(encoded.slice(first, last));
  }
  return forms;
}

function jsonInner(secret: string): string {
  return JSON.stringify(secret).slice(1, -1);
}

function jsonAsciiInner(secret: string): string {
  return jsonInner(secret).replace(
    /[^\x20-\x7e]/g,
    (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

function urlEncoded(secret: string): string | undefined {
  try {
    return encodeURIComponent(secret);
  } catch {
    return undefined; // lone surrogate: cannot be URL-encoded, so it cannot appear that way
  }
}

export function secretForms(secret: string, mode: TextMode): string[] {
  if (secret.length < MIN_SECRET_LENGTH) return [];
  const native = (text: string) => (mode === 'latin1-bytes' ? utf8AsLatin1(text) : text);
  const forms = [
    native(secret),
    ...base64Alignments(utf8AsLatin1(secret)),
    urlEncoded(secret),
    // Percent-encoding hex digits are case-insensitive (RFC 3986 §2.1): encoders emit either case.
    urlEncoded(secret)?.replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase()),
    native(jsonInner(secret)),
    // Some JSON encoders (PHP's json_encode by default) escape '/' as '\/'.
    native(jsonInner(secret).replace(/\//g, '\\/')),
    jsonAsciiInner(secret),
  ];
  return forms.filter((form): form is string => form !== undefined && form.length >= MIN_SECRET_LENGTH);
}

/** Every form of every secret, deduplicated, longest first. */
export function literalsOf(secrets: readonly string[], mode: TextMode): string[] {
  const all = new Set<string>();
  for (const secret of secrets) for (const form of secretForms(secret, mode)) all.add(form);
  return [...all].sort((a, b) => b.length - a.length);
}
