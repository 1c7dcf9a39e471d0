/** Shared fixtures of the redaction tests: seeded randomness, token shapes, leak scanning. */
import { compileRedaction } from '../../src/core/redaction/compile.js';
import type { CompiledRedaction } from '../../src/core/redaction/compile.js';
import { StreamRedactor } from '../../src/core/redaction/stream-redactor.js';

export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const UPPER = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';
export const LOWER = 'abcdefghijklmnopqrstuvwxyz';
export const DIGITS = '0123456789';
export const ALNUM = UPPER + LOWER + DIGITS;

export function randomString(random: () => number, alphabet: string, length: number): string {
  let out = '';
  for (let i = 0; i < length; i++) out += alphabet.charAt(Math.floor(random() * alphabet.length));
  return out;
}

/** A random body that surely holds an upper-case letter and a digit. */
export function randomKeyBody(random: () => number, alphabet: string, length: number): string {
  return 'Q7' + randomString(random, alphabet, length - 2);
}

export function pemBlock(random: () => number, label = 'RSA PRIVATE KEY', lines = 20): string {
  const body = Array.from({ length: lines }, () => randomString(random, ALNUM + '+/', 64));
  return [`-----BEGIN ${label}-----`, ...body, `-----END ${label}-----`].join('\n');
}

/** Text as the stream sees it: one latin1 char per UTF-8 byte. */
export function asBytes(text: string): string {
  return Buffer.from(text, 'utf8').toString('latin1');
}

/** Runs `chunks` through a fresh redactor (push each, then end). */
export function redactChunks(compiled: CompiledRedaction, chunks: readonly string[]): string {
  const redactor = new StreamRedactor(compiled);
  let out = '';
  for (const chunk of chunks) out += redactor.push(chunk);
  return out + redactor.end();
}

export function splitAt(text: string, ...positions: number[]): string[] {
  const cuts = [0, ...positions, text.length];
  return cuts.slice(1).map((cut, i) => text.slice(cuts[i], cut));
}

export function randomChunks(random: () => number, text: string, maxChunk: number): string[] {
  const chunks: string[] = [];
  for (let i = 0; i < text.length;) {
    const size = 1 + Math.floor(random() * maxChunk);
    chunks.push(text.slice(i, i + size));
    i += size;
  }
  return chunks;
}

/** Every 8-char window of each form (the whole form when shorter) that appears in `output`. */
export function leakedWindows(output: string, forms: readonly string[], width = 8): string[] {
  const leaks: string[] = [];
  for (const form of forms) {
    if (form.length <= width) {
      if (output.includes(form)) leaks.push(form);
      continue;
    }
    for (let i = 0; i + width <= form.length; i++) {
      const window = form.slice(i, i + width);
      if (output.includes(window)) leaks.push(window);
    }
  }
  return leaks;
}

/**
 * Base64 chars that depend only on the secret when it sits at `offset` (0..2) in a triple,
 * found without the production formula: encode with two different neighbours, keep what agrees.
 */
export function stableBase64(secret: string, offset: number): string {
  const bytes = Buffer.from(secret, 'utf8');
  const encode = (fill: number) =>
    Buffer.concat([Buffer.alloc(offset, fill), bytes, Buffer.alloc(3, fill)]).toString('base64');
  const a = encode(0x00);
  const b = encode(0xff);
  let start = 0;
  while (a[start] !== b[start]) start++;
  let end = start;
  while (end < a.length && a[end] === b[end]) end++;
  return a.slice(start, end);
}

export function compileBytes(secrets: readonly string[]): CompiledRedaction {
  return compileRedaction(secrets, 'latin1-bytes');
}
