import { exitCodeOf, explainResult, lastLines } from '../../core/next-steps.js';
import { isSupervisorRecord, type SupervisorRecord } from '../../core/supervisor-record.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { JournalRecord } from '../../core/journal-events.js';
import { runningSupervisor } from './supervisor-liveness.js';
import { BatchLedger } from '../../core/batch-ledger.js';
import type { FinishFacts, OpenClaim } from '../../core/ledger-facts.js';
import {
  deriveState,
  foldJournal,
  STATUS_SCHEMA,
  type Counts,
  type RunningPair,
} from '../../core/batch-state.js';
import { workersAllowed, type CapacityConfig } from '../../core/dispatch-policy.js';
import { CPU_ONLY_MEMORY_UNKNOWN_NOTE, cpuOnlyNote } from '../../core/cpu-only-admission.js';
import { capacityConfigOf } from './capacity-config.js';
import type { Manifest } from '../../core/manifest/schema.js';
import { formatOutcomeProblem, gpuObservation, outcomeProblems, type Outcome } from '../../core/outcome.js';
import type { Receipt } from '../../core/receipt.js';
import { estimateEtaFromMean, type Eta } from '../../core/report/eta.js';
import type { ResultRecord } from '../../core/result.js';
import { egressEntry } from '../../core/egress/egress-tally.js';
import type { ContainerRuntime, ContainerState } from '../ports/container-runtime.js';
import type { HostIdentity } from '../ports/host-identity.js';
import type { JobFiles } from './batch-context.js';
import { jobRel, type BatchRecord } from './layout.js';
import { STDERR_LOG, SUPERVISOR_FILE } from '../../core/evidence-names.js';
import { nodesStatus } from './status-nodes.js';
import type { BatchStatus, FailedPairs, Leftover, Summary, WrittenStatus } from './status-shapes.js';
function failedPairsOf(ledger: BatchLedger, counts: Counts): FailedPairs {
  const pairs = ledger.failedRecent();
  const total = counts.total - counts.pending - counts.claimed - counts.completed;
  return { pairs, more: Math.max(0, total - pairs.length) };
}

/**
 * Why the batch has the workers it has, in the words of its own rule: a serial manifest (`max_workers` 1) or a swarm
 * batch never speaks of GPU peaks; a local two-worker batch says what the GPU rule still waits for.
 */
function gpuNote(
  batch: BatchRecord,
  capacity: CapacityConfig,
  peaks: readonly number[],
  finished: number,
): string | null {
  if (capacity.executorSlots !== undefined)
    return `swarm: up to ${capacity.executorSlots} pairs at once after the first`;
  const observed = batch.gpu_observation;
  if (observed?.observation.kind === 'unobservable')
    return `GPUs not observable at start (${observed.observation.reason}): serial`;
  if (capacity.maxWorkers !== 2) return `max_workers ${capacity.maxWorkers}: serial by the manifest`;
  if (capacity.cpuOnly !== undefined) return cpuOnlyNote(capacity.cpuOnly, capacity.maxWorkers);
  if (capacity.cpuOnlyMemoryUnknown === true) return CPU_ONLY_MEMORY_UNKNOWN_NOTE;
  if (finished === 0) return 'the first pair runs alone';
  if (capacity.gpuTotalMib === undefined) return 'no gpu_total_mib in the manifest: serial';
  if (peaks.length === 0) return 'no measured GPU peak from a completed pair yet: serial';
  return null;
}

export function gpuPeaksOf(files: readonly JobFiles[]): number[] {
  const peaks: number[] = [];
  for (const f of files) {
    // result.json keeps the outcome as parsed: check its shape again, no need to re-encode it.
    if (f.result?.classification !== 'completed' || outcomeProblems(f.result.outcome).length > 0) continue;
    const peak = gpuObservation(f.result.outcome as Outcome);
    if (peak !== null) peaks.push(peak);
  }
  return peaks;
}

/** Whether the supervisor is alive: known (the supervisor itself), or asked of the host. */
export type StatusInput = StatusInputBase &
  ({ readonly supervisorAlive: boolean } | { readonly host: Pick<HostIdentity, 'isAlive'> });

interface StatusInputBase {
  readonly store: EvidenceStore;
  readonly batch: BatchRecord;
  readonly manifest: Manifest;
  readonly files: readonly JobFiles[];
  readonly journal: readonly JournalRecord[];
  /** In the supervisor: its own view of running pairs. Elsewhere: derived from receipts and the engine. */
  readonly running?: readonly RunningPair[];
  readonly runtime?: ContainerRuntime;
  readonly now: Date;
}

/**
 * What status counts of a result: its classification, its times, for a completed pair its usable GPU peak, and for
 * a failed one `why` (whyOfResult: the words the supervisor journals with its `pair_finished`).
 */
export function finishFactsOfResult(result: ResultRecord, why: readonly string[] = []): FinishFacts {
  // result.json keeps the outcome as parsed: check its shape again, no need to re-encode it.
  const usable = result.classification === 'completed' && outcomeProblems(result.outcome).length === 0;
  const problem = result.outcome_problems?.[0];
  return {
    classification: result.classification,
    started_at: result.started_at,
    finished_at: result.finished_at,
    gpu_peak_mib: usable ? gpuObservation(result.outcome as Outcome) : null,
    ...(result.reasons[0] !== undefined ? { first_reason: result.reasons[0] } : {}),
    ...(problem !== undefined ? { first_problem: formatOutcomeProblem(problem) } : {}),
    ...(why.length > 0 ? { why: [...why] } : {}),
    ...egressEntry(result.egress),
  };
}

/** Bytes of a log's end read for a hint: enough for a traceback's last lines. */
const TAIL_BYTES = 4096;

/**
 * Why the pair failed in words (core/next-steps.ts): for an outcome it did not write or broke, the last lines of its
 * stderr.log (masked on disk already) and where that file is. The same from the supervisor's journal record and from
 * the files alone (the full derivation, a resumed supervisor's ledger): status says the same whichever it read.
 */
export async function whyOfResult(
  store: EvidenceStore,
  jobId: string,
  result: ResultRecord,
): Promise<string[]> {
  if (result.classification === 'completed') return [];
  const facts = { reasons: result.reasons, outcome: result.outcome, exit_code: exitCodeOf(result) };
  // The stderr is part of the words only for an outcome missing or unparseable (explainResult): read only then.
  if (!result.reasons.some((r) => r === 'outcome_missing' || r === 'outcome_unparseable'))
    return explainResult(facts);
  const rel = `${jobRel(jobId)}/${STDERR_LOG}`;
  const tail = await store.readTail(rel, TAIL_BYTES);
  return explainResult({
    ...facts,
    // A result written by another hand may lack `logs`: then a tail shorter than asked is the whole file.
    ...(tail !== null ? { stderr_tail: lastLines(tail, wholeLog(result, tail.length)) } : {}),
    stderr_path: store.resolve(rel),
  });
}

/** Whether a tail of `read` bytes is the whole stderr.log (its size as the result says, else what was read). */
function wholeLog(result: ResultRecord, read: number): boolean {
  const bytes = (result.logs as ResultRecord['logs'] | undefined)?.stderr.bytes;
  return bytes === undefined ? read < TAIL_BYTES : bytes <= TAIL_BYTES;
}

/** Settle one job of a ledger from its files (receipt: the claim; result: the finish, with its words). */
export async function settleFromFiles(
  store: EvidenceStore,
  ledger: BatchLedger,
  jobId: string,
  receipt: Receipt | null,
  result: ResultRecord | null,
): Promise<void> {
  const why = result === null ? [] : await whyOfResult(store, jobId, result);
  ledger.settle(jobId, receipt, result === null ? null : finishFactsOfResult(result, why));
}

/** The whole derivation: the journal's fold, and every job as its files show it. */
export async function ledgerFromFiles(
  store: EvidenceStore,
  manifest: Manifest,
  files: readonly JobFiles[],
  journal: readonly JournalRecord[],
): Promise<BatchLedger> {
  const ledger = BatchLedger.forJobs(manifest.jobs);
  for (const record of journal) ledger.foldOnly(record);
  // The words of every failed pair read side by side; the jobs settled in manifest order, as before.
  const whys = await Promise.all(
    files.map((f) => (f.result === null ? Promise.resolve([]) : whyOfResult(store, f.job.job_id, f.result))),
  );
  files.forEach((f, i) =>
    ledger.settle(
      f.job.job_id,
      f.receipt,
      f.result === null ? null : finishFactsOfResult(f.result, whys[i] ?? []),
    ),
  );
  return ledger;
}

export interface LedgerStatusInput {
  readonly ledger: BatchLedger;
  readonly output: string;
  readonly batch: BatchRecord;
  readonly capacity: CapacityConfig;
  readonly supervisor: SupervisorRecord | null;
  readonly alive: boolean;
  /** The engine's containers labelled with the batch (none when the engine is not asked). */
  readonly containers: readonly ContainerState[];
  /** In the supervisor: its own view of running pairs. Elsewhere: derived from the open claims and the engine. */
  readonly running?: readonly RunningPair[];
  readonly now: Date;
  /** Why a container of the batch that no live claim owns is there: its job unknown, finished, or not running. */
  readonly leftoverWhy: (jobId: string | null) => Promise<Leftover['why']>;
  /** The manifest's jobs by id (a swarm batch's per-node GPUs in use); none: no per-node view. */
  readonly jobs?: ReadonlyMap<string, Manifest['jobs'][number]>;
}

function runningPairOf(claim: OpenClaim, containerId: string | null): RunningPair {
  return {
    job_id: claim.job_id,
    container_id: containerId,
    started_at: claim.claimed_at,
    deadline: claim.deadline,
    ...(claim.node !== undefined ? { node: claim.node } : {}),
  };
}

/**
 * The status record from a ledger (SPEC §6.11): O(claims without result + the batch's containers), whatever the
 * size of the batch. Every path (the supervisor's status.json, hot and cold `e1-batch status`) ends here.
 */
export async function statusFromLedger(input: LedgerStatusInput): Promise<BatchStatus> {
  const { ledger, alive } = input;
  const open = ledger.open();
  const { running, leftovers } = await runningAndLeftovers(input, open);
  const nodes = nodesStatus(input.batch, input.jobs ?? new Map(), running);
  const fold = ledger.fold();
  const counts = ledger.counts(running.length);
  const peaks = ledger.gpuPeaks();
  const allowed = workersAllowed(input.capacity, peaks, ledger.finishedCount());
  const state = deriveState(fold, counts, alive);
  const egress = ledger.egress();
  return {
    schema: STATUS_SCHEMA,
    batch_id: input.batch.batch_id,
    output: input.output,
    state,
    pause_reasons: fold.pauseReasons,
    ...(fold.pauseCauses !== undefined ? { pause_causes: fold.pauseCauses } : {}),
    counts,
    running,
    workers_allowed: allowed,
    ...(nodes !== undefined ? { nodes } : {}),
    gpu_peak_mib: peaks.length > 0 ? Math.max(...peaks) : null,
    gpu_note: gpuNote(input.batch, input.capacity, peaks, ledger.finishedCount()),
    failed: failedPairsOf(ledger, counts),
    ...(egress !== null ? { egress } : {}),
    claims_without_result: open.map((c) => c.job_id),
    eta: state === 'running' ? etaOf(ledger, counts.pending, running, allowed, input.now) : null,
    leftovers,
    supervisor: input.supervisor === null ? null : { ...input.supervisor, alive },
    updated_at: input.now.toISOString(),
  };
}

/** Time left from the mean duration of the finished pairs, the pending ones and how long the running ones ran. */
function etaOf(
  ledger: BatchLedger,
  pending: number,
  running: readonly RunningPair[],
  workers: number,
  now: Date,
): Eta | null {
  const nowMs = now.getTime();
  return estimateEtaFromMean(ledger.meanDuration(), {
    pending,
    runningElapsedSec: running.map((r) => (nowMs - new Date(r.started_at).getTime()) / 1000),
    workersAllowed: workers,
  });
}

/**
 * The running pairs (the supervisor's own view, or the open claims and the engine's containers) and the batch's
 * containers no running pair accounts for (leftovers), each running pair with its node once placed.
 */
async function runningAndLeftovers(
  input: LedgerStatusInput,
  open: readonly OpenClaim[],
): Promise<{ running: RunningPair[]; leftovers: Leftover[] }> {
  const { ledger, alive, containers } = input;
  const openByJob = new Map(open.map((c) => [c.job_id, c]));
  const byClaim = alive ? new Map(open.map((c) => [c.claim_id, c])) : new Map<string, OpenClaim>();
  // A claimed pair without a result whose claim a container carries (labels `roboguide.claim` and `roboguide.job`),
  // while the batch's supervisor is alive: such a container is that supervisor's, never a leftover.
  const owner = (labels: Readonly<Record<string, string>>): OpenClaim | undefined => {
    const c = byClaim.get(labels['roboguide.claim'] ?? '');
    return c !== undefined && labels['roboguide.job'] === c.job_id ? c : undefined;
  };
  const leftovers: Leftover[] = [];
  const running: RunningPair[] = input.running ? [...input.running] : [];
  if (!input.running && alive) {
    // A live supervisor owns every claim without a result (it dispatched or recovered each one): running, from
    // the claim until the result, whatever state its container is in (not created yet, created, exited).
    for (const claim of open) {
      const own = containers.find((c) => owner(c.labels) === claim);
      running.push(runningPairOf(claim, own?.id ?? claim.container_id));
    }
  }
  for (const c of containers) {
    const jobId = c.labels['roboguide.job'] ?? null;
    if (owner(c.labels) !== undefined) continue;
    const claim = jobId === null ? undefined : openByJob.get(jobId);
    if (!input.running && !alive && claim !== undefined && c.status === 'running') {
      // No supervisor, yet the pair's container still runs: shown as running until resume reattaches it.
      running.push(runningPairOf(claim, c.id));
      continue;
    }
    if (running.some((r) => r.container_id === c.id)) continue;
    leftovers.push({
      container_id: c.id,
      job_id: jobId,
      status: c.status,
      why: await input.leftoverWhy(jobId),
    });
  }
  return {
    running: running.map((r) => (r.node !== undefined ? r : withNode(r, ledger.placement(r.job_id)))),
    leftovers,
  };
}

function withNode(r: RunningPair, node: string | undefined): RunningPair {
  return node === undefined ? r : { ...r, node };
}

/**
 * status.json as a live supervisor writes it: the status from its own ledger and view of its running pairs (no
 * engine call: no leftovers), and the ledger's basis at the same journal record.
 */
export async function buildWrittenStatus(input: {
  readonly ledger: BatchLedger;
  readonly output: string;
  readonly batch: BatchRecord;
  readonly capacity: CapacityConfig;
  readonly supervisor: SupervisorRecord;
  readonly running: readonly RunningPair[];
  readonly now: Date;
  readonly jobs?: ReadonlyMap<string, Manifest['jobs'][number]>;
}): Promise<WrittenStatus> {
  for (;;) {
    const basis = input.ledger.basis();
    const status = await statusFromLedger({
      ...input,
      alive: true,
      containers: [],
      leftoverWhy: () => Promise.resolve('unknown_job'),
    });
    // The status and its basis must describe the same records: if one was folded in meanwhile, build again.
    if (basis.journal_seq === input.ledger.journalSeq)
      return { ...status, basis: { ...basis, capacity: input.capacity } };
  }
}

/** Why a leftover container is there, from a full ledger (one that knows every claimed job). */
export function leftoverWhyFrom(
  ledger: BatchLedger,
  manifest: Manifest,
): (jobId: string | null) => Promise<Leftover['why']> {
  const jobIds = new Set(manifest.jobs.map((j) => j.job_id));
  return (jobId) =>
    Promise.resolve(
      jobId === null || !jobIds.has(jobId)
        ? 'unknown_job'
        : ledger.finishedKnown(jobId) === true
          ? 'job_finished'
          : 'job_not_running',
    );
}

/**
 * The full derivation from every job file and the whole journal: what status.json and `e1-batch status` were before
 * they became incremental, kept as the reference the incremental paths are tested against.
 */
export async function buildStatus(input: StatusInput): Promise<BatchStatus> {
  const { files, manifest } = input;
  const supervisor = await input.store.readJson(SUPERVISOR_FILE, isSupervisorRecord);
  const alive =
    'supervisorAlive' in input
      ? input.supervisorAlive
      : (await runningSupervisor(input.store, input.host)) !== null;
  const containers = input.runtime
    ? await input.runtime.listByLabel({ 'roboguide.batch': input.batch.batch_id })
    : [];
  const ledger = await ledgerFromFiles(input.store, manifest, files, input.journal);
  const byJob = new Map(files.map((f) => [f.job.job_id, f]));
  return statusFromLedger({
    ledger,
    output: input.store.root,
    batch: input.batch,
    capacity: capacityConfigOf(manifest, input.batch),
    supervisor,
    alive,
    containers,
    jobs: new Map(manifest.jobs.map((j) => [j.job_id, j])),
    ...(input.running ? { running: input.running } : {}),
    now: input.now,
    leftoverWhy: (jobId) => {
      const f = jobId === null ? undefined : byJob.get(jobId);
      return Promise.resolve(!f ? 'unknown_job' : f.result ? 'job_finished' : 'job_not_running');
    },
  });
}

export function buildSummary(
  status: BatchStatus,
  batch: BatchRecord,
  files: readonly JobFiles[],
  journal: readonly JournalRecord[],
  now: Date,
): Summary {
  const fold = foldJournal(journal);
  const claims = files.flatMap((f) => (f.receipt ? [f.receipt.claimed_at] : [])).sort();
  const finishes = files.flatMap((f) => (f.result ? [f.result.finished_at] : [])).sort();
  return {
    schema: 'roboguide.e1.summary/v1',
    batch_id: batch.batch_id,
    state: status.state,
    counts: status.counts,
    pause_reasons: status.pause_reasons,
    pause_history: fold.pauseHistory,
    jobs: files.map((f) => ({
      job_id: f.job.job_id,
      classification: f.result?.classification ?? null,
      reasons: f.result?.reasons ?? [],
      started_at: f.result?.started_at ?? f.receipt?.claimed_at ?? null,
      finished_at: f.result?.finished_at ?? null,
    })),
    source_checks: journal.filter((e) => e.type === 'source_check'),
    timings: {
      created_at: batch.created_at,
      first_claim_at: claims[0] ?? null,
      last_finish_at: finishes.at(-1) ?? null,
    },
    written_at: now.toISOString(),
  };
}
