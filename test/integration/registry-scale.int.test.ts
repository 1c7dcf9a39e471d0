/**
 * The registry's scale-out behaviour with real batches on the shared engine (synthetic driver image):
 * - a batch started through the CLI (`e1-batch start`, detached supervisor) on the PostgreSQL registry: every pair
 *   once, 0 leaked reservations, 0 containers left;
 * - three batches on two "hosts" (supervisors whose registries name different nodes) sharing one PostgreSQL
 *   registry with one slot per node: the per-node limit is never exceeded (admitted/refused counts printed);
 * - published ports: two batches on one host declaring the same (free, high) port — the second's pair waits
 *   (port_held) instead of colliding at the engine, and a batch started while the port is held is refused;
 * - the GPU budget: two batches whose pairs declare more GPU MiB together than the budget run one after the other
 *   (gpu_budget), and a pair larger than the whole budget is refused at start.
 */
import { createServer } from 'node:net';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { parsePostgresUrl, registryLocation } from '../../src/adapters/registry/default-path.js';
import { openRegistryAt } from '../../src/adapters/registry/open-registry.js';
import { PostgresCapacityRegistry } from '../../src/adapters/registry/postgres-capacity-registry.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { checkRegistryNeeds } from '../../src/app/batch/registry-needs.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { supervise } from '../../src/app/batch/supervisor.js';
import type { AdmitRequest, AdmitResult, CapacityRegistry } from '../../src/app/ports/capacity-registry.js';
import { systemClock } from '../../src/adapters/system-clock.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { createExecutePairDeps } from '../../src/composition-root.js';
import { driverRuns, runCli } from '../support/crash-batch.js';
import { containersLabelled, DRIVER_IMAGE, noDocker, runtime } from '../support/docker.js';
import { postgresSkipReason, startPostgres, type TestPostgres } from '../support/postgres.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';

const rt = runtime();
const pgSkip = postgresSkipReason();
let work: string;

interface JobSpec {
  readonly id: string;
  readonly actions: readonly string[];
  readonly ports?: readonly number[];
  readonly gpu_mib?: number;
}

async function writeManifest(
  name: string,
  jobs: readonly JobSpec[],
): Promise<{ path: string; output: string; counter: string }> {
  const dir = join(work, name);
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: DRIVER_IMAGE,
    jobs: jobs.map((j) => ({
      job_id: j.id,
      argv: ['/opt/driver/run', 'count', ...j.actions],
      cwd: join(dir, 'cwd'),
      outcome_path: join(dir, 'out', `${j.id}.json`),
      timeout_seconds: 60,
      ...(j.ports !== undefined ? { ports: j.ports } : {}),
      ...(j.gpu_mib !== undefined ? { gpu_mib: j.gpu_mib } : {}),
    })),
    stop_budget_seconds: 5,
  };
  const path = join(work, `${name}.json`);
  await writeFile(path, JSON.stringify(manifest));
  return { path, output: join(dir, 'batch'), counter: join(dir, 'cwd', 'driver-runs.log') };
}

/** Prepares a batch in-process the way `e1-batch start` does, the registry checks included. */
async function prepare(
  name: string,
  jobs: readonly JobSpec[],
  registry: string,
): Promise<{ store: EvidenceStore; batchId: string; counter: string }> {
  const m = await writeManifest(name, jobs);
  const location = registryLocation(registry);
  const record = await prepareBatch(
    {
      fs: new NodeFileSystem(),
      host: procHostIdentity,
      runtime: rt,
      clock: systemClock,
      checkRegistry: async (needs) => {
        const opened = await openRegistryAt(location);
        try {
          await checkRegistryNeeds(opened, needs);
        } finally {
          await opened.close();
        }
      },
    },
    {
      manifestPath: m.path,
      output: m.output,
      registryPath: location.path,
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
    },
  );
  return {
    store: new EvidenceStore(new NodeFileSystem(), m.output),
    batchId: record.batch_id,
    counter: m.counter,
  };
}

/** Delegates to a registry and counts what admissions answered. */
function counting(
  inner: CapacityRegistry,
  counts: { admitted: number; refused: Record<string, number> },
): CapacityRegistry {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'admit') {
        return async (request: AdmitRequest): Promise<AdmitResult> => {
          const result = await target.admit(request);
          if (result.kind === 'admitted') counts.admitted += 1;
          if (result.kind === 'refused')
            counts.refused[result.reason] = (counts.refused[result.reason] ?? 0) + 1;
          return result;
        };
      }
      const value: unknown = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

function superviseWith(store: EvidenceStore, registry: CapacityRegistry): Promise<string> {
  return supervise(
    {
      store,
      registry,
      execute: createExecutePairDeps(rt, silentLogger),
      logger: silentLogger,
      environment: {},
      handleSignals: false,
    },
    'start',
  );
}

async function journalReasons(store: EvidenceStore): Promise<string[]> {
  return (await store.readJournal())
    .filter((r) => r.type === 'admission_refused')
    .map((r) => String((r as { reason?: unknown }).reason));
}

async function classifications(store: EvidenceStore): Promise<Record<string, string | null>> {
  const summary = JSON.parse(await readFile(store.resolve('SUMMARY.json'), 'utf8')) as {
    jobs: { job_id: string; classification: string | null }[];
  };
  return Object.fromEntries(summary.jobs.map((j) => [j.job_id, j.classification]));
}

/** A high TCP port free on 127.0.0.1 right now (the kernel picks it). */
function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

async function sleep(ms: number): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'rg-scale-'));
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe.skipIf(noDocker)('published ports and the GPU budget on the shared engine (SQLite registry)', () => {
  it("a second batch's pair waits for a port another batch holds; a batch started while it is held is refused", async () => {
    const registry = join(work, 'ports.db');
    const setup = SqliteCapacityRegistry.open({ path: registry });
    await setup.setLimits({ maxReservations: 4, gpuMib: null });
    const port = await freePort();
    const a = await prepare(
      'ports-a',
      [{ id: 'a1', actions: ['sleep=3', 'outcome=completed'], ports: [port] }],
      registry,
    );
    const b = await prepare(
      'ports-b',
      [{ id: 'b1', actions: ['outcome=completed'], ports: [port] }],
      registry,
    );
    const counts = { admitted: 0, refused: {} as Record<string, number> };
    const runA = superviseWith(a.store, setup);
    // Once a's pair holds the port, b is dispatched: its admission waits (port_held) instead of colliding at the engine.
    for (let i = 0; i < 200 && (await setup.portHolders(setup.localNode, [port])).length === 0; i++)
      await sleep(50);
    const holders = await setup.portHolders(setup.localNode, [port]);
    expect(holders).toMatchObject([{ port, batchId: a.batchId, jobId: 'a1' }]);
    // A batch started now is refused, naming the port and the holder batch; nothing is written.
    await expect(
      prepare('ports-c', [{ id: 'c1', actions: ['outcome=completed'], ports: [port] }], registry),
    ).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringContaining(
        `jobs[0].ports[0]: port ${port} is held on node ${setup.localNode} by batch ${a.batchId} (job a1)`,
      ) as string,
    });
    const runB = superviseWith(b.store, counting(setup, counts));
    expect(await Promise.all([runA, runB])).toEqual(['drained', 'drained']);
    expect(await classifications(a.store)).toEqual({ a1: 'completed' });
    expect(await classifications(b.store)).toEqual({ b1: 'completed' });
    expect(counts.refused['port_held'] ?? 0).toBeGreaterThan(0);
    expect(await journalReasons(b.store)).toContain('port_held');
    expect(await setup.held()).toEqual([]);
    expect(await setup.portHolders(setup.localNode, [port])).toEqual([]);
    console.info(
      `ports: batch b admitted ${counts.admitted}, refused ${JSON.stringify(counts.refused)} while a held port ${port}`,
    );
    await setup.close();
  });

  it('pairs declaring more GPU MiB together than the budget run one after the other; one larger than the whole budget is refused at start', async () => {
    const registry = join(work, 'gpu.db');
    const setup = SqliteCapacityRegistry.open({ path: registry });
    await setup.setLimits({ maxReservations: 4, gpuMib: 1_000 });
    await expect(
      prepare('gpu-huge', [{ id: 'h1', actions: ['outcome=completed'], gpu_mib: 1_500 }], registry),
    ).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringContaining(
        `jobs[0].gpu_mib: 1500 MiB exceeds the whole GPU budget of node ${setup.localNode} (1000 MiB)`,
      ) as string,
    });
    const a = await prepare(
      'gpu-a',
      [{ id: 'g1', actions: ['sleep=2', 'outcome=completed'], gpu_mib: 600 }],
      registry,
    );
    const b = await prepare(
      'gpu-b',
      [{ id: 'g2', actions: ['sleep=1', 'outcome=completed'], gpu_mib: 600 }],
      registry,
    );
    const counts = { admitted: 0, refused: {} as Record<string, number> };
    let peakMib = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        peakMib = Math.max(
          peakMib,
          (await setup.held()).reduce((sum, r) => sum + r.gpuMib, 0),
        );
        await sleep(50);
      }
    })();
    const states = await Promise.all([
      superviseWith(a.store, counting(setup, counts)),
      superviseWith(b.store, counting(setup, counts)),
    ]);
    sampling = false;
    await sampler;
    expect(states).toEqual(['drained', 'drained']);
    expect(await classifications(a.store)).toEqual({ g1: 'completed' });
    expect(await classifications(b.store)).toEqual({ g2: 'completed' });
    expect(counts.admitted).toBe(2);
    expect(counts.refused['gpu_budget'] ?? 0).toBeGreaterThan(0);
    expect(peakMib).toBe(600);
    expect(await setup.held()).toEqual([]);
    console.info(
      `gpu budget 1000 MiB, two pairs of 600 MiB: admitted ${counts.admitted}, refused ${JSON.stringify(counts.refused)}, peak held ${peakMib} MiB`,
    );
    await setup.close();
  });
});

describe.skipIf(noDocker || pgSkip !== null)('batches on the PostgreSQL registry', () => {
  let server: TestPostgres;
  beforeAll(() => {
    server = startPostgres();
  });
  afterAll(() => server.stop());

  it('e1-batch start through the CLI: every pair once, 0 leaked reservations, no container left', async () => {
    const url = await server.createDatabase('cli_batch');
    const setup = await openRegistryAt(registryLocation(url));
    await setup.setLimits({ maxReservations: 2, gpuMib: null });
    const m = await writeManifest('pg-cli', [
      { id: 'p1', actions: ['outcome=completed'] },
      { id: 'p2', actions: ['outcome=completed'] },
      { id: 'p3', actions: ['outcome=infra'] },
    ]);
    // Detached supervisor: it reopens the registry from batch.json, where the URL is recorded.
    const started = await runCli([
      'e1-batch',
      'start',
      '--manifest',
      m.path,
      '--output',
      m.output,
      '--registry',
      url,
    ]);
    expect(started.code, started.stderr).toBe(0);
    const batch = JSON.parse(await readFile(join(m.output, 'batch.json'), 'utf8')) as {
      batch_id: string;
      registry_path: string;
    };
    expect(batch.registry_path).toBe(url);
    let summary: { state: string } | null = null;
    for (let i = 0; i < 600 && summary === null; i++) {
      summary = await readFile(join(m.output, 'SUMMARY.json'), 'utf8').then(
        (t) => JSON.parse(t) as { state: string },
        () => null,
      );
      if (summary === null) await sleep(100);
    }
    expect(summary?.state).toBe('drained');
    const store = new EvidenceStore(new NodeFileSystem(), m.output);
    expect(await classifications(store)).toEqual({
      p1: 'completed',
      p2: 'completed',
      p3: 'infrastructure_failure',
    });
    expect([...(await driverRuns(m.counter)).entries()].sort()).toEqual([
      ['p1', 1],
      ['p2', 1],
      ['p3', 1],
    ]);
    expect(await setup.held()).toEqual([]);
    const board = await setup.board({ batchId: batch.batch_id });
    expect(board.map((r) => r.state)).toEqual(['terminal', 'terminal', 'terminal']);
    expect(await containersLabelled({ 'roboguide.batch': batch.batch_id })).toEqual([]);
    // The supervisor exits and gives its lease back: another process is granted it while the old one is gone.
    const supervisor = JSON.parse(await readFile(join(m.output, 'supervisor.json'), 'utf8')) as {
      pid: number;
    };
    for (let i = 0; i < 100 && isAlive(supervisor.pid); i++) await sleep(100);
    expect(
      await setup.acquireLease(batch.batch_id, { pid: 1, start_ticks: null, boot_id: null }, () => true),
    ).toEqual({ kind: 'acquired' });
    await setup.close();
  });

  it("three batches on two hosts sharing the registry never exceed a node's limit", async () => {
    const url = await server.createDatabase('two_hosts');
    const { connection, path } = parsePostgresUrl(url);
    const hostA = await PostgresCapacityRegistry.open({ connection, display: path, localNode: 'host-a' });
    const hostB = await PostgresCapacityRegistry.open({ connection, display: path, localNode: 'host-b' });
    await hostA.setLimits({ maxReservations: 1, gpuMib: null }, 'host-a');
    await hostA.setLimits({ maxReservations: 1, gpuMib: null }, 'host-b');
    const jobs = (prefix: string): JobSpec[] =>
      [1, 2, 3].map((n) => ({ id: `${prefix}${n}`, actions: ['sleep=1', 'outcome=completed'] }));
    const a1 = await prepare('host-a-1', jobs('x'), url);
    const a2 = await prepare('host-a-2', jobs('y'), url);
    const b1 = await prepare('host-b-1', jobs('z'), url);
    const counts = { admitted: 0, refused: {} as Record<string, number> };
    const peak: Record<string, number> = { 'host-a': 0, 'host-b': 0 };
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const held = await hostA.held();
        for (const node of ['host-a', 'host-b'])
          peak[node] = Math.max(peak[node] ?? 0, held.filter((r) => r.node === node).length);
        await sleep(50);
      }
    })();
    const states = await Promise.all([
      superviseWith(a1.store, counting(hostA, counts)),
      superviseWith(a2.store, counting(hostA, counts)),
      superviseWith(b1.store, counting(hostB, counts)),
    ]);
    sampling = false;
    await sampler;
    expect(states).toEqual(['drained', 'drained', 'drained']);
    for (const b of [a1, a2, b1])
      expect(Object.values(await classifications(b.store))).toEqual(['completed', 'completed', 'completed']);
    expect(counts.admitted).toBe(9);
    expect(peak).toEqual({ 'host-a': 1, 'host-b': 1 });
    expect(await hostA.held()).toEqual([]);
    const reservations = await hostA.board();
    expect(reservations).toHaveLength(9);
    console.info(
      `two hosts, one slot each, 3 batches x 3 pairs: admitted ${counts.admitted}, refused ${JSON.stringify(counts.refused)}, peak held per node ${JSON.stringify(peak)}`,
    );
    await hostA.close();
    await hostB.close();
  });
});

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
