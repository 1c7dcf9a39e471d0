import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import type { BatchPairContext, BatchPairDeps } from '../../src/app/batch/batch-pair.js';
import type { RunningHandle } from '../../src/app/pair/claimed-pair-types.js';
import { finishPair, reconcileFinished, removeUnverifiedContainer } from '../../src/app/batch/finish-pair.js';
import { recoverPair } from '../../src/app/batch/recover-pair.js';
import type { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import type { ContainerState, ContainerStatus } from '../../src/app/ports/container-runtime.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import type { JournalAppend, JournalEventType, JournalFieldsOf } from '../../src/core/journal-events.js';
import type { ResultRecord } from '../../src/core/result.js';
import { buildFinishedPair } from '../support/finished-pair.js';
import { FaultyFileSystem } from '../support/faulty-file-system.js';
import { fileOutcomeReader } from '../../src/adapters/outcome-reader.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { executeDeps, UnscriptedRuntime } from '../support/fakes.js';
import { manifestOf } from '../support/manifest.js';
import { clockAt, fakeTime } from '../support/fake-time.js';

/** A container runtime that holds containers in memory: inspect, list by label, stop, remove, environment. */
class MemoryRuntime extends UnscriptedRuntime {
  readonly containers = new Map<
    string,
    { status: ContainerStatus; labels: Record<string, string>; env: Record<string, string> }
  >();
  readonly removed: string[] = [];
  listFails = false;

  add(
    id: string,
    status: ContainerStatus,
    labels: Record<string, string> = {},
    env: Record<string, string> = {},
  ): void {
    this.containers.set(id, { status, labels, env });
  }
  override inspect(id: string): Promise<ContainerState | null> {
    const c = this.containers.get(id);
    return Promise.resolve(
      c === undefined
        ? null
        : {
            id,
            status: c.status,
            exitCode: null,
            oomKilled: false,
            startedAt: null,
            finishedAt: null,
            labels: c.labels,
          },
    );
  }
  override listByLabel(labels: Readonly<Record<string, string>>): Promise<ContainerState[]> {
    if (this.listFails) return Promise.reject(new Error('engine away'));
    const found = [...this.containers].filter(([, c]) =>
      Object.entries(labels).every(([k, v]) => c.labels[k] === v),
    );
    return Promise.resolve(
      found.map(([id, c]) => ({
        id,
        status: c.status,
        exitCode: null,
        oomKilled: false,
        startedAt: null,
        finishedAt: null,
        labels: c.labels,
      })),
    );
  }
  override stop(id: string): Promise<void> {
    const c = this.containers.get(id);
    if (c !== undefined) c.status = 'exited';
    return Promise.resolve();
  }
  override remove(id: string): Promise<'removed' | 'absent'> {
    this.removed.push(id);
    return Promise.resolve(this.containers.delete(id) ? 'removed' : 'absent');
  }
  override environmentOf(id: string): Promise<Record<string, string> | null> {
    return Promise.resolve(this.containers.get(id)?.env ?? null);
  }
}

type Recorded = { type: JournalEventType } & Record<string, unknown>;

function recordingJournal(): { journal: JournalAppend; records: Recorded[] } {
  const records: Recorded[] = [];
  const journal = <T extends JournalEventType>(type: T, fields: JournalFieldsOf<T>): Promise<void> => {
    records.push({ type, ...(fields as object) });
    return Promise.resolve();
  };
  return { journal, records };
}

const clock = clockAt(() => new Date('2026-12-03T10:00:00.000Z'));
let dir: string;
let registry: SqliteCapacityRegistry;
let runtime: MemoryRuntime;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-recovery-'));
  registry = SqliteCapacityRegistry.open({ path: join(dir, 'r.db'), clock });
  runtime = new MemoryRuntime();
});
afterEach(async () => {
  await registry.close();
  await rm(dir, { recursive: true, force: true });
});

function finishDeps(store: EvidenceStore, journal: JournalAppend) {
  return {
    store,
    registry,
    execute: {
      runtime: runtime,
      logger: silentLogger,
      outcomes: fileOutcomeReader,
      host: procHostIdentity,
      fs: new NodeFileSystem(),
      clock: fakeTime().clock,
    },
    journal,
  };
}

describe('finishPair', () => {
  it('writes result.json, journals pair_finished with its facts, then reconciles and releases the slot', async () => {
    const pair = await buildFinishedPair({
      root: join(dir, 'out'),
      outcomeDir: join(dir, 'outcomes'),
      registry,
      writeResult: false,
    });
    const { journal, records } = recordingJournal();
    const report = await finishPair(finishDeps(pair.store, journal), pair.receipt, pair.result);
    expect(report).toMatchObject({ jobId: 'pair-0001', pauseReasons: [], released: true });
    expect(JSON.parse(await readFile(pair.store.resolve(`${pair.jobRel}/result.json`), 'utf8'))).toEqual(
      pair.result,
    );
    expect(records.map((r) => r.type)).toEqual(['pair_finished', 'reconciled']);
    expect(records[0]).toEqual({
      type: 'pair_finished',
      job_id: 'pair-0001',
      claim_id: pair.receipt.claim_id,
      classification: 'completed',
      reasons: [],
      started_at: pair.result.started_at,
      finished_at: pair.result.finished_at,
      gpu_peak_mib: null,
    });
    expect(records[1]).toMatchObject({ type: 'reconciled', job_id: 'pair-0001', kind: 'committed' });
    expect((await registry.reservation(pair.reservationId))?.state).not.toBe('held');
  });

  it('a result that cannot be written: harness fault journalled, slot kept, the batch pauses harness', async () => {
    const fs = new FaultyFileSystem(new NodeFileSystem(), {
      rules: [{ op: 'rename', path: /result\.json$/, times: 10 }],
    });
    const pair = await buildFinishedPair({
      root: join(dir, 'out'),
      outcomeDir: join(dir, 'outcomes'),
      registry,
      fs,
      writeResult: false,
    });
    const { journal, records } = recordingJournal();
    const fatal: ResultRecord = { ...pair.result, classification: 'fatal', reasons: ['fatal_failure_flag'] };
    const report = await finishPair(finishDeps(pair.store, journal), pair.receipt, fatal);
    expect(report.released).toBe(false);
    expect(report.pauseReasons).toEqual(['fatal', 'harness']);
    expect(records).toEqual([
      {
        type: 'harness_fault',
        job_id: 'pair-0001',
        fault: 'result_write_failed',
        path: join(dir, 'out', 'jobs', 'pair-0001', 'result.json'),
        err: 'EIO',
      },
    ]);
    expect((await registry.reservation(pair.reservationId))?.state).toBe('held');
  });
});

describe('reconcileFinished', () => {
  it('a container still there: the slot is held and the batch pauses harness', async () => {
    const pair = await buildFinishedPair({
      root: join(dir, 'out'),
      outcomeDir: join(dir, 'outcomes'),
      registry,
    });
    runtime.add(pair.containerId, 'exited');
    const { journal, records } = recordingJournal();
    const report = await reconcileFinished(finishDeps(pair.store, journal), pair.receipt, pair.result);
    expect(report).toMatchObject({ released: false, pauseReasons: ['harness'] });
    expect(records[0]).toMatchObject({ type: 'reconciled', kind: 'hold' });
  });

  it('a pair lost with its node keeps its slot without pausing the batch', async () => {
    const pair = await buildFinishedPair({
      root: join(dir, 'out'),
      outcomeDir: join(dir, 'outcomes'),
      registry,
    });
    runtime.add(pair.containerId, 'exited');
    const { journal } = recordingJournal();
    const lost: ResultRecord = {
      ...pair.result,
      classification: 'infrastructure_failure',
      reasons: ['node_lost'],
    };
    const report = await reconcileFinished(finishDeps(pair.store, journal), pair.receipt, lost);
    expect(report).toMatchObject({ released: false, pauseReasons: [] });
  });
});

describe('removeUnverifiedContainer', () => {
  it('does nothing for a pair whose removal was verified', async () => {
    const pair = await buildFinishedPair({
      root: join(dir, 'out'),
      outcomeDir: join(dir, 'outcomes'),
      registry,
    });
    const { journal, records } = recordingJournal();
    await removeUnverifiedContainer(finishDeps(pair.store, journal), pair.receipt, pair.result, 5);
    expect(records).toEqual([]);
    expect(runtime.removed).toEqual([]);
  });

  it('removes the containers on record and by claim label, and journals whether each is verified gone', async () => {
    const pair = await buildFinishedPair({
      root: join(dir, 'out'),
      outcomeDir: join(dir, 'outcomes'),
      registry,
    });
    runtime.add(pair.containerId, 'running');
    runtime.add('stray', 'exited', { 'roboguide.claim': pair.receipt.claim_id });
    const { journal, records } = recordingJournal();
    const unverified: ResultRecord = {
      ...pair.result,
      cleanup: { removed: false, verified_absent: false, attempts: 3 },
    };
    await removeUnverifiedContainer(finishDeps(pair.store, journal), pair.receipt, unverified, 5);
    expect(new Set(runtime.removed)).toEqual(new Set([pair.containerId, 'stray']));
    expect(runtime.containers.size).toBe(0);
    expect(records).toEqual([
      { type: 'cleanup_retried', job_id: 'pair-0001', containers: 2, verified_absent: true },
    ]);
  });

  it('an engine that cannot list still gets the ids on record removed', async () => {
    const pair = await buildFinishedPair({
      root: join(dir, 'out'),
      outcomeDir: join(dir, 'outcomes'),
      registry,
    });
    runtime.listFails = true;
    const { journal, records } = recordingJournal();
    const unverified: ResultRecord = {
      ...pair.result,
      cleanup: { removed: false, verified_absent: false, attempts: 3 },
    };
    await removeUnverifiedContainer(finishDeps(pair.store, journal), pair.receipt, unverified, 5);
    expect(records).toEqual([
      { type: 'cleanup_retried', job_id: 'pair-0001', containers: 1, verified_absent: true },
    ]);
  });
});

describe('recoverPair: a claimed pair without a result, found by a new supervisor', () => {
  async function setUp(containerStatus: ContainerStatus | null, bootId: string | null) {
    const pair = await buildFinishedPair({
      root: join(dir, 'out'),
      outcomeDir: join(dir, 'outcomes'),
      registry,
      writeResult: false,
    });
    const receipt = { ...pair.receipt, host_boot_id: bootId };
    await pair.store.writeJsonAtomic(`${pair.jobRel}/receipt.json`, receipt);
    if (containerStatus !== null)
      runtime.add(
        pair.containerId,
        containerStatus,
        { 'roboguide.claim': receipt.claim_id },
        { TOKEN: 'the-secret-in-the-container' },
      );
    const { journal, records } = recordingJournal();
    const execute = executeDeps({
      runtime,
      clock,
      logger: silentLogger,
      outcomes: fileOutcomeReader,
      host: procHostIdentity,
      fs: new NodeFileSystem(),
    });
    const deps: BatchPairDeps = { store: pair.store, registry, execute, journal };
    const manifest = manifestOf(
      [
        {
          job_id: 'pair-0001',
          argv: ['/x'],
          cwd: dir,
          outcome_path: pair.outcomePath,
          environment: { TOKEN: '${TOKEN}' },
          timeout_seconds: 60,
        },
      ],
      { stop_budget_seconds: 5 },
    );
    const job = manifest.jobs[0]!;
    const ctx: BatchPairContext = { batch: { batch_id: 'batch-A' } as BatchPairContext['batch'], manifest };
    return { pair, receipt, records, deps, ctx, job };
  }

  it('no container at all: lost_worker, the pair a harness failure, its result written and its slot released', async () => {
    const { pair, receipt, records, deps, ctx, job } = await setUp(null, null);
    await rm(pair.outcomePath);
    const running: RunningHandle[] = [];
    const report = await recoverPair(deps, ctx, job, { ...receipt, container_id: null }, undefined, (h) =>
      running.push(h),
    );
    expect(running).toEqual([]);
    expect(records[0]).toEqual({
      type: 'recovered',
      job_id: 'pair-0001',
      action: 'lost_worker',
      container_id: null,
      rebooted: false,
    });
    expect(report.result.classification).toBe('harness_failure');
    expect(report.result.reasons).toContain('lost_worker');
    expect(report.result.cleanup).toEqual({ removed: false, verified_absent: true, attempts: 0 });
    expect(report.result.finished_at).toBe('2026-12-03T10:00:00.000Z');
    expect(report.released).toBe(true);
    expect(await pair.store.exists(`${pair.jobRel}/result.json`)).toBe(true);
  });

  it('a container from before a reboot is never reattached: removed, lost_worker, rebooted recorded', async () => {
    const { pair, receipt, records, deps, ctx, job } = await setUp(
      'running',
      'a-boot-id-that-is-not-this-one',
    );
    const running: RunningHandle[] = [];
    const report = await recoverPair(
      deps,
      ctx,
      job,
      receipt,
      { values: {}, secrets: [], warnings: [] },
      (h) => running.push(h),
    );
    expect(running).toEqual([]);
    expect(records[0]).toEqual({
      type: 'recovered',
      job_id: 'pair-0001',
      action: 'lost_worker',
      container_id: pair.containerId,
      rebooted: true,
    });
    expect(runtime.removed).toContain(pair.containerId);
    expect(report.result.cleanup.verified_absent).toBe(true);
    expect(report.result.classification).toBe('harness_failure');
  });

  it('a container never started (created) is lost too, and the secret it holds is masked in the result', async () => {
    const { pair, records, deps, ctx, job, receipt } = await setUp('created', null);
    // The pair's private outcome copy mentions the secret the container holds (the shell exports none).
    await writeFile(
      pair.outcomePath,
      JSON.stringify({
        job_id: 'pair-0001',
        infrastructure_failure: false,
        fatal_failure: false,
        arms: { a: true },
        note: 'the-secret-in-the-container',
      }),
    );
    const report = await recoverPair(deps, ctx, job, receipt, undefined, () => undefined);
    expect(records[0]).toMatchObject({ type: 'recovered', action: 'lost_worker', rebooted: false });
    expect(report.result.reasons).toContain('lost_worker');
    expect(runtime.removed).toContain(pair.containerId);
    expect(JSON.stringify(report.result)).not.toContain('the-secret-in-the-container');
    expect(report.result.outcome_redactions).toBeGreaterThan(0);
  });
});
