// The end of one pair: the operator's outcome copy, the kept outcome's hash, the classification and result.json.
import { classify, type HarnessFault } from '../../core/classify.js';
import { checkOutcome, formatOutcomeProblem, outcomeProblemsOf } from '../../core/outcome.js';
import { errorDetail } from '../../core/errors.js';
import type { DiskRecord, ResultRecord } from '../../core/result.js';
import { agentExitCode, buildResult, outcomeForResult } from './build-result.js';
import { sha256Hex } from '../digest.js';
import type { PairExecution } from './pair-lifecycle-types.js';
import type { ExecutePairDeps, ExecutePairInput, PairJob, PairPaths } from './execute-pair-types.js';
import { limitsOf } from './pair-container-spec.js';

/** The operator's copy at the job's `outcome_path`; a failure is logged, never a verdict. */
export async function publishOperatorCopy(
  deps: ExecutePairDeps,
  execution: PairExecution,
  job: PairJob,
): Promise<void> {
  if (execution.outcome.state !== 'present' || !deps.publishOutcome) return;
  try {
    await deps.publishOutcome(execution.outcome.bytes, job.outcome_path);
  } catch (err) {
    deps.logger.warn(
      { job: job.job_id, err: errorDetail(err) },
      'the operator copy of the outcome could not be written (the evidence keeps the private one)',
    );
  }
}

/**
 * SHA-256 of the outcome bytes the evidence keeps. The verdict comes from the driver's bytes; the evidence keeps them
 * with secrets masked, and the hash covers what is kept (the same bytes whenever nothing had to be masked).
 */
async function keptOutcomeSha256(
  deps: ExecutePairDeps,
  execution: PairExecution,
  input: ExecutePairInput,
  privateOutcomeFile: string,
): Promise<string | null> {
  let keptOutcome: Uint8Array | null = execution.outcome.state === 'present' ? execution.outcome.bytes : null;
  if (keptOutcome !== null && deps.maskOutcome) {
    const kept = await deps.maskOutcome(keptOutcome, privateOutcomeFile, input.secrets);
    keptOutcome = kept.kept;
    if (!kept.masked)
      deps.logger.warn(
        { job: input.job.job_id },
        "the evidence copy of the outcome could not be masked in place: it keeps the driver's bytes",
      );
  }
  return keptOutcome !== null ? sha256Hex(keptOutcome) : null;
}

/** The harness's own faults in a finished pair. */
function harnessFaultsOf(execution: PairExecution): HarnessFault[] {
  const harnessFaults: HarnessFault[] = [];
  if (execution.logFailure !== null || !execution.logs.stdout.closed || !execution.logs.stderr.closed)
    harnessFaults.push('log_write_failed');
  if (execution.receiptUpdateFailed) harnessFaults.push('receipt_write_failed');
  // A lost node cannot confirm the removal: the slot stays held (reconciliation needs the 404, or the operator's
  // `e1-batch node-down`), but that is the node's fault, not the harness's: no harness pause, dispatch goes on.
  if (!execution.cleanup.verified_absent && execution.engineLoss !== 'node_lost')
    harnessFaults.push('cleanup_unverified');
  return harnessFaults;
}

/** Classify the pair and build its result.json record, every text from the pair's side masked. */
export async function resultOf(
  deps: ExecutePairDeps,
  input: ExecutePairInput,
  execution: PairExecution,
  paths: PairPaths,
  mountRefused: boolean,
  disk: DiskRecord | undefined,
): Promise<ResultRecord> {
  const { job } = input;
  const check = checkOutcome(execution.outcome);
  const outcomeSha256 = await keptOutcomeSha256(deps, execution, input, paths.privateOutcomeFile);
  const classified = classify({
    jobId: job.job_id,
    outcome: check,
    timedOut: execution.timedOut,
    logLimitExceeded: execution.logLimitExceeded !== null,
    oomKilled: execution.container.oom_killed,
    diskLimitExceeded: disk?.exceeded === true,
    diskUnmeasurable: disk?.unmeasurable === true,
    logIncomplete:
      execution.logs.stdout.incomplete !== undefined || execution.logs.stderr.incomplete !== undefined,
    terminated: execution.terminated,
    engineFault: execution.engineFault,
    engineLoss: execution.engineLoss,
    harnessFaults: harnessFaultsOf(execution),
    mountRefused,
    allowedHttpStatuses: input.allowedHttpStatuses,
  });
  // The engine's own words are kept, but never with a resolved value in them.
  const engineError = execution.engineError && {
    ...execution.engineError,
    message: paths.redact(execution.engineError.message),
  };
  // Refusal texts hold archive names and error codes from the pair's side: masked before they are kept.
  const sessions = { ...execution.sessions, refusals: execution.sessions.refusals.map(paths.redact) };
  const problems = outcomeProblemsOf(check, agentExitCode(execution.container));
  if (problems.length > 0) {
    deps.logger.warn(
      { job: job.job_id, outcome_problems: problems.map(formatOutcomeProblem) },
      `the outcome breaks the contract (SPEC §5.2): ${problems.map(formatOutcomeProblem).join('; ')}`,
    );
  }
  return buildResult({
    batchId: input.batchId,
    jobId: job.job_id,
    claimId: input.claimId,
    execution: { ...execution, engineError, sessions },
    check,
    outcome: outcomeForResult(check, input.secrets),
    outcomeSha256,
    classified,
    limits: limitsOf(input),
    ...(disk !== undefined ? { disk: maskedDisk(disk, paths.redact) } : {}),
  });
}

/** The disk record with the names of the pair's files masked (a file name can hold a secret it was given). */
function maskedDisk(disk: DiskRecord, redact: (text: string) => string): DiskRecord {
  if (disk.outcome_folder === undefined) return disk;
  const largest = disk.outcome_folder.largest.map((e) => ({ ...e, path: redact(e.path) }));
  return { ...disk, outcome_folder: { ...disk.outcome_folder, largest } };
}
