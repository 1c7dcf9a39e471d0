import { mkdtemp, readFile, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../../../src/adapters/registry/sqlite-capacity-registry.js';
import {
  reconcileBatch,
  reconcilePair,
  type ReconcileDeps,
} from '../../../../src/app/pair/reconcile-pair.js';
import type { ReconcileStep } from '../../../../src/app/pair/reconcile-commit.js';
import { RoboguideError } from '../../../../src/core/errors.js';
import {
  buildFinishedPair,
  FakeContainerRuntime,
  hashTree,
  outcomeSha256OrNull,
  sha256,
  steppingClock,
  type FinishedPair,
  type FinishedPairOptions,
} from '../../../support/finished-pair.js';

let tmp: string;
let root: string;
let registry: SqliteCapacityRegistry;
let runtime: FakeContainerRuntime;

beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'rg-reconcile-'));
  root = join(tmp, 'D');
  registry = SqliteCapacityRegistry.open({ path: join(tmp, 'registry.db'), clock: steppingClock() });
  await registry.setLimits({ maxReservations: 10, gpuMib: null });
  runtime = new FakeContainerRuntime();
});

afterEach(async () => {
  registry.closeSync();
  await rm(tmp, { recursive: true, force: true });
});

function deps(extra: Partial<ReconcileDeps> = {}): ReconcileDeps {
  return {
    store: new EvidenceStore(new NodeFileSystem(), root),
    registry,
    runtime,
    readOutcomeSha256: outcomeSha256OrNull,
    ...extra,
  };
}

function finished(options: Partial<FinishedPairOptions> = {}): Promise<FinishedPair> {
  return buildFinishedPair({ root, outcomeDir: join(tmp, 'out'), registry, ...options });
}

function execute(pair: FinishedPair, extra: Partial<ReconcileDeps> = {}): ReturnType<typeof reconcilePair> {
  return reconcilePair(deps(extra), { jobRel: pair.jobRel, mode: 'execute' });
}

async function expectHeld(pair: FinishedPair): Promise<void> {
  expect((await registry.reservation(pair.reservationId))?.state).toBe('held');
  expect((await registry.board({ claimId: pair.receipt.claim_id }))[0]?.state).toBe('running');
}

describe('reconcilePair --execute', () => {
  it('writes the proof, marks the board terminal and releases the reservation, each read back', async () => {
    const pair = await finished();
    const steps: ReconcileStep[] = [];
    const report = await execute(pair, { afterStep: (s) => steps.push(s) });
    expect(report).toMatchObject({ job_id: 'pair-0001', mode: 'execute', kind: 'committed', reason: null });
    expect(report.steps).toEqual([
      'evidence read (receipt, result, outcome present, container absent)',
      `proof built (sha256 ${report.proof_sha256 ?? ''})`,
      'proof written',
      'board row terminal (read back)',
      'reservation released (read back)',
    ]);
    expect(steps).toEqual([
      'evidence_read',
      'proof_built',
      'proof_written',
      'board_terminal',
      'reservation_released',
    ]);
    const proof: unknown = JSON.parse(await readFile(join(root, pair.jobRel, 'terminal-proof.json'), 'utf8'));
    expect(proof).toMatchObject({ run_id: pair.receipt.claim_id, reservation_id: pair.reservationId });
    const board = (await registry.board({ claimId: pair.receipt.claim_id }))[0];
    expect(board).toMatchObject({
      state: 'terminal',
      classification: 'completed',
      outcomeSha256: pair.result.outcome_sha256,
      proofSha256: report.proof_sha256,
    });
    const reservation = await registry.reservation(pair.reservationId);
    expect(reservation).toMatchObject({ state: 'released', proofSha256: report.proof_sha256 });
  });

  it('replays idempotently: nothing changes, nothing is released twice, later board fields are kept', async () => {
    const pair = await finished();
    const first = await execute(pair);
    await registry.annotate(pair.receipt.claim_id, { score: '0.75', notes: 'checked by hand' });
    const releasedAt = (await registry.reservation(pair.reservationId))?.releasedAt;
    const before = await hashTree(root, tmp);
    const replay = await execute(pair);
    expect(replay.kind).toBe('already_committed');
    expect(replay.proof_sha256).toBe(first.proof_sha256);
    expect(replay.steps.slice(2)).toEqual([
      'proof already written (same digest)',
      'board row already terminal',
      'reservation already released',
    ]);
    expect(await hashTree(root, tmp)).toEqual(before);
    expect((await registry.reservation(pair.reservationId))?.releasedAt).toBe(releasedAt);
    expect((await registry.board({ claimId: pair.receipt.claim_id }))[0]).toMatchObject({
      score: '0.75',
      notes: 'checked by hand',
      state: 'terminal',
    });
  });

  it('reconciles a `pair run` directory (files at its root)', async () => {
    const pair = await finished({ layout: 'pair' });
    expect((await execute(pair)).kind).toBe('committed');
    expect(await new EvidenceStore(new NodeFileSystem(), root).exists('terminal-proof.json')).toBe(true);
  });
});

describe('reconcilePair --preview', () => {
  it('shows the plan and changes no byte of D or of the registry', async () => {
    const pair = await finished();
    const before = await hashTree(root, tmp);
    expect(Object.keys(before).filter((k) => /registry\.db(-wal)?$/.test(k))).toHaveLength(2);
    const report = await reconcilePair(deps(), { jobRel: pair.jobRel, mode: 'preview' });
    expect(report.kind).toBe('would_commit');
    expect(report.steps.slice(2)).toEqual([
      'would write terminal-proof.json',
      'would write the board row terminal (read back)',
      `would release reservation ${pair.reservationId} (read back)`,
    ]);
    expect(await hashTree(root, tmp)).toEqual(before);
    await expectHeld(pair);
  });

  it('after an execute, previews already_committed with the same digest, still byte-identical', async () => {
    const pair = await finished();
    const executed = await execute(pair);
    const before = await hashTree(root, tmp);
    const report = await reconcilePair(deps(), { jobRel: pair.jobRel, mode: 'preview' });
    expect(report).toMatchObject({ kind: 'already_committed', proof_sha256: executed.proof_sha256 });
    expect(await hashTree(root, tmp)).toEqual(before);
  });
});

describe('refusals and holds keep the reservation', () => {
  it('cross-batch: the run id is on the board under another batch', async () => {
    const claimId = 'shared-run-id';
    const other = await registry.admit({ batchId: 'batch-B', jobId: 'pair-0009', claimId, gpuMib: 0 });
    if (other.kind !== 'admitted') throw new Error('set-up');
    const pair = await finished({ claimId: 'mine' });
    const receipt = { ...pair.receipt, claim_id: claimId, reservation_id: other.reservationId };
    await pair.store.writeJsonAtomic(`${pair.jobRel}/receipt.json`, receipt);
    await pair.store.writeJsonAtomic(`${pair.jobRel}/result.json`, { ...pair.result, claim_id: claimId });
    const report = await execute(pair);
    expect(report).toMatchObject({ kind: 'refused', reason: 'run_owned_by_other_batch' });
    expect(report.detail).toContain('cross-batch collision');
    expect((await registry.reservation(other.reservationId))?.state).toBe('held');
    expect((await registry.board({ claimId }))[0]).toMatchObject({ batchId: 'batch-B', state: 'running' });
    await expectHeld(pair);
  });

  it('stale admission: the reservation was released outside reconciliation', async () => {
    const pair = await finished();
    expect((await registry.release(pair.reservationId, pair.receipt.claim_id)).kind).toBe('released');
    const report = await execute(pair);
    expect(report).toMatchObject({ kind: 'refused', reason: 'reservation_not_held_by_claim' });
    expect(report.detail).toContain('stale admission');
    expect((await registry.board({ claimId: pair.receipt.claim_id }))[0]?.state).toBe('running');
  });

  it('stale admission: the receipt names a reservation held by another claim', async () => {
    const pair = await finished();
    const other = await finished({ jobId: 'pair-0002' });
    await pair.store.writeJsonAtomic(`${pair.jobRel}/receipt.json`, {
      ...pair.receipt,
      reservation_id: other.reservationId,
    });
    const report = await execute(pair);
    expect(report).toMatchObject({ kind: 'refused', reason: 'reservation_not_held_by_claim' });
    await expectHeld(pair);
    await expectHeld(other);
  });

  it('outcome changed since result.json', async () => {
    const pair = await finished();
    await writeFile(pair.outcomePath, '{"job_id":"pair-0001","rewritten":true}');
    const report = await execute(pair);
    expect(report).toMatchObject({ kind: 'hold', reason: 'outcome_changed', proof_sha256: null });
    expect(report.detail).toContain(pair.result.outcome_sha256 ?? '');
    expect(await pair.store.exists(`${pair.jobRel}/terminal-proof.json`)).toBe(false);
    await expectHeld(pair);
  });

  it('container still present (by id, then by claim label only)', async () => {
    const pair = await finished();
    runtime.present.add(pair.containerId);
    expect(await execute(pair)).toMatchObject({ kind: 'hold', reason: 'container_present' });
    runtime.present.clear();
    runtime.presentClaims.add(pair.receipt.claim_id);
    expect(await execute(pair)).toMatchObject({ kind: 'hold', reason: 'container_present' });
    await expectHeld(pair);
  });

  it('engine unreachable: absence cannot be verified', async () => {
    const pair = await finished();
    runtime.failWith = new Error('connect ENOENT /var/run/docker.sock');
    const report = await execute(pair);
    expect(report).toMatchObject({ kind: 'hold', reason: 'cleanup_unverified' });
    expect(report.detail).toContain('docker.sock');
    await expectHeld(pair);
  });

  it('evidence missing: result.json deleted', async () => {
    const pair = await finished();
    await unlink(join(root, pair.jobRel, 'result.json'));
    expect(await execute(pair)).toMatchObject({ kind: 'hold', reason: 'evidence_missing' });
    await expectHeld(pair);
  });

  it('evidence contradictory: completed result, outcome file gone', async () => {
    const pair = await finished();
    await unlink(pair.outcomePath);
    expect(await execute(pair)).toMatchObject({ kind: 'hold', reason: 'evidence_contradictory' });
    await expectHeld(pair);
  });

  it('evidence contradictory: a proof with another digest is already on disk', async () => {
    const pair = await finished();
    const foreign = { schema: 'roboguide.terminal_proof/v1', run_id: 'someone-else' };
    await pair.store.writeJsonAtomic(`${pair.jobRel}/terminal-proof.json`, foreign);
    const report = await execute(pair);
    expect(report).toMatchObject({ kind: 'hold', reason: 'evidence_contradictory' });
    expect(report.detail).toContain(
      sha256(JSON.stringify({ run_id: 'someone-else', schema: 'roboguide.terminal_proof/v1' })),
    );
    expect(await pair.store.readJson(`${pair.jobRel}/terminal-proof.json`)).toEqual(foreign);
    await expectHeld(pair);
  });
});

describe('reconcileBatch', () => {
  it('reconciles every claimed job with a result and skips claims still without one', async () => {
    const a = await finished({ jobId: 'pair-0001' });
    const b = await finished({ jobId: 'pair-0002' });
    await finished({ jobId: 'pair-0003', writeResult: false });
    const batch = await reconcileBatch(deps(), { mode: 'execute' });
    expect(batch.reports.map((r) => [r.job_id, r.kind])).toEqual([
      ['pair-0001', 'committed'],
      ['pair-0002', 'committed'],
    ]);
    expect(batch.skipped.map((s) => s.job_id)).toEqual(['pair-0003']);
    expect((await registry.held()).map((r) => r.jobId)).toEqual(['pair-0003']);
    expect((await registry.reservation(a.reservationId))?.state).toBe('released');
    expect((await registry.reservation(b.reservationId))?.state).toBe('released');
  });

  it('with --job reconciles that job only, and reports a missing result as a hold', async () => {
    await finished({ jobId: 'pair-0001' });
    const pending = await finished({ jobId: 'pair-0003', writeResult: false });
    const batch = await reconcileBatch(deps(), { mode: 'execute', jobId: 'pair-0003' });
    expect(batch.reports).toEqual([
      expect.objectContaining({ job_id: 'pair-0003', kind: 'hold', reason: 'evidence_missing' }),
    ]);
    await expectHeld(pending);
    expect(await registry.held()).toHaveLength(2);
  });

  it('refuses an unknown job as bad usage (exit 2)', async () => {
    await finished();
    const err: unknown = await reconcileBatch(deps(), { mode: 'preview', jobId: 'nope' }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RoboguideError);
    expect((err as RoboguideError).exitCode).toBe(2);
  });
});
