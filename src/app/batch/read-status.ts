import { isObject } from '../../core/json-object.js';
import { isBatchRecord, receiptRel, resultRel } from './layout.js';
import { isReceipt } from '../../core/receipt.js';
import { isResultRecord } from '../../core/result.js';
import { isSupervisorRecord, type SupervisorRecord } from '../../core/supervisor-record.js';
import { isWrittenStatus, type BatchStatus, type WrittenStatus } from './status-shapes.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { JsonCheck } from '../evidence/json-check.js';
import { BatchLedger } from '../../core/batch-ledger.js';
import { BASIS_SCHEMA } from '../../core/ledger-facts.js';
import type { Manifest } from '../../core/manifest/schema.js';
import { RoboguideError } from '../../core/errors.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import type { HostIdentity } from '../ports/host-identity.js';
import { movedImages } from './image-pins.js';
import {
  BATCH_FILE,
  JOBS_DIR,
  MANIFEST_FILE,
  STATUS_FILE,
  SUPERVISOR_FILE,
} from '../../core/evidence-names.js';
import { buildStatus, leftoverWhyFrom, settleFromFiles, statusFromLedger } from './status.js';
import { capacityConfigOf } from './capacity-config.js';
import { withRunningEgress } from './running-egress.js';

/**
 * A fresh status from the evidence and the engine (read-only: status.json is not rewritten; SPEC §3.3, §6.11).
 * With a live supervisor: its status.json, the journal past the offset it was written at, and the engine's
 * containers (hot). Otherwise, or when status.json cannot be built on: the journal folded once, and the files of
 * only the jobs the fold cannot settle (cold). Both give what the full derivation (`readStatusFull`) gives. Then the
 * running pairs' egress attempts so far, read live from their `egress.jsonl` (`withRunningEgress`).
 */
export async function readStatus(
  store: EvidenceStore,
  runtime: ContainerRuntime | undefined,
  now: Date,
  host: Liveness,
): Promise<BatchStatus> {
  const status =
    (await readHotStatus(store, runtime, now, host)) ?? (await readColdStatus(store, runtime, now, host));
  return withMovedImages(store, runtime, await withRunningEgress(store, status));
}

/** Pinned tags that name another image now (SPEC §3): said by status, never followed. Only with an engine. */
async function withMovedImages(
  store: EvidenceStore,
  runtime: ContainerRuntime | undefined,
  status: BatchStatus,
): Promise<BatchStatus> {
  if (runtime === undefined) return status;
  const batch = await store.readJson(BATCH_FILE, isBatchRecord).catch(() => null);
  const moved = batch === null ? [] : await movedImages(batch, runtime);
  return moved.length > 0 ? { ...status, images_moved: moved } : status;
}

/** Whether a recorded supervisor is the same live process (HostIdentity.isAlive). */
type Liveness = Pick<HostIdentity, 'isAlive'>;

/** A frozen manifest: `jobs`, when present, a list of objects each with a string `job_id`. */
function hasJobIds<J>(value: unknown): value is { jobs?: J[] } {
  if (!isObject(value)) return false;
  const jobs = value['jobs'];
  return (
    jobs === undefined ||
    (Array.isArray(jobs) && jobs.every((j) => isObject(j) && typeof j['job_id'] === 'string'))
  );
}

/** A frozen manifest whose `jobs`, when present, is a list. */
function hasJobList(value: unknown): value is { jobs?: unknown[] } {
  return isObject(value) && (value['jobs'] === undefined || Array.isArray(value['jobs']));
}

/** The frozen manifest as plain JSON (validated when the batch was created). */
async function frozenManifestJson<T>(store: EvidenceStore, check: JsonCheck<T>): Promise<T> {
  const raw = await store.readJson(MANIFEST_FILE, check);
  if (raw === null)
    throw new RoboguideError(
      'E_BATCH_STATE',
      `${store.root}: the batch was never fully created (no ${MANIFEST_FILE})`,
      { exitCode: 2 },
    );
  return raw;
}

function sameSupervisor(a: SupervisorRecord, b: SupervisorRecord): boolean {
  return (
    a.pid === b.pid &&
    a.start_ticks === b.start_ticks &&
    a.boot_id === b.boot_id &&
    a.started_at === b.started_at
  );
}

function usableBasis(written: WrittenStatus | null): written is WrittenStatus {
  const basis = (written as Partial<WrittenStatus> | null)?.basis;
  return (
    basis?.schema === BASIS_SCHEMA &&
    Number.isInteger(basis.journal_bytes) &&
    Array.isArray(basis.open) &&
    typeof basis.fold === 'object'
  );
}

/**
 * Hot status: null when it cannot be built on status.json (no live supervisor, a status.json from another
 * supervisor or without a basis, a journal record it cannot place): the caller derives it cold.
 */
async function jobsById(store: EvidenceStore): Promise<Map<string, Manifest['jobs'][number]>> {
  const raw = await frozenManifestJson(store, hasJobIds<Manifest['jobs'][number]>);
  return new Map((raw.jobs ?? []).map((j) => [j.job_id, j]));
}

export async function readHotStatus(
  store: EvidenceStore,
  runtime: Pick<ContainerRuntime, 'listByLabel'> | undefined,
  now: Date,
  host: Liveness,
): Promise<BatchStatus | null> {
  const supervisor = await store.readJson(SUPERVISOR_FILE, isSupervisorRecord).catch(() => null);
  if (supervisor === null) return null;
  const written = await store.readJson(STATUS_FILE, isWrittenStatus).catch(() => null);
  if (
    !usableBasis(written) ||
    written.supervisor === null ||
    written.supervisor.alive !== true ||
    !sameSupervisor(written.supervisor, supervisor)
  )
    return null;
  if (written.basis.fold.exited_as !== null || !host.isAlive(supervisor)) return null;
  const batch = await store.readJson(BATCH_FILE, isBatchRecord);
  if (batch === null || batch.batch_id !== written.batch_id) return null;
  const tail = await store.readJournalFrom(written.basis.journal_bytes).catch(() => null);
  if (
    tail === null ||
    (tail.records[0] !== undefined && tail.records[0].seq !== written.basis.journal_seq + 1)
  )
    return null;

  // The manifest is read only when something needs a job's position or existence (a claim after status.json was
  // written, a leftover container): as plain JSON, it was validated when the batch was created.
  let jobIndex: Map<string, number> | undefined;
  const indexOf = async (): Promise<Map<string, number>> => {
    if (jobIndex === undefined) {
      const raw = await frozenManifestJson(store, hasJobList);
      jobIndex = new Map(
        (raw.jobs ?? []).flatMap((j, i) =>
          isObject(j) && typeof j['job_id'] === 'string' ? [[j['job_id'], i] as const] : [],
        ),
      );
    }
    return jobIndex;
  };
  if (tail.records.some((r) => r.type === 'claimed')) await indexOf();
  const ledger = BatchLedger.restore(written.basis, (id) => jobIndex?.get(id));
  for (const record of tail.records) {
    // A new supervisor start or an exit after status.json: it no longer describes a live supervisor's batch.
    if (record.type === 'supervisor_started' || record.type === 'supervisor_exited') return null;
    if (ledger.apply(record) === 'unsure') return null;
  }
  const containers = runtime ? await runtime.listByLabel({ 'roboguide.batch': batch.batch_id }) : [];
  // A swarm batch's per-node view counts the GPUs of the pairs running there: only then is the manifest read.
  const jobs = batch.executor?.kind === 'swarm' ? await jobsById(store) : undefined;
  return statusFromLedger({
    ledger,
    output: store.root,
    batch,
    ...(jobs !== undefined ? { jobs } : {}),
    capacity: written.basis.capacity,
    supervisor,
    alive: true,
    containers,
    now,
    leftoverWhy: async (jobId) => {
      if (jobId === null || !(await indexOf()).has(jobId)) return 'unknown_job';
      const known = ledger.finishedKnown(jobId);
      if (known !== null) return known ? 'job_finished' : 'job_not_running';
      return (await store.readJson(resultRel(jobId), isResultRecord)) !== null
        ? 'job_finished'
        : 'job_not_running';
    },
  });
}

/**
 * Cold status: the journal folded once; then the files of the jobs the fold leaves open or unsettled, of any job
 * folder the journal has no claim for (a receipt published just before a crash) and of any finished job whose
 * result.json is no longer there (each is looked up, not read). Nothing else is read.
 */
export async function readColdStatus(
  store: EvidenceStore,
  runtime: ContainerRuntime | undefined,
  now: Date,
  host: Liveness,
): Promise<BatchStatus> {
  // Loaded here, not at the top: the manifest's schema (zod) is the hot path's largest import (start-up of `status`).
  const { loadBatch } = await import('./batch-context.js');
  const { batch, manifest } = await loadBatch(store);
  const ledger = BatchLedger.forJobs(manifest.jobs);
  const journal = await store.readJournalSlice();
  for (const record of journal.records) ledger.apply(record);
  ledger.at(ledger.journalSeq, journal.endBytes);
  const jobIds = new Set(manifest.jobs.map((j) => j.job_id));
  const folders = (await store.list(JOBS_DIR)).filter((name) => jobIds.has(name));
  // A finished pair counts while its result.json is there (looked up, not read): a result lost behind the journal's
  // back shows as a claim without result, as the full derivation shows it.
  const finished = ledger.finishedJobs();
  const present = await store.existAll(finished.map(resultRel));
  const lost = finished.filter((_, i) => !present[i]);
  const toRead = new Set([
    ...ledger.open().map((c) => c.job_id),
    ...ledger.unsettled(),
    ...lost,
    ...folders.filter((name) => !ledger.knows(name)),
  ]);
  await Promise.all(
    [...toRead].map(async (jobId) => {
      const [receipt, result] = await Promise.all([
        store.readJson(receiptRel(jobId), isReceipt),
        store.readJson(resultRel(jobId), isResultRecord),
      ]);
      await settleFromFiles(store, ledger, jobId, receipt, result);
    }),
  );
  const supervisor = await store.readJson(SUPERVISOR_FILE, isSupervisorRecord);
  // Alive: the recorded supervisor's process lives and no `supervisor_exited` was journalled since it started.
  const alive = supervisor !== null && ledger.fold().exitedAs === null && host.isAlive(supervisor);
  const containers = runtime ? await runtime.listByLabel({ 'roboguide.batch': batch.batch_id }) : [];
  return statusFromLedger({
    ledger,
    output: store.root,
    batch,
    capacity: capacityConfigOf(manifest, batch),
    supervisor,
    alive,
    containers,
    now,
    leftoverWhy: leftoverWhyFrom(ledger, manifest),
    jobs: new Map(manifest.jobs.map((j) => [j.job_id, j])),
  });
}

/** The full derivation (every job's receipt and result, the whole journal): the reference for the two above. */
export async function readStatusFull(
  store: EvidenceStore,
  runtime: ContainerRuntime | undefined,
  now: Date,
  host: Liveness,
): Promise<BatchStatus> {
  const { loadBatch, readJobFiles } = await import('./batch-context.js');
  const { batch, manifest } = await loadBatch(store);
  return buildStatus({
    store,
    batch,
    manifest,
    files: await readJobFiles(store, manifest),
    journal: await store.readJournal(),
    ...(runtime ? { runtime } : {}),
    now,
    host,
  });
}
