import type { EgressFacts } from '../egress/egress-tally.js';
import type { ReportImagePlan, ReportImagePlanInput } from './image-plan.js';
import type { Counts, PauseCauseEntry, PauseHistoryEntry } from '../batch-state.js';
import type { BatchState } from '../batch-state-name.js';
import type { CapacityConfig } from '../dispatch-policy.js';
import type { Classification, ResultRecord } from '../result.js';
import type { Eta } from './eta.js';

/**
 * The batch report's data (`e1-batch report --json`, and what report.html draws). Pure: built only from evidence
 * that is already redacted — the journal, receipts, results and the names of the files in each job folder —
 * never from the manifest's argv or environment, so nothing secret can reach it.
 */
export const REPORT_SCHEMA = 'roboguide.e1.report/v1' as const;

export interface ReportJob {
  readonly job_id: string;
  readonly timeout_seconds: number;
  readonly receipt: {
    readonly claimed_at: string;
    readonly container_id: string | null;
    /** The evidence's copy of the outcome, relative to the pair's folder (`outcome/<file>`). */
    readonly private_outcome?: string;
  } | null;
  readonly result: ResultRecord | null;
  /** Names of the files in `jobs/<id>/`: a link is offered only to a file that exists. */
  readonly files: readonly string[];
}

export interface ReportInput {
  readonly batchId: string;
  readonly createdAt: string;
  readonly capacity: CapacityConfig;
  /** The host's GPUs could not be observed at start: the batch stays serial whatever the pairs report. */
  readonly gpuUnobservable: boolean;
  readonly journal: readonly {
    readonly type: string;
    readonly at: string;
    readonly [field: string]: unknown;
  }[];
  readonly jobs: readonly ReportJob[];
  readonly supervisorAlive: boolean;
  readonly now: string;
  /** Pinned image tags that name another image now, one line each (`e1-batch report` with an engine). */
  readonly imagesMoved?: readonly string[];
  /** batch.json `image_plan` (issue 43): absent when every image was on the engine at start. */
  readonly imagePlan?: ReportImagePlanInput;
}

/** pending: never claimed; running: claimed, its live supervisor owns it; unfinished: claimed, no result, no supervisor. */
export type PairStatus = 'pending' | 'running' | 'unfinished' | 'finished';

export interface ReportPair {
  readonly job_id: string;
  readonly status: PairStatus;
  readonly classification: Classification | null;
  readonly reasons: readonly string[];
  readonly started_at: string | null;
  readonly finished_at: string | null;
  readonly duration_sec: number | null;
  readonly deadline: string | null;
  readonly exit_code: number | null;
  readonly timed_out: boolean;
  readonly provider_failure_kind: string | null;
  readonly provider_http_status: number | null;
  readonly provider_failure_error_kind: string | null;
  readonly cleanup_verified: boolean | null;
  readonly gpu_peak_mib: number | null;
  /** Worker slot on the timeline (0-based); null for a pair never claimed. */
  readonly slot: number | null;
  /** Paths relative to the batch directory, only for files that exist. */
  readonly links: {
    readonly stdout?: string;
    readonly stderr?: string;
    readonly result?: string;
    readonly outcome?: string;
  };
  /** The outcome's broken rules, `path: message` (result.json `outcome_problems`); empty when none. */
  readonly outcome_problems: readonly string[];
  /** Why it failed in words and what would let it through (core/next-steps.ts); empty when there is nothing to add. */
  readonly why: readonly string[];
  /** An allowlisted pair's attempts (result.json `egress`, masked): counts and the hosts refused; else absent. */
  readonly egress?: EgressFacts;
}

export interface TimelineMarker {
  readonly at: string;
  readonly kind:
    'source_check' | 'supervisor_started' | 'supervisor_exited' | 'stop_requested' | 'second_worker';
  readonly label: string;
  /** For source checks: did the pinned files match. */
  readonly ok?: boolean;
}

export interface PauseSpan {
  readonly from: string;
  /** Null: still paused at the end of the timeline. */
  readonly to: string | null;
  readonly reasons: readonly string[];
  readonly job_id: string | null;
}

export interface GpuRule {
  readonly total_mib: number;
  readonly baseline_mib: number;
  readonly fraction: number;
  /** The largest peak that still admits a second worker: (fraction × total − baseline) / 2. */
  readonly two_worker_peak_limit_mib: number;
}

export interface ReportModel {
  readonly schema: typeof REPORT_SCHEMA;
  readonly batch_id: string;
  readonly state: BatchState;
  readonly generated_at: string;
  readonly created_at: string;
  readonly supervisor_alive: boolean;
  readonly pause_reasons: readonly string[];
  /** Pinned image tags that name another image now: the batch keeps running the pinned ids (empty: none seen). */
  readonly images_moved: readonly string[];
  readonly pause_history: readonly PauseHistoryEntry[];
  /** The causes of the pauses in force (issue 27); absent when there is none. */
  readonly pause_causes?: readonly PauseCauseEntry[];
  readonly counts: Counts;
  readonly elapsed_sec: number;
  readonly eta: Eta | null;
  readonly workers_allowed: number;
  readonly timeline: {
    readonly start: string;
    readonly end: string;
    readonly slots: number;
    readonly pauses: readonly PauseSpan[];
    readonly markers: readonly TimelineMarker[];
    readonly second_worker_at: string | null;
  };
  readonly gpu: {
    readonly max_workers: 1 | 2;
    readonly rule: GpuRule | null;
    readonly largest_peak_mib: number | null;
    readonly note: string;
  };
  readonly pairs: readonly ReportPair[];
  /** The image plan (issue 43): images, digests, sizes, pulls/evictions/waits per image, each pair's wait; swarm: per node too; null: none. */
  readonly image_plan: ReportImagePlan | null;
}
