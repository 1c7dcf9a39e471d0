import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { currentProcessIdentity, procHostIdentity } from '../../src/adapters/host-identity.js';
import { loadBatch, readJobFiles } from '../../src/app/batch/batch-context.js';
import { STATUS_FILE, SUPERVISOR_FILE } from '../../src/core/evidence-names.js';
import type { SupervisorRecord } from '../../src/core/supervisor-record.js';
import {
  readColdStatus,
  readHotStatus,
  readStatus,
  readStatusFull,
} from '../../src/app/batch/read-status.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { buildWrittenStatus, ledgerFromFiles } from '../../src/app/batch/status.js';
import { journalFinished } from '../../src/app/batch/finish-pair.js';
import type { ResultRecord } from '../../src/core/result.js';
import { capacityConfigOf } from '../../src/app/batch/capacity-config.js';
import type { BatchStatus, WrittenStatus } from '../../src/app/batch/status-shapes.js';
import type { ContainerState, ContainerStatus } from '../../src/app/ports/container-runtime.js';
import { BatchLedger } from '../../src/core/batch-ledger.js';
import { RECEIPT_SCHEMA, type Receipt } from '../../src/core/receipt.js';
import type { Classification } from '../../src/core/result.js';
import { answeringEngine } from '../support/fakes.js';
import { rawJournalRecord } from '../support/raw-journal.js';
import { clockAt } from '../support/fake-time.js';

/**
 * Incremental status (issue 14, item 2): the hot path (a live supervisor's status.json plus the journal past its
 * offset) and the cold path (the journal folded once, the files of only the jobs it cannot settle) give exactly
 * what the full derivation (every receipt and result, the whole journal) gives — including after crashes between a
 * file and its journal record, with journal records from before the records carried status's facts, and with
 * leftover containers. The batches are written on disk as the supervisor writes them.
 */
const T0 = Date.parse('2026-12-02T10:00:00.000Z');
const at = (sec: number): string => new Date(T0 + sec * 1000).toISOString();
const NOW = new Date(T0 + 3600_000);
const clock = clockAt(() => new Date(T0));
const JOBS = ['a', 'b', 'c', 'd', 'e', 'f'];
let dir: string;
let store: EvidenceStore;
let batchId: string;
let containers: ContainerState[];

const engine = answeringEngine(
  {},
  {
    listByLabel: (labels) =>
      Promise.resolve(containers.filter((c) => Object.entries(labels).every(([k, v]) => c.labels[k] === v))),
  },
);

function container(id: string, jobId: string, claimId: string, status: ContainerStatus): ContainerState {
  return {
    id,
    status,
    exitCode: null,
    oomKilled: false,
    startedAt: null,
    finishedAt: null,
    labels: { 'roboguide.batch': batchId, 'roboguide.job': jobId, 'roboguide.claim': claimId },
  };
}

/** A record of any shape (an older writer's included). */
const journal = (type: string, fields: Record<string, unknown> = {}, sec = 0): Promise<number> =>
  store.appendJournal(rawJournalRecord({ type, at: at(sec), ...fields }));

type RecordForm = 'full' | 'old' | 'none';

async function supervisorStarted(alive: boolean): Promise<SupervisorRecord> {
  const me = await currentProcessIdentity();
  const record: SupervisorRecord = {
    ...me,
    start_ticks: alive ? me.start_ticks : 'not-this-process',
    started_at: at(1),
    mode: 'start',
  };
  await store.writeJsonAtomic(SUPERVISOR_FILE, record);
  await journal(
    'supervisor_started',
    { mode: 'start', pid: record.pid, start_ticks: record.start_ticks, boot_id: record.boot_id },
    1,
  );
  return record;
}

async function claim(
  jobId: string,
  sec: number,
  form: RecordForm = 'full',
  containerId: string | null = null,
): Promise<void> {
  const receipt: Receipt = {
    schema: RECEIPT_SCHEMA,
    batch_id: batchId,
    job_id: jobId,
    attempt: 1,
    claim_id: `claim-${jobId}`,
    claimed_at: at(sec),
    host_boot_id: null,
    supervisor: { pid: 1, start_ticks: null, boot_id: null },
    reservation_id: 'r',
    image: 'roboguide/pair-driver:1',
    outcome_path: join(dir, 'out', `${jobId}.json`),
    source_sha256: {},
    code_version: 't',
    container_id: containerId,
    container_name: `roboguide-${jobId}`,
  };
  await store.ensureDir(`jobs/${jobId}`);
  await store.publishExclusive(`jobs/${jobId}/receipt.json`, receipt);
  if (form === 'full')
    await journal(
      'claimed',
      {
        job_id: jobId,
        claim_id: `claim-${jobId}`,
        reservation_id: 'r',
        claimed_at: at(sec),
        deadline: at(sec + 120),
      },
      sec,
    );
  if (form === 'old')
    await journal('claimed', { job_id: jobId, claim_id: `claim-${jobId}`, reservation_id: 'r' }, sec);
  if (containerId !== null && form !== 'none')
    await journal('container_created', { job_id: jobId, container_id: containerId }, sec);
}

async function finish(
  jobId: string,
  classification: Classification,
  startSec: number,
  endSec: number,
  form: RecordForm = 'full',
  peak: number | null = null,
): Promise<void> {
  const outcome = {
    job_id: jobId,
    infrastructure_failure: false,
    fatal_failure: false,
    arms: [],
    ...(peak !== null ? { resource_usage: { both_arms_measured: true, peak_job_gpu_mib: peak } } : {}),
  };
  const result = {
    schema: 'roboguide.e1.result/v1',
    job_id: jobId,
    batch_id: batchId,
    claim_id: `claim-${jobId}`,
    classification,
    reasons: [],
    outcome,
    started_at: at(startSec),
    finished_at: at(endSec),
  };
  await store.writeJsonAtomic(`jobs/${jobId}/result.json`, result);
  const usablePeak = classification === 'completed' ? peak : null;
  if (form === 'full')
    await journal(
      'pair_finished',
      {
        job_id: jobId,
        claim_id: `claim-${jobId}`,
        classification,
        reasons: [],
        started_at: at(startSec),
        finished_at: at(endSec),
        gpu_peak_mib: usablePeak,
      },
      endSec,
    );
  if (form === 'old')
    await journal(
      'pair_finished',
      { job_id: jobId, claim_id: `claim-${jobId}`, classification, reasons: [] },
      endSec,
    );
  if (form !== 'none')
    await journal('reconciled', { job_id: jobId, kind: 'committed', reason: null }, endSec);
}

/** status.json as the live supervisor writes it: from its ledger at the journal's current end. */
async function writeLiveStatus(supervisor: SupervisorRecord): Promise<WrittenStatus> {
  const { batch, manifest } = await loadBatch(store);
  const slice = await store.readJournalSlice();
  const ledger = await ledgerFromFiles(store, manifest, await readJobFiles(store, manifest), slice.records);
  ledger.at(slice.records.at(-1)?.seq ?? 0, slice.endBytes);
  const written = await buildWrittenStatus({
    ledger,
    output: store.root,
    batch,
    capacity: capacityConfigOf(manifest, batch),
    supervisor,
    running: [],
    now: clock.now(),
  });
  await store.writeJsonAtomic(STATUS_FILE, written);
  return written;
}

async function expectSameAsFull(path: 'hot' | 'cold'): Promise<BatchStatus> {
  const full = await readStatusFull(store, engine, NOW, procHostIdentity);
  const hot = await readHotStatus(store, engine, NOW, procHostIdentity);
  if (path === 'hot') expect(hot).toEqual(full);
  else expect(hot).toBeNull();
  expect(await readColdStatus(store, engine, NOW, procHostIdentity)).toEqual(full);
  expect(await readStatus(store, engine, NOW, procHostIdentity)).toEqual(full);
  return full;
}

describe('incremental status equals the full derivation', () => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-status-inc-'));
    containers = [];
    const manifest = {
      schema: 'roboguide.e1.batch/v0.1',
      image: 'roboguide/pair-driver:1',
      jobs: JOBS.map((id) => ({
        job_id: id,
        argv: ['/opt/driver/run'],
        cwd: join(dir, 'cwd'),
        outcome_path: join(dir, 'out', `${id}.json`),
        timeout_seconds: 120,
      })),
      capacity: { max_workers: 2, gpu_total_mib: 81920, gpu_baseline_mib: 1024, gpu_fraction: 0.9 },
    };
    await writeFile(join(dir, 'm.json'), JSON.stringify(manifest));
    const record = await prepareBatch(
      { fs: new NodeFileSystem(), host: procHostIdentity, runtime: engine, clock },
      {
        manifestPath: join(dir, 'm.json'),
        output: join(dir, 'batch'),
        registryPath: join(dir, 'r.db'),
        bindAddress: '127.0.0.1',
        environment: {},
        codeVersion: 't',
      },
    );
    batchId = record.batch_id;
    store = new EvidenceStore(new NodeFileSystem(), join(dir, 'batch'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('hot: a live supervisor status.json with nothing journalled since', async () => {
    const sup = await supervisorStarted(true);
    await claim('a', 10, 'full', 'c-a');
    await finish('a', 'completed', 10, 70, 'full', 30_000);
    await claim('b', 71, 'full', 'c-b');
    await claim('c', 72, 'full');
    await writeLiveStatus(sup);
    containers = [container('c-b', 'b', 'claim-b', 'running')];
    const s = await expectSameAsFull('hot');
    expect(s.state).toBe('running');
    expect(s.workers_allowed).toBe(2);
    expect(s.running.map((r) => [r.job_id, r.container_id])).toEqual([
      ['b', 'c-b'],
      ['c', null],
    ]);
    expect(s.eta).not.toBeNull();
  });

  it('hot: claims, finishes, pauses and a stop journalled after status.json are applied on top of it', async () => {
    const sup = await supervisorStarted(true);
    await claim('a', 10, 'full', 'c-a');
    await writeLiveStatus(sup);
    await finish('a', 'completed', 10, 70, 'full', 30_000);
    await claim('c', 71, 'full', 'c-c'); // out of manifest order: listed by the manifest anyway
    await claim('b', 72, 'full');
    await finish('c', 'infrastructure_failure', 71, 90);
    await claim('d', 91, 'full', 'c-d');
    await journal('paused', { reasons: ['provider'], job_id: 'c' }, 92);
    await journal('stop_requested', { terminate: false }, 93);
    containers = [
      container('c-d', 'd', 'claim-d', 'exited'),
      container('c-a', 'a', 'claim-a', 'exited'),
      container('c-z', 'zzz', 'claim-z', 'created'),
    ];
    const s = await expectSameAsFull('hot');
    expect(s.state).toBe('stopping');
    expect(s.pause_reasons).toEqual(['provider']);
    expect(s.claims_without_result).toEqual(['b', 'd']);
    expect(s.leftovers.map((l) => [l.container_id, l.why])).toEqual([
      ['c-a', 'job_finished'],
      ['c-z', 'unknown_job'],
    ]);
  });

  it('hot: a record status cannot place from status.json alone (a harness fault) sends it cold', async () => {
    const sup = await supervisorStarted(true);
    await claim('a', 10, 'full');
    await writeLiveStatus(sup);
    await journal('harness_fault', { job_id: 'a', fault: 'result_write_failed' }, 20);
    await finish('a', 'harness_failure', 10, 20, 'none');
    await expectSameAsFull('cold');
  });

  it('cold after a crash between writing status.json and the journal record: the result is counted', async () => {
    const sup = await supervisorStarted(false);
    await claim('a', 10, 'full', 'c-a');
    await writeLiveStatus(sup);
    await finish('a', 'completed', 10, 70, 'none', 25_000); // after_result: killed before `pair_finished`
    const s = await expectSameAsFull('cold');
    expect(s.counts.completed).toBe(1);
    expect(s.state).toBe('paused');
  });

  it('cold after a crash between the journal record and the status.json rewrite', async () => {
    const sup = await supervisorStarted(false);
    await claim('a', 10, 'full', 'c-a');
    await writeLiveStatus(sup);
    await finish('a', 'completed', 10, 70, 'full', 25_000); // journal:pair_finished: killed before status.json
    await claim('b', 71, 'none'); // after_claim: the receipt without its `claimed` record
    containers = [container('c-b2', 'b', 'claim-b', 'running')];
    const s = await expectSameAsFull('cold');
    expect(s.claims_without_result).toEqual(['b']);
    expect(s.running.map((r) => r.container_id)).toEqual(['c-b2']);
  });

  it('cold: journal records from before they carried claimed_at, the finish times and the GPU peak', async () => {
    await supervisorStarted(false);
    await claim('a', 10, 'old', 'c-a');
    await finish('a', 'completed', 10, 70, 'old', 40_000);
    await claim('b', 71, 'old');
    await finish('b', 'provider_stop', 71, 100, 'old');
    await claim('c', 101, 'old');
    await journal('paused', { reasons: ['provider'], job_id: 'b' }, 101);
    await journal('supervisor_exited', { state: 'paused' }, 102);
    containers = [container('c-c', 'c', 'claim-c', 'exited')];
    const s = await expectSameAsFull('cold');
    expect(s.gpu_peak_mib).toBe(40_000);
    expect(s.leftovers.map((l) => l.why)).toEqual(['job_not_running']);
  });

  it('cold: a result lost behind the journal (its pair_finished stands) shows as a claim without result', async () => {
    await supervisorStarted(false);
    await claim('a', 10, 'full', 'c-a');
    await finish('a', 'completed', 10, 70, 'full', 25_000);
    await claim('b', 71, 'full', 'c-b');
    await finish('b', 'completed', 71, 90, 'full');
    await rm(store.resolve('jobs/b/result.json'));
    const s = await expectSameAsFull('cold');
    expect(s.claims_without_result).toEqual(['b']);
  });

  it('cold: a stopped and a drained batch; a supervisor that exited is not hot even with its status.json', async () => {
    const sup = await supervisorStarted(true);
    for (const [i, id] of JOBS.entries()) {
      await claim(id, 10 + i * 100, 'full', `c-${id}`);
      await finish(id, i === 3 ? 'fatal' : 'completed', 10 + i * 100, 60 + i * 100, 'full', 20_000 + i);
    }
    await writeLiveStatus(sup);
    await journal('supervisor_exited', { state: 'drained' }, 1000);
    const s = await expectSameAsFull('cold');
    expect(s.state).toBe('drained');
    expect(s.counts.fatal).toBe(1);
  });

  it('names the failed pairs, newest first, with their first reason and outcome problem: the same hot, cold and full', async () => {
    const sup = await supervisorStarted(true);
    const problem = { path: 'fatal_failure', message: 'is required (true or false; there is no default)' };
    const failWith = async (
      jobId: string,
      startSec: number,
      endSec: number,
      reasons: string[],
      problems: (typeof problem)[],
    ): Promise<void> => {
      const result = {
        schema: 'roboguide.e1.result/v1',
        job_id: jobId,
        batch_id: batchId,
        claim_id: `claim-${jobId}`,
        classification: 'infrastructure_failure',
        reasons,
        outcome_problems: problems,
        outcome: null,
        started_at: at(startSec),
        finished_at: at(endSec),
      };
      await store.writeJsonAtomic(`jobs/${jobId}/result.json`, result);
      await journal(
        'pair_finished',
        {
          job_id: jobId,
          claim_id: `claim-${jobId}`,
          classification: 'infrastructure_failure',
          reasons,
          ...(problems.length ? { outcome_problems: problems } : {}),
          started_at: at(startSec),
          finished_at: at(endSec),
          gpu_peak_mib: null,
        },
        endSec,
      );
    };
    await claim('a', 10);
    await failWith('a', 10, 20, ['outcome_invalid'], [problem]);
    await writeLiveStatus(sup);
    await claim('b', 21);
    await finish('b', 'completed', 21, 30);
    await claim('c', 31);
    await failWith('c', 31, 40, ['timeout'], []);
    const s = await expectSameAsFull('hot');
    expect(s.failed).toEqual({
      pairs: [
        {
          job_id: 'c',
          classification: 'infrastructure_failure',
          reason: 'timeout',
          problem: null,
          finished_at: at(40),
        },
        {
          job_id: 'a',
          classification: 'infrastructure_failure',
          reason: 'outcome_invalid',
          problem: 'fatal_failure: is required (true or false; there is no default)',
          finished_at: at(20),
        },
      ],
      more: 0,
    });
  });

  it("a failed pair's words (its stderr's last lines and where it is), as the supervisor journals them: the same hot, cold and full", async () => {
    // CI found the full derivation without them: it explained a result from result.json alone, while the journal's
    // pair_finished (written by journalFinished) has the stderr's tail and path.
    const sup = await supervisorStarted(true);
    const failed = (jobId: string, startSec: number, endSec: number) => ({
      schema: 'roboguide.e1.result/v1' as const,
      job_id: jobId,
      batch_id: batchId,
      claim_id: `claim-${jobId}`,
      classification: 'harness_failure' as const,
      reasons: ['lost_worker', 'outcome_missing'],
      outcome: null,
      logs: { stdout: { bytes: 0, closed: true }, stderr: { bytes: 56, closed: true } },
      started_at: at(startSec),
      finished_at: at(endSec),
    });
    const journalOf = (type: string, fields: Record<string, unknown>): Promise<void> =>
      journal(type, fields, 0).then(() => undefined);
    await claim('a', 10);
    await store.writeBytesAtomic(
      'jobs/a/stderr.log',
      Buffer.from('Traceback (most recent call last):\nValueError: no model\n'),
    );
    const a = failed('a', 10, 20);
    await store.writeJsonAtomic('jobs/a/result.json', a);
    await journalFinished({ store, journal: journalOf }, a as unknown as ResultRecord);
    await writeLiveStatus(sup);
    await claim('b', 21);
    const b = failed('b', 21, 30);
    await store.writeJsonAtomic('jobs/b/result.json', b);
    await journalFinished({ store, journal: journalOf }, b as unknown as ResultRecord);
    const s = await expectSameAsFull('hot');
    expect(s.failed?.pairs.map((p) => [p.job_id, p.why])).toEqual([
      ['b', [`its whole stderr: ${store.resolve('jobs/b/stderr.log')}`]],
      [
        'a',
        [
          'last lines of its stderr:',
          '  | Traceback (most recent call last):',
          '  | ValueError: no model',
          `its whole stderr: ${store.resolve('jobs/a/stderr.log')}`,
        ],
      ],
    ]);
    await rm(store.resolve(STATUS_FILE));
    await expectSameAsFull('cold');
    // A result written by another hand, without `logs`: read from the files, status still answers.
    await claim('c', 31);
    await store.writeBytesAtomic('jobs/c/stderr.log', Buffer.from('boom\n'));
    const { logs: _none, ...c } = failed('c', 31, 40);
    await store.writeJsonAtomic('jobs/c/result.json', c);
    const full = await readStatusFull(store, engine, NOW, procHostIdentity);
    expect(full.failed?.pairs[0]).toMatchObject({
      job_id: 'c',
      why: [
        'last lines of its stderr:',
        '  | boom',
        `its whole stderr: ${store.resolve('jobs/c/stderr.log')}`,
      ],
    });
  });

  it('keeps only the most recent failed pairs in the basis and counts the others', () => {
    const many = Array.from({ length: 14 }, (_, i) => `j${String(i).padStart(2, '0')}`);
    const ledger = BatchLedger.forJobs(many.map((job_id) => ({ job_id, timeout_seconds: 60 })));
    for (const [i, id] of many.entries()) {
      ledger.apply({
        type: 'claimed',
        seq: 2 * i + 1,
        job_id: id,
        claim_id: `k${id}`,
        claimed_at: at(i),
        deadline: at(i + 60),
      });
      ledger.apply({
        type: 'pair_finished',
        seq: 2 * i + 2,
        job_id: id,
        claim_id: `k${id}`,
        classification: 'fatal',
        reasons: ['fatal_failure_flag'],
        started_at: at(i),
        finished_at: at(i + 1),
        gpu_peak_mib: null,
      });
    }
    const restored = BatchLedger.restore(ledger.basis(), () => undefined);
    expect(restored.failedRecent().map((f) => f.job_id)).toEqual([
      'j13',
      'j12',
      'j11',
      'j10',
      'j09',
      'j08',
      'j07',
      'j06',
      'j05',
      'j04',
    ]);
    expect(restored.failedRecent()[0]).toEqual({
      job_id: 'j13',
      classification: 'fatal',
      reason: 'fatal_failure_flag',
      problem: null,
      finished_at: at(14),
    });
  });

  it('a restored ledger answers unsure to what it cannot place, and its basis does not grow with finished pairs', () => {
    const ledger = BatchLedger.forJobs(JOBS.map((job_id) => ({ job_id, timeout_seconds: 60 })));
    for (const [i, id] of JOBS.entries()) {
      ledger.apply({
        type: 'claimed',
        seq: 2 * i + 1,
        job_id: id,
        claim_id: `k${id}`,
        claimed_at: at(i),
        deadline: at(i + 60),
      });
      ledger.apply({
        type: 'pair_finished',
        seq: 2 * i + 2,
        job_id: id,
        claim_id: `k${id}`,
        classification: 'completed',
        started_at: at(i),
        finished_at: at(i + 5),
        gpu_peak_mib: null,
      });
    }
    const basis = ledger.basis();
    expect(basis.open).toEqual([]);
    expect(basis.claimed).toBe(JOBS.length);
    expect(JSON.stringify(basis).length).toBeLessThan(800);
    const restored = BatchLedger.restore(basis, () => undefined);
    expect(
      restored.apply({
        type: 'pair_finished',
        seq: 13,
        job_id: 'a',
        claim_id: 'ka',
        classification: 'completed',
        started_at: at(0),
        finished_at: at(1),
        gpu_peak_mib: null,
      }),
    ).toBe('unsure');
    expect(
      restored.apply({ type: 'harness_fault', seq: 14, job_id: 'a', fault: 'result_write_failed' }),
    ).toBe('unsure');
    expect(restored.meanDuration()).toEqual({ meanSec: 5, basisPairs: JOBS.length });
  });
});
