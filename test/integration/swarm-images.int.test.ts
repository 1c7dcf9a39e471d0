import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, type CliOptions } from '../support/cli.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';
import { startSwarmCluster, swarmSkipReason, type SwarmCluster } from '../support/swarm-cluster.js';

/**
 * Issue 43 on Swarm, on two throwaway engines (own network namespaces and hostnames): start asks each node's engine
 * for every image; an image one node lacks and no registry resolves (a local tag: the manager's engine cannot reach
 * docker.io) is refused naming that node, the one that holds it and the registry's answer (nothing written);
 * with every image on every node, batch.json `image_nodes` says which node holds what.
 */
const skip = noDocker ? 'no Docker engine' : await swarmSkipReason();
const QUIET: CliOptions = { env: { ROBOGUIDE_LOG_LEVEL: 'warn' }, timeoutMs: 300_000 };
const ONLY_FIRST = 'rg43-swarm-only-first:1';
let cluster: SwarmCluster;
let work: string;

async function manifest(name: string, images: readonly string[]): Promise<string> {
  const path = join(work, `${name}.json`);
  await writeFile(
    path,
    JSON.stringify({
      schema: 'roboguide.e1.batch/v0.1',
      jobs: images.map((image, i) => ({
        job_id: `${name}-${i}`,
        image,
        argv: ['/opt/driver/run', 'outcome=completed'],
        cwd: join(work, name, 'cwd'),
        outcome_path: join(work, name, 'out', `${i}.json`),
        timeout_seconds: 120,
      })),
      stop_budget_seconds: 5,
    }),
  );
  return path;
}

describe.skipIf(skip !== null)('swarm: which node holds which image (issue 43)', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg43-swarm-'));
    cluster = await startSwarmCluster({ nodes: 2, gpusPerNode: 0, tag: 'rg43' });
    // The driver image is on both nodes; this tag only on the first.
    const first = new Docker({ socketPath: cluster.nodes[0]!.engine.socketPath });
    await first.getImage(DRIVER_IMAGE).tag({ repo: 'rg43-swarm-only-first', tag: '1' });
  }, 300_000);
  afterAll(async () => {
    await cluster?.stop();
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('an image one node lacks is refused naming it and the node that holds it; nothing is written', async () => {
    const [n1, n2] = cluster.nodes.map((n) => n.hostname);
    const path = await manifest('lacking', [DRIVER_IMAGE, ONLY_FIRST]);
    const output = join(work, 'lacking-D');
    const r = await cli(
      [
        'e1-batch',
        'start',
        '--manifest',
        path,
        '--output',
        output,
        '--registry',
        join(work, 'r.db'),
        ...cluster.flags,
      ],
      QUIET,
    );
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain('E_IMAGE_MISSING');
    expect(r.stderr).toContain(
      `image ${ONLY_FIRST} is not present on swarm node(s) ${n2} (held by ${n1}; needed by 1 job(s))`,
    );
    expect(r.stderr).not.toContain(`image ${DRIVER_IMAGE} is not present`);
    expect(r.stderr).toContain('its registry cannot resolve it');
    expect(await readdir(work)).not.toContain('lacking-D');
  }, 300_000);

  it('every image on every node: the batch drains and batch.json image_nodes names both nodes', async () => {
    const path = await manifest('present', [DRIVER_IMAGE]);
    const output = join(work, 'present-D');
    const r = await cli(
      [
        'e1-batch',
        'start',
        '--manifest',
        path,
        '--output',
        output,
        '--registry',
        join(work, 'r.db'),
        '--foreground',
        '--json',
        ...cluster.flags,
      ],
      QUIET,
    );
    expect(r.code, r.stderr).toBe(0);
    const batch = JSON.parse(await readFile(join(output, 'batch.json'), 'utf8')) as {
      image_nodes?: Record<string, string[]>;
    };
    expect(Object.keys(batch.image_nodes ?? {})).toEqual([DRIVER_IMAGE]);
    expect([...(batch.image_nodes?.[DRIVER_IMAGE] ?? [])].sort()).toEqual(
      cluster.nodes.map((n) => n.hostname).sort(),
    );
  }, 300_000);
});
