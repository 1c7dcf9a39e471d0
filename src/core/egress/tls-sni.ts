/**
 * The server name a TLS client asks for, read from its first record (the ClientHello), without decrypting anything:
 * what the egress proxy compares with the host a `CONNECT` named. Pure.
 */

export type ClientHelloRead =
  /** More bytes are needed to tell (the record is not complete yet). */
  | { readonly state: 'incomplete' }
  /** Not a TLS handshake, or a malformed one. */
  | { readonly state: 'not_tls' }
  /** A ClientHello; `sni` null when it names no server. */
  | { readonly state: 'hello'; readonly sni: string | null };

/** The largest first record we wait for (a ClientHello with post-quantum key shares is under 2 KiB; TLS caps records at 16 KiB + 5). */
export const MAX_HELLO_BYTES = 16_389;

export function readClientHello(bytes: Uint8Array): ClientHelloRead {
  if (bytes.length < 5)
    return bytes.length > 0 && bytes[0] !== 0x16 ? { state: 'not_tls' } : { state: 'incomplete' };
  if (bytes[0] !== 0x16 || bytes[1] !== 0x03) return { state: 'not_tls' };
  const recordLength = ((bytes[3] ?? 0) << 8) | (bytes[4] ?? 0);
  if (recordLength < 4 || recordLength > MAX_HELLO_BYTES - 5) return { state: 'not_tls' };
  if (bytes.length < 5 + recordLength) return { state: 'incomplete' };
  const b = bytes.subarray(5, 5 + recordLength);
  if (b[0] !== 0x01) return { state: 'not_tls' };
  const helloLength = ((b[1] ?? 0) << 16) | ((b[2] ?? 0) << 8) | (b[3] ?? 0);
  // A ClientHello split over several records is not followed: refused as not readable.
  if (helloLength + 4 > b.length) return { state: 'not_tls' };
  let at = 4 + 2 + 32; // version, random
  const u8 = (i: number): number => b[i] ?? -1;
  const u16 = (i: number): number => (u8(i) << 8) | u8(i + 1);
  if (at >= b.length) return { state: 'not_tls' };
  at += 1 + u8(at); // session id
  if (at + 2 > b.length) return { state: 'not_tls' };
  at += 2 + u16(at); // cipher suites
  if (at >= b.length) return { state: 'not_tls' };
  at += 1 + u8(at); // compression methods
  if (at + 2 > b.length) return { state: 'hello', sni: null };
  const extensionsEnd = at + 2 + u16(at);
  at += 2;
  if (extensionsEnd > b.length) return { state: 'not_tls' };
  let sni: string | null = null;
  let seen = 0;
  while (at + 4 <= extensionsEnd) {
    const type = u16(at);
    const length = u16(at + 2);
    const body = at + 4;
    if (body + length > extensionsEnd) return { state: 'not_tls' };
    if (type === 0) {
      seen += 1;
      // server_name_list: length, then entries of (type, length, name); only host_name (0) counts.
      let p = body + 2;
      const listEnd = body + 2 + u16(body);
      if (listEnd > body + length) return { state: 'not_tls' };
      while (p + 3 <= listEnd) {
        const nameType = u8(p);
        const nameLength = u16(p + 1);
        if (p + 3 + nameLength > listEnd) return { state: 'not_tls' };
        if (nameType === 0) {
          // Two host names in one hello: refused as ambiguous (a server may pick either).
          if (sni !== null) return { state: 'not_tls' };
          sni = Buffer.from(b.subarray(p + 3, p + 3 + nameLength)).toString('latin1');
        }
        p += 3 + nameLength;
      }
    }
    at = body + length;
  }
  if (seen > 1) return { state: 'not_tls' };
  return { state: 'hello', sni };
}
