/**
 * `pair run` with fakes behind every port (no engine, no /proc): the claim it publishes, the slot it takes and gives
 * back, and the refusals that must leave nothing behind.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { runPair, type RunPairDeps, type RunPairOptions } from '../../src/app/run-pair.js';
import { RoboguideError } from '../../src/core/errors.js';
import type { Receipt } from '../../src/core/receipt.js';
import { FakeHost, FakePairRuntime, fakeExecuteDeps, SUPERVISOR } from '../support/fake-pair-world.js';

let dir: string;
let registry: SqliteCapacityRegistry;
let runtime: FakePairRuntime;
let opened: number;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-run-pair-'));
  registry = SqliteCapacityRegistry.open({ path: join(dir, 'registry.db') });
  runtime = new FakePairRuntime();
  opened = 0;
});
afterEach(async () => {
  await registry.close();
  await rm(dir, { recursive: true, force: true });
});

function deps(overrides: Partial<RunPairDeps> = {}): RunPairDeps {
  return {
    ...fakeExecuteDeps(runtime, new FakeHost()),
    registry: () => {
      opened++;
      return Promise.resolve(registry);
    },
    ...overrides,
  };
}

function options(spec: Record<string, unknown> = {}, extra: Partial<RunPairOptions> = {}): RunPairOptions {
  const full = { job_id: 'j1', image: 'driver:1', argv: ['/run'], cwd: join(dir, 'cwd'), outcome_path: join(dir, 'out', 'j1.json'), timeout_seconds: 60, ...spec };
  return { specText: JSON.stringify(full), specSource: 'spec.json', output: join(dir, 'D'), bindAddress: '127.0.0.1', environment: {}, codeVersion: 'test', cwd: dir, ...extra };
}

async function held(): Promise<number> {
  return (await registry.held()).filter((r) => r.batchId !== 'other').length;
}

async function refusal(run: Promise<unknown>): Promise<RoboguideError> {
  const err: unknown = await run.catch((e: unknown) => e);
  if (!(err instanceof RoboguideError)) throw new Error(`expected a RoboguideError, got ${String(err)}`);
  return err;
}

describe('runPair', () => {
  it('claims with the host identity, runs, writes result.json and gives the slot back through reconciliation', async () => {
    const outcome = await runPair(deps(), options());
    const receipt = JSON.parse(await readFile(join(dir, 'D', 'receipt.json'), 'utf8')) as Receipt;
    expect(receipt.supervisor).toEqual(SUPERVISOR);
    expect(receipt.host_boot_id).toBe(SUPERVISOR.boot_id);
    expect(receipt.batch_id).toBe(`pair-run-${receipt.claim_id.slice(0, 8)}`);
    expect(receipt.private_outcome).toBe('outcome/j1.json');
    expect(receipt.container_id).toBe(outcome.result.container.id);
    expect(outcome.result.classification).toBe('completed');
    expect(outcome.result.outcome_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(outcome.reconciliation.kind).toBe('committed');
    expect(await held()).toBe(0);
    expect(runtime.containers.size).toBe(0);
  });

  it('refuses an outcome_path that already holds something, even a dangling symlink, before the registry or the engine', async () => {
    await mkdir(join(dir, 'out'), { recursive: true });
    await symlink(join(dir, 'nowhere'), join(dir, 'out', 'j1.json'));
    const err = await refusal(runPair(deps(), options()));
    expect(err.code).toBe('E_SPEC_INVALID');
    expect(err.message).toContain('outcome_path: already exists');
    expect(opened).toBe(0);
    expect(runtime.created).toBe(0);
    expect(existsSync(join(dir, 'D'))).toBe(false);
  });

  it('a missing image is exit 3 before the registry is opened or anything written', async () => {
    const err = await refusal(runPair(deps(), options({ image: 'absent:1' })));
    expect(err.code).toBe('E_IMAGE_MISSING');
    expect(opened).toBe(0);
    expect(existsSync(join(dir, 'D'))).toBe(false);
  });

  it('a full host refuses with E_REGISTRY and writes nothing', async () => {
    await registry.setLimits({ maxReservations: 1, gpuMib: null });
    const first = await registry.admit({ batchId: 'other', jobId: 'x', claimId: 'c-other', gpuMib: 0 });
    expect(first.kind).toBe('admitted');
    const err = await refusal(runPair(deps(), options()));
    expect(err.code).toBe('E_REGISTRY');
    expect(err.message).toContain('capacity limit');
    expect(existsSync(join(dir, 'D'))).toBe(false);
  });

  it('an engine fault at create: the pair is an infrastructure failure with the fault kept, and its slot is given back', async () => {
    runtime.failCreate = Object.assign(new Error('engine refused'), { statusCode: 500 });
    const r = await runPair(deps(), options());
    expect(r.result.classification).toBe('infrastructure_failure');
    expect(r.result.container.id).toBeNull();
    expect(r.result.engine_error).not.toBeNull();
    expect(r.reconciliation.kind).toBe('committed');
    expect(await held()).toBe(0);
  });

  it('an output directory left by an earlier run (not empty) refuses and gives the slot back', async () => {
    await mkdir(join(dir, 'D'));
    await writeFile(join(dir, 'D', 'receipt.json'), '{}');
    const err = await refusal(runPair(deps(), options()));
    expect(err.code).toBe('E_OUTPUT_NOT_EMPTY');
    expect(await held()).toBe(0);
    expect(runtime.created).toBe(0);
  });
});
