import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { clockAt } from '../support/fake-time.js';
import { EngineError } from '../../src/app/ports/engine-error.js';
import { doctorExitCode, renderDoctorTable, runDoctor } from '../../src/app/doctor/run-doctor.js';
import { DATA_ROOT_WARN_BYTES } from '../../src/app/doctor/facts-checks.js';
import { DISK_FAIL_BYTES, DISK_WARN_BYTES } from '../../src/app/doctor/host-checks.js';
import { type DoctorCheck } from '../../src/app/doctor/check.js';
import {
  type DoctorDeps,
  type RegistryProbe,
  type RegistryTarget,
} from '../../src/app/ports/doctor-probes.js';
import type { DoctorOptions } from '../../src/app/doctor/doctor-options.js';
import type { ContainerSpec, EngineInfo, WaitResult } from '../../src/app/ports/container-runtime.js';
import type { GpuObservation } from '../../src/core/gpu/nvidia-smi-parse.js';
import { gatherHostFacts } from '../../src/app/host-facts.js';
import type { HostFactsSource } from '../../src/app/ports/host-facts.js';
import type { FileSystemFact } from '../../src/core/host-facts.js';

const ENGINE: EngineInfo = {
  id: 'ABCD:EFGH',
  version: '20.10.24',
  apiVersion: '1.41',
  runtimes: ['runc', 'nvidia'],
  loggingDriver: 'json-file',
  dataRoot: '/var/lib/docker',
};
const GPUS: GpuObservation = {
  kind: 'observed',
  totalMib: 81559,
  gpus: [
    {
      index: 0,
      uuid: 'GPU-1234',
      name: 'NVIDIA H100',
      memoryTotalMib: 81559,
      memoryUsedMib: 1,
      memoryFreeMib: 81558,
    },
  ],
};

/** A hand-written world: every field can be overridden; calls are recorded. */
function fakeWorld(
  overrides: {
    info?: () => Promise<EngineInfo>;
    images?: readonly string[];
    start?: (id: string) => Promise<void>;
    wait?: () => Promise<WaitResult>;
    /** What the GPU probe container prints (default: NVIDIA_VISIBLE_DEVICES=all as asked) and what its inspect holds. */
    probeOutput?: string;
    grant?: { deviceRequests: number; cdiDevices: number };
    gpus?: GpuObservation;
    existing?: readonly string[];
    registry?: (t: RegistryTarget) => Promise<RegistryProbe | void>;
    freeBytes?: number;
    bootId?: string | null;
    facts?: Partial<HostFactsSource>;
  } = {},
) {
  const calls = {
    created: [] as ContainerSpec[],
    removed: [] as string[],
    imageQueries: [] as string[],
    registry: [] as RegistryTarget[],
  };
  const live = new Set<string>();
  const deps: DoctorDeps = {
    runtime: {
      info: overrides.info ?? (() => Promise.resolve(ENGINE)),
      imageExists: (image) => {
        calls.imageQueries.push(image);
        return Promise.resolve((overrides.images ?? ['roboguide/pair-driver:1']).includes(image));
      },
      create: (spec) => {
        calls.created.push(spec);
        live.add('c1');
        return Promise.resolve({ id: 'c1', name: spec.name });
      },
      attach: () => {
        const stdout = new PassThrough();
        stdout.end(overrides.probeOutput ?? 'visible_set=1\nvisible=all\nsmi=absent\nprobe=done\n');
        const stderr = new PassThrough();
        stderr.end();
        return Promise.resolve({ stdout, stderr });
      },
      gpuGrantOf: () => Promise.resolve(overrides.grant ?? { deviceRequests: 1, cdiDevices: 0 }),
      start: overrides.start ?? (() => Promise.resolve()),
      wait: overrides.wait ?? (() => Promise.resolve({ kind: 'exited', exitCode: 0 })),
      remove: (id) => {
        calls.removed.push(id);
        return Promise.resolve(live.delete(id) ? 'removed' : 'absent');
      },
      inspect: (id) =>
        Promise.resolve(
          live.has(id)
            ? {
                id,
                status: 'created',
                exitCode: null,
                oomKilled: false,
                startedAt: null,
                finishedAt: null,
                labels: {},
              }
            : null,
        ),
    },
    observeGpus: () => Promise.resolve(overrides.gpus ?? GPUS),
    fileExists: (path) => Promise.resolve((overrides.existing ?? []).includes(path)),
    probeRegistry: async (target) => {
      calls.registry.push(target);
      return overrides.registry?.(target);
    },
    freeDiskBytes: (path) => Promise.resolve({ path, freeBytes: overrides.freeBytes ?? 100 * 1024 ** 3 }),
    readBootId: () => Promise.resolve(overrides.bootId === undefined ? 'boot-1' : overrides.bootId),
    hostFacts: (request) =>
      gatherHostFacts(
        {
          source: { ...fakeFacts(overrides.gpus ?? GPUS), ...overrides.facts },
          clock: { sleep: () => new Promise(() => {}) },
        },
        request,
      ),
    clock: clockAt(new Date(1_000)),
    newId: () => 'id1',
  };
  return { deps, calls, live };
}

const fsFact = (path: string, freeBytes = 70 * 1024 ** 3): FileSystemFact => ({
  path,
  fs: '/dev/vda',
  type: 'ext4',
  mount: '/',
  size_bytes: 250 * 1024 ** 3,
  free_bytes: freeBytes,
});

/** A host that answers every fact at once; as many NVIDIA controllers on the bus as nvidia-smi sees GPUs. */
function fakeFacts(gpus: GpuObservation): HostFactsSource {
  const nvidia = gpus.kind === 'observed' ? gpus.gpus.length : 0;
  return {
    cpu: () => Promise.resolve({ model: 'AMD EPYC', cores: 64, physical_cores: 32 }),
    memory: () => Promise.resolve({ total_bytes: 512 * 1024 ** 3, available_bytes: 500 * 1024 ** 3 }),
    os: () => Promise.resolve({ distro: 'Ubuntu', release: '24.04', kernel: '6.8.0', arch: 'x64' }),
    fileSystemOf: (path) => Promise.resolve(fsFact(path)),
    gpuControllers: () =>
      Promise.resolve(
        Array.from({ length: nvidia }, () => ({ vendor: 'NVIDIA Corporation', model: 'GH100' })),
      ),
  };
}

const OPTIONS: DoctorOptions = {
  images: ['roboguide/pair-driver:1'],
  probeGpu: false,
  registryPath: null,
  defaultRegistryPath: '/state/roboguide-eval/registry.db',
  outputDir: '/data/out',
  imageDiskBytes: 10 * 1024 ** 3,
};

const byName = (checks: readonly DoctorCheck[], name: string): DoctorCheck | undefined =>
  checks.find((c) => c.name === name);
const unavailable = (): EngineError =>
  new EngineError(
    'engine_unavailable',
    'Docker engine unreachable while trying to query the engine (ENOENT)',
    {
      statusCode: null,
      engineMessage: 'connect ENOENT /var/run/docker.sock',
    },
  );

describe('doctor: --mount-root', () => {
  it('reports the roots every mount must lie under, and warns about a root the mount rules refuse', async () => {
    const { deps } = fakeWorld();
    const none = await runDoctor(deps, { ...OPTIONS, homeDir: '/home/eval' });
    expect(byName(none.checks, 'mount roots')).toMatchObject({
      status: 'ok',
      detail: 'every cwd and session mount must lie under /home/eval, /tmp, /work, /data, /scratch',
      facts: { mount_roots: ['/home/eval', '/tmp', '/work', '/data', '/scratch'] },
    });
    // The home folder as a root allows its non-hidden subfolders: no warning about the home itself.
    const home = await runDoctor(deps, {
      ...OPTIONS,
      homeDir: '/home/eval',
      mountRoots: ['/home/eval', '/tmp'],
    });
    expect(byName(home.checks, 'mount roots')).toMatchObject({ status: 'ok' });
    const given = await runDoctor(deps, { ...OPTIONS, mountRoots: ['/srv/eval'] });
    expect(byName(given.checks, 'mount roots')).toMatchObject({
      status: 'ok',
      detail: 'every cwd and session mount must lie under /srv/eval',
      facts: { mount_roots: ['/srv/eval'] },
    });
    const bad = await runDoctor(deps, { ...OPTIONS, mountRoots: ['/srv/eval', '/usr/local'] });
    expect(byName(bad.checks, 'mount roots')).toMatchObject({
      status: 'warn',
      detail: expect.stringMatching(
        /\/usr\/local must not be, contain or lie inside the system folder \/usr/,
      ) as string,
    });
    expect(bad.exitCode).toBe(0);
  });
});

describe('doctor verdict', () => {
  it('all checks ok → exit 0, in a stable order', async () => {
    const { deps } = fakeWorld();
    const report = await runDoctor(deps, OPTIONS);
    expect(report.checks.map((c) => [c.name, c.status])).toEqual([
      ['engine', 'ok'],
      ['image roboguide/pair-driver:1', 'ok'],
      ['nvidia runtime', 'ok'],
      ['log driver', 'ok'],
      ['runtimes', 'ok'],
      ['host privilege', 'ok'],
      ['host', 'ok'],
      ['gpus', 'ok'],
      ['registry', 'ok'],
      ['disk', 'ok'],
      ['engine data root', 'ok'],
      ['image budget', 'ok'],
      ['pair limits', 'ok'],
      ['boot id', 'ok'],
      ['mount roots', 'ok'],
    ]);
    expect(report.exitCode).toBe(0);
    expect(byName(report.checks, 'engine')?.detail).toBe('Docker 20.10.24, API 1.41, id ABCD:EFGH');
  });

  it('engine down → exit 3, engine check failed, image and nvidia checks not run, host checks still reported', async () => {
    const { deps, calls } = fakeWorld({ info: () => Promise.reject(unavailable()) });
    const report = await runDoctor(deps, { ...OPTIONS, probeGpu: true });
    expect(report.exitCode).toBe(3);
    expect(report.engineReachable).toBe(false);
    expect(byName(report.checks, 'engine')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('connect ENOENT /var/run/docker.sock'),
    });
    expect(byName(report.checks, 'gpu probe')?.detail).toMatch(/not checked/);
    expect(calls.imageQueries).toEqual([]);
    expect(calls.created).toEqual([]);
    expect(byName(report.checks, 'disk')?.status).toBe('ok');
    expect(byName(report.checks, 'registry')?.status).toBe('ok');
  });

  it('an engine that answers with an error (not unreachable) fails with exit 1', async () => {
    const err = new EngineError(
      'engine_error',
      'Docker engine error while trying to query the engine: boom',
      { statusCode: 500, engineMessage: 'boom' },
    );
    const { deps } = fakeWorld({ info: () => Promise.reject(err) });
    const report = await runDoctor(deps, OPTIONS);
    expect(byName(report.checks, 'engine')?.status).toBe('fail');
    expect(report.exitCode).toBe(1);
  });

  it('warnings only (no nvidia runtime, GPUs unobservable, image missing, no boot id) → exit 0', async () => {
    const { deps } = fakeWorld({
      info: () => Promise.resolve({ ...ENGINE, runtimes: ['io.containerd.runc.v2', 'runc'] }),
      images: [],
      gpus: { kind: 'unobservable', reason: 'binary_missing', detail: 'nvidia-smi: not found' },
      bootId: null,
    });
    const report = await runDoctor(deps, OPTIONS);
    expect(report.checks.filter((c) => c.status === 'warn').map((c) => c.name)).toEqual([
      'image roboguide/pair-driver:1',
      'nvidia runtime',
      'gpus',
      'boot id',
    ]);
    expect(byName(report.checks, 'image roboguide/pair-driver:1')?.fix).toBe('roboguide-eval images build');
    expect(byName(report.checks, 'nvidia runtime')?.detail).toContain('io.containerd.runc.v2, runc');
    expect(byName(report.checks, 'gpus')?.detail).toContain('binary_missing');
    expect(report.exitCode).toBe(0);
  });

  it('one failure → exit 1', async () => {
    const { deps } = fakeWorld({
      registry: () => Promise.reject(new Error('attempt to write a readonly database')),
    });
    const report = await runDoctor(deps, OPTIONS);
    expect(byName(report.checks, 'registry')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('readonly database'),
    });
    expect(report.exitCode).toBe(1);
  });

  it('doctorExitCode: unreachable wins over everything; fail → 1; warn → 0', () => {
    const c = (status: DoctorCheck['status']): DoctorCheck => ({ name: 'x', status, detail: '', fix: null });
    expect(doctorExitCode([c('ok')], false)).toBe(3);
    expect(doctorExitCode([c('ok'), c('fail'), c('warn')], true)).toBe(1);
    expect(doctorExitCode([c('ok'), c('warn')], true)).toBe(0);
  });

  it.each(['journald', 'syslog', 'gelf', 'fluentd', 'awslogs', 'splunk', 'gcplogs', 'etwlogs', 'logentries'])(
    'reports a default log driver %s that ships output off the host as a warning (exit 0)',
    async (driver) => {
      const { deps } = fakeWorld({ info: () => Promise.resolve({ ...ENGINE, loggingDriver: driver }) });
      const report = await runDoctor(deps, OPTIONS);
      expect(byName(report.checks, 'log driver')).toMatchObject({
        status: 'warn',
        detail: expect.stringMatching(
          new RegExp(
            `^engine default ${driver} ships container output off this host.*pair containers set json-file`,
          ),
        ),
        fix: expect.stringContaining('"log-driver": "json-file"'),
      });
      expect(report.exitCode).toBe(0);
    },
  );

  it.each(['json-file', 'local'])('reports the local default log driver %s as ok', async (driver) => {
    const { deps } = fakeWorld({ info: () => Promise.resolve({ ...ENGINE, loggingDriver: driver }) });
    expect(byName((await runDoctor(deps, OPTIONS)).checks, 'log driver')).toMatchObject({
      status: 'ok',
      detail: expect.stringContaining(`engine default ${driver}`),
    });
  });

  it('warns on an API older than 1.40 (no device requests)', async () => {
    const { deps } = fakeWorld({
      info: () => Promise.resolve({ ...ENGINE, version: '18.09.1', apiVersion: '1.39' }),
    });
    const report = await runDoctor(deps, OPTIONS);
    expect(byName(report.checks, 'engine')).toMatchObject({
      status: 'warn',
      detail: expect.stringContaining('API >= 1.40'),
    });
  });
});

describe('doctor disk thresholds', () => {
  it.each([
    [DISK_WARN_BYTES, 'ok'],
    [DISK_WARN_BYTES - 1, 'warn'],
    [DISK_FAIL_BYTES, 'warn'],
    [DISK_FAIL_BYTES - 1, 'fail'],
  ])('%d free bytes → %s', async (freeBytes, status) => {
    const { deps } = fakeWorld({ freeBytes });
    expect(byName((await runDoctor(deps, OPTIONS)).checks, 'disk')?.status).toBe(status);
  });
});

describe('doctor disk check with --manifest', () => {
  it('warns when the free space is less than the batch caps could need, names both figures; ok when it is enough', async () => {
    const { deps } = fakeWorld({ freeBytes: 10 * 1024 ** 3 });
    const short = byName(
      (await runDoctor(deps, { ...OPTIONS, batchNeedBytes: 12 * 1024 ** 3 })).checks,
      'disk',
    );
    expect(short).toMatchObject({
      status: 'warn',
      detail: expect.stringMatching(/10\.0 GiB free, less than the 12\.0 GiB/),
    });
    const enough = byName(
      (await runDoctor(deps, { ...OPTIONS, batchNeedBytes: 10 * 1024 ** 3 })).checks,
      'disk',
    );
    expect(enough?.status).toBe('ok');
  });
});

describe('doctor registry target', () => {
  it('--registry wins; else the default path when it exists; else a scratch database', async () => {
    const flag = fakeWorld();
    await runDoctor(flag.deps, { ...OPTIONS, registryPath: '/tmp/r.db' });
    expect(flag.calls.registry).toEqual([{ kind: 'file', path: '/tmp/r.db' }]);

    const existing = fakeWorld({ existing: [OPTIONS.defaultRegistryPath] });
    await runDoctor(existing.deps, OPTIONS);
    expect(existing.calls.registry).toEqual([{ kind: 'file', path: OPTIONS.defaultRegistryPath }]);

    const none = fakeWorld();
    const report = await runDoctor(none.deps, OPTIONS);
    expect(none.calls.registry).toEqual([{ kind: 'temp' }]);
    expect(byName(report.checks, 'registry')?.detail).toContain('no registry yet');
  });

  it('checks a PostgreSQL registry by its URL without the password, and reports its schema version', async () => {
    const postgres = { display: 'postgres://eval@db:5432/rg', connection: { opaque: true } };
    const current = fakeWorld({ registry: () => Promise.resolve({ schema: { current: 1, supported: 1 } }) });
    const ok = await runDoctor(current.deps, { ...OPTIONS, registryPostgres: postgres });
    expect(current.calls.registry).toEqual([{ kind: 'postgres', ...postgres }]);
    expect(byName(ok.checks, 'registry')).toMatchObject({
      status: 'ok',
      detail: 'writable: postgres://eval@db:5432/rg; schema version 1',
    });

    const older = fakeWorld({ registry: () => Promise.resolve({ schema: { current: 2, supported: 3 } }) });
    expect(
      byName((await runDoctor(older.deps, { ...OPTIONS, registryPath: '/tmp/r.db' })).checks, 'registry'),
    ).toMatchObject({
      status: 'ok',
      detail: 'writable: /tmp/r.db; schema version 2 (migrated to 3 on first use)',
    });

    const newer = fakeWorld({ registry: () => Promise.resolve({ schema: { current: 5, supported: 1 } }) });
    const report = await runDoctor(newer.deps, { ...OPTIONS, registryPostgres: postgres });
    expect(byName(report.checks, 'registry')).toMatchObject({
      status: 'fail',
      detail: expect.stringMatching(/schema version 5 is newer than this tool \(1\)/),
    });
    expect(report.exitCode).toBe(1);

    const down = fakeWorld({ registry: () => Promise.reject(new Error('connect ECONNREFUSED')) });
    expect(
      byName((await runDoctor(down.deps, { ...OPTIONS, registryPostgres: postgres })).checks, 'registry'),
    ).toMatchObject({
      status: 'fail',
      fix: expect.stringMatching(/PGPASSWORD/),
    });
  });
});

describe('doctor GPU probe', () => {
  it('requests all GPUs in a labelled container, reports ok, and removes it', async () => {
    const { deps, calls, live } = fakeWorld();
    const report = await runDoctor(deps, { ...OPTIONS, probeGpu: true });
    expect(calls.created).toHaveLength(1);
    expect(calls.created[0]).toMatchObject({
      image: 'roboguide/pair-driver:1',
      labels: { 'roboguide.doctor': 'probe' },
      deviceRequests: [{ Driver: 'nvidia', Count: -1, Capabilities: [['gpu']] }],
    });
    expect(calls.created[0]?.cmd.slice(0, 2)).toEqual(['sh', '-c']);
    expect(byName(report.checks, 'gpu probe')).toMatchObject({
      status: 'ok',
      detail: expect.stringContaining('NVIDIA_VISIBLE_DEVICES=all as asked'),
    });
    expect(calls.removed).toEqual(['c1']);
    expect(live.size).toBe(0);
  });

  it('nvidia-smi -L in the container is the strongest evidence, parsed at the probe boundary', async () => {
    const probeOutput =
      'visible_set=1\nvisible=all\nnode=/dev/nvidia0\nsmi_exit=0\nsmi: GPU 0: NVIDIA H200 (UUID: GPU-5f1e)\nprobe=done\n';
    const report = await runDoctor(fakeWorld({ probeOutput }).deps, { ...OPTIONS, probeGpu: true });
    expect(byName(report.checks, 'gpu probe')).toMatchObject({
      status: 'ok',
      detail: expect.stringContaining('lists 1 GPU(s): GPU 0: NVIDIA H200'),
    });
  });

  it('an engine that dropped the request (Podman): the probe fails from the inspect, never starts, and is removed (issue 28)', async () => {
    let started = 0;
    const { deps, calls, live } = fakeWorld({
      grant: { deviceRequests: 0, cdiDevices: 0 },
      start: () => {
        started++;
        return Promise.resolve();
      },
    });
    const report = await runDoctor(deps, { ...OPTIONS, probeGpu: true });
    expect(byName(report.checks, 'gpu probe')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('holds none'),
      fix: expect.stringContaining('CDI'),
    });
    expect(started).toBe(0);
    expect(calls.removed).toEqual(['c1']);
    expect(live.size).toBe(0);
    expect(report.exitCode).toBe(1);
  });

  it('a container that started and exited 0 but shows no GPU is no GPU (the old probe said ok)', async () => {
    const report = await runDoctor(
      fakeWorld({ probeOutput: 'visible_set=\nvisible=\nsmi=absent\nprobe=done\n' }).deps,
      { ...OPTIONS, probeGpu: true },
    );
    expect(byName(report.checks, 'gpu probe')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('shows no GPU'),
    });
  });

  it('no NVIDIA runtime: fails with the engine text, still removes the container, exit 1', async () => {
    const text = 'could not select device driver "nvidia" with capabilities: [[gpu]]';
    const { deps, calls, live } = fakeWorld({
      start: () =>
        Promise.reject(
          new EngineError('nvidia_runtime_missing', `GPU requested but … ${text}`, {
            statusCode: 500,
            engineMessage: text,
          }),
        ),
    });
    const report = await runDoctor(deps, { ...OPTIONS, probeGpu: true });
    expect(byName(report.checks, 'gpu probe')).toMatchObject({
      status: 'fail',
      detail: text,
      fix: expect.stringContaining('nvidia-container-toolkit'),
    });
    expect(calls.removed).toEqual(['c1']);
    expect(live.size).toBe(0);
    expect(report.exitCode).toBe(1);
  });

  it('a probe that never exits fails and is removed', async () => {
    const { deps, calls } = fakeWorld({ wait: () => Promise.resolve({ kind: 'deadline' }) });
    const report = await runDoctor(deps, { ...OPTIONS, probeGpu: true });
    expect(byName(report.checks, 'gpu probe')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('did not exit'),
    });
    expect(calls.removed).toEqual(['c1']);
  });
});

describe('doctor host facts (systeminformation, through the HostFactsSource port)', () => {
  it('reports CPU, memory and OS in one ok line, with the facts in --json', async () => {
    const { deps } = fakeWorld();
    const host = byName((await runDoctor(deps, OPTIONS)).checks, 'host');
    expect(host).toMatchObject({
      status: 'ok',
      detail:
        'AMD EPYC, 64 core(s) (32 physical); 512.0 GiB memory, 500.0 GiB available; Ubuntu 24.04, kernel 6.8.0 (x64)',
      facts: {
        cpu: { kind: 'known', cores: 64 },
        memory: { kind: 'known', total_bytes: 512 * 1024 ** 3 },
        os: { kind: 'known', kernel: '6.8.0' },
      },
    });
  });

  it('a fact that throws is unknown with its reason; with none of CPU, memory and OS known the line warns (exit 0)', async () => {
    const broken = () => Promise.reject(new Error('lscpu: not found'));
    const some = byName(
      (await runDoctor(fakeWorld({ facts: { cpu: broken } }).deps, OPTIONS)).checks,
      'host',
    );
    expect(some).toMatchObject({
      status: 'ok',
      detail: expect.stringMatching(/^CPU unknown \(lscpu: not found\); 512\.0 GiB memory/),
    });
    const report = await runDoctor(
      fakeWorld({ facts: { cpu: broken, memory: broken, os: broken } }).deps,
      OPTIONS,
    );
    expect(byName(report.checks, 'host')).toMatchObject({
      status: 'warn',
      fix: expect.stringContaining('lscpu'),
    });
    expect(report.exitCode).toBe(0);
  });

  it("the disk line names the output file system (type, device, mount, size) from the facts; its verdict stays statfs's", async () => {
    const { deps } = fakeWorld({ freeBytes: DISK_FAIL_BYTES - 1 });
    const disk = byName((await runDoctor(deps, OPTIONS)).checks, 'disk');
    expect(disk).toMatchObject({
      status: 'fail',
      detail: expect.stringMatching(/\(ext4 \/dev\/vda mounted on \/, 250\.0 GiB in all\)$/),
    });
    expect(disk?.facts).toEqual({
      output_fs: {
        kind: 'known',
        path: '/data/out',
        fs: '/dev/vda',
        type: 'ext4',
        mount: '/',
        size_bytes: 250 * 1024 ** 3,
        free_bytes: 70 * 1024 ** 3,
      },
    });
  });

  it('the engine data root: ok with its file system, warn under 5 GiB free, warn when unknown', async () => {
    const okRoot = byName((await runDoctor(fakeWorld().deps, OPTIONS)).checks, 'engine data root');
    expect(okRoot).toMatchObject({
      status: 'ok',
      detail: '/var/lib/docker: ext4 /dev/vda mounted on /, 70.0 GiB free of 250.0 GiB',
    });

    const full = fakeWorld({
      facts: { fileSystemOf: (path) => Promise.resolve(fsFact(path, DATA_ROOT_WARN_BYTES - 1)) },
    });
    expect(byName((await runDoctor(full.deps, OPTIONS)).checks, 'engine data root')).toMatchObject({
      status: 'warn',
      detail: expect.stringContaining('(< 5.0 GiB)'),
    });

    const unreported = fakeWorld({ info: () => Promise.resolve({ ...ENGINE, dataRoot: undefined }) });
    expect(byName((await runDoctor(unreported.deps, OPTIONS)).checks, 'engine data root')).toMatchObject({
      status: 'warn',
      detail: 'not checked: the engine did not report its data root',
    });

    const down = fakeWorld({ info: () => Promise.reject(unavailable()) });
    const report = await runDoctor(down.deps, OPTIONS);
    expect(byName(report.checks, 'engine data root')).toMatchObject({
      status: 'warn',
      detail: 'not checked: the engine did not answer',
    });
    expect(byName(report.checks, 'host')?.status).toBe('ok');
  });

  it('asks the engine for its info once (the data root comes from the same answer)', async () => {
    let infos = 0;
    const { deps } = fakeWorld({ info: () => (infos++, Promise.resolve(ENGINE)) });
    await runDoctor(deps, OPTIONS);
    expect(infos).toBe(1);
  });

  it('warns when the PCI bus lists a different number of NVIDIA controllers than nvidia-smi sees, naming both', async () => {
    const four = Array.from({ length: 4 }, () => ({ vendor: 'NVIDIA Corporation', model: 'GH100' }));
    const report = await runDoctor(
      fakeWorld({ facts: { gpuControllers: () => Promise.resolve(four) } }).deps,
      OPTIONS,
    );
    expect(byName(report.checks, 'gpus')).toMatchObject({
      status: 'warn',
      detail: expect.stringMatching(
        /^1 GPU\(s\), 81559 MiB in all: .*; nvidia-smi sees 1 GPU\(s\) but the PCI bus lists 4 NVIDIA controller\(s\)$/,
      ),
      fix: expect.stringContaining('nvidia-smi -L'),
      facts: { gpu_controllers: { kind: 'known', nvidia_count: 4 } },
    });
    expect(report.exitCode).toBe(0);

    const noDriver = fakeWorld({
      gpus: { kind: 'unobservable', reason: 'binary_missing', detail: 'nvidia-smi: not found' },
      facts: { gpuControllers: () => Promise.resolve(four.slice(0, 2)) },
    });
    expect(byName((await runDoctor(noDriver.deps, OPTIONS)).checks, 'gpus')?.detail).toMatch(
      /^not observable \(binary_missing\): nvidia-smi: not found; nvidia-smi sees no GPU \(not observable\) but the PCI bus lists 2 NVIDIA controller\(s\)$/,
    );
  });

  it('controllers that do not answer leave the nvidia-smi verdict alone', async () => {
    const { deps } = fakeWorld({
      facts: { gpuControllers: () => Promise.reject(new Error('lspci: not found')) },
    });
    expect(byName((await runDoctor(deps, OPTIONS)).checks, 'gpus')).toMatchObject({
      status: 'ok',
      facts: { gpu_controllers: { kind: 'unknown', reason: 'lspci: not found' } },
    });
  });
});

describe('doctor human table', () => {
  it('aligns names, marks each status, and prints the fix only under lines that are not ok', () => {
    const text = renderDoctorTable({
      engineReachable: true,
      exitCode: 1,
      checks: [
        { name: 'engine', status: 'ok', detail: 'Docker 20.10.24', fix: null },
        { name: 'nvidia runtime', status: 'warn', detail: 'not registered', fix: 'install it' },
        { name: 'disk', status: 'fail', detail: '100 MiB free', fix: 'free space' },
      ],
    });
    expect(text.split('\n')).toEqual([
      '✓ engine          Docker 20.10.24',
      '! nvidia runtime  not registered',
      '                  fix: install it',
      '✗ disk            100 MiB free',
      '                  fix: free space',
      '',
      '1 ok, 1 warning(s), 1 failure(s): exit 1',
    ]);
  });
});

describe('doctor on Podman behind the Docker API (issue 28)', () => {
  const PODMAN: EngineInfo = {
    id: 'f1e2',
    product: 'podman',
    version: '4.3.1',
    apiVersion: '1.41',
    runtimes: ['crun', 'runc', 'runsc'],
    loggingDriver: '',
  };
  const podman = (initPath: string | null, specs: readonly string[], existing: readonly string[]) => {
    const world = fakeWorld({ info: () => Promise.resolve(PODMAN), existing });
    return {
      ...world.deps,
      podmanHost: { initPath: () => Promise.resolve(initPath), cdiSpecs: () => Promise.resolve(specs) },
    };
  };

  it('names Podman and its own version, knows its log driver answer, finds catatonit, and says GPUs are dropped', async () => {
    const report = await runDoctor(podman(null, [], ['/usr/libexec/podman/catatonit']), OPTIONS);
    expect(byName(report.checks, 'engine')).toMatchObject({
      status: 'ok',
      detail: expect.stringMatching(/^Podman 4\.3\.1, API 1\.41/),
    });
    expect(byName(report.checks, 'podman init')).toMatchObject({
      status: 'ok',
      detail: expect.stringContaining('/usr/libexec/podman/catatonit'),
    });
    expect(byName(report.checks, 'log driver')).toMatchObject({
      status: 'ok',
      detail: expect.stringContaining('not reported over the Docker API'),
    });
    expect(byName(report.checks, 'podman gpus')).toMatchObject({
      status: 'warn',
      detail: expect.stringMatching(/gpu_request_dropped.*no CDI spec in \/etc\/cdi or \/var\/run\/cdi/),
    });
    expect(byName(report.checks, 'nvidia runtime')).toBeUndefined();
    expect(report.exitCode).toBe(0);
  });

  it('no catatonit and no init_path: fails with the fix (every pair would fail at its start)', async () => {
    const report = await runDoctor(podman(null, [], []), OPTIONS);
    expect(byName(report.checks, 'podman init')).toMatchObject({
      status: 'fail',
      fix: expect.stringContaining('apt-get install catatonit'),
    });
    expect(report.exitCode).toBe(1);
  });

  it('an init_path in containers.conf is checked instead; one that is missing fails', async () => {
    expect(
      byName(
        (await runDoctor(podman('/usr/bin/tini', [], ['/usr/bin/tini']), OPTIONS)).checks,
        'podman init',
      ),
    ).toMatchObject({ status: 'ok', detail: expect.stringContaining('/usr/bin/tini') });
    expect(
      byName(
        (await runDoctor(podman('/usr/bin/tini', [], ['/usr/libexec/podman/catatonit']), OPTIONS)).checks,
        'podman init',
      )?.status,
    ).toBe('fail');
  });

  it('a CDI spec on the host is named (and that CDI names are not passed yet)', async () => {
    const report = await runDoctor(
      podman(null, ['/etc/cdi/nvidia.yaml'], ['/usr/libexec/podman/catatonit']),
      OPTIONS,
    );
    expect(byName(report.checks, 'podman gpus')).toMatchObject({
      status: 'warn',
      detail: expect.stringContaining('/etc/cdi/nvidia.yaml'),
    });
  });
});
