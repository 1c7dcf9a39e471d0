import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { createDoctorDeps } from '../../src/adapters/doctor-probes.js';
import { gatherBatchHostFacts } from '../../src/composition-root.js';
import { renderDoctorTable, runDoctor } from '../../src/app/doctor/run-doctor.js';
import type { DoctorOptions, DoctorReport } from '../../src/app/doctor/doctor-options.js';
import { DRIVER_IMAGE, engineHasNvidia, engineIsPodman, noDocker, runtime } from '../support/docker.js';

let work: string;

function options(overrides: Partial<DoctorOptions> = {}): DoctorOptions {
  return {
    images: [DRIVER_IMAGE],
    probeGpu: false,
    registryPath: join(work, 'state', 'registry.db'),
    defaultRegistryPath: join(work, 'no-such-state', 'registry.db'),
    outputDir: join(work, 'batches', 'not-yet-created'),
    ...overrides,
  };
}

const statusOf = (report: DoctorReport, name: string): string | undefined =>
  report.checks.find((c) => c.name === name)?.status;

describe.skipIf(noDocker)('doctor against the shared engine', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-doctor-'));
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  // On Podman the engine line names Podman and the runtime line is `podman gpus`: test/integration/podman.int.test.ts.
  it.skipIf(engineHasNvidia || engineIsPodman)(
    'engine ok, driver image present, no nvidia runtime → warn; registry writable and left without tables; exit 0',
    async () => {
      const report = await runDoctor(createDoctorDeps(runtime(), gatherBatchHostFacts), options());
      expect(statusOf(report, 'engine')).toBe('ok');
      expect(report.checks.find((c) => c.name === 'engine')?.detail).toMatch(/^Docker \S+, API 1\.\d+/);
      expect(statusOf(report, `image ${DRIVER_IMAGE}`)).toBe('ok');
      expect(statusOf(report, 'nvidia runtime')).toBe('warn');
      expect(report.checks.find((c) => c.name === 'log driver')?.detail).toMatch(
        /^engine default \S+; pair containers set json-file/,
      );
      expect(statusOf(report, 'registry')).toBe('ok');
      expect(statusOf(report, 'disk')).not.toBe('fail');
      expect(statusOf(report, 'boot id')).toBe('ok');
      expect(report.exitCode).toBe(0);
      expect(renderDoctorTable(report)).toMatch(
        /^! nvidia runtime +not registered .*\n +fix: install nvidia-container-toolkit/m,
      );
      // The probe wrote inside a transaction that was rolled back: the file exists and holds no table.
      const db = new DatabaseSync(join(work, 'state', 'registry.db'));
      try {
        expect(db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all()).toEqual([]);
      } finally {
        db.close();
      }
    },
  );

  it('without --registry and no registry yet, probes a scratch database and creates nothing at the default path', async () => {
    const report = await runDoctor(
      createDoctorDeps(runtime(), gatherBatchHostFacts),
      options({ registryPath: null }),
    );
    expect(report.checks.find((c) => c.name === 'registry')).toMatchObject({
      status: 'ok',
      detail: expect.stringContaining('no registry yet'),
    });
    await expect(stat(join(work, 'no-such-state'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('a missing image is a warning with the images build fix', async () => {
    const missing = 'roboguide/not-built:1';
    const report = await runDoctor(
      createDoctorDeps(runtime(), gatherBatchHostFacts),
      options({ images: [DRIVER_IMAGE, missing] }),
    );
    expect(report.checks.find((c) => c.name === `image ${missing}`)).toMatchObject({
      status: 'warn',
      fix: 'roboguide-eval images build',
    });
    expect(report.exitCode).toBe(0);
  });

  it.skipIf(engineHasNvidia || engineIsPodman)(
    '--probe-gpu fails with the engine text (no NVIDIA runtime here) and leaves no probe container',
    async () => {
      const report = await runDoctor(
        createDoctorDeps(runtime(), gatherBatchHostFacts),
        options({ probeGpu: true }),
      );
      expect(report.checks.find((c) => c.name === 'gpu probe')).toMatchObject({
        status: 'fail',
        detail: expect.stringMatching(/could not select device driver "nvidia"/),
      });
      expect(report.exitCode).toBe(1);
      expect(await runtime().listByLabel({ 'roboguide.doctor': 'probe' })).toEqual([]);
    },
  );

  it('an unreachable engine gives exit 3 and still reports the host checks', async () => {
    const absent = new DockerContainerRuntime({ socketPath: join(work, 'no-engine.sock') });
    const report = await runDoctor(createDoctorDeps(absent, gatherBatchHostFacts), options());
    expect(statusOf(report, 'engine')).toBe('fail');
    expect(statusOf(report, 'registry')).toBe('ok');
    expect(report.exitCode).toBe(3);
  });
});
