import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { readStatus } from '../../src/app/batch/read-status.js';
import type { GpuObservation } from '../../src/core/gpu/nvidia-smi-parse.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { answeringEngine } from '../support/fakes.js';
import { clockAt } from '../support/fake-time.js';

/** Only what prepareBatch asks of the engine. */
const engine = answeringEngine();

const clock = clockAt(() => new Date('2026-12-02T10:00:00Z'));
let dir: string;

async function start(name: string, observation: GpuObservation, gpus: unknown) {
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: 'roboguide/pair-driver:1',
    jobs: [
      {
        job_id: 'g1',
        argv: ['/opt/driver/run'],
        cwd: join(dir, 'cwd'),
        outcome_path: join(dir, name, 'out', 'g1.json'),
        gpus,
      },
    ],
    capacity: { max_workers: 2, gpu_total_mib: 81559, gpu_baseline_mib: 1200, gpu_fraction: 0.9 },
  };
  const path = join(dir, `${name}.json`);
  await writeFile(path, JSON.stringify(manifest));
  const output = join(dir, name, 'batch');
  const record = await prepareBatch(
    {
      fs: new NodeFileSystem(),
      host: procHostIdentity,
      runtime: engine,
      clock,
      observeGpus: () => Promise.resolve(observation),
    },
    {
      manifestPath: path,
      output,
      registryPath: join(dir, 'r.db'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 't',
    },
  );
  return { record, output };
}

describe('GPU observation at start', () => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-gpu-start-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('records an unobservable host in batch.json, warns, and status says the batch stays serial', async () => {
    const { record, output } = await start(
      'unobs',
      { kind: 'unobservable', reason: 'binary_missing', detail: 'nvidia-smi: not found' },
      'all',
    );
    expect(record.gpu_observation?.warnings).toEqual([
      'GPUs not observable (binary_missing): the batch stays serial',
    ]);
    const onDisk = JSON.parse(await readFile(join(output, 'batch.json'), 'utf8'));
    expect(onDisk.gpu_observation.observation.kind).toBe('unobservable');
    const status = await readStatus(
      new EvidenceStore(new NodeFileSystem(), output),
      undefined,
      clock.now(),
      procHostIdentity,
    );
    expect(status.workers_allowed).toBe(1);
    expect(status.gpu_note).toMatch(/not observable.*serial/);
  });

  it('warns when the declared gpu_total_mib does not match what nvidia-smi reports', async () => {
    const observed: GpuObservation = {
      kind: 'observed',
      totalMib: 40960,
      gpus: [
        {
          index: 0,
          uuid: 'GPU-1',
          name: 'A100',
          memoryTotalMib: 40960,
          memoryUsedMib: 0,
          memoryFreeMib: 40960,
        },
      ],
    };
    const { record } = await start('mismatch', observed, 1);
    expect(record.gpu_observation?.comparison?.kind).toBe('mismatch');
    expect(record.gpu_observation?.warnings.join('\n')).toMatch(/capacity\.gpu_total_mib: .*81559/);
  });

  it('a matching total gives no warning; a manifest without GPU jobs is not observed at all', async () => {
    const observed: GpuObservation = {
      kind: 'observed',
      totalMib: 81559,
      gpus: [
        {
          index: 0,
          uuid: 'GPU-1',
          name: 'H100',
          memoryTotalMib: 81559,
          memoryUsedMib: 0,
          memoryFreeMib: 81559,
        },
      ],
    };
    expect((await start('match', observed, ['GPU-1'])).record.gpu_observation?.warnings).toEqual([]);
    expect((await start('cpu', observed, undefined)).record.gpu_observation).toBeNull();
  });
});
