import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { cpus, release, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SystemInformationHostFacts } from '../../src/adapters/host-facts/systeminformation-host-facts.js';
import { StaticFactsCache } from '../../src/adapters/host-facts/static-facts-cache.js';
import { gatherHostFacts } from '../../src/app/host-facts.js';
import { systemClock } from '../../src/adapters/system-clock.js';
import type { DoctorCheck } from '../../src/app/doctor/check.js';
import type { FileSystemFact, HostFact } from '../../src/core/host-facts.js';
import { noDocker } from '../support/docker.js';

const BIN = resolve('bin/run.js');
let work: string;
let checks: DoctorCheck[];

/** `df -kPT PATH`: the file system holding PATH as df sees it. */
function df(path: string): {
  fs: string;
  type: string;
  size_bytes: number;
  free_bytes: number;
  mount: string;
} {
  const line =
    execFileSync('df', ['-kPT', path], { encoding: 'utf8', env: { ...process.env, LC_ALL: 'C' } })
      .trim()
      .split('\n')[1] ?? '';
  const [fs = '', type = '', blocks = '0', , available = '0', , ...mount] = line.split(/\s+/);
  return {
    fs,
    type,
    size_bytes: Number(blocks) * 1024,
    free_bytes: Number(available) * 1024,
    mount: mount.join(' '),
  };
}

const check = (name: string): DoctorCheck => {
  const found = checks.find((c) => c.name === name);
  if (found === undefined) throw new Error(`no ${name} check`);
  return found;
};

const known = <T extends object>(fact: unknown): T & { kind: 'known' } => {
  expect(fact).toMatchObject({ kind: 'known' });
  return fact as T & { kind: 'known' };
};

describe('host facts: the real systeminformation on this machine, through `doctor --json`', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-host-facts-'));
    const run = spawnSync(
      process.execPath,
      ['--disable-warning=ExperimentalWarning', BIN, 'doctor', '--json', '--output', join(work, 'not-yet')],
      {
        encoding: 'utf8',
      },
    );
    checks = (JSON.parse(run.stdout) as { checks: DoctorCheck[] }).checks;
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('memory total is /proc/meminfo MemTotal; CPU cores and kernel are what Node sees', async () => {
    const host = check('host');
    expect(host.status).toBe('ok');
    const memTotalKb = Number(/^MemTotal:\s+(\d+) kB$/m.exec(await readFile('/proc/meminfo', 'utf8'))?.[1]);
    const memory = known<{ total_bytes: number; available_bytes: number }>(host.facts?.['memory']);
    expect(memory.total_bytes).toBe(memTotalKb * 1024);
    expect(memory.available_bytes).toBeGreaterThan(0);
    expect(memory.available_bytes).toBeLessThanOrEqual(memory.total_bytes);
    expect(known<{ cores: number }>(host.facts?.['cpu']).cores).toBe(cpus().length);
    expect(known<{ kernel: string }>(host.facts?.['os']).kernel).toBe(release());
  });

  it("the output directory's file system (its nearest existing ancestor) is the one df names", () => {
    const fact = known<FileSystemFact>(check('disk').facts?.['output_fs']);
    const seen = df(work);
    expect(fact).toMatchObject({
      path: join(work, 'not-yet'),
      fs: seen.fs,
      type: seen.type,
      mount: seen.mount,
      size_bytes: seen.size_bytes,
    });
    // Free space moves while the suite runs (other writers): within 1 % of df's figure.
    expect(Math.abs(fact.free_bytes - seen.free_bytes)).toBeLessThan(seen.size_bytes / 100);
  });

  it.skipIf(noDocker)("the engine's data root (DockerRootDir) is on the file system df names for it", () => {
    const root = execFileSync('docker', ['info', '--format', '{{.DockerRootDir}}'], {
      encoding: 'utf8',
    }).trim();
    const fact = known<FileSystemFact>(check('engine data root').facts?.['engine_data_root_fs']);
    const seen = df(root);
    // The device, type and size; the mount point may differ: df names a bind mount of the same device that
    // its own listing (and so systeminformation's) leaves out.
    expect(fact).toMatchObject({ path: root, fs: seen.fs, type: seen.type, size_bytes: seen.size_bytes });
    expect(root === fact.mount || root.startsWith(fact.mount === '/' ? '/' : `${fact.mount}/`)).toBe(true);
  });

  it('GPU controllers are known; no NVIDIA controller on this machine, and no mismatch with nvidia-smi', () => {
    const gpus = check('gpus');
    const controllers = gpus.facts?.['gpu_controllers'] as HostFact<{ nvidia_count: number }>;
    expect(controllers.kind).toBe('known');
    if (controllers.kind === 'known' && controllers.nvidia_count === 0)
      expect(gpus.detail).not.toMatch(/PCI bus lists/);
  });
});

describe('host facts adapter: a source that hangs or throws gives unknown facts, and its processes are killed', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-host-facts-'));
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('memory never answers, cpu throws, osInfo spins (and blocks the controllers of its group): unknown; the file systems are known; the children end', async () => {
    // A stand-in for systeminformation (the adapter loads it by path): each child records its pid.
    const standIn = join(work, 'stand-in.cjs');
    await writeFile(
      standIn,
      [
        `require('node:fs').appendFileSync(${JSON.stringify(join(work, 'pids'))}, process.pid + '\\n');`,
        'exports.mem = () => new Promise(() => { setInterval(() => {}, 1000); });',
        "exports.fsSize = () => Promise.resolve([{ fs: '/dev/x', type: 'ext4', size: 100, available: 40, mount: '/' }]);",
        "exports.cpu = () => { throw new Error('lscpu failed'); };",
        'exports.osInfo = () => { for (;;) {} };',
        'exports.graphics = () => Promise.resolve({ controllers: [] });',
      ].join('\n'),
    );
    const source = new SystemInformationHostFacts({
      modulePath: standIn,
      deadlineMs: 1_500,
      dynamic: 'child',
    });
    const facts = await gatherHostFacts(
      { source, clock: systemClock, timeoutMs: 1_000 },
      { outputDir: work, dataRoot: null },
    );
    expect(facts.memory).toEqual({ kind: 'unknown', reason: 'no answer within 1000 ms' });
    expect(facts.cpu).toEqual({ kind: 'unknown', reason: 'lscpu failed' });
    expect(facts.os).toEqual({ kind: 'unknown', reason: 'no answer within 1000 ms' });
    expect(facts.gpu_controllers).toEqual({ kind: 'unknown', reason: 'no answer within 1000 ms' });
    expect(facts.output_fs).toMatchObject({ kind: 'known', fs: '/dev/x', mount: '/' });

    const pids = (await readFile(join(work, 'pids'), 'utf8')).trim().split('\n').map(Number);
    expect(pids).toHaveLength(2);
    // The adapter's deadline kills both process groups: wait for it (bounded), then each pid is gone.
    const alive = (pid: number): boolean => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    for (let i = 0; i < 100 && pids.some(alive); i++) await new Promise((r) => setTimeout(r, 100));
    expect(pids.filter(alive)).toEqual([]);
  });

  it('static facts (cpu, os, controllers) are asked once per boot: a second source of the same boot starts only the other child', async () => {
    const standIn = join(work, 'answers.cjs');
    const pidsFile = join(work, 'answer-pids');
    await writeFile(
      standIn,
      [
        `require('node:fs').appendFileSync(${JSON.stringify(pidsFile)}, process.argv.slice(2).join(',') + '\\n');`,
        'exports.mem = () => Promise.resolve({ total: 1000, available: 600 });',
        "exports.fsSize = () => Promise.resolve([{ fs: '/dev/x', type: 'ext4', size: 100, available: 40, mount: '/' }]);",
        "exports.cpu = () => Promise.resolve({ manufacturer: 'AMD', brand: 'EPYC', cores: 4, physicalCores: 2 });",
        "exports.osInfo = () => Promise.resolve({ distro: 'Debian', release: '12', kernel: '6.1', arch: 'x64' });",
        "exports.graphics = () => Promise.resolve({ controllers: [{ vendor: 'NVIDIA Corporation', model: 'GH100' }] });",
      ].join('\n'),
    );
    const cacheFile = join(work, 'state', 'host-facts.json');
    const gather = (boot: string) =>
      gatherHostFacts(
        {
          source: new SystemInformationHostFacts({
            modulePath: standIn,
            cache: new StaticFactsCache(cacheFile, () => Promise.resolve(boot)),
            dynamic: 'child',
          }),
          clock: systemClock,
        },
        { outputDir: work, dataRoot: null },
      );
    const first = await gather('boot-1');
    // The cache is written just after the answers: wait (bounded) until it holds the three static facts.
    const cached = async (boot: string): Promise<void> => {
      for (let i = 0; i < 100; i++) {
        const file = JSON.parse(await readFile(cacheFile, 'utf8').catch(() => '{}')) as {
          boot_id?: string;
          facts?: object;
        };
        if (file.boot_id === boot && Object.keys(file.facts ?? {}).length === 3) return;
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    await cached('boot-1');
    const second = await gather('boot-1');
    expect(second).toEqual(first);
    expect(second.cpu).toEqual({ kind: 'known', model: 'AMD EPYC', cores: 4, physical_cores: 2 });
    expect(JSON.parse(await readFile(cacheFile, 'utf8'))).toMatchObject({
      boot_id: 'boot-1',
      facts: { cpu: { cores: 4 }, os: { kernel: '6.1' } },
    });
    await gather('boot-2');
    await cached('boot-2');
    const groups = (await readFile(pidsFile, 'utf8')).trim().split('\n');
    // boot-1: both children; boot-1 again: only the dynamic one; boot-2 (a reboot): both again.
    expect(groups.sort()).toEqual([
      'cpu,os,gpuControllers',
      'cpu,os,gpuControllers',
      'memory,fileSystems',
      'memory,fileSystems',
      'memory,fileSystems',
    ]);
  });
  it('on Linux memory and file systems are read in this process (no child for them): the same figures as /proc/meminfo and df', async () => {
    // A stand-in whose dynamic facts would fail: a child asked for them would make them unknown.
    const standIn = join(work, 'static-only.cjs');
    const groupsFile = join(work, 'static-only-groups');
    await writeFile(
      standIn,
      [
        `require('node:fs').appendFileSync(${JSON.stringify(groupsFile)}, process.argv.slice(2).join(',') + '\\n');`,
        "exports.mem = () => { throw new Error('asked a child'); };",
        "exports.fsSize = () => { throw new Error('asked a child'); };",
        "exports.cpu = () => Promise.resolve({ manufacturer: 'AMD', brand: 'EPYC', cores: 4, physicalCores: 2 });",
        "exports.osInfo = () => Promise.resolve({ distro: 'Debian', release: '12', kernel: '6.1', arch: 'x64' });",
        'exports.graphics = () => Promise.resolve({ controllers: [] });',
      ].join('\n'),
    );
    const source = new SystemInformationHostFacts({ modulePath: standIn });
    const facts = await gatherHostFacts(
      { source, clock: systemClock },
      { outputDir: join(work, 'not-yet', 'deeper'), dataRoot: null },
    );
    const memTotal = /^MemTotal:\s+(\d+) kB$/m.exec(await readFile('/proc/meminfo', 'utf8'))?.[1];
    expect(facts.memory).toMatchObject({ kind: 'known', total_bytes: Number(memTotal) * 1024 });
    const seen = df(work);
    const fs = known<FileSystemFact>(facts.output_fs);
    expect(fs).toMatchObject({
      path: join(work, 'not-yet', 'deeper'),
      fs: seen.fs,
      type: seen.type,
      mount: seen.mount,
      size_bytes: seen.size_bytes,
    });
    expect(Math.abs(fs.free_bytes - seen.free_bytes)).toBeLessThan(seen.size_bytes / 100);
    expect(facts.cpu).toMatchObject({ kind: 'known', cores: 4 });
    // Only the static group was asked of a child.
    expect((await readFile(groupsFile, 'utf8')).trim().split('\n')).toEqual(['cpu,os,gpuControllers']);
  });
});
