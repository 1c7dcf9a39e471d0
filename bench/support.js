// Shared by the benches: medians, a monotonic clock, and one pair through our code (runPair) with its own
// private registry, so the pairs of a bench take and give back slots without touching the host's.
import { mkdtempSync, rmSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeFileSystem } from '../dist/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../dist/adapters/registry/sqlite-capacity-registry.js';
import { silentLogger } from '../dist/app/ports/logger.js';
import { runPair } from '../dist/app/pair/run-pair.js';
import { createContainerRuntime, createExecutePairDeps } from '../dist/composition-root.js';

/**
 * The driver image; `BENCH_IMAGE` names another build of `docker/pair-driver` (e.g. a private tag on an engine
 * shared with other checkouts whose `images build` moves `roboguide/pair-driver:1` to their own context).
 */
export const IMAGE = process.env.BENCH_IMAGE ?? 'roboguide/pair-driver:1';

export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

export function elapsedMsSince(started) {
  return Number(process.hrtime.bigint() - started) / 1e6;
}

export function pairRunDeps() {
  const dir = mkdtempSync(join(tmpdir(), 'rg-bench-registry-'));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  const registry = SqliteCapacityRegistry.open({ path: join(dir, 'registry.db') });
  return {
    ...createExecutePairDeps(createContainerRuntime(), silentLogger),
    fs: new NodeFileSystem(),
    registry,
  };
}

/**
 * The same deps built from another build's compiled output (`BASELINE_DIST=<other checkout>/dist`), with that
 * build's `runPair` under `deps.runPair`: `timedPair` then times the other build's lifecycle in the same run.
 */
export async function pairRunDepsFrom(dist) {
  const [
    { NodeFileSystem: Fs },
    { SqliteCapacityRegistry: Registry },
    { silentLogger: logger },
    { runPair: run },
    root,
  ] = await Promise.all([
    import(`${dist}/adapters/fs/node-file-system.js`),
    import(`${dist}/adapters/registry/sqlite-capacity-registry.js`),
    import(`${dist}/app/ports/logger.js`),
    import(`${dist}/app/run-pair.js`),
    import(`${dist}/composition-root.js`),
  ]);
  const dir = mkdtempSync(join(tmpdir(), 'rg-bench-registry-'));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  const registry = Registry.open({ path: join(dir, 'registry.db') });
  return {
    ...root.createExecutePairDeps(root.createContainerRuntime(), logger),
    fs: new Fs(),
    registry,
    runPair: run,
  };
}

/** One pair of the synthetic driver through runPair; returns the elapsed ms and its evidence directory. */
export async function timedPair(deps, root, jobId, actions, timeoutSeconds) {
  const dir = join(root, jobId);
  const cwd = join(dir, 'cwd');
  await mkdir(cwd, { recursive: true });
  const spec = {
    job_id: jobId,
    argv: ['/opt/driver/run', ...actions],
    cwd,
    outcome_path: join(dir, 'out', 'outcome.json'),
    timeout_seconds: timeoutSeconds,
    image: IMAGE,
  };
  const output = join(dir, 'evidence');
  const started = process.hrtime.bigint();
  const { result } = await (deps.runPair ?? runPair)(deps, {
    specText: JSON.stringify(spec),
    specSource: `${jobId}.json`,
    output,
    bindAddress: '127.0.0.1',
    environment: {},
    codeVersion: 'bench',
    cwd: dir,
  });
  const elapsedMs = elapsedMsSince(started);
  if (result.classification !== 'completed') {
    throw new Error(
      `${jobId}: expected completed, got ${result.classification} ${JSON.stringify(result.reasons)}`,
    );
  }
  return { elapsedMs, dir, output };
}
