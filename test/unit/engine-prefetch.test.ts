import { createServer, type Server } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  PREFETCH_MAX_AGE_MS,
  prefetchEngineFacts,
  takePrefetchedFacts,
} from '../../src/adapters/docker/engine-prefetch.js';

// A stand-in engine at the socket boundary: Node's HTTP server on a unix socket, answering info and version as
// `answers` says, and recording what was asked.
let dir: string;
let server: Server;
let socket: string;
const asked: string[] = [];
let answers: Record<string, { status: number; body: string }> = {};

const INFO = { ID: 'engine-1', DockerRootDir: '/var/lib/docker', Runtimes: { runc: { path: 'runc' } } };
const VERSION = { Version: '20.10.24', ApiVersion: '1.41' };
const normal = () => ({
  '/info': { status: 200, body: JSON.stringify(INFO) },
  '/version': { status: 200, body: JSON.stringify(VERSION) },
});

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-prefetch-'));
  socket = join(dir, 'engine.sock');
  server = createServer((req, res) => {
    asked.push(req.url ?? '');
    const answer = answers[req.url ?? ''] ?? { status: 404, body: '{"message":"page not found"}' };
    res.writeHead(answer.status, { 'content-type': 'application/json' }).end(answer.body);
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
});
afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await rm(dir, { recursive: true, force: true });
});
afterEach(async () => {
  await takePrefetchedFacts(undefined); // nothing left over for the next test
  asked.length = 0;
  answers = normal();
  vi.restoreAllMocks();
});

describe('the engine prefetch of `pair run` (bin/run.js asks, the first engine call takes)', () => {
  it("asks info and version once on DOCKER_HOST's socket; the same socket takes the answers, once", async () => {
    answers = normal();
    prefetchEngineFacts({ DOCKER_HOST: `unix://${socket}` });
    expect(await takePrefetchedFacts(socket)).toEqual({ info: INFO, version: VERSION });
    expect(asked.sort()).toEqual(['/info', '/version']);
    expect(await takePrefetchedFacts(socket)).toBeNull();
    expect(asked).toHaveLength(2);
  });

  it('another socket gets nothing, and the prefetch is forgotten', async () => {
    answers = normal();
    prefetchEngineFacts({ DOCKER_HOST: `unix://${socket}` });
    expect(await takePrefetchedFacts(join(dir, 'other.sock'))).toBeNull();
    expect(await takePrefetchedFacts(socket)).toBeNull();
    await vi.waitFor(() => expect(asked).toHaveLength(2)); // the requests in flight end here, not in the next test
  });

  it('a tcp, ssh or TLS engine is not asked (dockerode alone talks to those)', async () => {
    for (const host of ['tcp://127.0.0.1:2375', 'ssh://user@host']) {
      prefetchEngineFacts({ DOCKER_HOST: host });
      expect(await takePrefetchedFacts(socket)).toBeNull();
    }
    expect(asked).toEqual([]);
  });

  it('an error, a body that is not JSON or a version without its fields gives nothing (the command asks itself)', async () => {
    const cases: Record<string, { status: number; body: string }>[] = [
      { ...normal(), '/info': { status: 500, body: '{"message":"boom"}' } },
      { ...normal(), '/version': { status: 200, body: 'not json' } },
      { ...normal(), '/version': { status: 200, body: '{"Version":"1"}' } },
      { ...normal(), '/info': { status: 200, body: '[1,2]' } },
    ];
    for (const c of cases) {
      answers = c;
      prefetchEngineFacts({ DOCKER_HOST: `unix://${socket}` });
      expect(await takePrefetchedFacts(socket), JSON.stringify(c)).toBeNull();
    }
  });

  it('no engine at the socket gives nothing, without an error', async () => {
    prefetchEngineFacts({ DOCKER_HOST: `unix://${join(dir, 'nobody.sock')}` });
    expect(await takePrefetchedFacts(join(dir, 'nobody.sock'))).toBeNull();
  });

  it(`answers older than ${PREFETCH_MAX_AGE_MS} ms are not taken`, async () => {
    answers = normal();
    const start = Date.now();
    prefetchEngineFacts({ DOCKER_HOST: `unix://${socket}` });
    vi.spyOn(Date, 'now').mockReturnValue(start + PREFETCH_MAX_AGE_MS + 1_000);
    expect(await takePrefetchedFacts(socket)).toBeNull();
    await vi.waitFor(() => expect(asked).toHaveLength(2));
  });
});
