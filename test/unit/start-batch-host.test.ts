import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { batchHostRequest, gatherHostFacts } from '../../src/app/host-facts.js';
import type { HostFactsRequest, HostFactsSource } from '../../src/app/ports/host-facts.js';
import type { HostFactsRecord } from '../../src/core/host-facts.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { answeringEngine } from '../support/fakes.js';
import { clockAt } from '../support/fake-time.js';

/** Only what prepareBatch asks of the engine; this one reports its data root. */
const engine = answeringEngine({ dataRoot: '/var/lib/docker' });

const clock = clockAt(() => new Date('2026-12-02T10:00:00Z'));
let dir: string;

const source: HostFactsSource = {
  cpu: () => Promise.resolve({ model: 'AMD EPYC', cores: 2, physical_cores: 2 }),
  memory: () => Promise.resolve({ total_bytes: 100, available_bytes: 50 }),
  os: () => Promise.resolve({ distro: 'Debian GNU/Linux', release: '12', kernel: '6.1.0', arch: 'x64' }),
  fileSystemOf: (path) =>
    Promise.resolve({ path, fs: '/dev/vda', type: 'ext4', mount: '/', size_bytes: 10, free_bytes: 5 }),
  gpuControllers: () => Promise.resolve([]),
};

async function start(hostFacts: (request: HostFactsRequest) => Promise<HostFactsRecord>) {
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: 'roboguide/pair-driver:1',
    jobs: [
      {
        job_id: 'j1',
        argv: ['/opt/driver/run'],
        cwd: join(dir, 'cwd'),
        outcome_path: join(dir, 'out', 'j1.json'),
      },
    ],
  };
  const path = join(dir, 'manifest.json');
  await writeFile(path, JSON.stringify(manifest));
  const output = join(dir, 'batch');
  const record = await prepareBatch(
    { fs: new NodeFileSystem(), host: procHostIdentity, runtime: engine, clock, hostFacts },
    {
      manifestPath: path,
      output,
      registryPath: join(dir, 'r.db'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 't',
    },
  );
  return {
    record,
    onDisk: JSON.parse(await readFile(join(output, 'batch.json'), 'utf8')) as Record<string, unknown>,
  };
}

describe('batch.json host record', () => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-host-start-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("records the host facts, asking for the output directory and the engine's data root", async () => {
    const asked: HostFactsRequest[] = [];
    const { record, onDisk } = await start((request) => {
      asked.push(request);
      return gatherHostFacts({ source, clock: { sleep: () => new Promise(() => {}) } }, request);
    });
    expect(asked).toEqual([{ outputDir: join(dir, 'batch'), dataRoot: '/var/lib/docker' }]);
    expect(onDisk['host']).toEqual(record.host);
    expect(onDisk['host']).toMatchObject({
      cpu: { kind: 'known', model: 'AMD EPYC', cores: 2 },
      memory: { kind: 'known', total_bytes: 100 },
      output_fs: { kind: 'known', path: join(dir, 'batch'), type: 'ext4' },
      engine_data_root_fs: { kind: 'known', path: '/var/lib/docker' },
      gpu_controllers: { kind: 'known', nvidia_count: 0 },
    });
  });

  it('records the default pair limits derived from those facts (issue 22), fixed fallbacks where a fact is unknown', async () => {
    const GIB = 1024 ** 3;
    const roomy: HostFactsSource = {
      ...source,
      memory: () => Promise.resolve({ total_bytes: 16 * GIB, available_bytes: 8 * GIB }),
      fileSystemOf: (path) =>
        Promise.resolve({
          path,
          fs: '/dev/vda',
          type: 'ext4',
          mount: '/',
          size_bytes: 100 * GIB,
          free_bytes: 40 * GIB,
        }),
    };
    const { onDisk } = await start((request) =>
      gatherHostFacts({ source: roomy, clock: { sleep: () => new Promise(() => {}) } }, request),
    );
    // (16 GiB − 1.6 GiB reserve) / 1 worker; half of 40 GiB free / 1 worker.
    expect(onDisk['pair_limit_defaults']).toMatchObject({
      pids_limit: 4096,
      memory_mib: Math.floor((16 * GIB - Math.floor((16 * GIB) / 10)) / 2 ** 20),
      disk_limit_bytes: 20 * GIB,
    });
  });

  it('an unknown host memory gives the fixed fallback default', async () => {
    const { onDisk: unknown } = await start((request) =>
      gatherHostFacts(
        {
          source: { ...source, memory: () => Promise.reject(new Error('no /proc/meminfo')) },
          clock: { sleep: () => Promise.resolve() },
          timeoutMs: 10,
        },
        request,
      ),
    );
    expect(unknown['pair_limit_defaults']).toMatchObject({ memory_mib: 4096 });
  });

  it('a fact that never answers is recorded unknown and the batch still starts', async () => {
    const { onDisk } = await start((request) =>
      gatherHostFacts(
        {
          source: { ...source, cpu: () => new Promise(() => {}) },
          clock: { sleep: () => Promise.resolve() },
          timeoutMs: 10,
        },
        request,
      ),
    );
    expect(onDisk['host']).toMatchObject({ cpu: { kind: 'unknown', reason: 'no answer within 10 ms' } });
    expect(onDisk['batch_id']).toMatch(/^e1-20261202-/);
  });

  it('without the dependency, batch.json has no host field (as before)', async () => {
    const manifest = {
      schema: 'roboguide.e1.batch/v0.1',
      image: 'roboguide/pair-driver:1',
      jobs: [
        { job_id: 'j1', argv: ['/x'], cwd: join(dir, 'cwd'), outcome_path: join(dir, 'out2', 'o.json') },
      ],
    };
    await writeFile(join(dir, 'm.json'), JSON.stringify(manifest));
    const record = await prepareBatch(
      { fs: new NodeFileSystem(), host: procHostIdentity, runtime: engine, clock },
      {
        manifestPath: join(dir, 'm.json'),
        output: join(dir, 'b2'),
        registryPath: join(dir, 'r.db'),
        bindAddress: '127.0.0.1',
        environment: {},
        codeVersion: 't',
      },
    );
    expect(record.host).toBeUndefined();
  });
});

describe('batch.json host record: refusals', () => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-host-refused-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('a refused start (image missing) never asks for host facts', async () => {
    const manifest = {
      schema: 'roboguide.e1.batch/v0.1',
      image: 'roboguide/pair-driver:1',
      jobs: [{ job_id: 'j1', argv: ['/x'], cwd: join(dir, 'cwd'), outcome_path: join(dir, 'out', 'o.json') }],
    };
    await writeFile(join(dir, 'm.json'), JSON.stringify(manifest));
    const noImage = answeringEngine(
      { dataRoot: '/var/lib/docker' },
      { imageExists: () => Promise.resolve(false) },
    );
    let asked = 0;
    await expect(
      prepareBatch(
        {
          fs: new NodeFileSystem(),
          host: procHostIdentity,
          runtime: noImage,
          clock,
          hostFacts: (request) => (asked++, gatherHostFacts({ source, clock }, request)),
        },
        {
          manifestPath: join(dir, 'm.json'),
          output: join(dir, 'b'),
          registryPath: join(dir, 'r.db'),
          bindAddress: '127.0.0.1',
          environment: {},
          codeVersion: 't',
        },
      ),
    ).rejects.toMatchObject({ code: 'E_IMAGE_MISSING' });
    expect(asked).toBe(0);
  });
});

describe('batchHostRequest', () => {
  it("local: the engine's data root (or null when it did not say)", () => {
    expect(batchHostRequest('/out', { dataRoot: '/srv/docker' }, undefined)).toEqual({
      outputDir: '/out',
      dataRoot: '/srv/docker',
    });
    expect(batchHostRequest('/out', {}, { kind: 'local' })).toEqual({ outputDir: '/out', dataRoot: null });
  });

  it('swarm: the data root is unknown, with the reason (the pairs run on the nodes)', async () => {
    const request = batchHostRequest('/out', { dataRoot: '/var/lib/docker' }, { kind: 'swarm' });
    const facts = await gatherHostFacts({ source, clock: { sleep: () => new Promise(() => {}) } }, request);
    expect(facts.engine_data_root_fs).toEqual({
      kind: 'unknown',
      reason: "swarm executor: the pairs run on the nodes' engines",
    });
  });
});
