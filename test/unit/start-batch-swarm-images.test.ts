import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import type { ImageNodes } from '../../src/app/ports/container-runtime.js';
import type { ImagePulls } from '../../src/app/ports/image-pulls.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { RoboguideError } from '../../src/core/errors.js';
import { answeringEngine } from '../support/fakes.js';
import { clockAt } from '../support/fake-time.js';

/**
 * Issue 43 on Swarm: start asks every node's engine for every image; the batch records which node holds what, and an
 * image some node lacks is refused naming the nodes (nothing written).
 */
const clock = clockAt(() => new Date('2026-12-05T10:00:00Z'));
let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-swarm-images-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A registry behind the manager's engine: `b:1` resolves to a digest unless `refused` says what it answers. */
function registryPulls(refused?: string): ImagePulls {
  return {
    distribution: (ref) =>
      refused !== undefined
        ? Promise.reject(new Error(refused))
        : Promise.resolve({ digest: `sha256:${ref.startsWith('b') ? 'b'.repeat(64) : 'a'.repeat(64)}` }),
    pull: () => Promise.reject(new Error('start never pulls')),
    facts: () => Promise.resolve(null),
    remove: () => Promise.resolve('absent'),
  };
}

async function start(
  where: Record<string, ImageNodes>,
  plan?: { readonly pulls: ImagePulls; readonly budget?: number },
) {
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    ...(plan?.budget !== undefined ? { capacity: { image_disk_bytes: plan.budget } } : {}),
    jobs: ['a:1', 'a:1', 'b:1'].map((image, i) => ({
      job_id: `j${i}`,
      image,
      argv: ['/opt/driver/run'],
      cwd: join(dir, 'cwd'),
      outcome_path: join(dir, 'out', `j${i}.json`),
    })),
  };
  const path = join(dir, 'manifest.json');
  await writeFile(path, JSON.stringify(manifest));
  const output = join(dir, 'batch');
  // The swarm runtime's shape: no imageId (pairs run by tag), imageExists true only when every node has it.
  const runtime = answeringEngine(
    {},
    {
      imageExists: (image) => Promise.resolve((where[image]?.absent.length ?? 1) === 0),
      imageNodes: (image) => Promise.resolve(where[image] ?? { present: [], absent: ['n1', 'n2'] }),
    },
  );
  const record = prepareBatch(
    {
      fs: new NodeFileSystem(),
      host: procHostIdentity,
      runtime,
      clock,
      ...(plan !== undefined ? { imagePulls: plan.pulls } : {}),
    },
    {
      ...(plan !== undefined
        ? {
            executor: {
              kind: 'swarm' as const,
              manager: 'unix:///m.sock',
              node_engines: { n1: 'unix:///n1.sock', n2: 'unix:///n2.sock' },
            },
          }
        : {}),
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

describe('swarm: which node holds which image (issue 43)', () => {
  it('every node holds every image: batch.json image_nodes says which node holds what', async () => {
    const { record, output } = await start({
      'a:1': { present: ['n1', 'n2'], absent: [] },
      'b:1': { present: ['n1', 'n2'], absent: [] },
    });
    await record;
    const onDisk = JSON.parse(await readFile(join(output, 'batch.json'), 'utf8')) as Record<string, unknown>;
    expect(onDisk['image_nodes']).toEqual({ 'a:1': ['n1', 'n2'], 'b:1': ['n1', 'n2'] });
  });

  it('an image a node lacks: E_IMAGE_MISSING naming the node that lacks it and the one that holds it; nothing written', async () => {
    const { record, output } = await start({
      'a:1': { present: ['n1', 'n2'], absent: [] },
      'b:1': { present: ['n1'], absent: ['n2'] },
    });
    const err = (await record.catch((e: unknown) => e)) as RoboguideError;
    expect(err).toBeInstanceOf(RoboguideError);
    expect(err.code).toBe('E_IMAGE_MISSING');
    expect(err.message).toBe('image b:1 is not present on swarm node(s) n2 (held by n1; needed by 1 job(s))');
    expect(err.context).toMatchObject({
      images: ['b:1'],
      nodes: { 'b:1': { present: ['n1'], absent: ['n2'] } },
    });
    expect(err.suggestions?.[0]).toBe("on node n2: `docker -H <n2's engine> pull b:1` (or docker load)");
    await expect(stat(output)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('with the registry reachable: an image a node lacks is planned by digest, pulled by the nodes within a budget each', async () => {
    const { record, output } = await start(
      { 'a:1': { present: ['n1', 'n2'], absent: [] }, 'b:1': { present: ['n1'], absent: ['n2'] } },
      { pulls: registryPulls(), budget: 5_000_000 },
    );
    await record;
    const onDisk = JSON.parse(await readFile(join(output, 'batch.json'), 'utf8')) as {
      image_plan: Record<string, unknown>;
      image_nodes: Record<string, string[]>;
    };
    expect(onDisk.image_plan).toEqual({
      images: {
        'b:1': {
          digest: `sha256:${'b'.repeat(64)}`,
          ref: `b@sha256:${'b'.repeat(64)}`,
          compressed_bytes: null,
        },
      },
      budget_bytes: 5_000_000,
      budget_basis: 'capacity.image_disk_bytes, on each node',
      concurrency: 2,
      nodes: ['n1', 'n2'],
    });
    expect(onDisk.image_nodes).toEqual({ 'a:1': ['n1', 'n2'], 'b:1': ['n1'] });
  });

  it('nodes must pull but no budget is set: refused naming capacity.image_disk_bytes; nothing written', async () => {
    const { record, output } = await start(
      { 'a:1': { present: ['n1', 'n2'], absent: [] }, 'b:1': { present: [], absent: ['n1', 'n2'] } },
      { pulls: registryPulls() },
    );
    const err = (await record.catch((e: unknown) => e)) as RoboguideError;
    expect(err.code).toBe('E_MANIFEST_INVALID');
    expect(err.message).toMatch(
      /capacity\.image_disk_bytes: must be set with --executor swarm when a node lacks an image \(1 to pull\)/,
    );
    await expect(stat(output)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('an image its registry cannot resolve: E_IMAGE_MISSING naming the nodes and the registry answer; nothing written', async () => {
    const { record, output } = await start(
      { 'a:1': { present: ['n1', 'n2'], absent: [] }, 'b:1': { present: ['n1'], absent: ['n2'] } },
      { pulls: registryPulls('manifest unknown'), budget: 1 },
    );
    const err = (await record.catch((e: unknown) => e)) as RoboguideError;
    expect(err.code).toBe('E_IMAGE_MISSING');
    expect(err.message).toBe(
      'image b:1 is not present on swarm node(s) n2 (held by n1; needed by 1 job(s)); its registry cannot resolve it: manifest unknown',
    );
    await expect(stat(output)).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
