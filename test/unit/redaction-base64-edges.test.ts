/**
 * Issue 40: the base64 form of a secret was masked as `[REDACTED]Q=`: the chars at either end of
 * the encoding that carry only some of the value's bits (and the padding after them) stayed in
 * the output. Property: for random secrets at all three byte alignments, with random bytes (or
 * none) around them, standard and url-safe, padded and not, every char of the encoding that
 * carries a bit of the value is masked, and the padding with it when the value ends the data;
 * the chars made only of the neighbours' bits stay. Through one-shot text, byte streams in
 * chunks of 1, 7 and all, and pino's line hook.
 */
import { describe, expect, it } from 'vitest';
import { compileRedaction } from '../../src/core/redaction/compile.js';
import { redactOnce } from '../../src/core/redaction/redact-once.js';
import { pinoRedactionOptions } from '../../src/adapters/log-redaction.js';
import { ALNUM, randomString, redactChunks, seededRandom } from './redaction.fixtures.js';

const random = seededRandom(40);
const SAFE_NEIGHBOURS = 'abcdefghijklmnopqrstuvwxyz ';

function chunksOf(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

interface Case {
  readonly secret: string;
  readonly encoded: string;
  readonly expected: string;
}

function caseFor(prefixLength: number, suffixLength: number, urlSafe: boolean, padded: boolean): Case {
  const secret = randomString(random, ALNUM + '-_.~', 6 + Math.floor(random() * 30));
  const prefix = randomString(random, SAFE_NEIGHBOURS, prefixLength);
  const suffix = randomString(random, SAFE_NEIGHBOURS, suffixLength);
  const bytes = Buffer.from(prefix + secret + suffix, 'utf8');
  let encoded = bytes.toString(urlSafe ? 'base64url' : 'base64');
  if (urlSafe && padded) encoded += '='.repeat((4 - (encoded.length % 4)) % 4);
  if (!urlSafe && !padded) encoded = encoded.replace(/=+$/, '');
  const head = encoded.slice(0, Math.floor((8 * prefix.length) / 6));
  let tail = encoded.slice(Math.ceil((8 * (prefix.length + secret.length)) / 6));
  if (/^=*$/.test(tail)) tail = '';
  return { secret, encoded, expected: `x ${head}[REDACTED]${tail} y` };
}

const CASES: Case[] = [];
for (let round = 0; round < 20; round++) {
  for (const prefixLength of [0, 1, 2, 3, 4, 5]) {
    for (const suffixLength of [0, 1, 2, 3]) {
      for (const urlSafe of [false, true]) {
        for (const padded of [false, true]) CASES.push(caseFor(prefixLength, suffixLength, urlSafe, padded));
      }
    }
  }
}

describe('base64 form of a secret: no partial tail or head left (issue 40)', () => {
  it('one-shot text: the whole encoded run of the value is masked, padding included', () => {
    const failures: string[] = [];
    for (const c of CASES) {
      const out = redactOnce(compileRedaction([c.secret], 'text'), `x ${c.encoded} y`);
      if (out !== c.expected) failures.push(`${c.encoded} → ${out} (want ${c.expected})`);
    }
    expect(failures.slice(0, 5)).toEqual([]);
  });

  it('byte streams: the same whatever the chunking (1, 7, all at once)', () => {
    const failures: string[] = [];
    for (const c of CASES.slice(0, 400)) {
      const compiled = compileRedaction([c.secret], 'latin1-bytes');
      for (const size of [1, 7, 1 << 20]) {
        const out = redactChunks(compiled, chunksOf(`x ${c.encoded} y`, size));
        if (out !== c.expected) failures.push(`chunks of ${size}: ${c.encoded} → ${out}`);
      }
    }
    expect(failures.slice(0, 5)).toEqual([]);
  });

  it('a log line keeps no tail of the encoded key (the `[REDACTED]Q=` of the report)', () => {
    const secret = 'sk-proj-abcdefghijk'; // 19 bytes: its encoding ends in a partial char and '=='
    const write = pinoRedactionOptions([secret]).hooks.streamWrite as (line: string) => string;
    for (const text of [secret, 'a' + secret, 'ab' + secret]) {
      const line = write(`{"msg":"auth ${Buffer.from(text).toString('base64')}"}`);
      expect(line).toMatch(/"auth [A-Za-z0-9+/]{0,2}\[REDACTED\]"/);
    }
  });
});
