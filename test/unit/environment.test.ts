import { describe, expect, it } from 'vitest';
import {
  environmentReferences,
  isCredentialLikePath,
  isSecretLookingName,
  resolveEnvironment,
} from '../../src/core/manifest/index.js';

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
    const source = { OPENAI_API_KEY: 'sk-123', BASE_URL: 'http://proxy:8080', UNRELATED: 'u' };
    expect(resolveEnvironment(env, source, 'jobs[0].environment')).toEqual({
      ok: true,
      values: { MODEL: 'm-1', OPENAI_API_KEY: 'sk-123', ALSO: 'sk-123', URL: 'http://proxy:8080' },
      secrets: ['sk-123', 'http://proxy:8080'],
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
  ])('flags %s', (name) => {
    expect(isSecretLookingName(name)).toBe(true);
  });

  it.each(['MODEL', 'BASE_URL', 'HOME', 'PATH', 'CODEX_HOME'])('does not flag %s', (name) => {
    expect(isSecretLookingName(name)).toBe(false);
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
