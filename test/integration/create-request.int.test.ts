import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { connect, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { DockerSessionEngine } from '../../src/adapters/docker/docker-session-engine.js';
import { runPair } from '../../src/app/pair/run-pair.js';
import { DRIVER_IMAGE, noDocker, pairRunDeps, sweep } from '../support/docker.js';

/**
 * A container's create goes to the engine as the Engine API has it: the name alone in the query string, the
 * configuration in the body. dockerode given plain options also URL-encodes the whole configuration into the request
 * line (about 25 KB: our seccomp profile, every environment value), which a proxy in front of the engine may log or
 * refuse. Watched here through a proxy of ours on a unix socket in front of the real engine, which records every
 * request line it forwards.
 */
const ENGINE_SOCKET = (process.env['DOCKER_HOST'] ?? 'unix:///var/run/docker.sock').replace(/^unix:\/\//, '');
const REQUEST_LINE = /^(GET|HEAD|POST|PUT|DELETE) (\S+) HTTP\/1\.[01]\r$/gm;

let work: string;
let proxy: Server;
let proxySocket: string;
const requestLines: string[] = [];
/** Labels of what each test made: swept at the end, whatever the test left. */
const made: Record<string, string>[] = [];

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'rg-create-request-'));
  proxySocket = join(work, 'engine.sock');
  proxy = createServer((client) => {
    const engine = connect(ENGINE_SOCKET);
    let pending = '';
    client.on('data', (chunk: Buffer) => {
      // Request lines only (bodies pass through unread but for this search); a line split across chunks is joined.
      pending = (pending + chunk.toString('latin1')).slice(-65_536);
      for (const m of pending.matchAll(REQUEST_LINE)) requestLines.push(`${m[1]} ${m[2]}`);
      pending = pending.slice(pending.lastIndexOf('\n') + 1);
    });
    client.pipe(engine).pipe(client);
    client.on('error', () => engine.destroy());
    engine.on('error', () => client.destroy());
  });
  await new Promise<void>((resolve) => proxy.listen(proxySocket, resolve));
});

afterAll(async () => {
  await new Promise((resolve) => proxy.close(resolve));
  await rm(work, { recursive: true, force: true });
  if (!noDocker) for (const labels of made) await sweep(labels);
});

const creates = (): string[] => requestLines.filter((l) => /^POST \S*\/containers\/create\b/.test(l));

describe.skipIf(noDocker)('the create request: the name in the URL, the configuration in the body', () => {
  it("a pair's create: a short request line with its name alone, no environment value in it; the container ran with it", async () => {
    const rt = new DockerContainerRuntime({ socketPath: proxySocket });
    const jobId = `it-create-request-${randomUUID().slice(0, 6)}`;
    const marker = `body-only-${randomUUID()}`;
    made.push({ 'roboguide.job': jobId });
    const spec = {
      job_id: jobId,
      argv: ['/opt/driver/run', 'print_env=CREATE_MARKER', 'outcome=completed'],
      cwd: join(work, jobId, 'cwd'),
      outcome_path: join(work, jobId, 'out', 'outcome.json'),
      environment: { CREATE_MARKER: marker },
      ports: [],
      timeout_seconds: 60,
      image: DRIVER_IMAGE,
    };
    await mkdir(spec.cwd, { recursive: true });
    const before = creates().length;
    const outcome = await runPair(pairRunDeps(rt), {
      specText: JSON.stringify(spec),
      specSource: `${jobId}.json`,
      output: join(work, jobId, 'evidence'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
      cwd: work,
    });
    expect(outcome.result.classification).toBe('completed');
    // The environment reached the container through the body.
    expect(await readFile(join(work, jobId, 'evidence', 'stdout.log'), 'utf8')).toContain(
      `CREATE_MARKER=${marker}`,
    );
    const sent = creates().slice(before);
    expect(sent).toHaveLength(1);
    const url = new URL(sent[0]!.split(' ')[1]!, 'http://engine');
    expect([...url.searchParams.keys()]).toEqual(['name']);
    expect(url.searchParams.get('name')).toContain(jobId);
    expect(sent[0]!.length).toBeLessThan(300);
    expect(sent[0]).not.toContain(marker);
  });

  it("a session's create: the same", async () => {
    const rt = new DockerContainerRuntime({ socketPath: proxySocket });
    const sessions = new DockerSessionEngine(rt);
    const marker = `session-body-only-${randomUUID()}`;
    const before = creates().length;
    const name = `roboguide-it-create-request-${randomUUID().slice(0, 6)}`;
    made.push({ 'it.create-request': name });
    const { id } = await sessions.createAndStart({
      name,
      image: DRIVER_IMAGE,
      env: { SESSION_MARKER: marker },
      workdir: undefined,
      binds: [],
      ports: [],
      bindAddress: '127.0.0.1',
      network: 'none',
      nanoCpus: undefined,
      memoryBytes: undefined,
      deviceRequests: [],
      labels: { 'it.create-request': name },
      stopTimeoutSec: 1,
    });
    try {
      const env = ((await rt.docker.getContainer(id).inspect()) as { Config: { Env: string[] } }).Config.Env;
      expect(env).toContain(`SESSION_MARKER=${marker}`);
    } finally {
      await rt.docker.getContainer(id).remove({ force: true });
    }
    const sent = creates().slice(before);
    expect(sent).toHaveLength(1);
    expect([...new URL(sent[0]!.split(' ')[1]!, 'http://engine').searchParams.keys()]).toEqual(['name']);
    expect(sent[0]).not.toContain(marker);
  });
});
