import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { JournalEvent, JournalAppend } from '../../core/journal-events.js';
import type { ProcessIdentity } from '../../core/process-identity.js';
import { foldJournal } from '../../core/batch-state.js';
import type { BatchState } from '../../core/batch-state-name.js';
import { RoboguideError, errorDetail } from '../../core/errors.js';
import type { Manifest } from '../../core/manifest/schema.js';
import { pausesFor, survivingResume } from '../../core/pause-rules.js';
import { exitState, initialSupervisorState } from '../../core/supervisor-machine.js';
import { failpoint } from '../ports/failpoints.js';
import { readJobFiles, loadBatch, resolveAllEnvironments, type JobFiles } from './batch-context.js';
import type { ResolvedJobEnvironment } from '../../core/manifest/environment.js';
import type { BatchPairDeps } from './batch-pair.js';
import { reconcileFinished, removeUnverifiedContainer } from './finish-pair.js';
import { type BatchRecord } from './layout.js';
import { STATUS_FILE, STOP_FILE, SUMMARY_FILE, SUPERVISOR_FILE } from '../../core/evidence-names.js';
import type { SupervisorRecord } from '../../core/supervisor-record.js';
import { reportRefresher } from './report.js';
import { buildStatus, buildSummary } from './status.js';
import { capacityConfigOf } from './capacity-config.js';
import { seedLedger, type SeededLedger } from './supervisor-ledger.js';
import { SupervisorLoop } from './supervisor-loop.js';
import {
  batchDepsOf,
  batchRedactor,
  bestEffort,
  loopPorts,
  statusWriterOf,
  type Supervision,
} from './supervisor-ports.js';
import { causeOf } from '../../core/pause-cause.js';
import { listenForStops, StopLatch } from './supervisor-signals.js';
import { NO_CREDENTIALS, type RegistryCredentials } from './registry-auth.js';
import { credentialsFor, imagePullerFor } from './supervisor-images.js';
import type { BatchImages } from './batch-images.js';
import type { SupervisorDeps } from './supervisor-deps.js';
import { releaseUnclaimed } from '../pair/claim.js';

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
    throw new RoboguideError(
      'E_SUPERVISOR_ALIVE',
      `batch ${batchId} is already supervised by pid ${lease.holder.pid}`,
      {
        suggestions: ['wait for it, or `e1-batch stop` it first'],
      },
    );
  }
  supervisedHere.add(batchId);
  const left = { registryUnavailable: false };
  try {
    return await superviseHeld(deps, mode, { batch, manifest, identity }, left);
  } finally {
    supervisedHere.delete(batchId);
    // A registry that did not answer in time would only make the exit wait one more deadline (issue 27: `stop` takes
    // effect within the stop budget plus one deadline): the lease is left, and taken over once this process is gone.
    if (left.registryUnavailable) {
      deps.logger.warn({ reason: 'registry_unavailable' }, 'supervisor lease left for takeover');
    } else {
      try {
        await registry.releaseLease(batchId, identity.pid);
      } catch (err) {
        // A lease left behind is taken over once this process is gone; never let it mask the batch's outcome.
        deps.logger.warn({ err: errorDetail(err) }, 'supervisor lease not released');
      }
    }
  }
}

/** Batches supervised by this process right now. */
const supervisedHere = new Set<string>();

async function superviseHeld(
  deps: SupervisorDeps,
  mode: 'start' | 'resume',
  held: { batch: BatchRecord; manifest: Manifest; identity: ProcessIdentity },
  left: { registryUnavailable: boolean },
): Promise<BatchState> {
  const { store } = deps;
  const { batch, manifest, identity } = held;
  const clock = deps.execute.clock;
  // A stop recorded for an earlier supervisor is void; one sent after our identity is published is ours.
  // Until the real handler is in place, SIGUSR2 (whose default action would kill us) is only latched.
  await deps.execute.fs.unlink(store.resolve(STOP_FILE)).catch(() => undefined);
  if (mode === 'resume') await store.cleanTempFiles();
  const latch = new StopLatch();
  let started: {
    record: SupervisorRecord;
    journal: JournalAppend;
    seeded: SeededLedger;
    envs: Map<string, ResolvedJobEnvironment>;
    credentials: RegistryCredentials;
  };
  try {
    const record: SupervisorRecord = { ...identity, started_at: clock.now().toISOString(), mode };
    await store.writeJsonAtomic(SUPERVISOR_FILE, record);
    const journal: JournalAppend = (type, fields) =>
      store
        .appendJournal({ type, at: clock.now().toISOString(), ...(fields as object) } as JournalEvent)
        .then(() => undefined);
    await journalStart(store, journal, mode, identity);
    const seeded = await seedLedger(store, manifest);
    const envs = resolvePending(deps, batch, manifest, seeded);
    started = { record, journal, seeded, envs, credentials: await credentialsFor(deps, batch, manifest) };
  } catch (err) {
    latch.off();
    throw err;
  }
  const { record, journal, seeded, envs, credentials } = started;
  const s: Supervision = {
    deps,
    batch,
    manifest,
    record,
    journal,
    book: seeded.book,
    peaks: seeded.peaks,
    stopFolding: seeded.stopFolding,
    credentials,
  };
  return runSupervision(s, seeded.files, envs, latch, left);
}

/** The start records: who supervises, and on resume which pauses it cleared and which survive (fatal, inputs changed). */
async function journalStart(
  store: EvidenceStore,
  journal: JournalAppend,
  mode: 'start' | 'resume',
  identity: ProcessIdentity,
): Promise<void> {
  await journal('supervisor_started', {
    mode,
    pid: identity.pid,
    start_ticks: identity.start_ticks,
    boot_id: identity.boot_id,
  });
  if (mode === 'resume') {
    const before = foldJournal(await store.readJournal());
    const kept = survivingResume(before.pauseReasons);
    await journal('resumed', { cleared: before.pauseReasons.filter((r) => !kept.includes(r)), kept });
  }
}

/** Every variable the unfinished jobs reference, resolved now (fail fast, before anything runs). */
function resolvePending(
  deps: SupervisorDeps,
  batch: BatchRecord,
  manifest: Manifest,
  seeded: SeededLedger,
): Map<string, ResolvedJobEnvironment> {
  const pending = new Set(seeded.files.filter((f) => f.result === null).map((f) => f.job.job_id));
  try {
    return resolveAllEnvironments(manifest, deps.environment, pending, {
      allowShortSecrets: batch.allow_short_secrets === true,
    });
  } catch (err) {
    seeded.stopFolding();
    throw err;
  }
}

/** The loop from start-up recovery to the drain check, then the exit records. */
async function runSupervision(
  s: Supervision,
  files: JobFiles[],
  envs: Map<string, ResolvedJobEnvironment>,
  latch: StopLatch,
  left: { registryUnavailable: boolean },
): Promise<BatchState> {
  const { deps, manifest, batch, book } = s;
  const report = reportRefresher(deps.store, deps.execute.clock, deps.logger, deps.execute.host);
  const initial = initialSupervisorState({
    jobIds: manifest.jobs.map((j) => j.job_id),
    capacity: capacityConfigOf(manifest, batch),
    claimed: files.filter((f) => f.receipt !== null).map((f) => f.job.job_id),
    finishedCount: files.filter((f) => f.result !== null).length,
    pauseReasons: book.fold().pauseReasons,
  });
  const holder: { loop?: SupervisorLoop; writer?: { soon(): void } } = {};
  const images = imagePullerFor({
    deps,
    batch,
    manifest,
    journal: s.journal,
    credentials: s.credentials ?? NO_CREDENTIALS,
    redact: batchRedactor(deps, envs, s.credentials?.secrets),
    state: () => holder.loop?.state,
    onChange: () => holder.writer?.soon(),
  });
  const statusWriter = statusWriterOf(s, () => holder.loop?.handles() ?? [], report, images);
  holder.writer = statusWriter;
  const loop = new SupervisorLoop(loopPorts(s, files, envs, statusWriter, images), initial);
  holder.loop = loop;
  const signalsOff = listenForStops({ ...deps, clock: deps.execute.clock }, loop, latch);
  try {
    await images?.start();
    await superviseLoop(s, loop, files);
  } catch (err) {
    const cause = causeOf(err, batchRedactor(deps, envs, s.credentials?.secrets));
    deps.logger.error(
      { err: cause.code, cause },
      'supervisor fault: pausing the batch; running pairs finish first',
    );
    await loop.feed({ type: 'fault', cause });
  } finally {
    // Whatever happened, pairs already running are finished (and their containers removed) before we exit.
    await loop.settled();
    await images?.close();
    await statusWriter.close();
    s.stopFolding();
    signalsOff();
  }
  left.registryUnavailable = loop.state.pauseReasons.includes('registry_unavailable');
  return exitSupervision(s, loop, report, images);
}

/** Start-up recovery, the dispatch loop, then (everything finished) the sources checked once more. */
async function superviseLoop(s: Supervision, loop: SupervisorLoop, files: JobFiles[]): Promise<void> {
  const batchDeps = batchDepsOf(s);
  await recoverAtStart(s, batchDeps, loop, files);
  await loop.feed({
    type: 'recover',
    jobIds: files.filter((f) => f.receipt !== null && f.result === null).map((f) => f.job.job_id),
  });
  await loop.run();
  await loop.settled();
  failpoint('before_drain_check');
  const after = await readJobFiles(s.deps.store, s.manifest);
  await loop.feed({
    type: 'drain_checked',
    allResults: after.every((f) => f.result !== null),
    pinsSources: Object.keys(s.manifest.source_sha256).length > 0,
  });
}

/**
 * Before the loop: reservations whose claim never got published are released (nothing ran for them); a result
 * written but its slot still held (the previous supervisor died between the two) is finished now.
 */
async function recoverAtStart(
  s: Supervision,
  batchDeps: BatchPairDeps,
  loop: SupervisorLoop,
  files: readonly JobFiles[],
): Promise<void> {
  const { registry } = s.deps;
  const claimIds = new Set(files.flatMap((f) => (f.receipt ? [f.receipt.claim_id] : [])));
  for (const r of await registry.held({ batchId: s.batch.batch_id })) {
    if (!claimIds.has(r.claimId)) {
      await releaseUnclaimed(registry, r);
      await s.journal('reservation_released_unclaimed', { job_id: r.jobId, reservation_id: r.id });
    }
  }
  for (const f of files) {
    const held = f.receipt && f.result ? await registry.reservationForClaim(f.receipt.claim_id) : null;
    if (f.receipt && f.result && held?.state === 'held') {
      await s.journal('recovered', { job_id: f.job.job_id, action: 'reconcile_finished' });
      await removeUnverifiedContainer(batchDeps, f.receipt, f.result, s.manifest.stop_budget_seconds);
      const report = await reconcileFinished(batchDeps, f.receipt, f.result);
      const reasons = pausesFor({ kind: 'recovered', released: report.released });
      if (reasons.length > 0) await loop.feed({ type: 'pause_needed', reasons, jobId: f.job.job_id });
    }
  }
}

/** The exit: the state the batch is left in, journalled; status.json and SUMMARY.json from the files, best effort. */
async function exitSupervision(
  s: Supervision,
  loop: SupervisorLoop,
  report: ReturnType<typeof reportRefresher>,
  images?: BatchImages,
): Promise<BatchState> {
  const { store, logger } = s.deps;
  const clock = s.deps.execute.clock;
  const files = await readJobFiles(store, s.manifest);
  const fold = foldJournal(await store.readJournal());
  const state = exitState(
    files.every((f) => f.result !== null),
    fold.pauseReasons,
    loop.state,
  );
  // Derived files and the exit record are best effort: the evidence is already durable, and a full disk must
  // not turn a clean exit into a crash.
  await bestEffort(logger, 'journal supervisor_exited', () => s.journal('supervisor_exited', { state }));
  await bestEffort(logger, 'status.json and SUMMARY.json', async () => {
    const records = await store.readJournal();
    const final = await buildStatus({
      store,
      batch: s.batch,
      manifest: s.manifest,
      files,
      journal: records,
      running: [],
      now: clock.now(),
      supervisorAlive: false,
    });
    // Issue 43: the image plan as this supervisor leaves it (on a swarm, which node holds which image).
    await store.writeJsonAtomic(
      STATUS_FILE,
      images === undefined ? final : { ...final, images: images.snapshot() },
    );
    await store.writeJsonAtomic(SUMMARY_FILE, buildSummary(final, s.batch, files, records, clock.now()));
  });
  await report.flush();
  logger.info({ state }, 'supervisor exiting');
  return state;
}
