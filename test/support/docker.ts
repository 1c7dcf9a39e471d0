import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, inject } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import type { ContainerRuntime } from '../../src/app/ports/container-runtime.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import type { RunPairDeps } from '../../src/app/pair/run-pair-types.js';
import { createExecutePairDeps } from '../../src/composition-root.js';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { PAIR_DRIVER_IMAGE } from '../../src/core/synthetic-images.js';

export const dockerAvailable = inject('dockerAvailable');
/** Use as `describe.skipIf(noDocker)(…)`: the skip shows in the report with the file's name. */
export const noDocker = !dockerAvailable;
/** True on a GPU host: tests of the "engine without NVIDIA runtime" behaviour skip there (visibly). */
export const engineHasNvidia = inject('engineHasNvidia');
/** The engine is Podman behind the Docker API (scripts/podman-suite.sh): tests of Docker-only behaviour skip, visibly. */
export const engineIsPodman = inject('engineIsPodman');
export const DRIVER_IMAGE = PAIR_DRIVER_IMAGE;

export function runtime(): DockerContainerRuntime {
  return new DockerContainerRuntime();
}

/** Every container carrying the label `roboguide.job=<jobId>` (or `roboguide.batch=<batchId>`). */
export async function containersLabelled(labels: Record<string, string>): Promise<string[]> {
  const list = await runtime().listByLabel(labels);
  return list.map((c) => c.id);
}

/** Remove whatever a test left behind (tests assert absence first; this only keeps the engine clean). */
export async function sweep(labels: Record<string, string>): Promise<number> {
  const rt = runtime();
  const ids = await containersLabelled(labels);
  await Promise.all(ids.map((id) => rt.remove(id)));
  return ids.length;
}

/**
 * Adapters for `runPair` in tests: the real engine, a real (temporary, per-process) registry with a roomy
 * host limit so unrelated tests never queue behind each other.
 */
export function pairRunDeps(
  rt: ContainerRuntime = runtime(),
): RunPairDeps & { readonly registry: SqliteCapacityRegistry } {
  if (testRegistry === undefined) {
    const dir = mkdtempSync(join(tmpdir(), 'roboguide-test-registry-'));
    testRegistry = SqliteCapacityRegistry.open({ path: join(dir, 'registry.db') });
    void testRegistry.setLimits({ maxReservations: 100, gpuMib: null }); // synchronous underneath (SQLite)
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  }
  const registry = testRegistry;
  return { ...createExecutePairDeps(rt, silentLogger), fs: new NodeFileSystem(), registry };
}
let testRegistry: SqliteCapacityRegistry | undefined;

/**
 * The assertion every pair test ends with: no container labelled with one of these jobs remains. Sweeps after
 * checking (so one failure does not spill into the next test) and empties the list.
 */
export async function expectNoContainersLeft(jobs: string[]): Promise<void> {
  for (const job of jobs.splice(0)) {
    const left = await containersLabelled({ 'roboguide.job': job });
    await sweep({ 'roboguide.job': job });
    expect(left, `containers left for ${job}`).toEqual([]);
  }
}
