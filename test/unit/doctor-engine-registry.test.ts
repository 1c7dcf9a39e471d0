import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { clockAt } from '../support/fake-time.js';
import { runDoctor } from '../../src/app/doctor/run-doctor.js';
import { type DoctorCheck } from '../../src/app/doctor/check.js';
import {
  type DoctorDeps,
  type RegistryProbe,
  type RegistryTarget,
} from '../../src/app/ports/doctor-probes.js';
import type { DoctorOptions } from '../../src/app/doctor/doctor-options.js';
import { EngineError } from '../../src/app/ports/engine-error.js';
import type { ContainerState, EngineInfo, WaitResult } from '../../src/app/ports/container-runtime.js';
import type { HostFactsSource } from '../../src/app/ports/host-facts.js';
import { gatherHostFacts } from '../../src/app/host-facts.js';

/**
 * The doctor's engine and registry checks, branch by branch (the host facts are another test's): an engine that
 * answers oddly or not at all, images the engine cannot tell about, log drivers, the GPU probe going wrong in each
 * way, and each kind of registry target.
 */
const ENGINE: EngineInfo = {
  id: 'ABCD:EFGH:IJKL:MNOP',
  version: '24.0.7',
  apiVersion: '1.43',
  runtimes: ['runc', 'nvidia'],
  loggingDriver: 'json-file',
};
const OPTIONS: DoctorOptions = {
  images: ['roboguide/pair-driver:1'],
  probeGpu: false,
  registryPath: null,
  defaultRegistryPath: '/state/registry.db',
  outputDir: '/data',
};

interface World {
  info?: () => Promise<EngineInfo>;
  imageExists?: (image: string) => Promise<boolean>;
  create?: () => Promise<{ id: string; name: string }>;
  start?: () => Promise<void>;
  wait?: () => Promise<WaitResult>;
  remove?: (id: string) => Promise<'removed' | 'absent'>;
  /** The probe container is still there after its removal. */
  stays?: boolean;
  existing?: readonly string[];
  probeRegistry?: (target: RegistryTarget) => Promise<RegistryProbe | void>;
}

const none = (): Promise<never> => Promise.reject(new Error('not in this test'));
const UNKNOWN_FACTS: HostFactsSource = {
  cpu: none,
  memory: none,
  os: none,
  fileSystemOf: none,
  gpuControllers: none,
};

function deps(world: World = {}) {
  const removed: string[] = [];
  const targets: RegistryTarget[] = [];
  const present = (id: string): ContainerState => ({
    id,
    status: 'created',
    exitCode: null,
    oomKilled: false,
    startedAt: null,
    finishedAt: null,
    labels: {},
  });
  const d: DoctorDeps = {
    runtime: {
      info: world.info ?? (() => Promise.resolve(ENGINE)),
      imageExists: world.imageExists ?? (() => Promise.resolve(true)),
      create: world.create ?? (() => Promise.resolve({ id: 'probe-container-1', name: 'p' })),
      // The GPU probe's own view (src/app/gpu-probe.ts): the request kept, NVIDIA_VISIBLE_DEVICES as asked.
      attach: () => {
        const stdout = new PassThrough();
        stdout.end('visible_set=1\nvisible=all\nsmi=absent\nprobe=done\n');
        const stderr = new PassThrough();
        stderr.end();
        return Promise.resolve({ stdout, stderr });
      },
      gpuGrantOf: () => Promise.resolve({ deviceRequests: 1, cdiDevices: 0 }),
      start: world.start ?? (() => Promise.resolve()),
      wait: world.wait ?? (() => Promise.resolve({ kind: 'exited', exitCode: 0 })),
      remove: (id) => {
        removed.push(id);
        return world.remove ? world.remove(id) : Promise.resolve('removed');
      },
      inspect: (id) => Promise.resolve(world.stays === true ? present(id) : null),
    },
    observeGpus: () =>
      Promise.resolve({ kind: 'unobservable', reason: 'binary_missing', detail: 'no nvidia-smi' }),
    fileExists: (path) => Promise.resolve((world.existing ?? []).includes(path)),
    probeRegistry: (target) => {
      targets.push(target);
      return world.probeRegistry ? world.probeRegistry(target) : Promise.resolve();
    },
    freeDiskBytes: (path) => Promise.resolve({ path, freeBytes: 100 * 1024 ** 3 }),
    readBootId: () => Promise.resolve('boot'),
    // This file is about the engine and registry checks: every host fact is unknown at once.
    hostFacts: (request) =>
      gatherHostFacts({ source: UNKNOWN_FACTS, clock: { sleep: () => new Promise(() => {}) } }, request),
    clock: clockAt(new Date(0)),
    newId: () => 'x',
  };
  return { deps: d, removed, targets };
}

const check = (checks: readonly DoctorCheck[], name: string): DoctorCheck => {
  const found = checks.find((c) => c.name === name);
  if (found === undefined) throw new Error(`no check ${name}`);
  return found;
};

describe('doctor: the engine', () => {
  it('something that is not an EngineError from info: unreachable (exit 3), its text as the detail, the rest skipped', async () => {
    // What a foreign library may reject with: not an Error at all.
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
    const report = await runDoctor(deps({ info: () => Promise.reject('socket hung up') }).deps, {
      ...OPTIONS,
      probeGpu: true,
    });
    expect(report.exitCode).toBe(3);
    expect(check(report.checks, 'engine')).toMatchObject({ status: 'fail', detail: 'socket hung up' });
    expect(
      ['image roboguide/pair-driver:1', 'nvidia runtime', 'log driver', 'gpu probe'].map(
        (n) => check(report.checks, n).status,
      ),
    ).toEqual(['warn', 'warn', 'warn', 'warn']);
  });

  it('an engine that answers with an error is reachable (exit 1): the log is where to look; no message said twice', async () => {
    const err = new EngineError('engine_error', 'server error', {
      statusCode: 500,
      engineMessage: 'server error',
    });
    const report = await runDoctor(deps({ info: () => Promise.reject(err) }).deps, OPTIONS);
    expect(report.exitCode).toBe(1);
    expect(report.engineReachable).toBe(true);
    expect(check(report.checks, 'engine')).toMatchObject({
      status: 'fail',
      detail: 'server error',
      fix: 'check the engine log (journalctl -u docker)',
    });
  });

  it('an engine too old for GPU device requests warns; one without an id says nothing of it', async () => {
    const report = await runDoctor(
      deps({ info: () => Promise.resolve({ ...ENGINE, id: '', apiVersion: '1.39' }) }).deps,
      OPTIONS,
    );
    expect(check(report.checks, 'engine')).toMatchObject({
      status: 'warn',
      detail: 'Docker 24.0.7, API 1.39; GPU device requests need API >= 1.40',
    });
    const newer = await runDoctor(deps().deps, OPTIONS);
    expect(check(newer.checks, 'engine')).toMatchObject({
      status: 'ok',
      detail: 'Docker 24.0.7, API 1.43, id ABCD:EFGH:IJKL',
    });
  });

  it('an image the engine cannot tell about fails; a missing image of our own says how to build it, another how to load it', async () => {
    const failing = await runDoctor(
      deps({ imageExists: () => Promise.reject(new Error('500 from the engine')) }).deps,
      OPTIONS,
    );
    expect(check(failing.checks, 'image roboguide/pair-driver:1')).toMatchObject({
      status: 'fail',
      detail: '500 from the engine',
    });
    const missing = await runDoctor(deps({ imageExists: () => Promise.resolve(false) }).deps, {
      ...OPTIONS,
      images: ['roboguide/pair-driver:1', 'my/driver:2'],
    });
    expect(check(missing.checks, 'image roboguide/pair-driver:1').fix).toBe('roboguide-eval images build');
    expect(check(missing.checks, 'image my/driver:2')).toMatchObject({
      status: 'warn',
      fix: 'docker build -t my/driver:2 … or docker load -i … (nothing can be pulled here)',
    });
  });

  for (const [driver, status, words] of [
    [undefined, 'warn', 'engine default not reported'],
    ['local', 'ok', 'engine default local'],
    ['journald', 'warn', 'ships container output off this host'],
    ['mystery', 'warn', 'is not a known local driver'],
  ] as const) {
    it(`log driver ${driver ?? '(not reported)'}: ${status}`, async () => {
      const { loggingDriver: _, ...rest } = ENGINE;
      const info = driver === undefined ? rest : { ...ENGINE, loggingDriver: driver };
      const report = await runDoctor(deps({ info: () => Promise.resolve(info) }).deps, OPTIONS);
      expect(check(report.checks, 'log driver').status).toBe(status);
      expect(check(report.checks, 'log driver').detail).toContain(words);
    });
  }

  it('without the nvidia runtime: a warning that names the runtimes there are (or none)', async () => {
    const report = await runDoctor(
      deps({ info: () => Promise.resolve({ ...ENGINE, runtimes: [] }) }).deps,
      OPTIONS,
    );
    expect(check(report.checks, 'nvidia runtime')).toMatchObject({ status: 'warn' });
    expect(check(report.checks, 'nvidia runtime').detail).toContain('runtimes: none listed');
  });
});

describe('doctor --probe-gpu: every way the probe goes wrong, and its container always removed', () => {
  const probe = async (world: World) => {
    const w = deps(world);
    const report = await runDoctor(w.deps, { ...OPTIONS, probeGpu: true });
    return { probe: check(report.checks, 'gpu probe'), removed: w.removed };
  };

  it('a probe that does not exit in time fails, and is removed', async () => {
    const got = await probe({ wait: () => Promise.resolve({ kind: 'deadline' }) });
    expect(got.probe).toMatchObject({
      status: 'fail',
      detail: 'probe container did not exit within 30000 ms',
    });
    expect(got.removed).toEqual(['probe-container-1']);
  });

  it('an image missing at start says how to build it; any other engine failure where to look', async () => {
    const missing = await probe({
      start: () =>
        Promise.reject(
          new EngineError('image_missing', 'no such image', {
            statusCode: 404,
            engineMessage: 'No such image',
          }),
        ),
    });
    expect(missing.probe).toMatchObject({
      status: 'fail',
      detail: 'no such image',
      fix: 'roboguide-eval images build',
    });
    expect(missing.removed).toEqual(['probe-container-1']);
    const other = await probe({ create: () => Promise.reject(new Error('conflict')) });
    expect(other.probe).toMatchObject({ status: 'fail', detail: 'conflict', fix: 'check the engine log' });
    expect(other.removed).toEqual([]); // nothing was created
  });

  it('a probe container still there after its removal, or whose removal fails, fails the check naming it', async () => {
    const stays = await probe({ stays: true });
    expect(stays.probe).toMatchObject({ status: 'fail', fix: 'docker rm -f probe-contai' });
    expect(stays.probe.detail).toContain('probe container probe-contai still exists after removal');
    const refused = await probe({ remove: () => Promise.reject(new Error('removal in progress')) });
    expect(refused.probe.status).toBe('fail');
    expect(refused.probe.detail).toContain('removal in progress');
  });
});

describe('doctor: the registry', () => {
  const registry = async (world: World, options: Partial<DoctorOptions> = {}) => {
    const w = deps(world);
    const report = await runDoctor(w.deps, { ...OPTIONS, ...options });
    return { check: check(report.checks, 'registry'), targets: w.targets };
  };

  it('a PostgreSQL URL is probed as such, shown without its password; failing, the fix is about the server', async () => {
    const pg = { registryPostgres: { display: 'postgres://rg@db:5432/rg', connection: { host: 'db' } } };
    const fine = await registry({}, pg);
    expect(fine.check).toMatchObject({ status: 'ok', detail: 'writable: postgres://rg@db:5432/rg' });
    expect(fine.targets).toEqual([
      { kind: 'postgres', display: 'postgres://rg@db:5432/rg', connection: { host: 'db' } },
    ]);
    const down = await registry({ probeRegistry: () => Promise.reject(new Error('ECONNREFUSED')) }, pg);
    expect(down.check).toMatchObject({
      status: 'fail',
      detail: 'cannot write postgres://rg@db:5432/rg: ECONNREFUSED',
    });
    expect(down.check.fix).toContain('PGPASSWORD');
  });

  it('the default registry when it exists, else a scratch database; a file that cannot be written says how to fix it', async () => {
    expect((await registry({ existing: ['/state/registry.db'] })).targets).toEqual([
      { kind: 'file', path: '/state/registry.db' },
    ]);
    const scratch = await registry({});
    expect(scratch.targets).toEqual([{ kind: 'temp' }]);
    expect(scratch.check.detail).toContain('a scratch database (no registry yet at /state/registry.db');
    const readOnly = await registry(
      { probeRegistry: () => Promise.reject(new Error('EROFS')) },
      { registryPath: '/ro/r.db' },
    );
    expect(readOnly.check).toMatchObject({
      status: 'fail',
      detail: 'cannot write /ro/r.db: EROFS',
      fix: 'make the directory writable, or choose another file with --registry',
    });
  });

  it('schema versions: current is ok, older is migrated on first use, newer than this tool fails', async () => {
    const at = (current: number) =>
      registry(
        { probeRegistry: () => Promise.resolve({ schema: { current, supported: 3 } }) },
        { registryPath: '/r.db' },
      );
    expect((await at(3)).check).toMatchObject({ status: 'ok', detail: 'writable: /r.db; schema version 3' });
    expect((await at(2)).check).toMatchObject({
      status: 'ok',
      detail: 'writable: /r.db; schema version 2 (migrated to 3 on first use)',
    });
    expect((await at(4)).check).toMatchObject({
      status: 'fail',
      detail: '/r.db: schema version 4 is newer than this tool (3)',
    });
  });
});
