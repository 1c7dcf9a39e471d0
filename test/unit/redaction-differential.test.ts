/**
 * Differential test of the streaming redactor against the one-shot one (issue 26): a log of ordinary lines
 * (near misses of every keyword, multi-byte UTF-8) with every secret form and every token shape embedded, cut
 * where a scanner that skips ahead could go wrong — right before a secret, right after its first byte (the anchor
 * byte last in its chunk), right before its last byte, inside every multi-byte character, after every byte that can
 * begin a keyword — and at random sizes up to past the stream's 64 KiB batch. Every chunking, through
 * `StreamRedactor` and through `createRedactStream` (Buffers, as the log path writes them), gives exactly what
 * `redactOnce` gives for the whole log, and `redactText` gives the same for the log as a JS string.
 */
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { createRedactStream } from '../../src/adapters/redact-stream.js';
import { compileRedaction } from '../../src/core/redaction/compile.js';
import { redactOnce } from '../../src/core/redaction/redact-once.js';
import { redactText } from '../../src/core/redaction/redact-text.js';
import {
  ALNUM,
  DIGITS,
  LOWER,
  UPPER,
  asBytes,
  compileBytes,
  leakedWindows,
  pemBlock,
  randomChunks,
  randomKeyBody,
  randomString,
  redactChunks,
  seededRandom,
  splitAt,
  stableBase64,
} from './redaction.fixtures.js';

const SECRETS = ['sk-live-Q7vJx2mB9kLp4RtY', 'Tr0ub4dor&3 "x"/日本🎉'];
const random = seededRandom(2026_12_04);
const latin1 = (b: Buffer) => b.toString('latin1');

/** Each secret in its forms, written with Buffer/JSON/URL APIs (not the production encoders). */
function secretItems(secret: string): { bytes: string; needle: string }[] {
  const utf8 = Buffer.from(secret, 'utf8');
  const raw = latin1(utf8);
  const json = asBytes(JSON.stringify(secret).slice(1, -1));
  const items = [
    { bytes: `pw=${raw};`, needle: raw },
    { bytes: `q=${encodeURIComponent(secret)}&`, needle: encodeURIComponent(secret) },
    { bytes: `{"k":"${json}"}`, needle: json },
    { bytes: `h=${utf8.toString('hex')}.`, needle: utf8.toString('hex') },
    { bytes: `H=${utf8.toString('hex').toUpperCase()}.`, needle: utf8.toString('hex').toUpperCase() },
    { bytes: `w=${latin1(Buffer.from(secret, 'utf16le'))}!`, needle: latin1(Buffer.from(secret, 'utf16le')) },
  ];
  for (const k of [0, 1, 2]) {
    const payload = Buffer.concat([Buffer.from('xyz').subarray(0, k), utf8, Buffer.from('!')]);
    const stable = stableBase64(secret, k);
    items.push(
      { bytes: `b64=${payload.toString('base64')} `, needle: stable },
      {
        bytes: `u=${payload.toString('base64url')}&`,
        needle: stable.replace(/\+/g, '-').replace(/\//g, '_'),
      },
    );
  }
  return items;
}

/** Token shapes: [text before, secret part that must not survive, text after]. */
const tokenItems = (
  [
    ['OPENAI_API_KEY=sk-proj-', randomKeyBody(random, ALNUM + '_-', 60), ''],
    ['key sk-', randomKeyBody(random, ALNUM, 48), ' used'],
    ['token ghp_', randomString(random, ALNUM, 36), '.'],
    ['GH=github_pat_', `${randomString(random, ALNUM, 22)}_${randomString(random, ALNUM, 59)}`, ''],
    ['aws_access_key_id = AKIA', randomString(random, UPPER + DIGITS, 16), ''],
    ['key:ASIA', randomString(random, UPPER + DIGITS, 16), ' end'],
    ['slack xoxb-', `${randomString(random, DIGITS, 12)}-${randomString(random, LOWER + DIGITS, 24)}`, ''],
    [
      '> Authorization: Basic ',
      Buffer.from('admin:' + randomString(random, ALNUM, 20)).toString('base64'),
      '\r',
    ],
    [
      "curl -H 'x: BeArEr ",
      `eyJ${randomString(random, ALNUM, 30)}.eyJ${randomString(random, ALNUM, 40)}`,
      "' url",
    ],
    ['', pemBlock(random), ''],
  ] as const
).map(([before, secret, after]) => ({ bytes: `${before}${secret}${after}`, needle: secret }));

const ITEMS = [...SECRETS.flatMap(secretItems), ...tokenItems];

/** Ordinary lines, each holding a near miss of some keyword or a multi-byte char. */
const FILLER = [
  'roboguide-log-line 0123456789abcdefghijklmnopqrstuvwxyz ABCDEFG',
  'task-123 skeleton ask- ghost_ github gh_ AKIAX ASIAN xoxo- ----- BEGIN',
  'bearer authentication bearer\tword Authorization (none) authorizations',
  asBytes('Grüße 日本 🎉 café — naïve'),
  'sk- alone, ghp_ short, AKIA123, xoxb-1 tiny',
  'a plain sentence with s x g b a A - in it',
];

interface Log {
  readonly text: string;
  /** [start, end) of every embedded item. */
  readonly spans: readonly (readonly [number, number])[];
}

function buildLog(lines: number, items: readonly { bytes: string; needle: string }[]): Log {
  let text = '';
  const spans: [number, number][] = [];
  for (let i = 0; i < lines; i++) {
    if (random() < 0.08) {
      const item = items[Math.floor(random() * items.length)]!;
      spans.push([text.length, text.length + item.bytes.length]);
      text += item.bytes;
    } else {
      text += FILLER[Math.floor(random() * FILLER.length)]!;
    }
    text += '\n';
  }
  // Every item at least once, and a raw secret as the very end of the log.
  for (const item of items) {
    spans.push([text.length, text.length + item.bytes.length]);
    text += `${item.bytes}\n`;
  }
  const last = items[0]!;
  spans.push([text.length, text.length + last.needle.length]);
  text += last.needle;
  return { text, spans };
}

const LOG = buildLog(3000, ITEMS);
const compiled = compileBytes(SECRETS);
const expected = redactOnce(compiled, LOG.text);
const KEYWORD_FIRST = new Set('sSxXgGbBaA-'.split(''));

function cutsAt(positions: Iterable<number>): string[] {
  const sorted = [...new Set(positions)].filter((p) => p > 0 && p < LOG.text.length).sort((a, b) => a - b);
  return splitAt(LOG.text, ...sorted);
}

const CHUNKINGS: Record<string, () => string[]> = {
  'right before every item': () => cutsAt(LOG.spans.map(([s]) => s)),
  "after every item's first byte (the anchor last in its chunk)": () => cutsAt(LOG.spans.map(([s]) => s + 1)),
  "before every item's last byte and right after it": () => cutsAt(LOG.spans.flatMap(([, e]) => [e - 1, e])),
  'inside every multi-byte UTF-8 character': () =>
    cutsAt(
      [...LOG.text].flatMap((ch, i) => (ch.charCodeAt(0) >= 0x80 && ch.charCodeAt(0) < 0xc0 ? [i] : [])),
    ),
  'after every byte that can begin a keyword': () =>
    cutsAt([...LOG.text].flatMap((ch, i) => (KEYWORD_FIRST.has(ch) ? [i + 1] : []))),
  'random sizes up to 70 000 bytes': () => randomChunks(seededRandom(11), LOG.text, 70_000),
  'random sizes up to 300 bytes': () => randomChunks(seededRandom(12), LOG.text, 300),
};

async function throughStream(chunks: readonly string[]): Promise<string> {
  const out: Buffer[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      out.push(chunk);
      callback();
    },
  });
  const source = Readable.from(chunks.map((c) => Buffer.from(c, 'latin1')));
  await pipeline(source, createRedactStream(SECRETS, { idleFlushMs: 0 }), sink);
  return Buffer.concat(out).toString('latin1');
}

describe('streaming redaction equals one-shot redaction', () => {
  it('the one-shot result masks every embedded item (the reference is sound)', () => {
    expect(LOG.text.length).toBeGreaterThan(150_000);
    expect(LOG.spans.length).toBeGreaterThan(ITEMS.length);
    expect(
      leakedWindows(
        expected,
        ITEMS.map((i) => i.needle),
      ),
    ).toEqual([]);
    expect(expected.endsWith('[REDACTED]')).toBe(true);
  });

  it.each(Object.keys(CHUNKINGS))('cut %s: StreamRedactor and createRedactStream', async (name) => {
    const chunks = CHUNKINGS[name]!();
    expect(chunks.join('')).toBe(LOG.text);
    expect(chunks.length).toBeGreaterThan(1);
    expect(redactChunks(compiled, chunks)).toBe(expected);
    expect(await throughStream(chunks)).toBe(expected);
  });

  it('redactText on a log of valid UTF-8 (the UTF-16 forms left out) as a JS string gives the same, decoded', () => {
    const valid = (bytes: string) =>
      Buffer.from(Buffer.from(bytes, 'latin1').toString('utf8'), 'utf8').toString('latin1') === bytes;
    const items = ITEMS.filter((item) => valid(item.bytes));
    expect(items.length).toBe(ITEMS.length - 1); // the UTF-16 of the non-ASCII secret
    const log = buildLog(1000, items).text;
    expect(valid(log)).toBe(true);
    const asString = Buffer.from(log, 'latin1').toString('utf8');
    const bytewise = Buffer.from(redactOnce(compiled, log), 'latin1').toString('utf8');
    expect(redactText(asString, SECRETS)).toBe(bytewise);
    expect(redactOnce(compileRedaction(SECRETS, 'text'), asString)).toBe(bytewise);
    expect(redactChunks(compiled, randomChunks(seededRandom(13), log, 5000))).toBe(redactOnce(compiled, log));
  });
});
