import { createHash } from 'node:crypto';

/**
 * SHA-256 (lowercase hex) of text or bytes: the one digest of the evidence, for `outcome_sha256` (the bytes kept in
 * the private outcome copy), the proof digest and the frozen manifest.
 */
export function sha256Hex(data: string | Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}
