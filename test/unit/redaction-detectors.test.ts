import { describe, expect, it } from 'vitest';
import { compileRedaction } from '../../src/core/redaction/compile.js';
import { redactOnce } from '../../src/core/redaction/redact-once.js';
import { secretForms } from '../../src/core/redaction/secret-forms.js';
import {
  ALNUM,
  DIGITS,
  LOWER,
  UPPER,
  pemBlock,
  randomKeyBody,
  randomString,
  seededRandom,
} from './redaction.fixtures.js';

const random = seededRandom(42);
const detectorsOnly = compileRedaction([], 'text');
const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
const CONTEXTS = [
  (t: string) => t,
  (t: string) => `x ${t} y`,
  (t: string) => `KEY=${t}\n`,
  (t: string) => `"${t}"`,
  (t: string) => `(${t}),`,
];

/** 25 generated positives per shape, each in a random context. */
function generate(make: () => string): string[] {
  return Array.from({ length: 25 }, make);
}

const positives: Record<string, string[]> = {
  openai: [
    ...generate(() => 'sk-' + randomKeyBody(random, ALNUM, 20 + Math.floor(random() * 40))),
    ...generate(() => 'sk-proj-' + randomKeyBody(random, ALNUM + '_-', 40 + Math.floor(random() * 120))),
  ],
  github: [
    ...generate(() => pick(['ghp_', 'gho_', 'ghu_', 'ghs_', 'ghr_']) + randomString(random, ALNUM, 36)),
    ...generate(
      () => 'github_pat_' + randomString(random, ALNUM, 22) + '_' + randomString(random, ALNUM, 59),
    ),
  ],
  aws: generate(() => pick(['AKIA', 'ASIA']) + randomString(random, UPPER + DIGITS, 16)),
  slack: generate(
    () =>
      `${pick(['xoxb', 'xoxa', 'xoxp', 'xoxr', 'xoxs'])}-${randomString(random, DIGITS, 12)}-${randomString(random, LOWER + DIGITS, 24)}`,
  ),
};

describe('token detectors: generated positives', () => {
  it.each(Object.entries(positives))('%s tokens are masked whole, in any context', (kind, tokens) => {
    for (const token of tokens) {
      const wrap = pick(CONTEXTS);
      expect(redactOnce(detectorsOnly, wrap(token))).toBe(wrap(`[REDACTED:${kind}]`));
    }
  });

  it('masks bearer tokens (keyword in any case) but keeps the keyword', () => {
    const tokens = [
      ...generate(() => `eyJ${randomString(random, ALNUM, 20)}.${randomString(random, ALNUM + '-_', 30)}`),
      ...generate(() => randomString(random, '0123456789abcdef', 32)),
      ...generate(() => randomString(random, ALNUM, 24)),
      'abc.defgh',
    ];
    for (const token of tokens) {
      const keyword = pick(['Bearer', 'bearer', 'BEARER']);
      expect(redactOnce(detectorsOnly, `auth ${keyword} ${token}\n`)).toBe(
        `auth ${keyword} [REDACTED:bearer]\n`,
      );
    }
  });

  it.each([
    ['Authorization: Basic dXNlcjpwYXNz\nnext', 'Authorization: [REDACTED:authorization]\nnext'],
    ['authorization=abc123&x=1\r\n', 'authorization=[REDACTED:authorization]\r\n'],
    ['Proxy-Authorization: Negotiate YIIabc\n', 'Proxy-Authorization: [REDACTED:authorization]\n'],
    ["{ authorization: 'Token t0k3n', x: 1 }", "{ authorization: '[REDACTED:authorization]', x: 1 }"],
    [
      '{"msg":"AUTHORIZATION: Digest a=\\"b\\"","level":30}',
      '{"msg":"AUTHORIZATION: [REDACTED:authorization]","level":30}',
    ],
  ])('masks the authorization value of %j', (input, expected) => {
    expect(redactOnce(detectorsOnly, input)).toBe(expected);
  });

  it.each([
    'RSA PRIVATE KEY',
    'PRIVATE KEY',
    'EC PRIVATE KEY',
    'OPENSSH PRIVATE KEY',
    'ENCRYPTED PRIVATE KEY',
  ])('masks a %s block', (label) => {
    const block = pemBlock(random, label, 5);
    expect(redactOnce(detectorsOnly, `a\n${block}\nb`)).toBe('a\n[REDACTED:private_key]\nb');
  });

  it('masks a PEM block without END to the end of the text', () => {
    const block = pemBlock(random, 'PRIVATE KEY', 3).split('\n').slice(0, -1).join('\n');
    expect(redactOnce(detectorsOnly, `a\n${block}\nmore`)).toBe('a\n[REDACTED:private_key]');
  });
});

const hex = (n: number) => randomString(random, '0123456789abcdef', n);
const NEGATIVES = [
  'skeleton',
  'task-123',
  'ghost_',
  'gh_pages branch',
  'risk-assessment-report-2024-ABCDEFGHIJ',
  'desk-Q7ABCDEFGHIJKLMNOPQRSTUV',
  'sk-learn-compatible-estimator-v2-final',
  'sk-Q7short',
  'ghp_' + randomString(random, ALNUM, 20),
  'xghp_' + randomString(random, ALNUM, 36),
  'AKIA' + randomString(random, UPPER + DIGITS, 15) + ' ',
  'AKIA' + randomString(random, UPPER + DIGITS, 17),
  'XAKIA' + randomString(random, UPPER + DIGITS, 16),
  'akia' + randomString(random, UPPER + DIGITS, 16),
  'xoxb-abcdefghijkl',
  'xoxz-123456789012-abcdef',
  'the bearer of bad news',
  'Bearer authentication',
  'Bearer',
  'authorization failed for user',
  'reauthorization: pending',
  'Authorization:\nnext',
  '-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----',
  '-----BEGIN PUBLIC KEY-----\nMIIBpub\n-----END PUBLIC KEY-----',
  '------------------------------',
  `sha1 ${hex(40)} sha256 ${hex(64)}`,
  `commit ${hex(40).toUpperCase()}`,
  `id 123e4567-e89b-12d3-a456-426614174000 ${crypto.randomUUID()}`,
  Buffer.from('hello world, this is not a secret at all').toString('base64'),
  'Grüße aus Köln 日本語 🎉',
];

describe('token detectors: negatives', () => {
  const withSecrets = compileRedaction(['Tr0ub4dor&3-horse', 'w0rd'], 'text');
  it.each(NEGATIVES)('leaves %j unchanged', (text) => {
    expect(redactOnce(detectorsOnly, text)).toBe(text);
    expect(redactOnce(withSecrets, `${text}\n`)).toBe(`${text}\n`);
  });
});

describe('secret values', () => {
  it('ignores an empty value and masks a short one as given (the manifest refuses short values unless allowed)', () => {
    expect(compileRedaction([''], 'text').secretMachine.nodeCount).toBe(0);
    expect(redactOnce(compileRedaction(['', 'abc'], 'text'), 'a abc abcd')).toBe('a [REDACTED] [REDACTED]d');
  });

  it('masks a 4-char secret and each of its forms', () => {
    const compiled = compileRedaction(['w0rd'], 'text');
    expect(redactOnce(compiled, 'pw=w0rd;')).toBe('pw=[REDACTED];');
    expect(secretForms('w0rd').length).toBeGreaterThanOrEqual(4);
    expect(redactOnce(compiled, `b64=${btoa('w0rd')}`)).not.toContain(btoa('w0rd').slice(0, 5));
  });

  it('masks the \\u-escaped JSON form of a non-ASCII secret', () => {
    const secret = 'clé-secrète-99';
    const escaped = 'cl\\u00e9-secr\\u00e8te-99';
    expect(redactOnce(compileRedaction([secret], 'text'), `{"k":"${escaped}"}`)).toBe('{"k":"[REDACTED]"}');
  });

  it('masks overlapping secrets as one region', () => {
    const compiled = compileRedaction(['alpha-beta-1', 'beta-1-gamma'], 'text');
    expect(redactOnce(compiled, 'x alpha-beta-1-gamma y')).toBe('x [REDACTED] y');
  });

  it('masks a secret that starts like a token but continues with other chars', () => {
    const secret = 'sk-Q7abcdefghijklmnopqrstuv:extra!pass';
    expect(redactOnce(compileRedaction([secret], 'text'), `k=${secret} end`)).toBe('k=[REDACTED] end');
  });
});
