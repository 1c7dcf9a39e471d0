import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import type { ImagePulls } from '../../src/app/ports/image-pulls.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { InvalidInputError } from '../../src/core/errors.js';
import { answeringEngine } from '../support/fakes.js';
import { clockAt } from '../support/fake-time.js';

/**
 * Issue 43 on Swarm: `--node-engine NODE=URL` takes a node's hostname or its swarm id, but everything after start
 * (admission, the per-node pullers, node-down, resume) names nodes by hostname. `start` records the executor with
 * hostnames only: an id becomes its node's hostname; a name no ready node has, or two names of one node, are refused
 * before anything is written.
 */
const clock = clockAt(() => new Date('2026-12-05T11:00:00Z'));
const ID_1 = 'k3o2rq8vw1x0y9z8a7b6c5d4e';
const ID_2 = 'p9q8r7s6t5u4v3w2x1y0z9a8b';
/** The swarm's ready nodes as the manager lists them (a hand-written fake of `swarmNodes`). */
const NODES = [
  { node: 'gpu-1', id: ID_1, gpus: 0 },
  { node: 'gpu-2', id: ID_2, gpus: 0 },
];
let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-node-ids-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A registry behind the manager's engine: every image resolves to a digest (start never pulls). */
const pulls: ImagePulls = {
  distribution: () => Promise.resolve({ digest: `sha256:${'b'.repeat(64)}` }),
  pull: () => Promise.reject(new Error('start never pulls')),
  facts: () => Promise.resolve(null),
  remove: () => Promise.resolve('absent'),
};

/** A swarm start whose `b:1` only `gpu-1` holds (by the name it was configured by), so the nodes must pull it. */
async function start(nodeEngines: Record<string, string>) {
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    capacity: { image_disk_bytes: 5_000_000 },
    jobs: ['a:1', 'b:1'].map((image, i) => ({
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
  // The swarm runtime names the nodes as they were configured (the keys of --node-engine).
  const names = Object.keys(nodeEngines);
  const runtime = answeringEngine(
    {},
    {
      imageExists: (image) => Promise.resolve(image === 'a:1'),
      imageNodes: (image) =>
        Promise.resolve(
          image === 'a:1'
            ? { present: names, absent: [] }
            : { present: names.slice(0, 1), absent: names.slice(1) },
        ),
    },
  );
  const record = prepareBatch(
    {
      fs: new NodeFileSystem(),
      host: procHostIdentity,
      runtime,
      clock,
      imagePulls: pulls,
      swarmNodes: () => Promise.resolve(NODES),
    },
    {
      executor: { kind: 'swarm', manager: 'unix:///m.sock', node_engines: nodeEngines },
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

describe('swarm: --node-engine by node id or hostname (issue 43)', () => {
  it('a node given by its id is recorded by its hostname: executor, image plan nodes, image_nodes', async () => {
    const { record, output } = await start({ [ID_1]: 'unix:///n1.sock', 'gpu-2': 'unix:///n2.sock' });
    const returned = await record;
    const onDisk = JSON.parse(await readFile(join(output, 'batch.json'), 'utf8')) as {
      executor: unknown;
      executor_nodes: unknown;
      image_plan: { nodes: string[] };
      image_nodes: Record<string, string[]>;
    };
    const executor = {
      kind: 'swarm',
      manager: 'unix:///m.sock',
      node_engines: { 'gpu-1': 'unix:///n1.sock', 'gpu-2': 'unix:///n2.sock' },
    };
    expect(onDisk.executor).toEqual(executor);
    expect(returned.executor).toEqual(executor);
    expect(onDisk.image_plan.nodes).toEqual(['gpu-1', 'gpu-2']);
    expect(onDisk.image_nodes).toEqual({ 'a:1': ['gpu-1', 'gpu-2'], 'b:1': ['gpu-1'] });
    // node-down takes a node by id or hostname: batch.json keeps each node's id beside its hostname.
    expect(onDisk.executor_nodes).toEqual([
      { node: 'gpu-1', id: ID_1, gpus: 0 },
      { node: 'gpu-2', id: ID_2, gpus: 0 },
    ]);
  });

  it('a name no ready node has: refused (exit 2) naming the flag, the rule and the nodes; nothing written', async () => {
    const { record, output } = await start({ 'gpu-1': 'unix:///n1.sock', 'gpu-9': 'unix:///n9.sock' });
    const err = (await record.catch((e: unknown) => e)) as InvalidInputError;
    expect(err).toBeInstanceOf(InvalidInputError);
    expect(err.exitCode).toBe(2);
    expect(err.code).toBe('E_USAGE');
    expect(err.issues).toEqual([
      {
        path: '--node-engine[1]',
        rule: `NODE "gpu-9" must be the hostname or id of a ready swarm node: gpu-1 (${ID_1}), gpu-2 (${ID_2})`,
      },
    ]);
    await expect(stat(output)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('one node given twice (by id and by hostname): refused naming both flags; nothing written', async () => {
    const { record, output } = await start({ 'gpu-2': 'unix:///a.sock', [ID_2]: 'unix:///b.sock' });
    const err = (await record.catch((e: unknown) => e)) as InvalidInputError;
    expect(err).toBeInstanceOf(InvalidInputError);
    expect(err.exitCode).toBe(2);
    expect(err.issues).toEqual([
      {
        path: '--node-engine[1]',
        rule: `NODE "${ID_2}" is swarm node gpu-2 (${ID_2}), already given by --node-engine[0]: one engine per node`,
      },
    ]);
    await expect(stat(output)).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
