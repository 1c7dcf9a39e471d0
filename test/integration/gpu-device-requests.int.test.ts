import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { createDoctorDeps } from '../../src/adapters/doctor-probes.js';
import { gatherBatchHostFacts } from '../../src/composition-root.js';
import { runDoctor } from '../../src/app/doctor/run-doctor.js';
import { PROBE_LABELS } from '../../src/app/doctor/engine-checks.js';
import { runPair } from '../../src/app/pair/run-pair.js';
import type { RunPairOutcome } from '../../src/app/pair/run-pair-types.js';
import {
  DRIVER_IMAGE,
  engineHasNvidia,
  noDocker,
  pairRunDeps,
  runtime as mainRuntime,
  sweep,
} from '../support/docker.js';
import {
  isAlive,
  listNetns,
  mountsUnder,
  namespaceSupportProblem,
  startSecondEngine,
  type SecondEngine,
} from '../support/second-engine.js';

const exec = promisify(execFile);
const required = process.env['REQUIRE_DOCKER'] === '1';
const namespaceProblem = noDocker ? 'no Docker engine' : await namespaceSupportProblem();
// Locally a host that cannot create namespaces skips visibly; in CI (REQUIRE_DOCKER=1) it fails in beforeAll.
const skipSecondEngine = namespaceProblem !== null && !required;
if (skipSecondEngine)
  console.warn(`\n*** gpu-device-requests on a second engine SKIPPED: ${namespaceProblem} ***\n`);

let work: string;

async function runGpuPair(rt: DockerContainerRuntime, jobId: string, gpus: unknown): Promise<RunPairOutcome> {
  const spec = {
    job_id: jobId,
    argv: ['/opt/driver/run', 'gpu_env', 'outcome=completed'],
    cwd: join(work, jobId, 'cwd'),
    outcome_path: join(work, jobId, 'out', 'outcome.json'),
    environment: {},
    ports: [],
    timeout_seconds: 60,
    image: DRIVER_IMAGE,
    gpus,
  };
  await mkdir(spec.cwd, { recursive: true });
  return runPair(pairRunDeps(rt), {
    specText: JSON.stringify(spec),
    specSource: `${jobId}.json`,
    output: join(work, jobId, 'evidence'),
    bindAddress: '127.0.0.1',
    environment: {},
    codeVersion: 'test',
    cwd: work,
  });
}

async function linkExists(name: string): Promise<boolean> {
  return exec('ip', ['link', 'show', name]).then(
    () => true,
    () => false,
  );
}

const uniqueJob = (name: string): string => `it-gpu-${name}-${randomUUID().slice(0, 6)}`;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'rg-gpu-'));
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe.skipIf(skipSecondEngine)(
  'NVIDIA device requests on a second engine with a no-op nvidia hook',
  () => {
    let engine: SecondEngine | undefined;
    let rt: DockerContainerRuntime;
    let docker0Before = false;

    beforeAll(async () => {
      if (namespaceProblem !== null)
        throw new Error(`REQUIRE_DOCKER=1 but a second engine cannot be started: ${namespaceProblem}`);
      docker0Before = await linkExists('docker0');
      engine = await startSecondEngine({ nvidiaHook: true, name: 'gpu' });
      rt = new DockerContainerRuntime({ socketPath: engine.socketPath });
    });

    afterAll(async () => {
      if (engine === undefined) return;
      await engine.stop();
      expect(await listNetns()).not.toContain(engine.netns);
      expect(isAlive(engine.pid)).toBe(false);
      expect(await mountsUnder(engine.dataRoot)).toEqual([]);
      await expect(stat(engine.dataRoot)).rejects.toMatchObject({ code: 'ENOENT' });
      // The shared engine's bridge survived the second engine (the reason it lives in its own netns).
      if (docker0Before) expect(await linkExists('docker0')).toBe(true);
    });

    it('is a different engine from the shared one (its own data root), with no "nvidia" runtime registered', async () => {
      // The engine ID comes from /etc/docker/key.json, shared by both daemons: compare the data roots instead.
      const [second, main] = (await Promise.all([rt.docker.info(), mainRuntime().docker.info()])) as {
        DockerRootDir: string;
      }[];
      expect(second?.DockerRootDir).toBe(engine?.dataRoot);
      expect(main?.DockerRootDir).not.toBe(engine?.dataRoot);
      // The hook registers a device driver, not a runtime: `Runtimes` does not show it.
      expect((await rt.info()).runtimes).not.toContain('nvidia');
    });

    // What Engine 20.10 puts in NVIDIA_VISIBLE_DEVICES for each request (observed): all → "all",
    // a count n → the first n indexes "0,…,n-1", a list → the ids joined by ",".
    it.each<{ gpus: unknown; visible: string }>([
      { gpus: 'all', visible: 'all' },
      { gpus: 1, visible: '0' },
      { gpus: 2, visible: '0,1' },
      { gpus: ['GPU-fake-1'], visible: 'GPU-fake-1' },
    ])(
      'gpus $gpus starts, completes and the container sees NVIDIA_VISIBLE_DEVICES=$visible',
      async ({ gpus, visible }) => {
        const job = uniqueJob('req');
        const { result, output } = await runGpuPair(rt, job, gpus);
        expect(result.engine_error).toBeNull();
        expect(result.classification).toBe('completed');
        expect(result.container.exit_code).toBe(0);
        expect(await readFile(join(output, 'stdout.log'), 'utf8')).toBe(
          `NVIDIA_VISIBLE_DEVICES=${visible}\n`,
        );
        expect(result.cleanup).toMatchObject({ removed: true, verified_absent: true });
        expect(await rt.inspect(result.container.id!)).toBeNull();
        expect(await rt.listByLabel({ 'roboguide.job': job })).toEqual([]);
      },
    );

    it('doctor --probe-gpu passes on this engine although no "nvidia" runtime is listed, and removes its probe', async () => {
      const report = await runDoctor(createDoctorDeps(rt, gatherBatchHostFacts), {
        images: [DRIVER_IMAGE],
        probeGpu: true,
        registryPath: null,
        defaultRegistryPath: join(work, 'no-state', 'registry.db'),
        outputDir: work,
      });
      const check = (name: string) => report.checks.find((c) => c.name === name);
      expect(check('gpu probe')).toMatchObject({
        status: 'ok',
        detail: expect.stringContaining('NVIDIA_VISIBLE_DEVICES=all as asked'),
      });
      expect(check('nvidia runtime')?.status).toBe('warn');
      expect(await rt.listByLabel(PROBE_LABELS)).toEqual([]);
    });

    it('a pair without gpus gets no NVIDIA_VISIBLE_DEVICES on the same engine', async () => {
      const { result, output } = await runGpuPair(rt, uniqueJob('none'), undefined);
      expect(result.classification).toBe('completed');
      expect(await readFile(join(output, 'stdout.log'), 'utf8')).toBe('NVIDIA_VISIBLE_DEVICES=<unset>\n');
    });
  },
);

describe.skipIf(noDocker || engineHasNvidia)(
  'NVIDIA device requests on the shared engine (no NVIDIA runtime)',
  () => {
    it('fails with the typed nvidia_runtime_missing outcome, keeps the engine text, and leaves no container', async () => {
      const rt = mainRuntime();
      const job = uniqueJob('main');
      let outcome: RunPairOutcome;
      let left: unknown[];
      try {
        outcome = await runGpuPair(rt, job, 'all');
      } finally {
        // Look first (asserted below); the sweep only keeps the shared engine clean when that assertion fails.
        left = await rt.listByLabel({ 'roboguide.job': job });
        await sweep({ 'roboguide.job': job });
      }
      const { result, output } = outcome;
      expect(left).toEqual([]);
      expect(result.classification).toBe('infrastructure_failure');
      expect(result.reasons).toContain('nvidia_runtime_missing');
      expect(result.engine_error?.message).toMatch(/could not select device driver "nvidia"/);
      expect(result.container.id).not.toBeNull();
      expect(await rt.inspect(result.container.id!)).toBeNull();
      expect(result.cleanup).toMatchObject({ verified_absent: true });
      expect(await readFile(join(output, 'stdout.log'), 'utf8')).toBe('');
    });
  },
);
