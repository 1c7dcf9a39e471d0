import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { pinoRedactionOptions } from '../../src/adapters/log-redaction.js';
import { RoboguideError, errorDetail } from '../../src/core/errors.js';
import { redactText } from '../../src/core/redaction/redact-text.js';
import { leakedWindows } from './redaction.fixtures.js';

const SECRET = 'Zq9-resolved-env-value/with+chars"and\\quotes';
const FORMS = [
  SECRET,
  encodeURIComponent(SECRET),
  JSON.stringify(SECRET).slice(1, -1),
  Buffer.from(SECRET).toString('base64').slice(0, -4),
];

function memoryLogger(secrets: readonly string[]) {
  const lines: string[] = [];
  const logger = pino(
    { level: 'debug', ...pinoRedactionOptions(secrets) },
    { write: (line: string) => void lines.push(line) },
  );
  return { logger, lines };
}

describe('pinoRedactionOptions', () => {
  it('writes lines inert for a terminal: an engine message with ESC, CR, C1 CSI, DEL and a bidi override keeps its value', () => {
    const { logger, lines } = memoryLogger([]);
    const engine = '\u001b[2K\rpair x completed\u009b31m\u007f\u202eexe';
    logger.warn({ engine_error: { message: engine } }, engine);
    expect(lines).toHaveLength(1);
    // eslint-disable-next-line no-control-regex -- no raw control may reach the terminal
    expect(lines[0]).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e]/u);
    const parsed = JSON.parse(lines[0]!) as { msg: string; engine_error: { message: string } };
    expect([parsed.msg, parsed.engine_error.message]).toEqual([engine, engine]);
  });

  it('masks authorization fields, env and secret values anywhere in a log line', () => {
    const { logger, lines } = memoryLogger([SECRET]);
    logger.info(
      {
        authorization: 'Bearer abc.def.ghi',
        headers: { authorization: 'Basic dXNlcjpwYXNz' },
        env: { OPENAI_API_KEY: SECRET },
        nested: { deep: [`token ${SECRET}`], b64: Buffer.from(SECRET).toString('base64') },
      },
      `request failed with ${SECRET}`,
    );
    logger
      .child({ job: 'pair-0001' })
      .warn({ req: { headers: { authorization: 'Token xyz' } } }, 'child %s', SECRET);
    expect(lines).toHaveLength(2);
    const all = lines.join('');
    expect(leakedWindows(all, FORMS)).toEqual([]);
    expect(all).not.toContain('dXNlcjpwYXNz');
    expect(all).not.toContain('abc.def.ghi');
    expect(all).not.toContain('Token xyz');
    const [first, second] = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(first).toMatchObject({
      authorization: '[REDACTED]',
      headers: { authorization: '[REDACTED]' },
      env: '[REDACTED]',
      nested: { deep: ['token [REDACTED]'] },
      msg: 'request failed with [REDACTED]',
    });
    expect(second).toMatchObject({
      job: 'pair-0001',
      req: { headers: { authorization: '[REDACTED]' } },
      msg: 'child [REDACTED]',
    });
  });

  it('logs a wrapped error with its cause chain, the secret in it masked', () => {
    const { logger, lines } = memoryLogger([SECRET]);
    const engine = Object.assign(new Error(`create failed: env OPENAI_API_KEY=${SECRET} refused`), {
      code: 'EPROTO',
    });
    const err = new RoboguideError('E_ENGINE', 'the container could not be created', { cause: engine });
    logger.warn({ container: 'c1', err: errorDetail(err) }, 'pair not started');
    expect(leakedWindows(lines.join(''), FORMS)).toEqual([]);
    const line = JSON.parse(lines[0] ?? '{}') as Record<string, unknown>;
    expect(line['err']).toEqual({
      kind: 'RoboguideError',
      code: 'E_ENGINE',
      message: 'the container could not be created',
      cause: {
        kind: 'Error',
        code: 'EPROTO',
        message: 'create failed: env OPENAI_API_KEY=[REDACTED] refused',
      },
    });
  });

  it('masks token formats in messages even without configured secrets', () => {
    const { logger, lines } = memoryLogger([]);
    const token = 'ghp_' + 'aB3'.repeat(12);
    logger.error(new Error(`clone failed: ${token}`), 'git error');
    expect(lines.join('')).not.toContain(token.slice(4, 12));
    expect((JSON.parse(lines[0] ?? '{}') as { err: { message: string } }).err.message).toBe(
      'clone failed: [REDACTED:github]',
    );
  });
});

describe('redactText', () => {
  it('masks secret values and their encodings in a user-facing message', () => {
    const message = `cannot connect: password ${SECRET} rejected (url ${encodeURIComponent(SECRET)})`;
    const out = redactText(message, [SECRET]);
    expect(out).toBe('cannot connect: password [REDACTED] rejected (url [REDACTED])');
  });

  it('leaves a message without secrets unchanged', () => {
    expect(redactText('image pair-driver:1 is missing', [SECRET, 'ab'])).toBe(
      'image pair-driver:1 is missing',
    );
  });
});

describe('redaction is idempotent', () => {
  it.each([
    'Authorization: Basic dXNlcjpwYXNz',
    '{"authorization":"Token abc123"}',
    `pw ${SECRET} and Bearer abc.def.ghi1`,
    '-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----',
  ])('masking %j twice changes nothing more', (text) => {
    const once = redactText(text, [SECRET]);
    expect(once).not.toBe(text);
    expect(redactText(once, [SECRET])).toBe(once);
  });
});
