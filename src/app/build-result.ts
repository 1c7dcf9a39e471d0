import type { Classified } from '../core/classify.js';
import type { OutcomeCheck } from '../core/outcome.js';
import { RESULT_SCHEMA, type ResultRecord } from '../core/result.js';
import type { PairExecution } from './pair-lifecycle.js';

/** Assemble result.json (SPEC §11) from what the lifecycle observed and how it was classified. Pure. */
export function buildResult(input: {
  readonly batchId: string;
  readonly jobId: string;
  readonly claimId: string;
  readonly execution: PairExecution;
  readonly check: OutcomeCheck;
  /** The parsed outcome with secrets masked, and how many values that took. */
  readonly outcome: { readonly value: unknown; readonly redactions: number };
  readonly outcomeSha256: string | null;
  readonly classified: Classified;
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
    container: e.container,
    logs: e.logs,
    sessions: e.sessions,
    provider_failure: e.providerFailure,
    provider_failure_error_kind: e.providerFailureErrorKind,
    cleanup: e.cleanup,
    engine_error: e.engineError,
    started_at: e.startedAt,
    finished_at: e.finishedAt,
  };
}
