import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../../src/adapters/registry/sqlite-capacity-registry.js';
import { runPair } from '../../../src/app/pair/run-pair.js';
import type { RunPairDeps } from '../../../src/app/pair/run-pair-types.js';
import type {
  ContainerOutput,
  ContainerState,
  WaitResult,
} from '../../../src/app/ports/container-runtime.js';
import { silentLogger } from '../../../src/app/ports/logger.js';
import { deadlineOf } from '../../../src/core/batch-ledger.js';
import { wallDeadlineFromClaim, wallDeadlineMs } from '../../../src/core/wall-budget.js';
import { steppingClock } from '../../support/finished-pair.js';
import { fileOutcomeReader } from '../../../src/adapters/outcome-reader.js';
import { procHostIdentity } from '../../../src/adapters/host-identity.js';
import { UnscriptedRuntime } from '../../support/fakes.js';

/** An engine whose one container exits at once; it records the deadline each wait was given. */
class RecordingRuntime extends UnscriptedRuntime {
  readonly waitDeadlines: number[] = [];
  present = false;
  override imageExists() {
    return Promise.resolve(true);
  }
  override create() {
    this.present = true;
    return Promise.resolve({ id: 'c1', name: 'n' });
  }
  override attach(): Promise<ContainerOutput> {
    return Promise.resolve({ stdout: new PassThrough().end(), stderr: new PassThrough().end() });
  }
  override start() {
    return Promise.resolve();
  }
  override wait(_id: string, options: { deadlineMs: number }): Promise<WaitResult> {
    this.waitDeadlines.push(options.deadlineMs);
    return Promise.resolve({ kind: 'exited', exitCode: 0 });
  }
  override stop() {
    return Promise.resolve();
  }
  override remove() {
    this.present = false;
    return Promise.resolve('removed' as const);
  }
  override inspect(): Promise<ContainerState | null> {
    return Promise.resolve(
      this.present
        ? {
            id: 'c1',
            status: 'exited',
            exitCode: 0,
            oomKilled: false,
            startedAt: null,
            finishedAt: null,
            labels: {},
          }
        : null,
    );
  }
  override getArchive() {
    return Promise.resolve(null);
  }
  override listByLabel(): Promise<ContainerState[]> {
    return Promise.resolve([]);
  }
}

let dir: string;
let registry: SqliteCapacityRegistry;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-wall-budget-'));
  registry = SqliteCapacityRegistry.open({ path: join(dir, 'registry.db'), clock: steppingClock() });
  await registry.setLimits({ maxReservations: 4, gpuMib: null });
});
afterEach(async () => {
  registry.closeSync();
  await rm(dir, { recursive: true, force: true });
});

describe('the wall budget: one deadline in epoch ms, fixed at claim time', () => {
  it('is the claim time plus timeout_seconds, and what status shows is that same instant', () => {
    expect(wallDeadlineMs(Date.UTC(2026, 11, 3, 8, 0, 0), 90)).toBe(Date.UTC(2026, 11, 3, 8, 1, 30));
    expect(wallDeadlineFromClaim('2026-12-03T08:00:00.250Z', 36_060)).toBe(
      Date.parse('2026-12-03T18:01:00.250Z'),
    );
    expect(deadlineOf('2026-12-03T08:00:00.250Z', 36_060)).toBe('2026-12-03T18:01:00.250Z');
  });

  it('pair run waits until the claim time in its receipt plus timeout_seconds, whatever the clock says later', async () => {
    const runtime = new RecordingRuntime();
    // Every reading of the injected clock is one second later than the one before.
    const deps: RunPairDeps = {
      fs: new NodeFileSystem(),
      host: procHostIdentity,
      outcomes: fileOutcomeReader,
      registry,
      runtime: runtime,
      clock: steppingClock(),
      logger: silentLogger,
      createRedactor: () => new PassThrough(),
      extractSessions: () => Promise.reject(new Error('no sessions archive in this test')),
      diagnose: () => Promise.resolve(null),
      verifyAbsentTimeoutMs: 300,
    };
    const spec = {
      job_id: 'p1',
      argv: ['/run'],
      cwd: join(dir, 'cwd'),
      outcome_path: join(dir, 'out', 'o.json'),
      ports: [],
      timeout_seconds: 90,
      image: 'img',
    };
    const ran = await runPair(deps, {
      specText: JSON.stringify(spec),
      specSource: 'p1.json',
      output: join(dir, 'D'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 't',
      cwd: dir,
    });
    expect(runtime.waitDeadlines).toEqual([Date.parse(ran.receipt.claimed_at) + 90_000]);
  });
});
