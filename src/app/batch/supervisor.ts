import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { ProcessIdentity } from '../ports/host-identity.js';
import type { JournalRecord } from '../evidence/evidence-store.js';
import type { BatchLedger } from '../../core/batch-ledger.js';
import { foldJournal, type BatchState } from '../../core/batch-state.js';
import type { PauseReason } from '../../core/classify.js';
import { decideDispatch } from '../../core/dispatch-policy.js';
import { RoboguideError, errorKind } from '../../core/errors.js';
import { jobImage, type Manifest } from '../../core/manifest/index.js';
import { survivingResume, infrastructureStreak } from '../../core/pause-rules.js';
import type { Receipt } from '../../core/receipt.js';
import type { Classification, ResultRecord } from '../../core/result.js';
import type { ExecutePairDeps } from '../execute-pair.js';
import { failpoint } from '../failpoints.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { Logger } from '../ports/logger.js';
import { loadBatch, readJobFiles, resolveAllEnvironments, type JobFiles, type ResolvedJobEnvironment } from './batch-context.js';
import { dispatchPair, type BatchPairContext, type BatchPairDeps, type RunningHandle } from './batch-pair.js';
import { reconcileFinished, removeUnverifiedContainer, type FinishReport } from './finish-pair.js';
import { receiptRel, resultRel, STATUS_FILE, STOP_FILE, SUMMARY_FILE, SUPERVISOR_FILE, type BatchRecord, type StopRequest, type SupervisorRecord } from './layout.js';
import { nodesDown } from './node-down.js';
import { recoverPair } from './recover-pair.js';
import { reportRefresher } from './report.js';
import { checkSources } from './source-check.js';
import { buildStatus, buildSummary, buildWrittenStatus, capacityConfigOf, gpuPeaksOf, ledgerFromFiles, settleFromFiles } from './status.js';
import { CoalescingWriter, STATUS_MIN_INTERVAL_MS } from './status-writer.js';

/** How often a swarm pair's placement is asked for until the swarm has placed it. */
const PLACEMENT_POLL_MS = 500;

export interface SupervisorDeps {
  readonly store: EvidenceStore;
  readonly registry: CapacityRegistry;
  readonly execute: ExecutePairDeps;
  readonly logger: Logger;
  readonly environment: Readonly<Record<string, string | undefined>>;
  /** Install signal handlers (SIGTERM/SIGINT: stop, twice: terminate; SIGUSR2: read the stop request). */
  readonly handleSignals: boolean;
}

const REGISTRY_RETRY_MS = 2_000;
const STOP_POLL_MS = 1_000;

/**
 * The batch supervisor (SPEC §5): recovers claimed pairs, dispatches unclaimed ones in manifest order under
 * the dispatch policy, pauses when continuing would waste GPU hours or corrupt evidence, and exits when the
 * batch drains, stops, or pauses with nothing running. Returns the state it leaves the batch in.
 */
export async function supervise(deps: SupervisorDeps, mode: 'start' | 'resume'): Promise<BatchState> {
  const { store, registry } = deps;
  const { batch, manifest } = await loadBatch(store);
  const batchId = batch.batch_id;

  const identity = await deps.execute.host.current();
  // One live supervisor per batch, host-wide: two resumes racing can never both supervise. The registry lease
  // tells processes apart; the set below does the same inside one process (the library API).
  const lease = supervisedHere.has(batchId)
    ? ({ kind: 'held', holder: identity } as const)
    : await registry.acquireLease(batchId, identity, (holder) => deps.execute.host.isAlive(holder));
  if (lease.kind === 'held') {
    throw new RoboguideError('E_SUPERVISOR_ALIVE', `batch ${batchId} is already supervised by pid ${lease.holder.pid}`, {
      suggestions: ['wait for it, or `e1-batch stop` it first'],
    });
  }
  supervisedHere.add(batchId);
  try {
    return await superviseHeld(deps, mode, { batch, manifest, identity });
  } finally {
    supervisedHere.delete(batchId);
    try {
      await registry.releaseLease(batchId, identity.pid);
    } catch (err) {
      // A lease left behind is taken over once this process is gone; never let it mask the batch's outcome.
      deps.logger.warn({ err: errorKind(err) }, 'supervisor lease not released');
    }
  }
}

/** Batches supervised by this process right now. */
const supervisedHere = new Set<string>();

async function superviseHeld(
  deps: SupervisorDeps,
  mode: 'start' | 'resume',
  held: { batch: BatchRecord; manifest: Manifest; identity: ProcessIdentity },
): Promise<BatchState> {
  const { store, registry, logger } = deps;
  const { batch, manifest, identity } = held;
  const clock = deps.execute.clock;
  const batchId = batch.batch_id;
  // Admission reserves a GPU pair's measured peak for its image (SPEC §7): the results read at start, then each
  // `pair_finished` record's peak as it is appended (never a rescan of the job folders).
  const jobById = new Map(manifest.jobs.map((j) => [j.job_id, j]));
  const peaksByImage = new Map<string, number[]>();
  const notePeak = (jobId: string, peak: number): void => {
    const job = jobById.get(jobId);
    if (job === undefined) return;
    const image = jobImage(manifest, job);
    peaksByImage.set(image, [...(peaksByImage.get(image) ?? []), peak]);
  };
  // Swarm: admission per node (the registry's slots, GPU budget and ports are per node). The nodes the manager
  // calls ready, less those the operator declared down, taken in turn so that the pairs spread over the nodes.
  const readyNodes = batch.executor?.kind === 'swarm' ? deps.execute.runtime.readyNodes?.bind(deps.execute.runtime) : undefined;
  let turn = 0;
  const admissionNodes =
    readyNodes === undefined
      ? undefined
      : async (constraints: readonly string[]): Promise<readonly string[]> => {
          const down = new Set(await nodesDown(store).catch(() => []));
          const ready = (await readyNodes(constraints).catch(() => [])).filter((n) => !down.has(n));
          if (ready.length === 0) return [];
          const first = turn++ % ready.length;
          return [...ready.slice(first), ...ready.slice(0, first)];
        };
  const ctx: BatchPairContext = { batch, manifest, gpuPeaksByImage: () => peaksByImage, ...(admissionNodes ? { admissionNodes } : {}) };
  // A stop recorded for an earlier supervisor is void; one sent after our identity is published is ours.
  // Until the real handler is in place, SIGUSR2 (whose default action would kill us) is only latched.
  await deps.execute.fs.unlink(store.resolve(STOP_FILE)).catch(() => undefined);
  if (mode === 'resume') await store.cleanTempFiles();
  let stopLatched = false;
  const latchStop = (): void => {
    stopLatched = true;
  };
  process.on('SIGUSR2', latchStop);
  const record: SupervisorRecord = { ...identity, started_at: clock.now().toISOString(), mode };
  try {
    await store.writeJsonAtomic(SUPERVISOR_FILE, record);
  } catch (err) {
    process.off('SIGUSR2', latchStop);
    throw err;
  }
  const journal = async (type: string, fields: Record<string, unknown>): Promise<void> => {
    await store.appendJournal({ type, at: clock.now().toISOString(), ...fields });
  };
  await journal('supervisor_started', { mode, pid: identity.pid, start_ticks: identity.start_ticks, boot_id: identity.boot_id });
  if (mode === 'resume') {
    const before = foldJournal(await store.readJournal());
    const kept = survivingResume(before.pauseReasons);
    await journal('resumed', { cleared: before.pauseReasons.filter((r) => !kept.includes(r)), kept });
  }

  // The ledger status is written from: every record this store appends from here on is folded in as it becomes
  // durable; the records before, and the jobs, come from the journal and the files read once just below.
  let ledger: BatchLedger | undefined;
  const early: { record: JournalRecord; endBytes: number }[] = [];
  const stopFolding = store.onJournalAppend((record, endBytes) => {
    const r = record as JournalRecord & { job_id?: unknown; gpu_peak_mib?: unknown };
    if (r.type === 'pair_finished' && typeof r.job_id === 'string' && typeof r.gpu_peak_mib === 'number') notePeak(r.job_id, r.gpu_peak_mib);
    if (ledger === undefined) early.push({ record, endBytes });
    else if (record.seq > ledger.journalSeq) ledger.apply(record, endBytes);
  });
  let files: JobFiles[];
  try {
    files = await readJobFiles(store, manifest);
    for (const f of files) for (const peak of gpuPeaksOf([f])) notePeak(f.job.job_id, peak);
    const slice = await store.readJournalSlice();
    const seeded = ledgerFromFiles(manifest, files, slice.records);
    seeded.at(slice.records.at(-1)?.seq ?? 0, slice.endBytes);
    for (const { record, endBytes } of early) if (record.seq > seeded.journalSeq) seeded.apply(record, endBytes);
    ledger = seeded;
  } catch (err) {
    stopFolding();
    throw err;
  }
  const book = ledger;
  const pending = new Set(files.filter((f) => f.result === null).map((f) => f.job.job_id));
  let envs: Map<string, ResolvedJobEnvironment>;
  try {
    envs = resolveAllEnvironments(manifest, deps.environment, pending, { allowShortSecrets: batch.allow_short_secrets === true });
  } catch (err) {
    stopFolding();
    throw err;
  }

  const pauseReasons = new Set<PauseReason>(book.fold().pauseReasons);
  const claimed = new Set(files.filter((f) => f.receipt !== null).map((f) => f.job.job_id));
  let finishedCount = files.filter((f) => f.result !== null).length;
  const finishedHere: { jobId: string; classification: Classification }[] = [];
  const running = new Map<string, RunningHandle>();
  const tasks = new Map<string, Promise<void>>();
  let stopRequested = false;
  let terminateRequested = false;
  /** After a refused admission, retry no earlier than this (epoch ms) unless one of our pairs frees a slot. */
  let registryRetryAtMs = 0;
  const wakeup = new Wakeup();
  const wake = (): void => wakeup.notify();

  const pause = async (reasons: readonly PauseReason[], jobId: string | null): Promise<void> => {
    const fresh = reasons.filter((r) => !pauseReasons.has(r));
    if (fresh.length === 0) return;
    for (const r of fresh) pauseReasons.add(r);
    // The pause holds in memory whatever happens to the journal; a batch whose supervisor is gone without a
    // recorded pause or stop is shown as paused anyway (fail closed).
    await bestEffort('journal paused', () => journal('paused', { reasons: fresh, ...(jobId ? { job_id: jobId } : {}) }));
    logger.warn({ reasons: fresh, job: jobId }, 'batch paused');
    await writeStatus();
  };

  const report = reportRefresher(store, clock, logger, deps.execute.host);
  const capacity = capacityConfigOf(manifest, batch);
  // A swarm batch's status shows the GPUs in use per node: the jobs by id, once.
  const jobsById = batch.executor?.kind === 'swarm' ? new Map(manifest.jobs.map((j) => [j.job_id, j])) : undefined;
  /** status.json from the ledger (never a rescan of the job folders), with the basis `e1-batch status` builds on. */
  const writeStatusNow = async (): Promise<void> => {
    // A job a harness fault left unsettled: its files decide (one job, not the batch).
    for (const jobId of book.unsettled()) {
      settleFromFiles(book, jobId, await store.readJson<Receipt>(receiptRel(jobId)), await store.readJson<ResultRecord>(resultRel(jobId)));
    }
    const view = [...running.values()].map((h) => ({
      job_id: h.jobId,
      container_id: h.containerId,
      started_at: h.startedAt,
      deadline: h.deadline,
      ...(h.node !== undefined ? { node: h.node } : {}),
    }));
    const written = await buildWrittenStatus({ ledger: book, output: store.root, batch, capacity, supervisor: record, running: view, now: clock.now(), ...(jobsById !== undefined ? { jobs: jobsById } : {}) });
    await store.writeJsonAtomic(STATUS_FILE, written);
    report.poke();
  };
  const statusWriter = new CoalescingWriter(writeStatusNow, clock, STATUS_MIN_INTERVAL_MS, (err) => logger.error({ err: errorKind(err), what: 'status.json' }, 'write failed; continuing fail-closed'));
  /** A status change that can wait (a pair started): coalesced, at most one write per STATUS_MIN_INTERVAL_MS. */
  const statusSoon = (): void => statusWriter.soon();
  /** A status change that matters (a pair finished, a pause, a stop): written now. */
  const writeStatus = (): Promise<void> => statusWriter.now();

  const applyStop = async (request: StopRequest | null): Promise<void> => {
    if (!request) return;
    const fresh = !stopRequested || (request.terminate && !terminateRequested);
    stopRequested = true;
    if (request.terminate && !terminateRequested) {
      terminateRequested = true;
      for (const h of running.values()) h.terminate.abort();
    }
    wake();
    if (fresh) {
      await bestEffort('journal stop_requested', () => journal('stop_requested', { terminate: request.terminate }));
      await writeStatus();
    }
  };
  const onSignal = (): void => {
    // First SIGTERM/SIGINT: stop (running pairs finish); a second one: terminate them.
    applyStop({ terminate: stopRequested, requested_at: clock.now().toISOString() }).catch(() => undefined);
  };
  const onUsr2 = (): void => {
    store
      .readJson<StopRequest>(STOP_FILE)
      .then(applyStop)
      .catch(() => undefined);
  };
  // SIGUSR2 is the stop protocol (`e1-batch stop`): always ours while supervising, even in-process.
  process.on('SIGUSR2', onUsr2);
  process.off('SIGUSR2', latchStop);
  if (stopLatched) onUsr2();
  if (deps.handleSignals) {
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  }
  const stopPoll = setInterval(onUsr2, STOP_POLL_MS);

  const batchDeps: BatchPairDeps = { store, registry, execute: deps.execute, journal };
  // Swarm (issue 13): which node runs each pair, journalled once the swarm placed it (status shows it).
  const placementOf = deps.execute.runtime.placementOf?.bind(deps.execute.runtime);
  const watchPlacement = (h: RunningHandle): void => {
    if (!placementOf) return;
    void (async () => {
      while (running.get(h.jobId) === h) {
        const placed = h.containerId === null ? null : await placementOf(h.containerId).catch(() => null);
        if (placed !== null) {
          h.node = placed.node;
          await bestEffort('journal pair_placed', () => journal('pair_placed', { job_id: h.jobId, node: placed.node }));
          statusSoon();
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, PLACEMENT_POLL_MS));
      }
    })();
  };
  const onRunning = (h: RunningHandle): void => {
    running.set(h.jobId, h);
    if (terminateRequested) h.terminate.abort();
    statusSoon();
    watchPlacement(h);
  };
  const settle = async (jobId: string, work: Promise<FinishReport | null>): Promise<void> => {
    try {
      const report = await work;
      if (report) {
        registryRetryAtMs = 0;
        finishedCount++;
        finishedHere.push({ jobId, classification: report.result.classification });
        if (report.pauseReasons.length > 0) await pause(report.pauseReasons, jobId);
        if (infrastructureStreak(finishedHere)) await pause(['infrastructure_streak'], jobId);
      }
    } catch (err) {
      logger.error({ job: jobId, err: errorKind(err) }, 'pair task failed: pausing the batch');
      await pause(['harness'], jobId).catch(() => undefined);
    } finally {
      running.delete(jobId);
      tasks.delete(jobId);
      await writeStatus();
      wake();
    }
  };
  const launch = (jobId: string, work: () => Promise<FinishReport | null>): void => {
    tasks.set(jobId, settle(jobId, work()));
  };

  try {
    // Reservations whose claim never got published: nothing ran for them.
    const claimIds = new Set(files.flatMap((f) => (f.receipt ? [f.receipt.claim_id] : [])));
    for (const r of await registry.held({ batchId })) {
      if (!claimIds.has(r.claimId)) {
        await registry.release(r.id, r.claimId);
        await journal('reservation_released_unclaimed', { job_id: r.jobId, reservation_id: r.id });
      }
    }
    // A result written but its slot still held: the previous supervisor died between the two. Finish it.
    for (const f of files) {
      const held = f.receipt && f.result ? await registry.reservationForClaim(f.receipt.claim_id) : null;
      if (f.receipt && f.result && held?.state === 'held') {
        await journal('recovered', { job_id: f.job.job_id, action: 'reconcile_finished' });
        await removeUnverifiedContainer(batchDeps, f.receipt, f.result, manifest.stop_budget_seconds);
        const report = await reconcileFinished(batchDeps, f.receipt, f.result);
        if (!report.released) await pause(['harness'], f.job.job_id);
      }
    }
    for (const f of files) {
      if (f.receipt && !f.result) {
        const receipt = f.receipt;
        launch(f.job.job_id, () => recoverPair(batchDeps, ctx, f.job, receipt, envs.get(f.job.job_id), onRunning));
      }
    }
    let sourcesChecked = false;
    await writeStatus();
    for (;;) {
      const decision = decideDispatch({
        jobIds: manifest.jobs.map((j) => j.job_id),
        claimed,
        running: tasks.size,
        finishedCount,
        gpuPeaksMib: book.gpuPeaks(),
        capacity,
        paused: pauseReasons.size > 0,
        stopping: stopRequested,
        registryRefused: Date.now() < registryRetryAtMs,
      });
      if (decision.kind === 'drained') break;
      if (decision.kind === 'dispatch') {
        if (!sourcesChecked) {
          sourcesChecked = true;
          const check = await checkSources(deps.execute.fs, manifest.source_sha256);
          await journal('source_check', { phase: 'before_first_dispatch', ok: check.ok, checked: check.checked, mismatched: check.mismatched });
          if (!check.ok) {
            await pause(['fatal', 'inputs_changed'], null);
            continue;
          }
        }
        const job = manifest.jobs.find((j) => j.job_id === decision.jobId);
        const env = envs.get(decision.jobId);
        if (!job || !env) throw new Error(`job ${decision.jobId} has no resolved environment`);
        claimed.add(job.job_id);
        launch(job.job_id, async () => {
          const attempt = await dispatchPair(batchDeps, ctx, job, env, onRunning);
          if (attempt.kind === 'ran') return attempt.finish;
          if (attempt.kind === 'refused') {
            claimed.delete(job.job_id);
            if (registryRetryAtMs === 0) await bestEffort('journal admission_refused', () => journal('admission_refused', { job_id: job.job_id, reason: attempt.reason }));
            registryRetryAtMs = Date.now() + REGISTRY_RETRY_MS;
          } else if (attempt.reason === 'receipt_write_failed') {
            await pause(['harness'], job.job_id);
          }
          return null;
        });
        continue;
      }
      if (tasks.size === 0 && (pauseReasons.size > 0 || stopRequested)) break;
      await wakeup.wait(registryRetryAtMs > Date.now() ? registryRetryAtMs - Date.now() : 60_000);
    }
    await Promise.all(tasks.values());
    failpoint('before_drain_check');
    files = await readJobFiles(store, manifest);
    if (files.every((f) => f.result !== null) && Object.keys(manifest.source_sha256).length > 0) {
      const check = await checkSources(deps.execute.fs, manifest.source_sha256);
      await journal('source_check', { phase: 'drain', ok: check.ok, checked: check.checked, mismatched: check.mismatched });
      if (!check.ok) await pause(['fatal', 'inputs_changed'], null);
    }
  } catch (err) {
    logger.error({ err: errorKind(err) }, 'supervisor fault: pausing the batch; running pairs finish first');
    await pause(['harness'], null);
  } finally {
    // Whatever happened, pairs already running are finished (and their containers removed) before we exit.
    await Promise.allSettled(tasks.values());
    await statusWriter.close();
    stopFolding();
    clearInterval(stopPoll);
    process.off('SIGUSR2', onUsr2);
    if (deps.handleSignals) {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
    }
  }
  files = await readJobFiles(store, manifest);
  const journalNow = await store.readJournal();
  const fold = foldJournal(journalNow);
  const drained = files.every((f) => f.result !== null);
  const paused = fold.pauseReasons.length > 0 || pauseReasons.size > 0;
  const state: BatchState = drained ? 'drained' : paused ? 'paused' : 'stopped';
  // Derived files and the exit record are best effort: the evidence is already durable, and a full disk must
  // not turn a clean exit into a crash.
  await bestEffort('journal supervisor_exited', () => journal('supervisor_exited', { state }));
  await bestEffort('status.json and SUMMARY.json', async () => {
    const records = await store.readJournal();
    const final = await buildStatus({ store, batch, manifest, files, journal: records, running: [], now: clock.now(), supervisorAlive: false });
    await store.writeJsonAtomic(STATUS_FILE, final);
    await store.writeJsonAtomic(SUMMARY_FILE, buildSummary(final, batch, files, records, clock.now()));
  });
  await report.flush();
  logger.info({ state }, 'supervisor exiting');
  return state;

  async function bestEffort(what: string, work: () => Promise<unknown>): Promise<void> {
    try {
      await work();
    } catch (err) {
      logger.error({ err: errorKind(err), what }, 'write failed; continuing fail-closed');
    }
  }
}

/** A wake-up that is never lost: a notify before the wait makes the wait return at once. */
class Wakeup {
  #pending = false;
  #resolve: (() => void) | undefined;
  notify(): void {
    this.#pending = true;
    this.#resolve?.();
  }
  async wait(ms: number): Promise<void> {
    if (!this.#pending) await Promise.race([new Promise<void>((resolve) => (this.#resolve = resolve)), delay(ms)]);
    this.#resolve = undefined;
    this.#pending = false;
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    t.unref?.();
  });
}
