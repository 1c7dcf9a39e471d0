import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDoctorDeps } from '../../src/adapters/doctor-probes.js';
import { gatherBatchHostFacts } from '../../src/composition-root.js';
import { DockerSessionEngine } from '../../src/adapters/docker/docker-session-engine.js';
import { deviceRequestsFor } from '../../src/core/gpu/device-requests.js';
import { containerLimitsOf } from '../../src/core/pair-limits.js';
import { runDoctor } from '../../src/app/doctor/run-doctor.js';
import { PROBE_LABELS } from '../../src/app/doctor/engine-checks.js';
import { runPair } from '../../src/app/pair/run-pair.js';
import {
  DRIVER_IMAGE,
  engineIsPodman,
  expectNoContainersLeft,
  pairRunDeps,
  runtime,
} from '../support/docker.js';

/**
 * Podman behind the Docker API (issue 28): run by the Podman set (scripts/podman-suite.sh, DOCKER_HOST on a Podman
 * service in its own network namespace, named in ROBOGUIDE_TEST_PODMAN_NETNS); on Docker it skips, visibly.
 */
const netns = process.env['ROBOGUIDE_TEST_PODMAN_NETNS'] ?? '';
if (!engineIsPodman)
  console.warn(
    '\n*** podman.int.test.ts SKIPPED: the engine is not Podman (run scripts/podman-suite.sh) ***\n',
  );

let work: string;
const jobs: string[] = [];

async function run(name: string, extra: Record<string, unknown>) {
  const jobId = `it-podman-${name}-${randomUUID().slice(0, 6)}`;
  jobs.push(jobId);
  const cwd = join(work, jobId, 'cwd');
  await mkdir(cwd, { recursive: true });
  const spec = {
    job_id: jobId,
    argv: ['/opt/driver/run', 'gpu_env', 'outcome=completed'],
    cwd,
    outcome_path: join(work, jobId, 'out', 'o.json'),
    image: DRIVER_IMAGE,
    timeout_seconds: 60,
    ...extra,
  };
  return runPair(pairRunDeps(), {
    specText: JSON.stringify(spec),
    specSource: `${jobId}.json`,
    output: join(work, jobId, 'evidence'),
    bindAddress: '127.0.0.1',
    environment: {},
    codeVersion: 'test',
    cwd: work,
  });
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe.skipIf(!engineIsPodman)('Podman on its Docker API', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-podman-it-'));
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('doctor names Podman and its version, finds catatonit, and --probe-gpu fails from the inspect (the request is dropped), leaving no probe', async () => {
    const report = await runDoctor(createDoctorDeps(runtime(), gatherBatchHostFacts), {
      images: [DRIVER_IMAGE],
      probeGpu: true,
      registryPath: null,
      defaultRegistryPath: join(work, 'none', 'r.db'),
      outputDir: work,
    });
    const check = (name: string) => report.checks.find((c) => c.name === name);
    expect(check('engine')).toMatchObject({
      status: 'ok',
      detail: expect.stringMatching(/^Podman \d+\.\d+\.\d+, API /),
    });
    expect(check('podman init')).toMatchObject({
      status: 'ok',
      detail: expect.stringContaining('catatonit'),
    });
    expect(check('log driver')?.status).toBe('ok');
    expect(check('gpu probe')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('holds none'),
    });
    expect(await runtime().listByLabel(PROBE_LABELS)).toEqual([]);
  });

  it('a pair asking for GPUs fails with gpu_request_dropped (infrastructure) before its driver runs, and its container is gone', async () => {
    const { result, output } = await run('gpu', { gpus: 'all' });
    expect(result.classification).toBe('infrastructure_failure');
    // The same reasons as any start error on Docker: no harness fault, no log gap.
    expect(result.reasons).toEqual(['gpu_request_dropped', 'outcome_missing']);
    expect(result.engine_error?.message).toMatch(/holds none/);
    // The driver never ran: it would have printed NVIDIA_VISIBLE_DEVICES= (gpu_env).
    expect(await readFile(join(output, 'stdout.log'), 'utf8')).toBe('');
    expect(result.cleanup).toMatchObject({ removed: true, verified_absent: true });
    expect(await runtime().inspect(result.container.id!)).toBeNull();
    await expectNoContainersLeft(jobs);
  });

  it.skipIf(netns === '')(
    'a port taken by a plain process (Podman refuses at the attach) is port_allocated (infrastructure), as on Docker',
    async () => {
      const port = await freePort();
      // The process listens in Podman's own network namespace, where its containers publish their ports.
      const holder: ChildProcess = spawn(
        'nsenter',
        [
          `--net=/run/netns/${netns}`,
          process.execPath,
          '-e',
          `require('net').createServer().listen(${port}, '127.0.0.1', () => console.log('ready'))`,
        ],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      try {
        await new Promise<void>((resolve, reject) => {
          holder.stdout?.once('data', () => resolve());
          holder.once('exit', (code) => reject(new Error(`port holder exited ${code}`)));
        });
        const { result, output } = await run('port', {
          ports: [port],
          argv: ['/opt/driver/run', 'outcome=completed'],
        });
        expect(result.classification).toBe('infrastructure_failure');
        // What Docker gives for a taken port (pair-run.int.test.ts): no log_write_failed, no harness_failure.
        expect(result.reasons).toEqual(['port_allocated', 'outcome_missing']);
        expect(result.engine_error?.message).toMatch(/address already in use/);
        expect(result.logs).toMatchObject({ stdout: { closed: true }, stderr: { closed: true } });
        expect(await readFile(join(output, 'stdout.log'), 'utf8')).toBe('');
        expect(result.cleanup).toMatchObject({ removed: true, verified_absent: true });
        await expectNoContainersLeft(jobs);
      } finally {
        holder.kill('SIGTERM');
      }
    },
  );

  it('a serve session asking for GPUs is refused (E_GPU_REQUEST_DROPPED) before anything runs in it, its container removed', async () => {
    const labels = { 'roboguide.test': `podman-session-${randomUUID().slice(0, 8)}` };
    const engine = new DockerSessionEngine(runtime());
    const refused = engine.createAndStart({
      name: `rg-podman-session-${randomUUID().slice(0, 8)}`,
      image: DRIVER_IMAGE,
      env: {},
      workdir: undefined,
      binds: [],
      ports: [],
      bindAddress: '127.0.0.1',
      network: 'none',
      nanoCpus: undefined,
      memoryBytes: undefined,
      limits: containerLimitsOf({ pids_limit: 64, memory_mib: 64, cpus: null }),
      deviceRequests: deviceRequestsFor(1),
      labels,
      stopTimeoutSec: 1,
    });
    await expect(refused).rejects.toMatchObject({
      code: 'E_GPU_REQUEST_DROPPED',
      fault: 'gpu_request_dropped',
    });
    expect(await runtime().listByLabel(labels)).toEqual([]);
  });

  it('a pair without GPUs runs to completion on Podman (Init: true through catatonit, json-file logs read back)', async () => {
    const { result, output } = await run('plain', {});
    expect(result.classification).toBe('completed');
    expect(await readFile(join(output, 'stdout.log'), 'utf8')).toBe('NVIDIA_VISIBLE_DEVICES=<unset>\n');
    await expectNoContainersLeft(jobs);
  });
});
