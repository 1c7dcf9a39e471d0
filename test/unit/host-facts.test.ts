import { describe, expect, it } from 'vitest';
import { gatherHostFacts, HOST_FACTS_TIMEOUT_MS } from '../../src/app/host-facts.js';
import type { HostFactsSource } from '../../src/app/ports/host-facts.js';
import {
  controllersFromSi,
  cpuFromSi,
  memoryFromSi,
  mountsFromSi,
  osFromSi,
} from '../../src/adapters/host-facts/si-shapes.js';
import { gpuControllersFact, gpuCountMismatch, mountOf, type MountFact } from '../../src/core/host-facts.js';

const never = <T>(): Promise<T> => new Promise<T>(() => {});

/** A host whose every fact answers at once; each can be replaced. */
function source(overrides: Partial<HostFactsSource> = {}): HostFactsSource & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    cpu: () => Promise.resolve({ model: 'AMD EPYC', cores: 2, physical_cores: 2 }),
    memory: () => Promise.resolve({ total_bytes: 8 * 1024 ** 3, available_bytes: 6 * 1024 ** 3 }),
    os: () => Promise.resolve({ distro: 'Debian GNU/Linux', release: '12', kernel: '6.1.0', arch: 'x64' }),
    fileSystemOf: (path, options) => {
      asked.push(`${path} nearest=${options.nearestAncestor}`);
      return Promise.resolve({
        path,
        fs: '/dev/vda',
        type: 'ext4',
        mount: '/',
        size_bytes: 100,
        free_bytes: 40,
      });
    },
    gpuControllers: () =>
      Promise.resolve([
        { vendor: 'NVIDIA Corporation', model: 'GH100' },
        { vendor: 'ASPEED', model: 'AST2600' },
      ]),
    ...overrides,
  };
}

/** A timer the test fires: `sleep` resolves only when `fire()` is called (or the gathering aborts it). */
function manualTimer() {
  const waiting: { ms: number; resolve: () => void }[] = [];
  return {
    waiting,
    sleep: (ms: number, signal?: AbortSignal) =>
      new Promise<void>((resolve) => {
        waiting.push({ ms, resolve });
        signal?.addEventListener('abort', () => resolve(), { once: true });
      }),
    fire: () => {
      for (const w of waiting) w.resolve();
    },
  };
}

describe('gatherHostFacts', () => {
  it('collects every fact; the output dir may not exist yet (nearest ancestor), the data root must', async () => {
    const s = source();
    const facts = await gatherHostFacts(
      { source: s, clock: { sleep: () => never() } },
      { outputDir: '/data/out', dataRoot: '/var/lib/docker' },
    );
    expect(facts).toEqual({
      cpu: { kind: 'known', model: 'AMD EPYC', cores: 2, physical_cores: 2 },
      memory: { kind: 'known', total_bytes: 8 * 1024 ** 3, available_bytes: 6 * 1024 ** 3 },
      os: { kind: 'known', distro: 'Debian GNU/Linux', release: '12', kernel: '6.1.0', arch: 'x64' },
      output_fs: {
        kind: 'known',
        path: '/data/out',
        fs: '/dev/vda',
        type: 'ext4',
        mount: '/',
        size_bytes: 100,
        free_bytes: 40,
      },
      engine_data_root_fs: {
        kind: 'known',
        path: '/var/lib/docker',
        fs: '/dev/vda',
        type: 'ext4',
        mount: '/',
        size_bytes: 100,
        free_bytes: 40,
      },
      gpu_controllers: {
        kind: 'known',
        controllers: [
          { vendor: 'NVIDIA Corporation', model: 'GH100' },
          { vendor: 'ASPEED', model: 'AST2600' },
        ],
        nvidia_count: 1,
      },
    });
    expect(s.asked).toEqual(['/data/out nearest=true', '/var/lib/docker nearest=false']);
  });

  it('a call that does not answer in time is unknown, naming the timeout; the others are kept', async () => {
    const timer = manualTimer();
    const pending = gatherHostFacts(
      { source: source({ gpuControllers: never, os: never }), clock: timer, timeoutMs: 250 },
      { outputDir: '/out', dataRoot: '/var/lib/docker' },
    );
    await new Promise((r) => setImmediate(r));
    expect(timer.waiting.map((w) => w.ms)).toEqual(Array(6).fill(250));
    timer.fire();
    const facts = await pending;
    expect(facts.gpu_controllers).toEqual({ kind: 'unknown', reason: 'no answer within 250 ms' });
    expect(facts.os).toEqual({ kind: 'unknown', reason: 'no answer within 250 ms' });
    expect(facts.cpu.kind).toBe('known');
    expect(facts.memory.kind).toBe('known');
  });

  it('a call that throws (or rejects) is unknown with its message; nothing is thrown', async () => {
    const facts = await gatherHostFacts(
      {
        source: source({
          cpu: () => {
            throw new Error('lscpu: command not found');
          },
          memory: () => Promise.reject(new Error('memory: total is 0')),
          fileSystemOf: (path) =>
            Promise.reject(
              Object.assign(new Error(`ENOENT: no such file or directory, realpath '${path}'`), {
                code: 'ENOENT',
              }),
            ),
        }),
        clock: { sleep: () => never() },
      },
      { outputDir: '/out', dataRoot: '/srv/docker' },
    );
    expect(facts.cpu).toEqual({ kind: 'unknown', reason: 'lscpu: command not found' });
    expect(facts.memory).toEqual({ kind: 'unknown', reason: 'memory: total is 0' });
    expect(facts.engine_data_root_fs).toEqual({
      kind: 'unknown',
      reason: "ENOENT: no such file or directory, realpath '/srv/docker'",
    });
    expect(facts.os.kind).toBe('known');
  });

  it('no data root reported, or the engine did not answer: that fact is unknown with the reason', async () => {
    const missing = await gatherHostFacts(
      { source: source(), clock: { sleep: () => never() } },
      { outputDir: '/out', dataRoot: null },
    );
    expect(missing.engine_data_root_fs).toEqual({
      kind: 'unknown',
      reason: 'the engine did not report its data root',
    });
    const down = await gatherHostFacts(
      { source: source(), clock: { sleep: () => never() } },
      { outputDir: '/out', dataRoot: Promise.reject(new Error('the engine did not answer')) },
    );
    expect(down.engine_data_root_fs).toEqual({ kind: 'unknown', reason: 'the engine did not answer' });
    expect(down.output_fs.kind).toBe('known');
  });

  it('ends its timers once every fact is in (nothing pending keeps the process alive)', async () => {
    const timer = manualTimer();
    const aborted: boolean[] = [];
    await gatherHostFacts(
      {
        source: source(),
        clock: {
          sleep: (ms, signal) => {
            signal?.addEventListener('abort', () => aborted.push(true));
            return timer.sleep(ms, signal);
          },
        },
      },
      { outputDir: '/out', dataRoot: '/d' },
    );
    expect(aborted).toHaveLength(6);
    expect(timer.waiting.map((w) => w.ms)).toEqual(Array(6).fill(HOST_FACTS_TIMEOUT_MS));
  });
});

describe('mountOf', () => {
  const m = (mount: string): MountFact => ({
    fs: `dev${mount}`,
    type: 'ext4',
    mount,
    size_bytes: 1,
    free_bytes: 1,
  });
  const mounts = [m('/'), m('/data'), m('/data/fast'), m('/var/lib/docker')];
  it.each([
    ['/data/fast/out', '/data/fast'],
    ['/data/fast', '/data/fast'],
    ['/data/faster', '/data'],
    ['/var/lib/docker', '/var/lib/docker'],
    ['/var/lib', '/'],
    ['/', '/'],
  ])('%s is on %s (the longest mount point that holds it)', (path, mount) => {
    expect(mountOf(path, mounts)?.mount).toBe(mount);
  });
  it('null when no listed mount holds the path', () => {
    expect(mountOf('/srv', [m('/data')])).toBeNull();
  });
});

describe('gpuCountMismatch (nvidia-smi against the PCI bus)', () => {
  const bus = (n: number) => ({
    kind: 'known' as const,
    ...gpuControllersFact(Array.from({ length: n }, () => ({ vendor: 'NVIDIA', model: 'H100' }))),
  });
  it('agreeing counts, or an unknown bus: no mismatch', () => {
    expect(gpuCountMismatch(2, bus(2))).toBeNull();
    expect(gpuCountMismatch(null, bus(0))).toBeNull();
    expect(gpuCountMismatch(4, { kind: 'unknown', reason: 'lspci: not found' })).toBeNull();
  });
  it('a different count names both figures', () => {
    expect(gpuCountMismatch(2, bus(4))).toBe(
      'nvidia-smi sees 2 GPU(s) but the PCI bus lists 4 NVIDIA controller(s)',
    );
    expect(gpuCountMismatch(null, bus(1))).toBe(
      'nvidia-smi sees no GPU (not observable) but the PCI bus lists 1 NVIDIA controller(s)',
    );
  });
  it('counts only NVIDIA vendors', () => {
    expect(
      gpuControllersFact([
        { vendor: 'NVIDIA Corporation', model: 'A100' },
        { vendor: 'Matrox', model: 'G200' },
        { vendor: 'nVidia', model: 'T4' },
      ]).nvidia_count,
    ).toBe(2);
  });
});

describe('systeminformation answers read into facts', () => {
  it('reads the fields it needs from systeminformation-shaped objects', () => {
    expect(
      cpuFromSi({ manufacturer: 'AMD', brand: 'EPYC 9654', cores: 192, physicalCores: 96, speed: 2.4 }),
    ).toEqual({ model: 'AMD EPYC 9654', cores: 192, physical_cores: 96 });
    expect(cpuFromSi({ manufacturer: '', brand: '', cores: 1, physicalCores: 1 }).model).toBe('unnamed');
    expect(memoryFromSi({ total: 1024, free: 10, available: 512 })).toEqual({
      total_bytes: 1024,
      available_bytes: 512,
    });
    expect(
      osFromSi({
        platform: 'linux',
        distro: 'Ubuntu',
        release: '24.04',
        kernel: '6.8.0-45-generic',
        arch: 'x64',
      }),
    ).toEqual({
      distro: 'Ubuntu',
      release: '24.04',
      kernel: '6.8.0-45-generic',
      arch: 'x64',
    });
    expect(
      mountsFromSi([
        {
          fs: '/dev/nvme0n1p2',
          type: 'xfs',
          size: 1000,
          used: 400,
          available: 500,
          use: 44.4,
          mount: '/data',
          rw: true,
        },
        { fs: 'C:', type: 'NTFS', size: 1, used: 0, available: 1, mount: 'C:' },
      ]),
    ).toEqual([{ fs: '/dev/nvme0n1p2', type: 'xfs', mount: '/data', size_bytes: 1000, free_bytes: 500 }]);
    expect(
      controllersFromSi([
        { vendor: 'NVIDIA Corporation', model: 'GH100 [H100 SXM5 80GB]', bus: 'PCI', vram: 81559 },
      ]),
    ).toEqual([{ vendor: 'NVIDIA Corporation', model: 'GH100 [H100 SXM5 80GB]' }]);
  });

  it.each([
    ['cpu without cores', () => cpuFromSi({ manufacturer: 'AMD', cores: 0, physicalCores: 0 }), /no cores/],
    ['cpu not an object', () => cpuFromSi(null), /not an object/],
    ['memory without a total', () => memoryFromSi({ available: 5 }), /no total/],
    ['memory total 0', () => memoryFromSi({ total: 0, available: 0 }), /total is 0/],
    ['os without a kernel', () => osFromSi({ distro: 'x' }), /no kernel/],
    ['file systems not a list', () => mountsFromSi({}), /not a list/],
    ['a file system without a size', () => mountsFromSi([{ fs: 'a', mount: '/', available: 1 }]), /no size/],
    ['controllers not a list', () => controllersFromSi('lspci failed'), /not a list/],
  ])('%s throws (the fact becomes unknown)', (_what, read, message) => {
    expect(read).toThrow(message);
  });
});
