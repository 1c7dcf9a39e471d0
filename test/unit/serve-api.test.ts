import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { bearerMatches, Router } from '../../src/adapters/http/http-kit.js';
import { ApiError, parseBody, toApiError } from '../../src/app/serve/api-error.js';
import { UnwrittenCopyError } from '../../src/adapters/serve-archive.js';
import { openApiDocument } from '../../src/app/serve/openapi.js';
import { ExecSchema } from '../../src/app/serve/exec-schemas.js';
import { SessionCreateSchema } from '../../src/app/serve/session-schemas.js';
import { InvalidInputError, RoboguideError } from '../../src/core/errors.js';
import { checkFreeMounts, checkMounts, resolveProtectedPaths } from '../../src/core/mount-policy.js';

const protectedPaths = {
  outputDir: '/var/lib/rg/serve',
  registryPath: '/home/u/.local/state/roboguide-eval/registry.db',
  homeDir: '/home/u',
  engineSocketPaths: ['/var/run/docker.sock'],
};

describe('checkMounts', () => {
  it('allows a project folder inside the home directory', () => {
    expect(checkMounts([{ field: 'm', hostPath: '/home/u/project' }], protectedPaths)).toEqual([]);
  });

  it.each([
    ['/', 'must not be / (the whole host file system)'],
    ['/home/u', 'must not contain the registry database /home/u/.local/state/roboguide-eval/registry.db'],
    ['/home', 'must not be or contain the home folder /home/u (use a folder inside it)'],
    ['/var/lib/rg/serve/sessions', 'must not lie inside the output directory /var/lib/rg/serve'],
    ['/var/lib/rg', 'must not contain the output directory /var/lib/rg/serve'],
    ['/var/run/docker.sock', 'must not be, contain or lie inside the system folder /var/run'],
    ['/srv/sock-dir', 'must not contain the engine socket /srv/sock-dir/docker.sock'],
    ['/home/u/.local/state/roboguide-eval', 'must not contain the registry database'],
    ['/srv/app/.env', 'must not be or lie inside the credential-looking /srv/app/.env'],
    ['/srv/app/.ssh/keys', 'must not be or lie inside the credential-looking /srv/app/.ssh'],
    ['relative/path', 'host path relative/path must be absolute'],
    ['/srv/x/../../home/u', 'must not be or contain the home folder /home/u'],
  ])('refuses %s', (hostPath, message) => {
    const issues = checkFreeMounts([{ field: 'mounts[0].source', hostPath }], {
      ...protectedPaths,
      engineSocketPaths: [...protectedPaths.engineSocketPaths, '/srv/sock-dir/docker.sock'],
    });
    expect(issues.length).toBeGreaterThan(0);
    expect(issues.every((i) => i.field === 'mounts[0].source')).toBe(true);
    expect(issues.map((i) => i.message)).toContainEqual(expect.stringContaining(message));
  });
});

describe('checkMounts (home only)', () => {
  it('refuses the home directory or a parent, allows a folder inside it and a sibling', () => {
    const home = { homeDir: '/home/u' };
    expect(checkMounts([{ field: 'a', hostPath: '/home/u' }], home)).toEqual([
      { field: 'a', message: 'must not be or contain the home folder /home/u (use a folder inside it)' },
    ]);
    expect(checkMounts([{ field: 'a', hostPath: '/home/u/project' }], home)).toEqual([]);
    // A sibling of the home folder is not refused by the home rules (the allowlist is told to admit it here).
    expect(
      checkMounts([{ field: 'a', hostPath: '/home/u/../other' }], { ...home, mountRoots: ['/home'] }),
    ).toEqual([]);
  });
});

describe('resolveProtectedPaths', () => {
  it('compares mounts with the real protected paths: a symlinked $HOME is refused under its real name too', async () => {
    const real = (path: string): Promise<string> =>
      path.startsWith('/home/') ? Promise.resolve(`/var${path}`) : Promise.reject(new Error('ENOENT'));
    const resolved = await resolveProtectedPaths(
      { homeDir: '/home/u', registryPath: '/nowhere/r.db', engineSocketPaths: ['/home/u/docker.sock'] },
      real,
    );
    expect(resolved).toEqual({
      homeDir: '/var/home/u',
      registryPath: '/nowhere/r.db',
      engineSocketPaths: ['/home/u/docker.sock', '/var/home/u/docker.sock'],
      homeDirs: ['/root', '/home'],
      ownedDirs: [],
      // No roots given: the default allowlist, the home folder by its real path.
      mountRoots: ['/var/home/u', '/tmp', '/work', '/data', '/scratch'],
    });
    const wide = { homeDir: '/home/u', mountRoots: ['/var/home'] };
    expect(checkFreeMounts([{ field: 'm', hostPath: '/var/home/u' }], wide)).toEqual([]);
    expect(checkFreeMounts([{ field: 'm', hostPath: '/var/home/u' }], resolved).length).toBeGreaterThan(0);
  });
});

describe('bearerMatches', () => {
  it('accepts only the exact token', () => {
    const token = 'a-long-enough-token-0123456789';
    expect(bearerMatches(`Bearer ${token}`, token)).toBe(true);
    expect(bearerMatches(`Bearer ${token}x`, token)).toBe(false);
    expect(bearerMatches(token, token)).toBe(false);
    expect(bearerMatches(undefined, token)).toBe(false);
    expect(bearerMatches('Bearer ', '')).toBe(false);
  });
});

describe('request schemas', () => {
  it('defaults a session to network none, 1 h TTL, no ports, no mounts', () => {
    expect(parseBody(SessionCreateSchema, { image: 'i' }, 'x')).toMatchObject({
      network: 'none',
      ttl_seconds: 3600,
      ports: [],
      mounts: [],
      environment: {},
      labels: {},
    });
  });

  it('reports every problem with its path and rule', () => {
    let err: unknown;
    try {
      parseBody(
        SessionCreateSchema,
        {
          image: 'i',
          ports: [80, 80],
          labels: { 'roboguide.x': 'y' },
          environment: { API_KEY: 'Bearer ${KEY}' },
          bogus: 1,
        },
        'the session request',
      );
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ApiError);
    const api = err as ApiError;
    expect(api.status).toBe(400);
    const paths = api.issues.map((i) => i.path);
    expect(paths).toEqual(expect.arrayContaining(['$', 'labels["roboguide.x"]', 'environment.API_KEY']));
  });

  it('refuses a NUL or other control character in a session environment or exec env value, naming the field', () => {
    for (const [schema, body, path] of [
      [
        SessionCreateSchema,
        { image: 'i', environment: { API_KEY: 'nulsecret\u0000abcdefgh' } },
        'environment.API_KEY',
      ],
      [SessionCreateSchema, { image: 'i', environment: { MODEL: 'a\u0001b' } }, 'environment.MODEL'],
      [ExecSchema, { command: 'ls', env: { API_KEY: 'nulsecret\u0000abcdefgh' } }, 'env.API_KEY'],
    ] as const) {
      let err: unknown;
      try {
        parseBody(schema, body, 'the request');
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ApiError);
      const api = err as ApiError;
      expect(api.status).toBe(400);
      expect(api.issues).toEqual([
        expect.objectContaining({ path, rule: expect.stringMatching(/control character/) }),
      ]);
      expect(JSON.stringify(api.issues)).not.toContain('nulsecret');
    }
    // tab and newline stay allowed (multi-line values are ordinary configuration)
    expect(parseBody(ExecSchema, { command: 'ls', env: { NOTE: 'a\tb\nc' } }, 'x').env).toEqual({
      NOTE: 'a\tb\nc',
    });
  });

  it('ports need the bridge network', () => {
    expect(() => parseBody(SessionCreateSchema, { image: 'i', ports: [8080] }, 'x')).toThrow(ApiError);
    expect(
      parseBody(SessionCreateSchema, { image: 'i', ports: [8080], network: 'bridge' }, 'x').ports,
    ).toEqual([8080]);
  });

  it('exec takes exactly one of argv and command', () => {
    expect(() => parseBody(ExecSchema, {}, 'x')).toThrow(ApiError);
    expect(() => parseBody(ExecSchema, { argv: ['a'], command: 'a' }, 'x')).toThrow(ApiError);
    expect(parseBody(ExecSchema, { command: 'ls', timeout_sec: 1.5 }, 'x')).toMatchObject({
      command: 'ls',
      timeout_sec: 1.5,
    });
  });
});

describe('toApiError', () => {
  it('maps tool errors to 400/409/503 and anything else to 500 without its message', () => {
    expect(
      toApiError(new InvalidInputError('E_SPEC_INVALID', 'spec is invalid', [{ path: 'a', rule: 'r' }])),
    ).toMatchObject({ status: 400, issues: [{ path: 'a', rule: 'r' }] });
    expect(toApiError(new RoboguideError('E_ENGINE_UNAVAILABLE', 'down')).status).toBe(503);
    expect(toApiError(new RoboguideError('E_PORT_ALLOCATED', 'taken')).status).toBe(409);
    expect(
      toApiError(new RoboguideError('E_ENGINE', 'container is not running', { context: { statusCode: 409 } }))
        .status,
    ).toBe(409);
    expect(toApiError(new Error('secret detail'))).toMatchObject({ status: 500, message: 'internal error' });
  });

  it("the server's own disk full (ENOSPC, EDQUOT, also wrapped) is 507 E_NO_SPACE, by its code alone; EIO stays 500", () => {
    const full = Object.assign(
      new Error("ENOSPC: no space left on device, write '/srv/data/tmp/upload-x/checked.tar'"),
      {
        code: 'ENOSPC',
      },
    );
    const quota = Object.assign(new Error('EDQUOT: disk quota exceeded'), { code: 'EDQUOT' });
    const wrapped = new RoboguideError('E_STORE', 'session.json could not be written', { cause: full });
    for (const err of [full, quota, wrapped, new UnwrittenCopyError('ENOSPC')]) {
      const api = toApiError(err);
      expect(api).toMatchObject({ status: 507, code: 'E_NO_SPACE' });
      expect(api.message).not.toMatch(/\/srv|checked\.tar|session\.json/);
    }
    expect(toApiError(new UnwrittenCopyError('EIO'))).toMatchObject({ status: 500, code: 'E_INTERNAL' });
    expect(toApiError(new UnwrittenCopyError('error'))).toMatchObject({ status: 500, code: 'E_INTERNAL' });
  });
});

describe('Router', () => {
  it('matches parameters, tells a wrong method from an unknown path', () => {
    const router = new Router();
    const handler = () => Promise.resolve();
    router.add('POST', '/v1/sessions/{id}/exec', handler);
    expect(router.match('POST', '/v1/sessions/s-1/exec')).toEqual({
      handler,
      params: { id: 's-1' },
      route: '/v1/sessions/{id}/exec',
    });
    expect(router.match('GET', '/v1/sessions/s-1/exec')).toBe('method');
    expect(router.match('POST', '/v1/sessions/s-1/exec/x')).toBeNull();
  });
});

describe('OpenAPI', () => {
  it('docs/openapi.json is the document generated from the schemas (run `npm run openapi` after a schema change)', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version: string;
    };
    const committed = JSON.parse(
      readFileSync(new URL('../../docs/openapi.json', import.meta.url), 'utf8'),
    ) as unknown;
    expect(committed).toEqual(openApiDocument(pkg.version));
  });

  it('is OpenAPI 3.1 with every route of the issue', () => {
    const doc = openApiDocument('0') as { openapi: string; paths: Record<string, Record<string, unknown>> };
    expect(doc.openapi).toBe('3.1.0');
    const routes = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`),
    );
    expect(routes.sort()).toEqual(
      [
        'DELETE /v1/pairs/{id}',
        'DELETE /v1/sessions/{id}',
        'GET /v1/health',
        'GET /v1/images',
        'GET /v1/openapi.json',
        'GET /v1/pairs/{id}',
        'GET /v1/pairs/{id}/logs',
        'GET /v1/sessions',
        'GET /v1/sessions/{id}',
        'GET /v1/sessions/{id}/archive',
        'POST /v1/images',
        'POST /v1/images/pull',
        'POST /v1/pairs',
        'POST /v1/sessions',
        'POST /v1/sessions/{id}/exec',
        'POST /v1/sessions/{id}/keepalive',
        'PUT /v1/sessions/{id}/archive',
        'PUT /v1/sessions/{id}/egress',
        'GET /v1/sessions/{id}/file',
        'PUT /v1/sessions/{id}/file',
      ].sort(),
    );
  });
});
