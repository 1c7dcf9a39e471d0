import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../../../src/adapters/registry/sqlite-capacity-registry.js';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import type { CapacityRegistry } from '../../../../src/app/ports/capacity-registry.js';
import type { ContainerRuntime } from '../../../../src/app/ports/container-runtime.js';
import { reconcileOutput, type OutputEvidenceDeps } from '../../../../src/app/pair/reconcile-output.js';
import { recoverOutput } from '../../../../src/app/pair/recover-output.js';
import { RoboguideError } from '../../../../src/core/errors.js';
import {
  buildFinishedPair,
  FakeContainerRuntime,
  outcomeSha256OrNull,
  steppingClock,
} from '../../../support/finished-pair.js';
import { fileOutcomeReader } from '../../../../src/adapters/outcome-reader.js';
import { procHostIdentity } from '../../../../src/adapters/host-identity.js';
import { fakeLogger } from '../../../support/fakes.js';
import { clockAt } from '../../../support/fake-time.js';

let tmp: string;
let registry: SqliteCapacityRegistry;
let closes: number;

beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'rg-reconcile-output-'));
  registry = SqliteCapacityRegistry.open({ path: join(tmp, 'registry.db'), clock: steppingClock() });
  closes = 0;
});
afterEach(async () => {
  registry.closeSync();
  await rm(tmp, { recursive: true, force: true });
});

/** The registry as the command opens it: closing it is counted, not done (the test reads it afterwards). */
function opened(): CapacityRegistry {
  return new Proxy(registry, {
    get(target, key) {
      if (key === 'close') return () => ((closes += 1), Promise.resolve());
      const value: unknown = Reflect.get(target, key, target);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

function deps(runtime: Partial<ContainerRuntime> | Error): OutputEvidenceDeps {
  return {
    isDirectory: () => Promise.resolve(true),
    exists: () => Promise.resolve(true),
    locateRegistry: () => ({
      path: join(tmp, 'registry.db'),
      file: true,
      open: () => Promise.resolve(opened()),
    }),
    storeAt: (output) => new EvidenceStore(new NodeFileSystem(), output),
    runtimeFor: () =>
      runtime instanceof Error ? Promise.reject(runtime) : Promise.resolve(runtime as ContainerRuntime),
  };
}

describe('reconcileOutput (`reconcile`)', () => {
  it('reconciles the pair run of the output directory, says which registry, and closes it', async () => {
    const pair = await buildFinishedPair({
      root: join(tmp, 'run'),
      outcomeDir: join(tmp, 'out'),
      registry,
      layout: 'pair',
      batchId: 'pair-run-1',
    });
    const got = await reconcileOutput(
      { ...deps(new FakeContainerRuntime()), readOutcomeSha256: outcomeSha256OrNull },
      { output: join(tmp, 'run'), mode: 'execute' },
    );
    expect(got.registryPath).toBe(join(tmp, 'registry.db'));
    expect(got.reports.map((r) => r.kind)).toEqual(['committed']);
    expect((await registry.reservation(pair.reservationId))?.state).toBe('released');
    expect(closes).toBe(1);
  });

  it('--job: only that pair of a batch is reconciled (preview: nothing released)', async () => {
    const root = join(tmp, 'batch');
    await buildFinishedPair({ root, outcomeDir: join(tmp, 'out'), registry, jobId: 'pair-0001' });
    const second = await buildFinishedPair({
      root,
      outcomeDir: join(tmp, 'out'),
      registry,
      jobId: 'pair-0002',
    });
    const got = await reconcileOutput(
      { ...deps(new FakeContainerRuntime()), readOutcomeSha256: outcomeSha256OrNull },
      { output: root, mode: 'preview', jobId: 'pair-0002' },
    );
    expect(got.reports.map((r) => [r.job_id, r.kind])).toEqual([['pair-0002', 'would_commit']]);
    expect((await registry.reservation(second.reservationId))?.state).toBe('held');
    expect(closes).toBe(1);
  });

  it("closes the registry when the output's runtime cannot be built", async () => {
    await mkdir(join(tmp, 'run'));
    const refused = new RoboguideError('E_USAGE', 'a swarm pair');
    await expect(
      reconcileOutput(
        { ...deps(refused), readOutcomeSha256: outcomeSha256OrNull },
        { output: join(tmp, 'run'), mode: 'preview' },
      ),
    ).rejects.toBe(refused);
    expect(closes).toBe(1);
  });
});

describe('recoverOutput (`pair recover`)', () => {
  it('refuses a directory without a receipt (exit 2) and closes the registry', async () => {
    await mkdir(join(tmp, 'empty'));
    const logger = fakeLogger();
    const err: unknown = await recoverOutput(
      {
        ...deps(new FakeContainerRuntime()),
        clock: clockAt(() => new Date()),
        logger,
        host: procHostIdentity,
        fs: new NodeFileSystem(),
        outcomes: fileOutcomeReader,
      },
      { output: join(tmp, 'empty'), stopBudgetSec: 1 },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RoboguideError);
    expect((err as RoboguideError).exitCode).toBe(2);
    expect(closes).toBe(1);
  });
});
