import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { Dockerode } from '../../src/adapters/docker/dockerode.js';
import { EngineError } from '../../src/app/ports/engine-error.js';
import { containerSpec } from '../support/fakes.js';

/**
 * The pair's log driver follows the engine (src/adapters/docker/container-create.ts): Docker's `local`, json-file on
 * Podman (which refuses `local`). Which engine it is gets asked once per runtime, with the call deadline, through
 * real dockerode against a hand-written engine on a unix socket that answers /version, /info and /containers/create.
 */
const DOCKER_VERSION = {
  Version: '20.10.24',
  ApiVersion: '1.41',
  Components: [{ Name: 'Engine', Version: '20.10.24' }],
};
const PODMAN_VERSION = {
  Version: '4.3.1',
  ApiVersion: '1.41',
  Components: [{ Name: 'Podman Engine', Version: '4.3.1' }],
};

interface FakeEngine {
  /** The answer to the next /version requests: a body, a status code, or 'hang'. */
  version: object | number | 'hang';
  readonly asked: string[];
  readonly createBodies: { HostConfig?: { LogConfig?: unknown } }[];
}

let dir: string;
let server: Server;
let engine: FakeEngine;
let runtime: DockerContainerRuntime;

function answer(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '').split('?')[0]!;
  engine.asked.push(`${req.method} ${path}`);
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  if (path === '/version') {
    if (engine.version === 'hang') return;
    if (typeof engine.version === 'number') return answer(res, engine.version, { message: 'engine busy' });
    return answer(res, 200, engine.version);
  }
  if (path === '/info')
    return answer(res, 200, { ID: 'fake', Runtimes: { runc: {} }, LoggingDriver: 'json-file' });
  if (path === '/containers/create') {
    engine.createBodies.push(
      JSON.parse(Buffer.concat(chunks).toString('utf8')) as FakeEngine['createBodies'][number],
    );
    return answer(res, 201, { Id: `c${engine.createBodies.length}`, Warnings: [] });
  }
  answer(res, 404, { message: `not faked: ${path}` });
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-log-driver-'));
  engine = { version: DOCKER_VERSION, asked: [], createBodies: [] };
  server = createServer((req, res) => void handle(req, res));
  const socketPath = join(dir, 'engine.sock');
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  runtime = new DockerContainerRuntime(new Dockerode({ socketPath }), { callTimeoutMs: 300 });
});

afterEach(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await rm(dir, { recursive: true, force: true });
});

const versionAsks = (): number => engine.asked.filter((line) => line === 'GET /version').length;

describe("a pair container's log driver follows the engine", () => {
  it('Docker: the local driver, bounded and uncompressed; the engine is asked once for every create', async () => {
    await runtime.create(containerSpec({ name: 'a' }));
    await runtime.create(containerSpec({ name: 'b' }));
    expect(engine.createBodies.map((body) => body.HostConfig?.LogConfig)).toEqual([
      { Type: 'local', Config: { 'max-size': '512m', 'max-file': '4', compress: 'false' } },
      { Type: 'local', Config: { 'max-size': '512m', 'max-file': '4', compress: 'false' } },
    ]);
    expect(versionAsks()).toBe(1);
  });

  it('Podman: json-file with the same bounds (Podman has no local driver)', async () => {
    engine.version = PODMAN_VERSION;
    await runtime.create(containerSpec());
    expect(engine.createBodies[0]?.HostConfig?.LogConfig).toEqual({
      Type: 'json-file',
      Config: { 'max-size': '512m', 'max-file': '4' },
    });
  });

  it('what info() found is kept: a create after it asks nothing more', async () => {
    engine.version = PODMAN_VERSION;
    expect((await runtime.info()).product).toBe('podman');
    const asked = versionAsks();
    await runtime.create(containerSpec());
    expect(versionAsks()).toBe(asked);
    expect(engine.createBodies[0]?.HostConfig?.LogConfig).toMatchObject({ Type: 'json-file' });
  });

  it('a failed ask is an EngineError, creates nothing, and is asked again at the next create', async () => {
    engine.version = 500;
    await expect(runtime.create(containerSpec())).rejects.toBeInstanceOf(EngineError);
    expect(engine.createBodies).toEqual([]);
    engine.version = DOCKER_VERSION;
    await runtime.create(containerSpec());
    expect(versionAsks()).toBe(2);
    expect(engine.createBodies[0]?.HostConfig?.LogConfig).toMatchObject({ Type: 'local' });
  });

  it('an engine that never answers /version fails the create at the call deadline, not never', async () => {
    engine.version = 'hang';
    const started = Date.now();
    const error = await runtime.create(containerSpec()).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(EngineError);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(engine.createBodies).toEqual([]);
  });
});
