import { STDERR_LOG, STDOUT_LOG } from '../../core/evidence-names.js';
import { classify, type Classified } from '../../core/classify.js';
import { checkOutcome, outcomeProblemsOf, type OutcomeCheck } from '../../core/outcome.js';
import type { Receipt } from '../../core/receipt.js';
import { redactOutcome } from '../../core/redaction/redact-text.js';
import { RESULT_SCHEMA, type DiskRecord, type LimitsRecord, type ResultRecord } from '../../core/result.js';
import type { CleanupRecord } from '../../core/cleanup-record.js';
import { sha256Hex } from '../digest.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { PairExecution } from './pair-lifecycle-types.js';
import type { Clock } from '../ports/clock.js';
import type { FileSystem } from '../ports/file-system.js';
import type { OutcomeReader } from '../ports/outcome-reader.js';

/** What result.json records of a pair's run, besides its verdict and outcome. */
export type ResultFacts = Pick<
  PairExecution,
  | 'container'
  | 'logs'
  | 'sessions'
  | 'providerFailure'
  | 'providerFailureErrorKind'
  | 'cleanup'
  | 'engineError'
  | 'startedAt'
  | 'finishedAt'
  | 'phases'
>;

/** The parsed outcome as result.json keeps it: secrets masked; the host file stays as the driver wrote it. */
export function outcomeForResult(
  check: OutcomeCheck,
  secrets: readonly string[],
): { value: unknown; redactions: number } {
  if (check.kind !== 'valid' && check.kind !== 'invalid') return { value: null, redactions: 0 };
  const { outcome, redactions } = redactOutcome(check.raw, secrets);
  return { value: outcome, redactions };
}

/** Assemble result.json (SPEC §11) from what the lifecycle observed and how it was classified. Pure. */
export function buildResult(input: {
  readonly batchId: string;
  readonly jobId: string;
  readonly claimId: string;
  readonly execution: ResultFacts;
  readonly check: OutcomeCheck;
  /** The parsed outcome with secrets masked, and how many values that took. */
  readonly outcome: { readonly value: unknown; readonly redactions: number };
  readonly outcomeSha256: string | null;
  readonly classified: Classified;
  /** The limits the container ran under and its measured disk use (issue 22); absent for a lost worker. */
  readonly limits?: LimitsRecord;
  readonly disk?: DiskRecord;
}): ResultRecord {
  const { execution: e } = input;
  return {
    schema: RESULT_SCHEMA,
    job_id: input.jobId,
    batch_id: input.batchId,
    claim_id: input.claimId,
    classification: input.classified.classification,
    reasons: input.classified.reasons,
    outcome: input.outcome.value,
    outcome_redactions: input.outcome.redactions,
    outcome_sha256: input.outcomeSha256,
    // The exit code is named only when it is the agent's own (not our kill at its deadline or the OOM killer's).
    outcome_problems: outcomeProblemsOf(input.check, agentExitCode(e.container)),
    container: e.container,
    logs: e.logs,
    sessions: e.sessions,
    provider_failure: e.providerFailure,
    provider_failure_error_kind: e.providerFailureErrorKind,
    cleanup: e.cleanup,
    engine_error: e.engineError,
    ...(input.limits !== undefined ? { limits: input.limits } : {}),
    ...(input.disk !== undefined ? { disk: input.disk } : {}),
    ...(e.phases !== undefined ? { phases: e.phases } : {}),
    started_at: e.startedAt,
    finished_at: e.finishedAt,
  };
}

/** The container's exit code when the agent ended on its own (null when we or the kernel's OOM killer stopped it). */
export function agentExitCode(container: ResultFacts['container']): number | null {
  return container.timed_out || container.oom_killed ? null : container.exit_code;
}

export interface LostWorkerDeps {
  readonly fs: FileSystem;
  readonly outcomes: OutcomeReader;
  readonly clock: Clock;
}

/**
 * result.json of a pair whose watcher died (SPEC §5 resume, `pair recover`): `harness_failure` / `lost_worker` (plus
 * `cleanup_unverified` when the removal was not proven); the outcome in the pair's private folder parsed and masked
 * as usual, its digest over the bytes kept; the logs as far as they were written (`closed: false`); no session
 * collection and no diagnosis. The same for a batch pair (`jobRel` `jobs/<id>`) and a `pair run` (`.`).
 */
export async function lostWorkerResult(
  deps: LostWorkerDeps,
  pair: {
    readonly store: EvidenceStore;
    readonly jobRel: string;
    readonly receipt: Receipt;
    readonly containerId: string | null;
    readonly cleanup: CleanupRecord;
    readonly secrets: readonly string[];
    readonly allowedHttpStatuses: readonly number[];
    /** `evidence_write_failed`: the pair had ended and only its result.json could not be written (default lost_worker). */
    readonly fault?: 'lost_worker' | 'evidence_write_failed';
  },
): Promise<ResultRecord> {
  const { store, receipt } = pair;
  const inPair = (name: string): string =>
    store.resolve(pair.jobRel === '.' ? name : `${pair.jobRel}/${name}`);
  // Receipts from before the private folder name only the host outcome_path: the driver's own file, never masked.
  const { read, kept } =
    receipt.private_outcome === undefined
      ? await deps.outcomes
          .read(receipt.outcome_path)
          .then((r) => ({ read: r, kept: r.state === 'present' ? r.bytes : null }))
      : await deps.outcomes.readAndMask(inPair(receipt.private_outcome), pair.secrets);
  const check = checkOutcome(read);
  const classified = classify({
    jobId: receipt.job_id,
    outcome: check,
    timedOut: false,
    terminated: false,
    engineFault: null,
    harnessFaults: pair.cleanup.verified_absent
      ? [pair.fault ?? 'lost_worker']
      : [pair.fault ?? 'lost_worker', 'cleanup_unverified'],
    allowedHttpStatuses: pair.allowedHttpStatuses,
  });
  const logBytes = async (name: string): Promise<number> =>
    (await deps.fs.lstat(inPair(name)).catch(() => null))?.sizeBytes ?? 0;
  const facts: ResultFacts = {
    container: { id: pair.containerId, exit_code: null, timed_out: false, oom_killed: false },
    logs: {
      stdout: { bytes: await logBytes(STDOUT_LOG), closed: false },
      stderr: { bytes: await logBytes(STDERR_LOG), closed: false },
    },
    sessions: { files: 0, bytes: 0, refusals: [] },
    providerFailure: null,
    providerFailureErrorKind: null,
    cleanup: pair.cleanup,
    engineError: null,
    startedAt: receipt.claimed_at,
    finishedAt: deps.clock.now().toISOString(),
  };
  return buildResult({
    batchId: receipt.batch_id,
    jobId: receipt.job_id,
    claimId: receipt.claim_id,
    execution: facts,
    check,
    outcome: outcomeForResult(check, pair.secrets),
    outcomeSha256: kept !== null ? sha256Hex(kept) : null,
    classified,
  });
}
