import { randomUUID } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registryLocation } from '../../src/adapters/registry/default-path.js';
import { openRegistryAt } from '../../src/adapters/registry/open-registry.js';
import type { CapacityRegistry } from '../../src/app/ports/capacity-registry.js';
import { postgresSkipReason, startPostgres, type TestPostgres } from '../support/postgres.js';
import { startTestServer } from '../../src/testing/index.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';
import { listFilesRecursively } from '../support/files.js';
import { cli, type CliOptions } from '../support/cli.js';
import { until } from '../support/until.js';
import {
  leftovers,
  startSwarmCluster,
  swarmSkipReason,
  type SwarmCluster,
} from '../support/swarm-cluster.js';

/**
 * The swarm executor end to end (issue 13): a swarm of two throwaway engines, each in its own network namespace with
 * its own hostname and two fake GPUs; the CLI with `--executor swarm`. The swarm is started once for the file.
 */
const skip = noDocker ? 'no Docker engine' : await swarmSkipReason();

const PAIRS = Number(process.env['RG_SWARM_PAIRS'] ?? 20);
const PAIR_SLEEP_SEC = 1;
let cluster: SwarmCluster;
let work: string;
let registry: string;
let postgres: TestPostgres | undefined;

/** The registry `registry` names, file or URL, opened as the CLI opens it. */
function openRegistry(): Promise<CapacityRegistry> {
  return openRegistryAt(registryLocation(registry));
}

/** What the CLI runs with here: warnings and errors only on stderr, killed after 5 minutes. */
const QUIET: CliOptions = { env: { ROBOGUIDE_LOG_LEVEL: 'warn' }, timeoutMs: 300_000 };

function spec(
  jobId: string,
  actions: string[],
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    job_id: jobId,
    argv: ['/opt/driver/run', ...actions],
    cwd: join(work, jobId, 'cwd'),
    outcome_path: join(work, jobId, 'out', 'outcome.json'),
    timeout_seconds: 120,
    image: DRIVER_IMAGE,
    stop_budget_seconds: 5,
    ...extra,
  };
}

async function pairRun(
  jobId: string,
  actions: string[],
  executor: readonly string[],
  extra: Record<string, unknown> = {},
) {
  const path = join(work, `${jobId}.json`);
  await writeFile(path, JSON.stringify(spec(jobId, actions, extra)));
  const output = join(work, jobId, 'evidence');
  const r = await cli(
    ['pair', 'run', '--spec', path, '--output', output, '--registry', registry, '--json', ...executor],
    QUIET,
  );
  const parsed = JSON.parse(r.stdout) as Record<string, unknown> & { result?: never };
  return { ...r, result: parsed, output };
}

/** The shape of a JSON value: keys (recursively) and value types, not the values. */
function shape(value: unknown): unknown {
  if (Array.isArray(value)) return value.length === 0 ? [] : [shape(value[0])];
  if (value !== null && typeof value === 'object')
    return Object.fromEntries(
      Object.entries(value)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => [k, shape(v)]),
    );
  return value === null ? 'null' : typeof value;
}

async function readJson(path: string): Promise<unknown> {
  return JSON.parse(await readFile(path, 'utf8')) as unknown;
}

async function filesOf(dir: string): Promise<string[]> {
  return (await listFilesRecursively(dir)).map((f) => f.slice(dir.length)).sort();
}

/** job → node, from the supervisor's `pair_placed` journal records. */
async function nodesOf(output: string): Promise<Map<string, string>> {
  const text = await readFile(join(output, 'events.jsonl'), 'utf8');
  const placed = new Map<string, string>();
  for (const line of text.split('\n').filter(Boolean)) {
    const r = JSON.parse(line) as { type: string; job_id?: string; node?: string };
    if (r.type === 'pair_placed' && r.job_id !== undefined && r.node !== undefined)
      placed.set(r.job_id, r.node);
  }
  return placed;
}

async function expectNothingLeft(label: string): Promise<void> {
  for (const [i, node] of cluster.nodes.entries()) {
    expect(await leftovers(node, label, i === 0), `node ${node.hostname}`).toEqual({
      services: 0,
      containers: 0,
      volumes: 0,
    });
  }
}

describe.skipIf(skip !== null)('swarm executor (two throwaway engines)', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-swarm-'));
    registry = join(work, 'registry.db');
    cluster = await startSwarmCluster({ nodes: 2, gpusPerNode: 2 });
    // The 20-pair batch runs on the PostgreSQL registry where one can run here (CI: REQUIRE_POSTGRES=1).
    if (postgresSkipReason() === null) postgres = startPostgres();
  });
  afterAll(async () => {
    postgres?.stop();
    await cluster?.stop();
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('refuses bad executor flags with exit 2 naming the flag, before anything is written', async () => {
    const path = join(work, 'bad.json');
    await writeFile(path, JSON.stringify(spec('bad', ['outcome=completed'])));
    const r = await cli(
      [
        'pair',
        'run',
        '--spec',
        path,
        '--output',
        join(work, 'bad-out'),
        '--executor',
        'swarm',
        '--manager',
        'http://x',
        '--node-engine',
        'n1',
      ],
      QUIET,
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--manager: scheme http is not one of unix, tcp, ssh/);
    expect(r.stderr).toMatch(/--node-engine\[0\]: must be NODE=URL/);
    expect(await readdir(work)).not.toContain('bad-out');
  });

  it('pair run --executor swarm: a no-op pair gives the same result shape as local; outcome collected; service, container and volumes gone on its node', async () => {
    const job = `sw-noop-${randomUUID().slice(0, 6)}`;
    const swarm = await pairRun(job, ['outcome=completed'], cluster.flags);
    expect(swarm.stderr).not.toMatch(/Error/);
    expect(swarm.code).toBe(0);
    expect(swarm.result).toMatchObject({
      classification: 'completed',
      reasons: [],
      cleanup: { verified_absent: true },
    });
    expect(swarm.result['outcome_sha256']).toMatch(/^[0-9a-f]{64}$/);
    // The handle is the pair's service (swarm ids are 25 characters; a local container id is 64 hex).
    const serviceId = (swarm.result['container'] as { id: string }).id;
    expect(serviceId).toMatch(/^[a-z0-9]{25}$/);
    await expect(
      new Docker({ socketPath: cluster.nodes[0]!.engine.socketPath }).getService(serviceId).inspect(),
    ).rejects.toMatchObject({ statusCode: 404 });
    // The operator's copy at outcome_path, read back from the node's volume (no shared file system assumed).
    const outcome = JSON.parse(await readFile(join(work, job, 'out', 'outcome.json'), 'utf8')) as {
      job_id: string;
    };
    expect(outcome.job_id).toBe(job);
    await expectNothingLeft(`roboguide.job=${job}`);

    const localJob = `lo-noop-${randomUUID().slice(0, 6)}`;
    const local = await pairRun(localJob, ['outcome=completed'], []);
    expect(local.code).toBe(0);
    expect(shape(swarm.result)).toEqual(shape(local.result));
    expect((await listFilesRecursively(swarm.output)).map((f) => f.replace(job, 'J')).sort()).toEqual(
      (await listFilesRecursively(local.output)).map((f) => f.replace(localJob, 'J')).sort(),
    );
  });

  it("pair run --executor swarm: logs streamed through the service log API (each byte once), a Codex session collected through the node's engine", async () => {
    const job = `sw-sess-${randomUUID().slice(0, 6)}`;
    const r = await pairRun(
      job,
      ['numbered=200', 'stderr_bytes=1000', 'session=success', 'outcome=completed'],
      cluster.flags,
      { gpus: 1 },
    );
    expect(r.code).toBe(0);
    expect(r.result).toMatchObject({
      classification: 'completed',
      logs: { stdout: { bytes: 200 * 64, closed: true }, stderr: { bytes: 1000, closed: true } },
    });
    expect((r.result['sessions'] as { files: number }).files).toBeGreaterThanOrEqual(1);
    const stdout = await readFile(join(r.output, 'stdout.log'), 'utf8');
    const lines = stdout.split('\n').filter(Boolean);
    expect(lines).toHaveLength(200);
    expect(new Set(lines).size).toBe(200);
    const sessions = await listFilesRecursively(join(r.output, 'sessions'));
    expect(sessions.some((f) => f.endsWith('.jsonl'))).toBe(true);
    await expectNothingLeft(`roboguide.job=${job}`);
  });

  /** Until a running container labelled for `job` is on node `index` (polls its engine). */
  async function jobRunningOn(index: number, job: string): Promise<void> {
    const docker = new Docker({ socketPath: cluster.nodes[index]!.engine.socketPath });
    await until(
      async () => {
        const found = await docker.listContainers({
          filters: JSON.stringify({ label: [`roboguide.job=${job}`], status: ['running'] }),
        });
        return found.length > 0 ? true : undefined;
      },
      `${job} running on ${cluster.nodes[index]!.hostname}`,
      { timeoutMs: 120_000, intervalMs: 250 },
    );
  }

  it('pair run --executor swarm is admitted per node: with one node full it is reserved on, pinned to and runs on the other; all full: refused; a gpu_mib no node can hold: exit 2', async () => {
    const admission = join(work, 'admission.db');
    const [nodeA, nodeB] = [cluster.nodes[0]!.hostname, cluster.nodes[1]!.hostname];
    const reg = await openRegistryAt(registryLocation(admission));
    try {
      await reg.setLimits({ maxReservations: 1, gpuMib: null });
      // Another batch's pair holds node A's only slot.
      const fillerA = await reg.admit({
        batchId: 'other-batch',
        jobId: 'filler-a',
        claimId: randomUUID(),
        gpuMib: 0,
        node: nodeA,
      });
      expect(fillerA.kind).toBe('admitted');
      const job = `sw-adm-${randomUUID().slice(0, 6)}`;
      const path = join(work, `${job}.json`);
      await writeFile(path, JSON.stringify(spec(job, ['sleep=3', 'outcome=completed'])));
      const output = join(work, job, 'evidence');
      const exited = cli(
        [
          'pair',
          'run',
          '--spec',
          path,
          '--output',
          output,
          '--registry',
          admission,
          '--json',
          ...cluster.flags,
        ],
        QUIET,
      );
      await jobRunningOn(1, job);
      const ran = await exited;
      expect(ran.code, ran.stderr).toBe(0);
      expect(await readJson(join(output, 'result.json'))).toMatchObject({
        classification: 'completed',
        cleanup: { verified_absent: true },
      });
      const receipt = (await readJson(join(output, 'receipt.json'))) as { claim_id: string };
      expect(await reg.reservationForClaim(receipt.claim_id)).toMatchObject({
        node: nodeB,
        state: 'released',
      });
      await expectNothingLeft(`roboguide.job=${job}`);

      // Both nodes full: refused at once (exit 1, naming the limit), nothing held for it, nothing created.
      const fillerB = await reg.admit({
        batchId: 'other-batch',
        jobId: 'filler-b',
        claimId: randomUUID(),
        gpuMib: 0,
        node: nodeB,
      });
      expect(fillerB.kind).toBe('admitted');
      const full = `sw-full-${randomUUID().slice(0, 6)}`;
      const fullSpec = join(work, `${full}.json`);
      await writeFile(fullSpec, JSON.stringify(spec(full, ['outcome=completed'])));
      const again = await cli(
        [
          'pair',
          'run',
          '--spec',
          fullSpec,
          '--output',
          join(work, full, 'evidence2'),
          '--registry',
          admission,
          ...cluster.flags,
        ],
        QUIET,
      );
      expect(again.code).toBe(1);
      expect(again.stderr).toMatch(/capacity limit \(1 of 1 held\): not started/);
      expect((await reg.held()).map((r) => r.jobId).sort()).toEqual(['filler-a', 'filler-b']);
      await expectNothingLeft(`roboguide.job=${full}`);

      // A declared gpu_mib larger than every node's whole GPU budget can never run: exit 2 naming the field and figures.
      await reg.setLimits({ maxReservations: 4, gpuMib: 1_000 });
      const huge = join(work, 'huge.json');
      await writeFile(
        huge,
        JSON.stringify(spec('sw-huge', ['outcome=completed'], { gpus: 1, gpu_mib: 5_000 })),
      );
      const never = await cli(
        [
          'pair',
          'run',
          '--spec',
          huge,
          '--output',
          join(work, 'huge-out'),
          '--registry',
          admission,
          ...cluster.flags,
        ],
        QUIET,
      );
      expect(never.code).toBe(2);
      expect(never.stderr).toContain(
        'gpu_mib: 5000 MiB exceeds the whole GPU budget of every node it may run on',
      );
      expect(await readdir(work)).not.toContain('huge-out');
    } finally {
      await reg.close();
    }
  });

  it('serve --executor swarm: a pair through POST /v1/pairs runs as a service on a node (admitted there), its evidence comes back, nothing left', async () => {
    const server = await startTestServer({ extraArgs: [...cluster.flags], clientMode: 'raw' });
    try {
      const job = `sw-api-${randomUUID().slice(0, 6)}`;
      const accepted = await server.client.call<{ pair_id: string }>('POST', '/v1/pairs', {
        body: spec(job, ['numbered=20', 'outcome=completed']),
      });
      expect(accepted.status, JSON.stringify(accepted.body)).toBe(202);
      const id = accepted.body.pair_id;
      type PairBody = {
        state: string;
        error: string | null;
        receipt: { claim_id: string } | null;
        result: {
          classification: string;
          cleanup: { verified_absent: boolean };
          container: { id: string };
        } | null;
      };
      const pair = await until(
        async () => {
          const body = (await server.client.call<PairBody>('GET', `/v1/pairs/${id}`)).body;
          return body.state === 'running' ? undefined : body;
        },
        `pair ${id} no longer running`,
        { timeoutMs: 180_000, intervalMs: 500 },
      );
      expect(pair.state, pair.error ?? '').toBe('finished');
      expect(pair.result).toMatchObject({ classification: 'completed', cleanup: { verified_absent: true } });
      expect(pair.result?.container.id).toMatch(/^[a-z0-9]{25}$/); // a service id, not a local container's
      const logs = await server.client.call<Buffer>('GET', `/v1/pairs/${id}/logs?stream=stdout`);
      expect(logs.body.toString('utf8').split('\n').filter(Boolean)).toHaveLength(20);
      const evidence = join(server.dataDir, 'pairs', id);
      expect((await readdir(evidence)).sort()).toEqual(
        expect.arrayContaining(['receipt.json', 'result.json', 'stdout.log', 'stderr.log']),
      );
      expect(((await readJson(join(work, job, 'out', 'outcome.json'))) as { job_id: string }).job_id).toBe(
        job,
      );
      const reg = await openRegistryAt(registryLocation(server.registryPath));
      try {
        const reservation = await reg.reservationForClaim(pair.receipt!.claim_id);
        expect(cluster.nodes.map((n) => n.hostname)).toContain(reservation?.node);
        expect(reservation?.state).toBe('released');
      } finally {
        await reg.close();
      }
      await expectNothingLeft(`roboguide.job=${job}`);
    } finally {
      await server.dispose();
    }
  });

  /** A 20-pair manifest asking one GPU per pair; `placement` pins every pair (the one-node baseline). */
  async function batchManifest(name: string, sleepSec: number, placement?: string): Promise<string> {
    const path = join(work, `${name}.json`);
    await writeFile(
      path,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: DRIVER_IMAGE,
        jobs: Array.from({ length: PAIRS }, (_, i) => ({
          job_id: `p${String(i).padStart(2, '0')}`,
          // `count` appends a line to $DRIVER_COUNTER each time the driver runs: here in the pair's outcome folder, a
          // volume on its node that is copied back into the evidence (a task restarted by the swarm would add a line).
          argv: ['/opt/driver/run', 'count', `sleep=${sleepSec}`, 'outcome=completed'],
          cwd: join(work, name, 'cwd'),
          outcome_path: join(work, name, 'out', `p${i}`, 'outcome.json'),
          environment: { DRIVER_COUNTER: join(work, name, 'out', `p${i}`, 'runs.log') },
          timeout_seconds: 300,
          gpus: 1,
          ...(placement !== undefined ? { placement: [placement] } : {}),
        })),
        stop_budget_seconds: 5,
      }),
    );
    return path;
  }

  async function runBatch(
    name: string,
    sleepSec: number,
    placement?: string,
  ): Promise<{ makespanMs: number; output: string; batchId: string; nodes: Map<string, string> }> {
    const manifest = await batchManifest(name, sleepSec, placement);
    const output = join(work, name, 'batch');
    const t0 = performance.now();
    const r = await cli(
      [
        'e1-batch',
        'start',
        '--manifest',
        manifest,
        '--output',
        output,
        '--registry',
        registry,
        '--foreground',
        '--json',
        ...cluster.flags,
      ],
      QUIET,
    );
    const makespanMs = performance.now() - t0;
    expect(r.stderr).not.toMatch(/Error/);
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout) as { batch_id: string; state: string };
    expect(out.state).toBe('drained');
    // Every pair once: one completed result each, one run of the driver each (its counter, read back from the
    // node), one run (claim) each on the registry's board, and no reservation left held.
    const jobs = Array.from({ length: PAIRS }, (_, i) => `p${String(i).padStart(2, '0')}`);
    for (const job of jobs) {
      const result = JSON.parse(await readFile(join(output, 'jobs', job, 'result.json'), 'utf8')) as {
        classification: string;
        cleanup: { verified_absent: boolean };
      };
      expect(result, job).toMatchObject({ classification: 'completed', cleanup: { verified_absent: true } });
      const counter = (await listFilesRecursively(join(output, 'jobs', job))).filter((f) =>
        f.endsWith('runs.log'),
      );
      expect(counter, job).toHaveLength(1);
      expect((await readFile(counter[0]!, 'utf8')).split('\n').filter(Boolean), job).toHaveLength(1);
    }
    await expectNothingLeft(`roboguide.batch=${out.batch_id}`);
    const reg = await openRegistry();
    try {
      expect(await reg.held({ batchId: out.batch_id })).toEqual([]);
      expect((await reg.board({ batchId: out.batch_id })).map((row) => row.jobId).sort()).toEqual(jobs);
    } finally {
      await reg.close();
    }
    const spans = await Promise.all(
      jobs.map(
        async (job) =>
          (await readJson(join(output, 'jobs', job, 'result.json'))) as {
            started_at: string;
            finished_at: string;
          },
      ),
    );
    const edges = spans
      .flatMap(
        (r) =>
          [
            [Date.parse(r.started_at), 1],
            [Date.parse(r.finished_at), -1],
          ] as const,
      )
      .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    let now = 0;
    let most = 0;
    for (const [, d] of edges) most = Math.max(most, (now += d));
    const mean =
      spans.reduce((sum, r) => sum + Date.parse(r.finished_at) - Date.parse(r.started_at), 0) / spans.length;
    process.stdout.write(
      `${name}: ${(makespanMs / 1000).toFixed(1)} s, at most ${most} pairs at once, mean pair ${(mean / 1000).toFixed(1)} s\n`,
    );
    return { makespanMs, output, batchId: out.batch_id, nodes: await nodesOf(output) };
  }

  it(`a ${PAIRS}-pair batch (e1-batch start --executor swarm, 2 nodes x 2 fake GPUs, 1 GPU per pair): every pair once, local evidence shape, nothing left on either node, no held reservation`, async () => {
    const fileRegistry = registry;
    if (postgres !== undefined) registry = await postgres.createDatabase('swarm_batch');
    try {
      await twentyPairBatch();
    } finally {
      registry = fileRegistry;
    }
  });

  async function twentyPairBatch(): Promise<void> {
    // Limits per node: two slots on each node (its two GPUs).
    expect((await cli(['capacity', '--registry', registry, '--max-reservations', '2'], QUIET)).code).toBe(0);
    const two = await runBatch('two-nodes', PAIR_SLEEP_SEC);
    process.stdout.write(`registry: ${postgres !== undefined ? 'PostgreSQL' : 'SQLite'}\n`);
    const batch = JSON.parse(await readFile(join(two.output, 'batch.json'), 'utf8')) as {
      executor: { kind: string };
      executor_slots: number;
    };
    expect(batch).toMatchObject({
      executor: { kind: 'swarm', manager: cluster.managerUrl },
      executor_slots: 4,
    });
    // Every pair's node is on record, and both nodes took pairs.
    expect(two.nodes.size).toBe(PAIRS);
    expect(new Set(two.nodes.values())).toEqual(new Set(cluster.nodes.map((n) => n.hostname)));

    // Admission per node: each pair's reservation is on the node Swarm ran it on, and no node ran more pairs at
    // once than its two slots.
    const reg = await openRegistry();
    try {
      const rows = await reg.board({ batchId: two.batchId });
      expect(rows).toHaveLength(PAIRS);
      for (const row of rows)
        expect((await reg.reservationForClaim(row.claimId))?.node, row.jobId).toBe(two.nodes.get(row.jobId));
    } finally {
      await reg.close();
    }
    for (const node of cluster.nodes.map((n) => n.hostname)) {
      const spans = await Promise.all(
        [...two.nodes]
          .filter(([, n]) => n === node)
          .map(
            async ([job]) =>
              (await readJson(join(two.output, 'jobs', job, 'result.json'))) as {
                started_at: string;
                finished_at: string;
              },
          ),
      );
      const edges = spans
        .flatMap(
          (r) =>
            [
              [Date.parse(r.started_at), 1],
              [Date.parse(r.finished_at), -1],
            ] as const,
        )
        .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
      let now = 0;
      let most = 0;
      for (const [, d] of edges) most = Math.max(most, (now += d));
      expect(most, node).toBeLessThanOrEqual(2);
    }

    // Evidence identical in shape to a local batch's (same files per job, same result.json and SUMMARY.json keys).
    const localManifest = join(work, 'local.json');
    await writeFile(
      localManifest,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: DRIVER_IMAGE,
        jobs: [
          {
            job_id: 'p00',
            argv: ['/opt/driver/run', 'count', 'outcome=completed'],
            cwd: join(work, 'local', 'cwd'),
            outcome_path: join(work, 'local', 'out', 'p0', 'outcome.json'),
            environment: { DRIVER_COUNTER: join(work, 'local', 'out', 'p0', 'runs.log') },
            timeout_seconds: 60,
          },
        ],
        stop_budget_seconds: 5,
      }),
    );
    const localOut = join(work, 'local', 'batch');
    const local = await cli(
      [
        'e1-batch',
        'start',
        '--manifest',
        localManifest,
        '--output',
        localOut,
        '--registry',
        registry,
        '--foreground',
        '--json',
      ],
      QUIET,
    );
    expect(local.code).toBe(0);
    expect(await filesOf(join(two.output, 'jobs', 'p00'))).toEqual(
      await filesOf(join(localOut, 'jobs', 'p00')),
    );
    expect(shape(await readJson(join(two.output, 'jobs', 'p00', 'result.json')))).toEqual(
      shape(await readJson(join(localOut, 'jobs', 'p00', 'result.json'))),
    );
    expect(Object.keys((await readJson(join(two.output, 'SUMMARY.json'))) as object).sort()).toEqual(
      Object.keys((await readJson(join(localOut, 'SUMMARY.json'))) as object).sort(),
    );
  }

  /** A small manifest: `jobs` are [job_id, driver actions, placement?]; one GPU each; counters in the outcome folders. */
  async function smallManifest(
    name: string,
    jobs: readonly (readonly [string, readonly string[], string?])[],
  ): Promise<string> {
    const path = join(work, `${name}.json`);
    await writeFile(
      path,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: DRIVER_IMAGE,
        jobs: jobs.map(([id, actions, placement]) => ({
          job_id: id,
          argv: ['/opt/driver/run', 'count', ...actions],
          cwd: join(work, name, 'cwd'),
          outcome_path: join(work, name, 'out', id, 'outcome.json'),
          environment: { DRIVER_COUNTER: join(work, name, 'out', id, 'runs.log') },
          timeout_seconds: 300,
          gpus: 1,
          ...(placement !== undefined ? { placement: [placement] } : {}),
        })),
        stop_budget_seconds: 5,
      }),
    );
    return path;
  }

  /** Until the job's task container runs on one of `nodes` (polls their engines). */
  async function runningOn(nodes: readonly number[], batchId: string, job: string): Promise<void> {
    const filters = JSON.stringify({
      label: [`roboguide.batch=${batchId}`, `roboguide.job=${job}`],
      status: ['running'],
    });
    await until(
      async () => {
        for (const node of nodes) {
          const docker = new Docker({ socketPath: cluster.nodes[node]!.engine.socketPath });
          if ((await docker.listContainers({ filters })).length > 0) return true;
        }
        return undefined;
      },
      `${job} running`,
      { timeoutMs: 120_000, intervalMs: 250 },
    );
  }

  async function batchIdOf(output: string): Promise<string> {
    const text = await until(
      () => readFile(join(output, 'batch.json'), 'utf8').catch(() => undefined),
      'batch.json',
      { timeoutMs: 40_000 },
    );
    return (JSON.parse(text) as { batch_id: string }).batch_id;
  }

  async function runsOf(output: string, job: string): Promise<number> {
    const counter = (await listFilesRecursively(join(output, 'jobs', job))).filter((f) =>
      f.endsWith('runs.log'),
    );
    return counter.length === 0
      ? 0
      : (await readFile(counter[0]!, 'utf8')).split('\n').filter(Boolean).length;
  }

  it('a supervisor SIGKILLed mid-batch: resume reattaches to its services; every pair once, logs whole, nothing left', async () => {
    const manifest = await smallManifest('sigkill', [
      ['k0', ['outcome=completed']],
      ['k1', ['numbered_slow=30', 'outcome=completed']],
      ['k2', ['numbered_slow=30', 'outcome=completed']],
    ]);
    const output = join(work, 'sigkill', 'batch');
    const started = await cli(
      [
        'e1-batch',
        'start',
        '--manifest',
        manifest,
        '--output',
        output,
        '--registry',
        registry,
        '--json',
        ...cluster.flags,
      ],
      QUIET,
    );
    expect(started.code).toBe(0);
    const { supervisor_pid: pid, batch_id: batchId } = JSON.parse(started.stdout) as {
      supervisor_pid: number;
      batch_id: string;
    };
    await runningOn([0, 1], batchId, 'k1');
    process.kill(pid, 'SIGKILL');
    const resumed = await cli(['e1-batch', 'resume', '--output', output, '--foreground', '--json'], QUIET);
    expect(resumed.stderr).not.toMatch(/Error/);
    expect(resumed.code).toBe(0);
    for (const job of ['k0', 'k1', 'k2']) {
      expect(await readJson(join(output, 'jobs', job, 'result.json')), job).toMatchObject({
        classification: 'completed',
        cleanup: { verified_absent: true },
      });
      expect(await runsOf(output, job), job).toBe(1);
    }
    // The reattached log continues the one on disk: 30 numbered lines, none twice, none lost.
    const lines = (await readFile(join(output, 'jobs', 'k1', 'stdout.log'), 'utf8'))
      .split('\n')
      .filter(Boolean);
    expect(lines).toHaveLength(30);
    expect(new Set(lines).size).toBe(30);
    await expectNothingLeft(`roboguide.batch=${batchId}`);
    const reg = await openRegistry();
    try {
      expect(await reg.held({ batchId })).toEqual([]);
    } finally {
      await reg.close();
    }
  });

  // Last: it kills the second node's engine (restarted at the end for a clean teardown).
  it('a node lost mid-pair: infrastructure_failure/node_lost, never re-run, slot held until node-down, the batch goes on on the other node', async () => {
    const victimNode = cluster.nodes[1]!.hostname;
    const otherNode = cluster.nodes[0]!.hostname;
    const manifest = await smallManifest('nodeloss', [
      ['n0', ['outcome=completed']],
      ['n1', ['sleep=120', 'outcome=completed'], `node.hostname==${victimNode}`],
      ...Array.from(
        { length: 4 },
        (_, i) => [`n${i + 2}`, ['sleep=2', 'outcome=completed'], `node.hostname==${otherNode}`] as const,
      ),
    ]);
    const output = join(work, 'nodeloss', 'batch');
    // At the default log level: the node loss is read from stderr.
    const exited = cli([
      'e1-batch',
      'start',
      '--manifest',
      manifest,
      '--output',
      output,
      '--registry',
      registry,
      '--foreground',
      '--json',
      ...cluster.flags,
    ]);
    const batchId = await batchIdOf(output);
    await runningOn([1], batchId, 'n1');
    await cluster.nodes[1]!.engine.kill();
    const { code, stdout, stderr } = await exited;
    expect(stderr).toMatch(/node lost while the pair ran/);
    expect(code, stderr).toBe(0);
    expect((JSON.parse(stdout) as { state: string }).state).toBe('drained');

    const lost = (await readJson(join(output, 'jobs', 'n1', 'result.json'))) as {
      classification: string;
      reasons: string[];
      cleanup: { verified_absent: boolean };
      engine_error: { kind: string };
    };
    expect(lost).toMatchObject({
      classification: 'infrastructure_failure',
      cleanup: { verified_absent: false },
      engine_error: { kind: 'node_lost' },
    });
    expect(lost.reasons).toContain('node_lost');
    expect(lost.reasons).not.toContain('cleanup_unverified');
    for (const job of ['n0', 'n2', 'n3', 'n4', 'n5']) {
      expect(await readJson(join(output, 'jobs', job, 'result.json')), job).toMatchObject({
        classification: 'completed',
      });
    }
    const nodes = await nodesOf(output);
    expect(nodes.get('n1')).toBe(victimNode);
    for (const job of ['n2', 'n3', 'n4', 'n5']) expect(nodes.get(job), job).toBe(otherNode);
    const status = JSON.parse(
      (await cli(['e1-batch', 'status', '--output', output, '--json'], QUIET)).stdout,
    ) as {
      state: string;
      pause_reasons: string[];
      nodes: unknown[];
    };
    expect(status).toMatchObject({ state: 'drained', pause_reasons: [] });
    expect(status.nodes).toEqual(
      expect.arrayContaining([
        { node: victimNode, running: [], gpus_total: 2, gpus_in_use: 0 },
        { node: otherNode, running: [], gpus_total: 2, gpus_in_use: 0 },
      ]),
    );

    // Never re-run (one run on the registry's board), and its slot is held: the container was never seen gone.
    const reg = await openRegistry();
    try {
      expect((await reg.board({ batchId })).filter((r) => r.jobId === 'n1')).toHaveLength(1);
      expect((await reg.held({ batchId })).map((r) => r.jobId)).toEqual(['n1']);
    } finally {
      await reg.close();
    }
    // The operator declares the node down: recorded, and the slot is released.
    const unknown = await cli(['e1-batch', 'node-down', '--output', output, '--node', 'no-such-node'], QUIET);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/--node: must be one of the batch's nodes/);
    const down = await cli(
      ['e1-batch', 'node-down', '--output', output, '--node', victimNode, '--json'],
      QUIET,
    );
    expect(down.stderr).not.toMatch(/Error/);
    expect(down.code).toBe(0);
    expect(JSON.parse(down.stdout)).toEqual({ node: victimNode, held: ['n1'], released: ['n1'] });
    expect(
      ((await readJson(join(output, 'nodes-down.json'))) as { nodes: { node: string }[] }).nodes.map(
        (n) => n.node,
      ),
    ).toEqual([victimNode]);
    const after = await openRegistry();
    try {
      expect(await after.held({ batchId })).toEqual([]);
    } finally {
      await after.close();
    }

    // Clean up for the teardown: the node's engine back (without live-restore it stops the orphaned container).
    await cluster.nodes[1]!.engine.restart();
    const docker = new Docker({ socketPath: cluster.nodes[1]!.engine.socketPath });
    const deadline = Date.now() + 60_000;
    for (;;) {
      const left = await docker.listContainers({
        all: true,
        filters: JSON.stringify({ label: [`roboguide.batch=${batchId}`] }),
      });
      if (left.length === 0 || Date.now() > deadline) {
        for (const c of left)
          await docker
            .getContainer(c.Id)
            .remove({ force: true })
            .catch(() => undefined);
        break;
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  });
});
