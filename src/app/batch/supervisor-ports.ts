import { isReceipt } from '../../core/receipt.js';
import { isResultRecord } from '../../core/result.js';
import type { BatchLedger } from '../../core/batch-ledger.js';
import { InternalError, errorDetail } from '../../core/errors.js';
import type { JournalAppend } from '../../core/journal-events.js';
import type { Job, Manifest } from '../../core/manifest/schema.js';
import type { PairOutcome, SupervisorJournal } from '../../core/supervisor-machine.js';
import type { Logger } from '../ports/logger.js';
import type { PlacementInventory } from '../ports/executor-inventory.js';
import { textRedactor } from '../../core/redaction/redact-text.js';
import type { JobFiles } from './batch-context.js';
import type { ResolvedJobEnvironment } from '../../core/manifest/environment.js';
import {
  dispatchPair,
  type BatchPairContext,
  type BatchPairDeps,
  type DispatchAttempt,
} from './batch-pair.js';
import type { RunningHandle } from '../pair/claimed-pair-types.js';
import type { FinishReport } from './finish-pair.js';
import { receiptRel, resultRel, type BatchRecord } from './layout.js';
import { STATUS_FILE } from '../../core/evidence-names.js';
import type { SupervisorRecord } from '../../core/supervisor-record.js';
import { nodesDown } from './node-down.js';
import { admissionNodesFor } from '../admission.js';
import { recoverPair } from './recover-pair.js';
import type { reportRefresher } from './report.js';
import { checkSources } from './source-check.js';
import { buildWrittenStatus, settleFromFiles } from './status.js';
import { capacityConfigOf } from './capacity-config.js';
import { CoalescingWriter, STATUS_MIN_INTERVAL_MS } from './status-writer.js';
import type { SupervisorDeps } from './supervisor-deps.js';
import type { PeakBook } from './supervisor-ledger.js';
import type { SupervisorLoopPorts } from './supervisor-loop.js';
import type { RegistryCredentials } from './registry-auth.js';
import type { BatchImages, PulledImage } from './batch-images.js';
import { jobImage } from '../../core/manifest/parse.js';

/**
 * The supervisor's wiring: how each effect of the loop is performed on the batch's evidence, registry and engine
 * (dispatch, recovery, the source check, the journal, status.json, swarm placement and admission nodes).
 */

/** How often a swarm pair's placement is asked for until the swarm has placed it. */
const PLACEMENT_POLL_MS = 500;

/** What one supervision holds while it runs: the batch, the ledger status is written from, the loop. */
export interface Supervision {
  readonly deps: SupervisorDeps;
  readonly batch: BatchRecord;
  readonly manifest: Manifest;
  readonly record: SupervisorRecord;
  readonly journal: JournalAppend;
  readonly book: BatchLedger;
  readonly peaks: PeakBook;
  readonly stopFolding: () => void;
  /** Issue 43: the registries' credentials (memory only; masked everywhere). */
  readonly credentials?: RegistryCredentials;
}

export async function bestEffort(logger: Logger, what: string, work: () => Promise<unknown>): Promise<void> {
  try {
    await work();
  } catch (err) {
    logger.error({ err: errorDetail(err), what }, 'write failed; continuing fail-closed');
  }
}

export function batchDepsOf(s: Supervision): BatchPairDeps {
  return { store: s.deps.store, registry: s.deps.registry, execute: s.deps.execute, journal: s.journal };
}

/** The loop's effects, performed on the batch's evidence, registry and engine. */
export function loopPorts(
  s: Supervision,
  files: readonly JobFiles[],
  envs: ReadonlyMap<string, ResolvedJobEnvironment>,
  statusWriter: CoalescingWriter,
  images?: BatchImages,
): SupervisorLoopPorts {
  const { deps, manifest } = s;
  const receipts = new Map(
    files.flatMap((f) => (f.receipt !== null ? [[f.job.job_id, f.receipt] as const] : [])),
  );
  const batchDeps = batchDepsOf(s);
  const ctx = pairContextOf(s);
  const jobOf = (jobId: string): Job => {
    const job = manifest.jobs.find((j) => j.job_id === jobId);
    if (job === undefined) throw new InternalError(`job ${jobId} is not in the manifest`);
    return job;
  };
  const placements = deps.execute.placements;
  return {
    clock: deps.execute.clock,
    logger: deps.logger,
    redact: batchRedactor(deps, envs, s.credentials?.secrets),
    gpuPeaksMib: () => s.book.gpuPeaks(),
    journal: (event) => journalEvent(s.journal, event),
    writeStatus: () => statusWriter.now(),
    statusSoon: () => statusWriter.soon(),
    checkSources: async (phase) => {
      const check = await checkSources(s.deps.execute.fs, manifest.source_sha256);
      await s.journal('source_check', {
        phase,
        ok: check.ok,
        checked: check.checked,
        mismatched: check.mismatched,
      });
      return check.ok;
    },
    dispatch: (jobId, onRunning) => {
      const job = jobOf(jobId);
      const env = envs.get(jobId);
      if (env === undefined) throw new InternalError(`job ${jobId} has no resolved environment`);
      if (images === undefined)
        return dispatchPair(batchDeps, ctx, job, env, onRunning).then(outcomeOfAttempt);
      return images.whenPulled(job, jobImage(manifest, job), (pulled) =>
        dispatchPair(batchDeps, withImage(ctx, pulled), job, env, onRunning).then(outcomeOfAttempt),
      );
    },
    recover: (jobId, onRunning) => {
      const job = jobOf(jobId);
      const receipt = receipts.get(jobId);
      if (receipt === undefined) throw new InternalError(`job ${jobId} has no receipt to recover`);
      return recoverPair(batchDeps, ctx, job, receipt, envs.get(jobId), onRunning).then(outcomeOfFinish);
    },
    ...(placements !== undefined
      ? {
          watchPlacement: (handle, stillRunning) =>
            watchPlacement(s, placements, handle, stillRunning, () => statusWriter.soon()),
        }
      : {}),
  };
}

/** Masks every secret of the batch's pending jobs, and the registry's password, in a cause's message. */
export function batchRedactor(
  deps: Pick<SupervisorDeps, 'environment'>,
  envs: ReadonlyMap<string, ResolvedJobEnvironment>,
  registrySecrets: readonly string[] = [],
): (text: string) => string {
  const secrets = new Set<string>(registrySecrets);
  for (const env of envs.values()) for (const s of env.secrets) secrets.add(s);
  const pgPassword = deps.environment['PGPASSWORD'];
  if (pgPassword !== undefined && pgPassword !== '') secrets.add(pgPassword);
  return textRedactor([...secrets]);
}

function journalEvent(journal: JournalAppend, event: SupervisorJournal): Promise<void> {
  switch (event.type) {
    case 'paused':
      return journal('paused', {
        reasons: event.reasons,
        ...(event.job_id !== undefined ? { job_id: event.job_id } : {}),
        ...(event.cause !== undefined ? { cause: event.cause } : {}),
      });
    case 'stop_requested':
      return journal('stop_requested', { terminate: event.terminate });
    case 'admission_refused':
      return journal('admission_refused', { job_id: event.job_id, reason: event.reason });
  }
}

export function outcomeOfFinish(report: FinishReport): PairOutcome {
  return {
    kind: 'finished',
    classification: report.result.classification,
    pauseReasons: report.pauseReasons,
    ...(report.cause !== undefined ? { cause: report.cause } : {}),
  };
}

export function outcomeOfAttempt(attempt: DispatchAttempt): PairOutcome {
  if (attempt.kind === 'ran') return outcomeOfFinish(attempt.finish);
  return attempt.kind === 'refused'
    ? { kind: 'refused', reason: attempt.reason }
    : { kind: 'claim_failed', reason: attempt.reason };
}

/**
 * Issue 43: the pair's context once its image's wait ended: its pull failure (it fails `image_pull_failed`), or on a
 * swarm admission only to the nodes that hold its image.
 */
function withImage(ctx: BatchPairContext, pulled: PulledImage): BatchPairContext {
  const holding = pulled.nodes;
  const admissionNodes = ctx.admissionNodes;
  return {
    ...ctx,
    ...(pulled.pullFailure !== undefined ? { pullFailure: pulled.pullFailure } : {}),
    ...(holding !== undefined && admissionNodes !== undefined
      ? { admissionNodes: async (c) => (await admissionNodes(c)).filter((n) => holding.includes(n)) }
      : {}),
  };
}

/** Swarm (issue 13): which node runs each pair, journalled once the swarm placed it (status shows it). */
function watchPlacement(
  s: Supervision,
  placements: PlacementInventory,
  handle: RunningHandle,
  stillRunning: () => boolean,
  statusSoon: () => void,
): void {
  void (async () => {
    while (stillRunning()) {
      const placed =
        handle.containerId === null
          ? null
          : await placements.placementOf(handle.containerId).catch(() => null);
      if (placed !== null) {
        handle.node = placed.node;
        await bestEffort(s.deps.logger, 'journal pair_placed', () =>
          s.journal('pair_placed', { job_id: handle.jobId, node: placed.node }),
        );
        statusSoon();
        return;
      }
      await s.deps.execute.clock.sleep(PLACEMENT_POLL_MS);
    }
  })();
}

/** The pair context: the batch, its GPU peaks per image, and on a swarm the nodes admission tries in turn. */
function pairContextOf(s: Supervision): BatchPairContext {
  const admissionNodes = admissionNodesOf(s);
  return {
    batch: s.batch,
    manifest: s.manifest,
    gpuPeaksByImage: () => s.peaks.byImage(),
    ...(admissionNodes ? { admissionNodes } : {}),
  };
}

/**
 * Swarm: admission per node (the registry's slots, GPU budget and ports are per node): `admissionNodesFor`, with
 * the nodes the operator declared down left out. A manager that cannot list its nodes fails the listing; a batch
 * then waits (no node now: the pair is refused `host_full` and tried again), as `admissionNodesFor` leaves to it.
 */
export function admissionNodesOf(s: Supervision): BatchPairContext['admissionNodes'] {
  if (s.batch.executor?.kind !== 'swarm') return undefined;
  const nodes = admissionNodesFor(s.deps.execute.nodes, () => nodesDown(s.deps.store));
  if (nodes === undefined) return undefined;
  return (constraints) => nodes(constraints).catch((): readonly string[] => []);
}

/**
 * status.json from the ledger (never a rescan of the job folders), with the basis `e1-batch status` builds on: now
 * for a change that matters (a pair finished, a pause, a stop), coalesced for one that can wait (a pair started).
 */
export function statusWriterOf(
  s: Supervision,
  running: () => readonly RunningHandle[],
  report: ReturnType<typeof reportRefresher>,
  images?: BatchImages,
): CoalescingWriter {
  const { store, logger } = s.deps;
  const clock = s.deps.execute.clock;
  const capacity = capacityConfigOf(s.manifest, s.batch);
  // A swarm batch's status shows the GPUs in use per node: the jobs by id, once.
  const jobsById =
    s.batch.executor?.kind === 'swarm' ? new Map(s.manifest.jobs.map((j) => [j.job_id, j])) : undefined;
  const writeNow = async (): Promise<void> => {
    // A job a harness fault left unsettled: its files decide (one job, not the batch).
    for (const jobId of s.book.unsettled()) {
      await settleFromFiles(
        store,
        s.book,
        jobId,
        await store.readJson(receiptRel(jobId), isReceipt),
        await store.readJson(resultRel(jobId), isResultRecord),
      );
    }
    const view = running().map((h) => ({
      job_id: h.jobId,
      container_id: h.containerId,
      started_at: h.startedAt,
      deadline: h.deadline,
      ...(h.node !== undefined ? { node: h.node } : {}),
    }));
    const written = await buildWrittenStatus({
      ledger: s.book,
      output: store.root,
      batch: s.batch,
      capacity,
      supervisor: s.record,
      running: view,
      now: clock.now(),
      ...(jobsById !== undefined ? { jobs: jobsById } : {}),
    });
    await store.writeJsonAtomic(
      STATUS_FILE,
      images === undefined ? written : { ...written, images: images.snapshot() },
    );
    report.poke();
  };
  return new CoalescingWriter(writeNow, clock, STATUS_MIN_INTERVAL_MS, (err) =>
    logger.error({ err: errorDetail(err), what: STATUS_FILE }, 'write failed; continuing fail-closed'),
  );
}
