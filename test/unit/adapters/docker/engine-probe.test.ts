import { createServer, type Server } from 'node:http';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EngineError } from '../../../../src/app/ports/engine-error.js';
import { DockerContainerRuntime } from '../../../../src/adapters/docker/docker-container-runtime.js';
import {
  askEngineFactsEarly,
  engineInfoOf,
  prefetchEngineFacts,
  engineUnixSocket,
  probeEngineFacts,
  probeImageId,
  type InfoBody,
  type VersionBody,
} from '../../../../src/adapters/docker/engine-probe.js';

/** A stand-in engine on a unix socket: /info and /version as dockerd answers them, or an error status. */
let dir: string;
let server: Server;
let socket: string;
let failWith: number | null = null;
/** What /info answers besides its body: headers, and its ServerVersion (none: an engine that says neither). */
let infoExtra: { headers: Record<string, string>; serverVersion?: string } = { headers: {} };
const requests: string[] = [];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-engine-probe-'));
  socket = join(dir, 'engine.sock');
  server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    if (failWith !== null) {
      res
        .writeHead(failWith, { 'content-type': 'application/json' })
        .end(JSON.stringify({ message: 'engine is unwell' }));
    } else if (req.url === '/info') {
      res.writeHead(200, { 'content-type': 'application/json', ...infoExtra.headers }).end(
        JSON.stringify({
          ...(infoExtra.serverVersion !== undefined ? { ServerVersion: infoExtra.serverVersion } : {}),
          ID: 'ENGINE-ID',
          Runtimes: {
            runc: {},
            nvidia: {},
            runsc: { path: '/usr/bin/runsc', runtimeArgs: ['--network=none'] },
          },
          LoggingDriver: 'json-file',
        }),
      );
    } else if (req.url === '/images/roboguide/pair-driver:1/json') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ Id: 'sha256:abc' }));
    } else if (req.url === '/version') {
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ Version: '28.1.1', ApiVersion: '1.49' }));
    } else {
      res.writeHead(404).end('{"message":"page not found"}');
    }
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
});
afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await rm(dir, { recursive: true, force: true });
});

describe('probeImageId (the status fast path, without dockerode)', () => {
  it('an engine that answers with an error status: an engine_error carrying the status and the engine message', async () => {
    failWith = 500;
    try {
      const err = await probeImageId(socket, 'roboguide/pair-driver:1').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(EngineError);
      expect((err as EngineError).fault).toBe('engine_error');
      expect((err as EngineError).statusCode).toBe(500);
      expect((err as EngineError).message).toContain('engine is unwell');
    } finally {
      failWith = null;
    }
  });

  it('no engine at the socket: engine_unavailable (exit 3)', async () => {
    const err = await probeImageId(join(dir, 'nobody-listens.sock'), 'roboguide/pair-driver:1').catch(
      (e: unknown) => e,
    );
    expect((err as EngineError).fault).toBe('engine_unavailable');
    expect((err as EngineError).exitCode).toBe(3);
  });
});

describe('engineUnixSocket: the socket dockerode would use', () => {
  it('DOCKER_HOST unix://PATH is PATH; tcp, ssh and npipe are left to dockerode', async () => {
    expect(await engineUnixSocket({ DOCKER_HOST: 'unix:///run/user/1000/docker.sock' })).toBe(
      '/run/user/1000/docker.sock',
    );
    for (const host of [
      'tcp://127.0.0.1:2375',
      'ssh://me@host',
      'npipe:////./pipe/docker_engine',
      '127.0.0.1:2375',
    ]) {
      expect(await engineUnixSocket({ DOCKER_HOST: host }), host).toBeNull();
    }
  });

  it('unset, empty or `unix://` alone: ~/.docker/run/docker.sock when it is there, else /var/run/docker.sock', async () => {
    const home = join(dir, 'home');
    const saved = process.env['HOME'];
    process.env['HOME'] = home;
    try {
      for (const env of [{}, { DOCKER_HOST: '' }, { DOCKER_HOST: 'unix://' }]) {
        expect(await engineUnixSocket(env)).toBe('/var/run/docker.sock');
      }
      await mkdir(join(home, '.docker', 'run'), { recursive: true });
      await writeFile(join(home, '.docker', 'run', 'docker.sock'), '');
      expect(await engineUnixSocket({})).toBe(join(home, '.docker', 'run', 'docker.sock'));
    } finally {
      process.env['HOME'] = saved;
    }
  });
});

describe('probeImageId', () => {
  it("the image's id for an image the engine has, null for its 404", async () => {
    failWith = null;
    expect(await probeImageId(socket, 'roboguide/pair-driver:1')).toBe('sha256:abc');
    expect(await probeImageId(socket, 'roboguide/absent:1')).toBeNull();
    expect(requests).toContain('GET /images/roboguide/absent:1/json');
  });
});

describe('probeEngineFacts (info and what version would say, one request: issue 39)', () => {
  it("Docker: the API version from info's Api-Version header, the engine's from its ServerVersion; version is not asked", async () => {
    infoExtra = {
      headers: { 'Api-Version': '1.41', Server: 'Docker/20.10.24 (linux)' },
      serverVersion: '20.10.24',
    };
    requests.length = 0;
    try {
      const [info, version] = await probeEngineFacts(socket);
      expect(requests).toEqual(['GET /info']);
      expect(engineInfoOf(info, version)).toMatchObject({
        id: 'ENGINE-ID',
        product: 'docker',
        version: '20.10.24',
        apiVersion: '1.41',
        loggingDriver: 'json-file',
      });
    } finally {
      infoExtra = { headers: {} };
    }
  });

  it('Podman behind its Docker API: known by the Libpod-Api-Version header every answer carries', async () => {
    infoExtra = { headers: { 'Api-Version': '1.41', 'Libpod-Api-Version': '4.3.1' }, serverVersion: '4.3.1' };
    try {
      const [info, version] = await probeEngineFacts(socket);
      expect(engineInfoOf(info, version)).toMatchObject({
        product: 'podman',
        version: '4.3.1',
        apiVersion: '1.41',
      });
    } finally {
      infoExtra = { headers: {} };
    }
  });

  it('an answer that does not say its API version (or the engine its version): version is asked as before', async () => {
    for (const extra of [
      { headers: {}, serverVersion: '20.10.24' },
      { headers: { 'Api-Version': '1.41' } },
    ]) {
      infoExtra = extra;
      requests.length = 0;
      try {
        const [info, version] = await probeEngineFacts(socket);
        expect(requests).toEqual(['GET /info', 'GET /version']);
        expect(engineInfoOf(info, version)).toMatchObject({ version: '28.1.1', apiVersion: '1.49' });
      } finally {
        infoExtra = { headers: {} };
      }
    }
  });

  it('an engine that answers info with an error: the error, with its status', async () => {
    failWith = 500;
    try {
      await expect(probeEngineFacts(socket)).rejects.toMatchObject({ statusCode: 500 });
    } finally {
      failWith = null;
    }
  });
});

describe('the facts asked before dockerode loaded (askEngineFactsEarly), taken by the runtime once', () => {
  it('on the socket dockerode talks to and moments ago: the first info takes that answer, asking nothing', async () => {
    const early = await askEngineFactsEarly({ DOCKER_HOST: `unix://${socket}` });
    expect(early?.socketPath).toBe(socket);
    requests.length = 0;
    const answer: [InfoBody, VersionBody] = [{ ID: 'EARLY' }, { Version: '1', ApiVersion: '1.41' }];
    const rt = new DockerContainerRuntime(
      { socketPath: socket },
      { earlyFacts: { socketPath: socket, atMs: performance.now(), answer: Promise.resolve(answer) } },
    );
    expect((await rt.info()).id).toBe('EARLY');
    expect(requests).toEqual([]);
  });

  it('on another socket, or asked too long ago: not taken, the engine is asked', async () => {
    const answer = Promise.resolve<[InfoBody, VersionBody]>([
      { ID: 'EARLY' },
      { Version: '1', ApiVersion: '1.41' },
    ]);
    for (const earlyFacts of [
      { socketPath: join(dir, 'other.sock'), atMs: performance.now(), answer },
      { socketPath: socket, atMs: performance.now() - 60_000, answer },
    ]) {
      requests.length = 0;
      const rt = new DockerContainerRuntime({ socketPath: socket }, { earlyFacts });
      expect((await rt.info()).id).toBe('ENGINE-ID');
      expect(requests[0]).toBe('GET /info');
    }
  });

  it('no unix socket (a tcp engine): nothing asked early', async () => {
    expect(await askEngineFactsEarly({ DOCKER_HOST: 'tcp://127.0.0.1:2375' })).toBeNull();
  });
});

describe("the facts asked at the process's start (prefetchEngineFacts, bin/run.js for pair run: issue 39)", () => {
  const env = (): Record<string, string> => ({ DOCKER_HOST: `unix://${socket}` });
  /** A child process runs the sources themselves (type stripping; `.js` imports found as `.ts`): node's arguments. */
  const TS_SOURCES = join(import.meta.dirname, '../../../support/ts-sources.mjs');
  const SOURCE = join(import.meta.dirname, '../../../../src/adapters/docker/engine-probe.ts');
  const moduleArgs = (code: string): string[] => [
    '--no-warnings',
    '--import',
    TS_SOURCES,
    '--input-type=module',
    '-e',
    code,
  ];
  beforeEach(() => {
    infoExtra = { headers: { 'Api-Version': '1.47' }, serverVersion: '27.0.0' };
  });
  afterEach(() => {
    infoExtra = { headers: {} };
  });

  it('taken once by askEngineFactsEarly on the same socket: one request in all; the next asks anew', async () => {
    requests.length = 0;
    await prefetchEngineFacts(env());
    const early = await askEngineFactsEarly(env());
    expect(early?.socketPath).toBe(socket);
    expect((await early!.answer)[0].ID).toBe('ENGINE-ID');
    expect(requests).toEqual(['GET /info']);
    const next = await askEngineFactsEarly(env());
    await next!.answer;
    expect(requests).toEqual(['GET /info', 'GET /info']);
  });

  it('asked on another socket: not taken (and gone), the engine the command uses is asked', async () => {
    await prefetchEngineFacts({ DOCKER_HOST: `unix://${join(dir, 'other.sock')}` });
    requests.length = 0;
    const early = await askEngineFactsEarly(env());
    expect((await early!.answer)[0].ID).toBe('ENGINE-ID');
    expect(requests).toEqual(['GET /info']);
  });

  it('no answer within the deadline, or an error status, is not asked again: the first info reports it', async () => {
    failWith = 500;
    try {
      requests.length = 0;
      await prefetchEngineFacts(env());
      const early = await askEngineFactsEarly(env());
      await expect(early!.answer).rejects.toMatchObject({ statusCode: 500 });
      expect(requests).toEqual(['GET /info']);
    } finally {
      failWith = null;
    }
  });

  it('an answer that failed (no engine then) is asked again when taken', async () => {
    const later = join(dir, 'later.sock');
    await prefetchEngineFacts({ DOCKER_HOST: `unix://${later}` });
    // The engine appears between the process's start and the command's first engine call.
    const second = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'api-version': '1.47' });
      res.end(JSON.stringify({ ID: 'LATER', ServerVersion: '27.0.0' }));
    });
    await new Promise<void>((resolve) => second.listen(later, resolve));
    try {
      const early = await askEngineFactsEarly({ DOCKER_HOST: `unix://${later}` });
      expect((await early!.answer)[0].ID).toBe('LATER');
    } finally {
      await new Promise<void>((resolve) => second.close(() => resolve()));
    }
  });

  it('never keeps the process alive before it is taken: a command that fails first exits at once', async () => {
    // An engine that never answers: the prefetch's connection must not hold the process.
    const { spawnSync } = await import('node:child_process');
    const silent = join(dir, 'silent.sock');
    const hung = (await import('node:net')).createServer(() => undefined);
    await new Promise<void>((resolve) => hung.listen(silent, resolve));
    try {
      const started = Date.now();
      const r = spawnSync(
        process.execPath,
        moduleArgs(
          `import { prefetchEngineFacts } from ${JSON.stringify(SOURCE)}; await prefetchEngineFacts({ DOCKER_HOST: 'unix://${silent}' }); process.exitCode = 2;`,
        ),
        { encoding: 'utf8', timeout: 20_000 },
      );
      expect(r.status, r.stderr).toBe(2);
      // Not the engine call's 60 s deadline (nor the 20 s of this test's own).
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      await new Promise<void>((resolve) => hung.close(() => resolve()));
    }
  });

  it('once taken, its connection holds the process until the engine answers', async () => {
    const { execFile } = await import('node:child_process');
    const slow = join(dir, 'slow.sock');
    const late = createServer((_req, res) => {
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/json', 'api-version': '1.47' });
        res.end(JSON.stringify({ ID: 'SLOW', ServerVersion: '27.0.0' }));
      }, 300);
    });
    await new Promise<void>((resolve) => late.listen(slow, resolve));
    try {
      // Asynchronously: this process's own stand-in engine must answer meanwhile.
      const r = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) =>
        execFile(
          process.execPath,
          moduleArgs(
            [
              `import { prefetchEngineFacts, askEngineFactsEarly } from ${JSON.stringify(SOURCE)};`,
              `const env = { DOCKER_HOST: 'unix://${slow}' };`,
              'await prefetchEngineFacts(env);',
              // Nothing else keeps this process alive: only the taken connection does.
              'askEngineFactsEarly(env).then((early) => early.answer).then(([info]) => console.log(info.ID));',
            ].join(' '),
          ),
          { encoding: 'utf8', timeout: 20_000 },
          (err, stdout, stderr) =>
            err === null ? resolve({ stdout, stderr }) : reject(new Error(stderr, { cause: err })),
        ),
      );
      expect(r.stderr).toBe('');
      expect(r.stdout.trim()).toBe('SLOW');
    } finally {
      await new Promise<void>((resolve) => late.close(() => resolve()));
    }
  });
});
