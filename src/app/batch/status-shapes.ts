/** The shapes status reports: the batch status, status.json as written (with its basis), the summary, leftovers, nodes. */
import {
  type Counts,
  type PauseCauseEntry,
  type PauseHistoryEntry,
  type RunningPair,
  STATUS_SCHEMA,
} from '../../core/batch-state.js';
import type { EgressStatus } from '../../core/egress/egress-tally.js';
import type { BatchState } from '../../core/batch-state-name.js';
import { taggedRecord } from '../../core/json-object.js';
import type { FailedPair, LedgerBasis } from '../../core/ledger-facts.js';
import type { PauseReason } from '../../core/pause-rules.js';
import type { CapacityConfig } from '../../core/dispatch-policy.js';
import type { Eta } from '../../core/report/eta.js';
import type { Classification } from '../../core/result.js';
import type { MovedImage } from './image-pins.js';
import type { SupervisorRecord } from '../../core/supervisor-record.js';

export interface Leftover {
  readonly container_id: string;
  readonly job_id: string | null;
  readonly status: string;
  readonly why: 'job_finished' | 'job_not_running' | 'unknown_job';
}

export interface BatchStatus {
  readonly schema: typeof STATUS_SCHEMA;
  readonly batch_id: string;
  readonly output: string;
  readonly state: BatchState;
  readonly pause_reasons: PauseReason[];
  /** The causes of the pauses in force, where an error made them (issue 27); absent when there is none. */
  readonly pause_causes?: PauseCauseEntry[];
  readonly counts: Counts;
  readonly running: RunningPair[];
  readonly workers_allowed: number;
  /**
   * Swarm executor only (absent for local batches): per node, the pairs running there and its GPUs (the node's
   * `NVIDIA-GPU` generic resources seen at start, and those the running pairs asked for).
   */
  readonly nodes?: readonly NodeStatus[];
  readonly gpu_peak_mib: number | null;
  /** Why the batch stays serial on GPU grounds, when it does (null: the dispatch rule alone decides). */
  readonly gpu_note: string | null;
  readonly claims_without_result: string[];
  /** The failed pairs, most recent first, with their first reason (see FailedPairs). */
  readonly failed?: FailedPairs;
  /**
   * The allowlisted pairs' attempts beyond their containers (docs/spec.md §5.6): the batch's allowed and refused
   * counts, and per pair (the most recent with refusals) its counts and the hosts refused, masked. Absent when no
   * allowlisted pair has finished.
   */
  readonly egress?: EgressStatus;
  /** Pinned images whose tag names another image now (`e1-batch status` with an engine); absent when none. */
  readonly images_moved?: readonly MovedImage[];
  /** Time left, from the mean duration of the pairs finished so far; null before the first result or when idle. */
  readonly eta: Eta | null;
  readonly leftovers: Leftover[];
  readonly supervisor: (SupervisorRecord & { readonly alive: boolean }) | null;
  readonly updated_at: string;
}

export interface Summary {
  readonly schema: 'roboguide.e1.summary/v1';
  readonly batch_id: string;
  readonly state: BatchState;
  readonly counts: Counts;
  readonly pause_reasons: PauseReason[];
  readonly pause_history: PauseHistoryEntry[];
  readonly jobs: {
    readonly job_id: string;
    readonly classification: Classification | null;
    readonly reasons: readonly string[];
    readonly started_at: string | null;
    readonly finished_at: string | null;
  }[];
  readonly source_checks: unknown[];
  readonly timings: {
    readonly created_at: string;
    readonly first_claim_at: string | null;
    readonly last_finish_at: string | null;
  };
  readonly written_at: string;
}

/**
 * Failed pairs as status names them: the most recent ones (at most FAILED_SHOWN, newest first) with their
 * classification, first reason and first outcome problem; `more`: how many other failed pairs there are (the report
 * lists every one).
 */
export interface FailedPairs {
  readonly pairs: readonly FailedPair[];
  readonly more: number;
}

export interface NodeStatus {
  readonly node: string;
  readonly running: readonly string[];
  readonly gpus_total: number;
  readonly gpus_in_use: number;
}

/** status.json as the supervisor writes it: the status, and the ledger it was built from (`basis`, SPEC §6.11). */
export interface WrittenStatus extends BatchStatus {
  readonly basis: StatusBasis;
}

export interface StatusBasis extends LedgerBasis {
  readonly capacity: CapacityConfig;
}

/** The check `status.json` is read back through. */
export const isWrittenStatus = taggedRecord<WrittenStatus>(STATUS_SCHEMA, ['batch_id', 'state']);
