/**
 * `pair recover` and the lost-worker result with fakes (no engine, no /proc): the refusals that touch nothing, the
 * crash left-over (a container still there, no result) recovered once, and a replay that releases nothing.
 */
import { isResultRecord } from '../../../../src/core/result.js';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { fileOutcomeReader } from '../../../../src/adapters/outcome-reader.js';
import { SqliteCapacityRegistry } from '../../../../src/adapters/registry/sqlite-capacity-registry.js';
import { lostWorkerResult } from '../../../../src/app/pair/build-result.js';
import { sha256Hex } from '../../../../src/app/digest.js';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import { silentLogger } from '../../../../src/app/ports/logger.js';
import { recoverPairRun, type RecoverPairRunDeps } from '../../../../src/app/pair/recover-pair-run.js';
import { RoboguideError } from '../../../../src/core/errors.js';
import { buildReceipt, type Receipt } from '../../../../src/core/receipt.js';
import { FakeHost, FakePairRuntime, SUPERVISOR } from '../../../support/fake-pair-world.js';
import { clockAt } from '../../../support/fake-time.js';

const SECRET = 'sk-live-abcdefgh12345678';
const clock = clockAt(() => new Date('2026-12-03T09:00:00Z'));
let dir: string;
let registry: SqliteCapacityRegistry;
let runtime: FakePairRuntime;
let host: FakeHost;
let store: EvidenceStore;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-recover-run-'));
  registry = SqliteCapacityRegistry.open({ path: join(dir, 'registry.db') });
  runtime = new FakePairRuntime();
  host = new FakeHost();
  await mkdir(join(dir, 'D'), { mode: 0o700 });
  store = new EvidenceStore(new NodeFileSystem(), join(dir, 'D'));
});
afterEach(async () => {
  await registry.close();
  await rm(dir, { recursive: true, force: true });
});

function deps(): RecoverPairRunDeps {
  return {
    store,
    registry,
    runtime,
    clock,
    logger: silentLogger,
    fs: new NodeFileSystem(),
    host,
    outcomes: fileOutcomeReader,
  };
}

/** What a `pair run` killed mid-pair leaves: a held slot, the receipt with its container, the outcome it wrote. */
async function killedPairRun(
  batchId = 'pair-run-0000aaaa',
): Promise<{ receipt: Receipt; containerId: string }> {
  const claimId = '0000aaaa-1111-2222-3333-444455556666';
  const admitted = await registry.admit({ batchId, jobId: 'j1', claimId, gpuMib: 0 });
  if (admitted.kind !== 'admitted') throw new Error('set-up: admission refused');
  const containerId = runtime.leave({
    labels: { 'roboguide.claim': claimId },
    env: { OPENAI_API_KEY: SECRET, PATH: '/bin' },
  });
  await registry.attachContainer(admitted.reservationId, containerId);
  const receipt = {
    ...buildReceipt({
      batchId,
      jobId: 'j1',
      claimId,
      claimedAt: new Date('2026-12-03T08:00:00Z'),
      supervisor: SUPERVISOR,
      reservationId: admitted.reservationId,
      image: 'driver:1',
      outcomePath: join(dir, 'out', 'j1.json'),
      sourceSha256: {},
      codeVersion: 'test',
      network: 'bridge',
      runtime: 'runc',
    }),
    container_id: containerId,
  };
  await store.writeJsonAtomic('receipt.json', receipt);
  await store.ensureDir('outcome');
  await writeFile(
    store.resolve('outcome/j1.json'),
    JSON.stringify({
      job_id: 'j1',
      infrastructure_failure: false,
      fatal_failure: false,
      arms: { key: SECRET },
    }),
  );
  await writeFile(store.resolve('stdout.log'), 'half a line');
  return { receipt, containerId };
}

async function refusal(run: Promise<unknown>): Promise<RoboguideError> {
  const err: unknown = await run.catch((e: unknown) => e);
  if (!(err instanceof RoboguideError)) throw new Error(`expected a RoboguideError, got ${String(err)}`);
  return err;
}

describe('recoverPairRun', () => {
  it('refuses a directory without a receipt, and a batch pair', async () => {
    expect((await refusal(recoverPairRun(deps(), { stopBudgetSec: 1 }))).code).toBe('E_USAGE');
    await killedPairRun('e1-20261203-batch');
    const err = await refusal(recoverPairRun(deps(), { stopBudgetSec: 1 }));
    expect(err.code).toBe('E_USAGE');
    expect(err.message).toContain('not a pair run');
    expect(runtime.removed).toBe(0);
  });

  it('refuses while the pair run that owns the directory is alive, and touches nothing', async () => {
    await killedPairRun();
    host.alive.add(SUPERVISOR.pid);
    const err = await refusal(recoverPairRun(deps(), { stopBudgetSec: 1 }));
    expect(err.code).toBe('E_SUPERVISOR_ALIVE');
    expect(runtime.containers.size).toBe(1);
    expect(await store.readJson('result.json')).toBeNull();
  });

  it('a crash left-over: removes the container, writes a lost_worker result with the secret masked, releases the slot once', async () => {
    const { receipt, containerId } = await killedPairRun();
    const report = await recoverPairRun(deps(), { stopBudgetSec: 1 });
    expect(report.containers).toEqual([containerId]);
    expect(runtime.containers.size).toBe(0);
    expect(report.result).toBe('written');
    expect(report.released_now).toBe(true);
    expect((await registry.reservation(receipt.reservation_id ?? ''))?.state).toBe('released');
    const result = (await store.readJson('result.json', isResultRecord))!;
    expect(result.reasons).toEqual(['lost_worker']);
    expect(result.classification).toBe('harness_failure');
    expect(result.logs.stdout).toEqual({ bytes: 11, closed: false });
    expect(JSON.stringify(result)).not.toContain(SECRET);
    // the evidence copy is masked in place, and the digest is over what is kept
    const kept = await readFile(store.resolve('outcome/j1.json'));
    expect(kept.toString()).not.toContain(SECRET);
    expect(result.outcome_sha256).toBe(sha256Hex(kept));

    const again = await recoverPairRun(deps(), { stopBudgetSec: 1 });
    expect(again.result).toBe('kept');
    expect(again.released_now).toBe(false);
    expect(again.reconciliation.kind).toBe('already_committed');
  });
});

describe('lostWorkerResult', () => {
  it('a receipt from before the private outcome folder reads the host outcome_path, unmasked, and a removal not proven adds cleanup_unverified', async () => {
    const { receipt } = await killedPairRun();
    const legacy: Receipt = { ...receipt };
    delete (legacy as { private_outcome?: string }).private_outcome;
    await mkdir(join(dir, 'out'));
    const bytes = JSON.stringify({
      job_id: 'j1',
      infrastructure_failure: false,
      fatal_failure: false,
      arms: {},
    });
    await writeFile(join(dir, 'out', 'j1.json'), bytes);
    const result = await lostWorkerResult(
      { fs: new NodeFileSystem(), outcomes: fileOutcomeReader, clock },
      {
        store,
        jobRel: '.',
        receipt: legacy,
        containerId: null,
        cleanup: { removed: false, verified_absent: false, attempts: 3 },
        secrets: [],
        allowedHttpStatuses: [],
      },
    );
    expect(result.reasons).toEqual(['lost_worker', 'cleanup_unverified']);
    expect(result.outcome_sha256).toBe(sha256Hex(bytes));
    expect(result.started_at).toBe(receipt.claimed_at);
    expect(result.finished_at).toBe(clock.now().toISOString());
    expect(result.logs.stderr).toEqual({ bytes: 0, closed: false });
  });

  it('an outcome copy that is a symlink is no outcome: unparseable, no digest (what reconciliation then reads too)', async () => {
    const { receipt } = await killedPairRun();
    await rm(store.resolve('outcome/j1.json'));
    await writeFile(join(dir, 'elsewhere.json'), '{"job_id":"j1"}');
    await symlink(join(dir, 'elsewhere.json'), store.resolve('outcome/j1.json'));
    const result = await lostWorkerResult(
      { fs: new NodeFileSystem(), outcomes: fileOutcomeReader, clock },
      {
        store,
        jobRel: '.',
        receipt,
        containerId: null,
        cleanup: { removed: false, verified_absent: true, attempts: 0 },
        secrets: [],
        allowedHttpStatuses: [],
      },
    );
    expect(result.outcome_sha256).toBeNull();
    expect(result.reasons).toContain('outcome_unparseable');
    expect(await fileOutcomeReader.sha256(store.resolve('outcome/j1.json'))).toBeNull();
  });
});
