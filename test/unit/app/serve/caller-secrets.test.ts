import { describe, expect, it } from 'vitest';
import { ApiError, parseBody } from '../../../../src/app/serve/api-error.js';
import {
  callerEnvironment,
  MAX_SECRET_VALUE_BYTES,
  MAX_SESSION_SECRET_BYTES,
  relearnedSecrets,
  SECRET_MARKER,
  sessionSecretsProblem,
} from '../../../../src/app/serve/caller-secrets.js';
import { sessionCapabilities } from '../../../../src/app/serve/session-create.js';
import { ExecSchema } from '../../../../src/app/serve/exec-schemas.js';
import { extraHostProblem } from '../../../../src/app/serve/request-fields.js';
import { SessionCreateSchema } from '../../../../src/app/serve/session-schemas.js';

const FIELDS = { env: 'environment', secretEnv: 'secret_env' };
const KEY = 'sk-ant-literal-0123456789';

function refusal(fn: () => unknown): ApiError {
  try {
    fn();
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error('expected a refusal');
}

describe('callerEnvironment (issue 23: literal secrets from callers)', () => {
  it('accepts a literal under a secret-looking name: passed on, masked, stored as a marker only', () => {
    const env = callerEnvironment(
      { ANTHROPIC_API_KEY: KEY, MODEL: 'opus', PWD: '/app', PATH: '/bin' },
      [],
      {},
      new Set(),
      FIELDS,
    );
    expect(env.values).toEqual({ ANTHROPIC_API_KEY: KEY, MODEL: 'opus', PWD: '/app', PATH: '/bin' });
    expect(env.secrets).toEqual([KEY]);
    expect(env.stored).toEqual({
      ANTHROPIC_API_KEY: SECRET_MARKER,
      MODEL: 'opus',
      PWD: '/app',
      PATH: '/bin',
    });
    expect(JSON.stringify(env.stored)).not.toContain(KEY);
  });

  it('a name listed in secret_env is a secret whatever it is called; a listed name that is absent is ignored', () => {
    const env = callerEnvironment(
      { JUDGE_ID: 'judge-0123456789' },
      ['JUDGE_ID', 'NOT_THERE'],
      {},
      new Set(),
      FIELDS,
    );
    expect(env.secrets).toEqual(['judge-0123456789']);
    expect(env.stored).toEqual({ JUDGE_ID: SECRET_MARKER });
  });

  it('a URL with a password is a secret', () => {
    const env = callerEnvironment({ DATABASE_URL: 'postgres://u:pw@db/x' }, [], {}, new Set(), FIELDS);
    expect(env.secrets).toEqual(['postgres://u:pw@db/x']);
  });

  it('a listed value too short to mask is refused, naming the field; a short one secret by name only is passed but not masked', () => {
    const err = refusal(() => callerEnvironment({ PIN: '1234' }, ['PIN'], {}, new Set(), FIELDS));
    expect(err.status).toBe(400);
    expect(err.issues[0]).toMatchObject({ path: 'environment.PIN' });
    expect(err.issues[0]!.rule).toContain('secret_env');
    expect(JSON.stringify(err.issues)).not.toContain('1234');
    const env = callerEnvironment({ DEBUG_KEY: '1' }, [], {}, new Set(), FIELDS);
    expect(env.values).toEqual({ DEBUG_KEY: '1' });
    expect(env.secrets).toEqual([]);
    expect(env.stored).toEqual({ DEBUG_KEY: SECRET_MARKER });
  });

  it('${NAME} references keep the --allow-env rule and resolve as secrets', () => {
    expect(
      refusal(() => callerEnvironment({ K: '${HIDDEN}' }, [], { HIDDEN: 'x'.repeat(20) }, new Set(), FIELDS))
        .code,
    ).toBe('E_ENV_NOT_ALLOWED');
    expect(refusal(() => callerEnvironment({ K: '${UNSET}' }, [], {}, new Set(['UNSET']), FIELDS)).code).toBe(
      'E_ENV_MISSING',
    );
    const env = callerEnvironment({ K: '${OK}' }, [], { OK: 'resolved-secret-1' }, new Set(['OK']), FIELDS);
    expect(env).toEqual({
      values: { K: 'resolved-secret-1' },
      secrets: ['resolved-secret-1'],
      stored: { K: '${OK}' },
    });
  });

  it('a secret longer than MAX_SECRET_VALUE_BYTES, or secrets over the session total, are refused before any is kept (issue 39)', () => {
    // A 1 MB value took the server down (the masking automaton, out of memory); 20 KB held it 2.3 s.
    const long = refusal(() =>
      callerEnvironment(
        { API_TOKEN: 'k'.repeat(MAX_SECRET_VALUE_BYTES + 1), OTHER: 'x'.repeat(1_000_000) },
        [],
        {},
        new Set(),
        FIELDS,
      ),
    );
    expect(long.status).toBe(400);
    expect(long.issues).toEqual([
      {
        path: 'environment.API_TOKEN',
        rule: expect.stringContaining(`more than ${MAX_SECRET_VALUE_BYTES} bytes`),
      },
    ]);
    // The longest one passes (a PEM private key of 4,096-bit RSA is about 3.3 KB); a long value that is no secret too.
    const edge = callerEnvironment(
      { API_TOKEN: 'k'.repeat(MAX_SECRET_VALUE_BYTES), OTHER: 'x'.repeat(1_000_000) },
      [],
      {},
      new Set(),
      FIELDS,
    );
    expect(edge.secrets).toEqual(['k'.repeat(MAX_SECRET_VALUE_BYTES)]);
    // Many secrets, each short enough, over the session's total: refused at the field.
    const many = Object.fromEntries(
      Array.from({ length: 5 }, (_, i) => [`KEY_${i}_TOKEN`, `${i}`.repeat(MAX_SECRET_VALUE_BYTES)]),
    );
    const total = refusal(() => callerEnvironment(many, [], {}, new Set(), FIELDS));
    expect(total.issues).toEqual([
      { path: 'environment', rule: expect.stringContaining(`${MAX_SESSION_SECRET_BYTES} bytes in all`) },
    ]);
    // An exec's secrets count with the session's own; the same one twice counts once.
    const held = ['a'.repeat(MAX_SESSION_SECRET_BYTES - 10)];
    expect(sessionSecretsProblem(held, ['a'.repeat(MAX_SESSION_SECRET_BYTES - 10)])).toBeNull();
    expect(sessionSecretsProblem(held, ['b'.repeat(10)])).toBeNull();
    expect(sessionSecretsProblem(held, ['b'.repeat(11)])).toMatch(/at most 16384 bytes in all/);
  });

  it('relearnedSecrets takes markers and references back from the container environment, nothing else', () => {
    const stored = { API_KEY: SECRET_MARKER, REF: '${OK}', MODEL: 'opus', SHORT_TOKEN: SECRET_MARKER };
    const container = {
      API_KEY: KEY,
      REF: 'resolved-secret-1',
      MODEL: 'opus',
      SHORT_TOKEN: '1',
      PATH: '/bin',
    };
    expect(relearnedSecrets(stored, container).sort()).toEqual([KEY, 'resolved-secret-1'].sort());
  });
});

describe('session and exec schemas (issue 23)', () => {
  it('accept literal secrets in environment and env; still refuse a reference inside a longer value', () => {
    expect(
      parseBody(SessionCreateSchema, { image: 'i', environment: { OPENAI_API_KEY: KEY } }, 't').environment,
    ).toEqual({ OPENAI_API_KEY: KEY });
    expect(
      parseBody(
        ExecSchema,
        { command: 'true', env: { SFORGE_TOKEN: KEY }, secret_env: ['SFORGE_TOKEN'] },
        't',
      ).env,
    ).toEqual({ SFORGE_TOKEN: KEY });
    const err = refusal(() =>
      parseBody(SessionCreateSchema, { image: 'i', environment: { A: 'x${B}' } }, 't'),
    );
    expect(err.issues[0]).toMatchObject({ path: 'environment.A' });
  });

  it('refuse annotations under roboguide.* and keys given in both labels and annotations', () => {
    const err = refusal(() =>
      parseBody(
        SessionCreateSchema,
        { image: 'i', annotations: { 'roboguide.job': 'x', 'Roboguide.claim': 'y' } },
        't',
      ),
    );
    expect(err.issues.map((i) => i.path).sort()).toEqual([
      'annotations["Roboguide.claim"]',
      'annotations["roboguide.job"]',
    ]);
    const dup = refusal(() =>
      parseBody(SessionCreateSchema, { image: 'i', labels: { a: '1' }, annotations: { a: '2' } }, 't'),
    );
    expect(dup.issues[0]!.path).toBe('annotations.a');
  });

  it('refuse an unknown capability and a malformed extra host, naming the entry', () => {
    const err = refusal(() =>
      parseBody(
        SessionCreateSchema,
        { image: 'i', cap_drop: ['NET_RAW', 'MAGIC'], extra_hosts: ['judge:host-gateway', 'bad'] },
        't',
      ),
    );
    expect(err.issues.map((i) => i.path).sort()).toEqual(['cap_drop[1]', 'extra_hosts[1]']);
  });

  it('extra hosts: name:ip and name:host-gateway', () => {
    expect(extraHostProblem('judge:host-gateway')).toBeNull();
    expect(extraHostProblem('host.docker.internal:host-gateway')).toBeNull();
    expect(extraHostProblem('db:10.0.0.5')).toBeNull();
    expect(extraHostProblem('v6:fe80::1')).toBeNull();
    expect(extraHostProblem('db:999.0.0.1')).not.toBeNull();
    expect(extraHostProblem(':1.2.3.4')).not.toBeNull();
    expect(extraHostProblem('db')).not.toBeNull();
  });
});

describe('sessionCapabilities', () => {
  it("drops only: a pair's set less what is named (any spelling), ALL drops every one, nothing is ever added", () => {
    expect(sessionCapabilities([])).toEqual(['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID', 'KILL']);
    expect(sessionCapabilities(['cap_chown', 'KILL', 'NET_ADMIN'])).toEqual([
      'DAC_OVERRIDE',
      'FOWNER',
      'SETUID',
      'SETGID',
    ]);
    expect(sessionCapabilities(['all'])).toEqual([]);
  });
});

describe('redactingLogger', () => {
  it('masks the current secrets (plain and base64) in messages, fields, nested fields, errors and children', async () => {
    const { redactingLogger } = await import('../../../../src/app/serve/redacting-logger.js');
    const lines: unknown[] = [];
    const sink = {
      info: (f: Record<string, unknown>, m: string) => lines.push([f, m]),
      warn: (f: Record<string, unknown>, m: string) => lines.push([f, m]),
      error: (f: Record<string, unknown>, m: string) => lines.push([f, m]),
      debug: (f: Record<string, unknown>, m: string) => lines.push([f, m]),
      child: () => sink,
    };
    const secrets: string[] = [];
    const logger = redactingLogger(sink, () => [secrets]);
    logger.info({ a: KEY }, 'before');
    secrets.push(KEY);
    logger.warn({ nested: { v: `x ${Buffer.from(KEY).toString('base64')} y` } }, `msg ${KEY}`);
    logger.error({ err: new Error(`failed with ${KEY}`) }, 'boom');
    logger.child({ s: KEY }).debug({}, KEY);
    const text = JSON.stringify(lines.slice(1));
    expect(text).not.toContain(KEY);
    expect(text).not.toContain(Buffer.from(KEY).toString('base64'));
    expect(text).toContain('failed with [REDACTED]');
    expect(JSON.stringify(lines[0])).toContain(KEY); // nothing to mask before the secret was known
  });
});
