import { describe, expect, it } from 'vitest';
import {
  environmentProblems,
  environmentReferences,
  resolveEnvironment,
} from '../../../../src/core/manifest/environment.js';
import { isCredentialLikePath, isSecretLookingName } from '../../../../src/core/manifest/secrets.js';

describe('environmentReferences', () => {
  it('lists whole-value references once, in first-use order, ignoring literals', () => {
    const env = {
      B: '${TOKEN_B}',
      MODEL: 'm-1',
      A: '${TOKEN_A}',
      C: '${TOKEN_B}',
      D: 'x${NOT}',
      E: '$PLAIN',
    };
    expect(environmentReferences(env)).toEqual(['TOKEN_B', 'TOKEN_A']);
  });

  it('is empty without references', () => {
    expect(environmentReferences({})).toEqual([]);
  });
});

describe('resolveEnvironment', () => {
  it('replaces references, keeps literals, and returns every resolved value as a secret', () => {
    const env = {
      MODEL: 'm-1',
      OPENAI_API_KEY: '${OPENAI_API_KEY}',
      ALSO: '${OPENAI_API_KEY}',
      URL: '${BASE_URL}',
    };
    const source = { OPENAI_API_KEY: 'sk-12345', BASE_URL: 'http://proxy:8080', UNRELATED: 'u' };
    expect(resolveEnvironment(env, source, 'jobs[0].environment')).toEqual({
      ok: true,
      values: { MODEL: 'm-1', OPENAI_API_KEY: 'sk-12345', ALSO: 'sk-12345', URL: 'http://proxy:8080' },
      secrets: ['sk-12345', 'http://proxy:8080'],
      warnings: [],
    });
  });

  it('reports missing and empty variables by path and name, never by value', () => {
    const env = { OPENAI_API_KEY: '${OPENAI_API_KEY}', HF: '${HF_TOKEN}', OK: '${SET}' };
    const result = resolveEnvironment(env, { HF_TOKEN: '', SET: 'the-set-value' }, 'jobs[3].environment');
    expect(result).toEqual({
      ok: false,
      issues: [
        { path: 'jobs[3].environment.OPENAI_API_KEY', rule: expect.stringContaining('OPENAI_API_KEY') },
        { path: 'jobs[3].environment.HF', rule: expect.stringContaining('HF_TOKEN') },
      ],
    });
    expect(JSON.stringify(result)).not.toContain('the-set-value');
  });

  it('does not resolve names through the prototype chain', () => {
    const result = resolveEnvironment({ X: '${toString}' }, {}, 'environment');
    expect(result.ok).toBe(false);
  });

  it('refuses a value shorter than 8 characters, naming the variable and never the value', () => {
    const result = resolveEnvironment(
      { K: '${SHORT}', L: '${LONG}' },
      { SHORT: 'hunter2', LONG: 'long-enough' },
      'jobs[0].environment',
    );
    expect(result).toEqual({
      ok: false,
      issues: [
        {
          path: 'jobs[0].environment.K',
          rule: expect.stringMatching(/SHORT.*shorter than 8 characters.*--allow-short-secrets/),
        },
      ],
    });
    expect(JSON.stringify(result)).not.toContain('hunter2');
  });

  it('accepts a short value when allowed, with a warning that names the variable only', () => {
    const result = resolveEnvironment({ K: '${SHORT}' }, { SHORT: 'pw1' }, 'environment', {
      allowShortSecrets: true,
    });
    expect(result.ok && result.secrets).toEqual(['pw1']);
    expect(result.ok && result.warnings).toEqual([
      expect.stringMatching(/^environment.K references \$\{SHORT\}, whose value is shorter than 8/),
    ]);
    expect(JSON.stringify(result.ok && result.warnings)).not.toContain('pw1');
  });

  it('counts characters, not bytes: 8 non-ASCII characters are enough', () => {
    expect(resolveEnvironment({ K: '${V}' }, { V: 'ééééçççç' }, 'environment').ok).toBe(true);
  });

  it('uses bare names at the root of a pair spec', () => {
    const result = resolveEnvironment({ K: '${MISSING}' }, {}, '$');
    expect(!result.ok && result.issues.map((i) => i.path)).toEqual(['K']);
  });
});

describe('isSecretLookingName', () => {
  it.each([
    'OPENAI_API_KEY',
    'apikey',
    'GH_TOKEN',
    'client_secret',
    'DB_PASSWORD',
    'PASSWD',
    'GCP_CREDENTIALS',
    'AUTHORIZATION',
    'Cookie',
    'DB_PASS',
    'PGPASSFILE',
    'SMTP_PWD',
    'PRIVATE_KEY_PEM',
    'my_private',
    'SESSION_ID',
    'SENTRY_DSN',
    'ANTHROPIC_API_KEY',
    'SFORGE_TOKEN',
    'GIT_AUTHOR_TOKEN',
    'MY_PWD',
    'KEYBOARD_SECRET',
  ])('flags %s', (name) => {
    expect(isSecretLookingName(name)).toBe(true);
  });

  it.each([
    'MODEL',
    'BASE_URL',
    'HOME',
    'PATH',
    'CODEX_HOME',
    'PWD',
    'OLDPWD',
    'GIT_AUTHOR_NAME',
    'GIT_AUTHOR_EMAIL',
    'KEYBOARD_LAYOUT',
    'XDG_SESSION_ID',
    'DBUS_SESSION_BUS_ADDRESS',
  ])('does not flag %s', (name) => {
    expect(isSecretLookingName(name)).toBe(false);
  });
});

describe('environmentProblems: URLs holding a password', () => {
  it.each([
    ['DATABASE_URL', 'postgres://app:s3cret@db:5432/x'],
    ['redis_url', 'redis://:pw@cache:6379'],
    ['PROXY_URL', 'http://user:pa%40ss@proxy:3128'],
  ])('refuses the literal %s', (name, value) => {
    expect(environmentProblems({ [name]: value })).toEqual([
      { name, rule: expect.stringContaining('user:password@') },
    ]);
  });

  it.each([
    ['BASE_URL', 'http://proxy:8080'],
    ['BASE_URL', 'https://user@host/path'],
    ['HOMEPAGE', 'http://a:b@c/'],
  ])('accepts the literal %s=%s', (name, value) => {
    expect(environmentProblems({ [name]: value })).toEqual([]);
  });
});

describe('isCredentialLikePath', () => {
  it.each([
    '/abs/.env',
    '/abs/.ENV.production',
    '/abs/server.pem',
    '/abs/tls.KEY',
    '/home/u/.ssh/id_rsa',
    '/home/u/.ssh/id_rsa.pub',
    '/abs/gcp-credentials.json',
    '/abs/Credentials',
    '/root/.codex/auth.json',
    '/home/u/.netrc',
    '/home/u/.npmrc',
    '/home/u/.pypirc',
  ])('flags %s', (path) => {
    expect(isCredentialLikePath(path)).toBe(true);
  });

  it.each(['/abs/driver.py', '/abs/.envrc.md', '/abs/env/driver.py', '/abs/keys.txt', '/abs/auth.json.md'])(
    'does not flag %s',
    (path) => {
      expect(isCredentialLikePath(path)).toBe(false);
    },
  );
});

describe('environmentProblems: control characters', () => {
  it('refuses NUL and other C0/DEL control characters in a value (files and the serve API alike), never quoting it', () => {
    for (const options of [{}, { literalSecrets: true }]) {
      const problems = environmentProblems(
        { A: 'x\u0000y', B: 'x\u001by', C: 'x\u007fy', D: 'x\ty\r\nz', E: 'plain' },
        options,
      );
      expect(problems.map((p) => p.name)).toEqual(['A', 'B', 'C']);
      for (const p of problems) expect(p.rule).toMatch(/must not contain a control character/);
    }
  });
});
