/**
 * Every form a leak could take, as the redaction rules list them (src/core/redaction/secret-forms.ts): raw; percent
 * (every byte escaped, upper and lower hex); JSON (quoted escapes, every character as \uXXXX); hex (both cases);
 * base64 at 3 alignments (std and url-safe, and MIME-wrapped at 64/76 columns); UTF-16 LE and BE. Then 12-character
 * windows of each (a leak of part of the value counts).
 */
export function leakForms(secret: string): string[] {
  const bytes = Buffer.from(secret);
  const pct = (upper: boolean): string =>
    [...bytes]
      .map((b) => `%${b.toString(16).padStart(2, '0')[upper ? 'toUpperCase' : 'toLowerCase']()}`)
      .join('');
  const forms = [
    secret,
    encodeURIComponent(secret),
    pct(true),
    pct(false),
    JSON.stringify(secret).slice(1, -1),
    [...secret].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join(''),
    bytes.toString('hex'),
    bytes.toString('hex').toUpperCase(),
    Buffer.from(secret, 'utf16le').toString('latin1'),
    Buffer.from(secret, 'utf16le').swap16().toString('latin1'),
  ];
  for (let k = 0; k < 3; k += 1) {
    const b64 = Buffer.from('x'.repeat(k) + secret).toString('base64');
    const inner = b64.slice(Math.ceil((8 * k) / 6), Math.floor((8 * (k + secret.length)) / 6));
    forms.push(inner, inner.replaceAll('+', '-').replaceAll('/', '_'));
  }
  const windows = new Set<string>();
  for (const f of forms) {
    if (f.length <= 12) windows.add(f);
    else for (let i = 0; i + 12 <= f.length; i += 1) windows.add(f.slice(i, i + 12));
  }
  return [...windows];
}
