import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';
import { listFilesRecursively } from '../support/files.js';
import { leftovers, startSwarmCluster, swarmSkipReason, type SwarmCluster } from '../support/swarm-cluster.js';

/**
 * The swarm executor end to end (issue 13): a swarm of two throwaway engines, each in its own network namespace with
 * its own hostname and two fake GPUs; the CLI with `--executor swarm`. The swarm is started once for the file.
 */
const BIN = join(import.meta.dirname, '../../bin/run.js');
const skip = noDocker ? 'no Docker engine' : await swarmSkipReason();

let cluster: SwarmCluster;
let work: string;
let registry: string;

function cli(args: readonly string[], env: Record<string, string> = {}): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env: { ...process.env, ROBOGUIDE_LOG_LEVEL: 'warn', ...env }, timeout: 300_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function spec(jobId: string, actions: string[], extra: Record<string, unknown> = {}): Record<string, unknown> {
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

async function pairRun(jobId: string, actions: string[], executor: readonly string[], extra: Record<string, unknown> = {}) {
  const path = join(work, `${jobId}.json`);
  await writeFile(path, JSON.stringify(spec(jobId, actions, extra)));
  const output = join(work, jobId, 'evidence');
  const r = cli(['pair', 'run', '--spec', path, '--output', output, '--registry', registry, '--json', ...executor]);
  const parsed = JSON.parse(r.stdout) as Record<string, unknown> & { result?: never };
  return { ...r, result: parsed, output };
}

/** The shape of a JSON value: keys (recursively) and value types, not the values. */
function shape(value: unknown): unknown {
  if (Array.isArray(value)) return value.length === 0 ? [] : [shape(value[0])];
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => [k, shape(v)]));
  return value === null ? 'null' : typeof value;
}

async function expectNothingLeft(label: string): Promise<void> {
  for (const [i, node] of cluster.nodes.entries()) {
    expect(await leftovers(node, label, i === 0), `node ${node.hostname}`).toEqual({ services: 0, containers: 0, volumes: 0 });
  }
}

describe.skipIf(skip !== null)('swarm executor (two throwaway engines)', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-swarm-'));
    registry = join(work, 'registry.db');
    cluster = await startSwarmCluster({ nodes: 2, gpusPerNode: 2 });
  });
  afterAll(async () => {
    await cluster?.stop();
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('pair run --executor swarm: a no-op pair gives the same result shape as local; outcome collected; service, container and volumes gone on its node', async () => {
    const job = `sw-noop-${randomUUID().slice(0, 6)}`;
    const swarm = await pairRun(job, ['outcome=completed'], cluster.flags);
    expect(swarm.stderr).not.toMatch(/Error/);
    expect(swarm.status).toBe(0);
    expect(swarm.result).toMatchObject({ classification: 'completed', reasons: [], cleanup: { verified_absent: true } });
    expect(swarm.result['outcome_sha256']).toMatch(/^[0-9a-f]{64}$/);
    // The handle is the pair's service (swarm ids are 25 characters; a local container id is 64 hex).
    const serviceId = (swarm.result['container'] as { id: string }).id;
    expect(serviceId).toMatch(/^[a-z0-9]{25}$/);
    await expect(new Docker({ socketPath: cluster.nodes[0]!.engine.socketPath }).getService(serviceId).inspect()).rejects.toMatchObject({ statusCode: 404 });
    // The operator's copy at outcome_path, read back from the node's volume (no shared file system assumed).
    const outcome = JSON.parse(await readFile(join(work, job, 'out', 'outcome.json'), 'utf8')) as { job_id: string };
    expect(outcome.job_id).toBe(job);
    await expectNothingLeft(`roboguide.job=${job}`);

    const localJob = `lo-noop-${randomUUID().slice(0, 6)}`;
    const local = await pairRun(localJob, ['outcome=completed'], []);
    expect(local.status).toBe(0);
    expect(shape(swarm.result)).toEqual(shape(local.result));
    expect((await listFilesRecursively(swarm.output)).map((f) => f.replace(job, 'J')).sort()).toEqual(
      (await listFilesRecursively(local.output)).map((f) => f.replace(localJob, 'J')).sort(),
    );
  });

  it('pair run --executor swarm: logs streamed through the service log API (each byte once), a Codex session collected through the node\'s engine', async () => {
    const job = `sw-sess-${randomUUID().slice(0, 6)}`;
    const r = await pairRun(job, ['numbered=200', 'stderr_bytes=1000', 'session=success', 'outcome=completed'], cluster.flags, { gpus: 1 });
    expect(r.status).toBe(0);
    expect(r.result).toMatchObject({ classification: 'completed', logs: { stdout: { bytes: 200 * 64, closed: true }, stderr: { bytes: 1000, closed: true } } });
    expect((r.result['sessions'] as { files: number }).files).toBeGreaterThanOrEqual(1);
    const stdout = await readFile(join(r.output, 'stdout.log'), 'utf8');
    const lines = stdout.split('\n').filter(Boolean);
    expect(lines).toHaveLength(200);
    expect(new Set(lines).size).toBe(200);
    const sessions = await listFilesRecursively(join(r.output, 'sessions'));
    expect(sessions.some((f) => f.endsWith('.jsonl'))).toBe(true);
    await expectNothingLeft(`roboguide.job=${job}`);
  });

  it('refuses bad executor flags with exit 2 naming the flag, before anything is written', async () => {
    const path = join(work, 'bad.json');
    await writeFile(path, JSON.stringify(spec('bad', ['outcome=completed'])));
    const r = cli(['pair', 'run', '--spec', path, '--output', join(work, 'bad-out'), '--executor', 'swarm', '--manager', 'http://x', '--node-engine', 'n1']);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/--manager: scheme http is not one of unix, tcp, ssh/);
    expect(r.stderr).toMatch(/--node-engine\[0\]: must be NODE=URL/);
    expect(await readdir(work)).not.toContain('bad-out');
  });
});
