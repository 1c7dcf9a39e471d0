import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { createRedactStream } from '../../src/adapters/redact-stream.js';
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

/**
 * Every secret form at every split position and in 1-byte chunks: the output is the same as
 * for the whole text, equals the expected masking, and holds no 8-char window of any form.
 */
const random = seededRandom(20240611);
const PLAIN = 'Tr0ub4dor&3 "correct"/horse+battery?staple\\x';
const UNICODE = 'pässwörd-🔑-geheimnis-1234';
const SECRETS = [PLAIN, UNICODE];
const compiled = compileBytes(SECRETS);

function base64Case(secret: string, offset: number) {
  const before = Buffer.from('ab'.slice(0, offset) + 'xyz'.repeat(offset));
  const bytes = Buffer.concat([before, Buffer.from(secret, 'utf8'), Buffer.from('!tail')]);
  const encoded = bytes.toString('base64');
  const stable = stableBase64(secret, before.length % 3);
  // Every char that carries a bit of the value is masked, the edge chars too (issue 40).
  const from = Math.floor((8 * before.length) / 6);
  const to = Math.ceil((8 * (before.length + Buffer.byteLength(secret))) / 6);
  return {
    name: `base64 at byte offset ${before.length % 3} of ${JSON.stringify(secret)}`,
    text: `payload=${encoded}\n`,
    expected: `payload=${encoded.slice(0, from)}[REDACTED]${encoded.slice(to)}\n`,
    forms: [stable],
  };
}

function literalCases(secret: string) {
  const json = JSON.stringify(secret).slice(1, -1);
  const url = encodeURIComponent(secret);
  return [
    {
      name: `raw ${secret}`,
      text: `db password is ${secret} ok\n`,
      expected: 'db password is [REDACTED] ok\n',
      forms: [secret],
    },
    {
      name: `url ${secret}`,
      text: `GET /cb?k=${url}&x=1\n`,
      expected: 'GET /cb?k=[REDACTED]&x=1\n',
      forms: [url],
    },
    {
      name: `json ${secret}`,
      text: `{"pw":"${json}","n":1}\n`,
      expected: '{"pw":"[REDACTED]","n":1}\n',
      forms: [json],
    },
    ...[0, 1, 2].map((offset) => base64Case(secret, offset)),
  ];
}

const openai = 'sk-proj-' + randomKeyBody(random, ALNUM + '_-', 60);
const openaiLegacy = 'sk-' + randomKeyBody(random, ALNUM, 48);
const ghp = 'ghp_' + randomString(random, ALNUM, 36);
const githubPat = 'github_pat_' + randomString(random, ALNUM, 22) + '_' + randomString(random, ALNUM, 59);
const akia = 'AKIA' + randomString(random, UPPER + DIGITS, 16);
const asia = 'ASIA' + randomString(random, UPPER + DIGITS, 16);
const slack = `xoxb-${randomString(random, DIGITS, 12)}-${randomString(random, DIGITS, 13)}-${randomString(random, LOWER + DIGITS, 24)}`;
const basic = Buffer.from('admin:' + randomString(random, ALNUM, 20)).toString('base64');
const jwt = `eyJ${randomString(random, ALNUM, 30)}.eyJ${randomString(random, ALNUM, 40)}.${randomString(random, ALNUM + '-_', 43)}`;
const pem = pemBlock(random);
const pemBody = pem.split('\n').slice(1, -1);

const detectorCases = [
  {
    name: 'openai sk-proj',
    text: `OPENAI_API_KEY=${openai}\n`,
    expected: 'OPENAI_API_KEY=[REDACTED:openai]\n',
    forms: [openai.slice(8)],
  },
  {
    name: 'openai legacy',
    text: `key "${openaiLegacy}" used\n`,
    expected: 'key "[REDACTED:openai]" used\n',
    forms: [openaiLegacy],
  },
  { name: 'github ghp', text: `token ${ghp}.\n`, expected: 'token [REDACTED:github].\n', forms: [ghp] },
  {
    name: 'github pat',
    text: `GH=${githubPat}\n`,
    expected: 'GH=[REDACTED:github]\n',
    forms: [githubPat.slice(11)],
  },
  {
    name: 'aws AKIA',
    text: `aws_access_key_id = ${akia}\n`,
    expected: 'aws_access_key_id = [REDACTED:aws]\n',
    forms: [akia],
  },
  { name: 'aws ASIA', text: `key:${asia} end`, expected: 'key:[REDACTED:aws] end', forms: [asia] },
  { name: 'slack', text: `slack ${slack}\n`, expected: 'slack [REDACTED:slack]\n', forms: [slack.slice(5)] },
  {
    name: 'authorization header',
    text: `> Authorization: Basic ${basic}\r\n> Host: x\r\n`,
    expected: '> Authorization: [REDACTED:authorization]\r\n> Host: x\r\n',
    forms: [basic],
  },
  {
    name: 'authorization in JSON',
    text: `{"headers":{"authorization":"Token ${basic}"},"n":1}\n`,
    expected: '{"headers":{"authorization":"[REDACTED:authorization]"},"n":1}\n',
    forms: [basic],
  },
  {
    name: 'bearer',
    text: `curl -H 'x: Bearer ${jwt}' url\n`,
    expected: "curl -H 'x: Bearer [REDACTED:bearer]' url\n",
    forms: [jwt],
  },
  {
    name: 'PEM block',
    text: `key follows\n${pem}\nafter\n`,
    expected: 'key follows\n[REDACTED:private_key]\nafter\n',
    forms: pemBody,
  },
  {
    name: 'PEM block in a JSON string',
    text: `{"k":${JSON.stringify(pem)}}\n`,
    expected: '{"k":"[REDACTED:private_key]"}\n',
    forms: pemBody,
  },
];

const cases = [...SECRETS.flatMap(literalCases), ...detectorCases].map((c) => ({
  ...c,
  text: asBytes(c.text),
  expected: asBytes(c.expected),
  forms: c.forms.map(asBytes),
}));

/** Every secret and every encoded form of the cases: no output may hold 8 chars of any. */
const ALL_FORMS = [...SECRETS.map(asBytes), ...cases.flatMap((c) => c.forms)];

async function streamBytewise(text: string): Promise<string> {
  const out: Buffer[] = [];
  const bytes = [...text].map((ch) => Buffer.from(ch, 'latin1'));
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      out.push(chunk);
      callback();
    },
  });
  await pipeline(Readable.from(bytes), createRedactStream(SECRETS), sink);
  return Buffer.concat(out).toString('latin1');
}

describe('redaction at every split position', () => {
  it.each(cases)('$name', ({ text, expected, forms }) => {
    expect(forms.every((form) => text.includes(form))).toBe(true);
    expect(redactChunks(compiled, [text])).toBe(expected);
    for (let cut = 1; cut < text.length; cut++) {
      const out = redactChunks(compiled, splitAt(text, cut));
      if (out !== expected) expect({ cut, out }).toEqual({ cut, out: expected });
    }
    const bytewise = redactChunks(compiled, [...text]);
    expect(bytewise).toBe(expected);
    expect(leakedWindows(bytewise, ALL_FORMS)).toEqual([]);
  });

  it('through createRedactStream in 1-byte writes, every case', async () => {
    for (const { text, expected } of cases) expect(await streamBytewise(text)).toBe(expected);
  });

  it('also at every pair of split positions for short texts', () => {
    for (const { text, expected } of cases.filter((c) => c.text.length < 120)) {
      for (let a = 1; a < text.length; a++) {
        for (let b = a + 1; b < text.length; b++) {
          const out = redactChunks(compiled, splitAt(text, a, b));
          if (out !== expected) expect({ text, a, b, out }).toEqual({ text, a, b, out: expected });
        }
      }
    }
  });

  it('masks a random mix of everything under random chunkings, identically', () => {
    const fragments = [
      ...cases.map((c) => c.text),
      'plain words ',
      'task-123 ',
      'skeleton ',
      '\n',
      asBytes('Grüße 日本 '),
      'sk-',
      'AKIA',
    ];
    const forms = ALL_FORMS;
    const mix = seededRandom(7);
    for (let round = 0; round < 60; round++) {
      const parts = Array.from({ length: 8 }, () => fragments[Math.floor(mix() * fragments.length)] ?? '');
      const text = parts.join(mix() < 0.5 ? ' ' : '\n');
      const whole = redactChunks(compiled, [text]);
      expect(redactChunks(compiled, randomChunks(mix, text, 1 + Math.floor(mix() * 40)))).toBe(whole);
      expect(leakedWindows(whole, forms)).toEqual([]);
    }
  });
});
