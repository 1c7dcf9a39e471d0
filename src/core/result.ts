import type { EgressSummary } from './egress/record.js';
import type { OutcomeProblem } from './outcome.js';
import type { PhasesRecord } from './pair-phases.js';
import type { CleanupRecord } from './cleanup-record.js';
import { taggedRecord } from './json-object.js';

/**
 * The `jobs/<id>/result.json` contract (SPEC §11). Field names are a contract: add, never rename.
 */
export const RESULT_SCHEMA = 'roboguide.e1.result/v1' as const;
export const PROVIDER_FAILURE_SCHEMA = 'roboguide.provider_failure/v1' as const;

export type Classification =
  'completed' | 'infrastructure_failure' | 'fatal' | 'provider_stop' | 'harness_failure';

export const CLASSIFICATIONS: readonly Classification[] = [
  'completed',
  'infrastructure_failure',
  'fatal',
  'provider_stop',
  'harness_failure',
];

/** Stable machine-readable reason words. */
export type Reason =
  | 'infrastructure_failure_flag'
  | 'fatal_failure_flag'
  | 'outcome_missing'
  | 'outcome_unparseable'
  | 'outcome_invalid'
  | 'outcome_too_large'
  | 'outcome_too_deep'
  | 'job_id_mismatch'
  | 'timeout'
  | 'log_limit_exceeded'
  | 'mount_refused'
  | 'oom_killed'
  | 'disk_limit_exceeded'
  | 'disk_unmeasurable'
  | 'log_incomplete'
  | 'port_allocated'
  | 'nvidia_runtime_missing'
  | 'gpu_request_dropped'
  | 'image_missing'
  | 'image_pull_failed'
  | 'engine_error'
  | 'engine_restarted'
  | 'container_vanished'
  | 'engine_unreachable'
  | 'node_lost'
  | 'provider_requires_stop'
  | 'provider_status_not_allowed'
  | 'lost_worker'
  | 'evidence_write_failed'
  | 'log_write_failed'
  | 'receipt_write_failed'
  | 'result_write_failed'
  | 'cleanup_unverified'
  | 'terminated';

export type ProviderFailureKind =
  | 'response_too_many_failed_attempts'
  | 'http_connection_failed'
  | 'response_stream_connection_failed'
  | 'response_stream_disconnected'
  | 'usage_limit_exceeded'
  | 'rate_limit_exceeded'
  | 'server_overloaded'
  | 'internal_server_error';

export interface ProviderFailure {
  readonly schema: typeof PROVIDER_FAILURE_SCHEMA;
  readonly kind: ProviderFailureKind;
  readonly http_status: number | null;
}

export interface ContainerRecord {
  readonly id: string | null;
  readonly exit_code: number | null;
  readonly timed_out: boolean;
  readonly oom_killed: boolean;
}

export interface LogRecord {
  readonly bytes: number;
  readonly closed: boolean;
  /** Present (true) only when the stream reached the job's `log_limit_bytes`: the file is cap + marker line. */
  readonly limit_exceeded?: boolean;
  /**
   * Present only when bytes of the stream are known to be missing from the file (reason `log_incomplete`, docs/spec.md
   * 6.6): the engine's copy read on reattach does not continue the file (`engine_copy_differs` at byte `differs_at`,
   * or `engine_copy_short`: it ended before the file's end, e.g. rotated away), or the drain before the removal was cut
   * (`drain_stalled`: no byte for the stall bound; `drain_deadline`). `engine_bytes`: the bytes (masked) the engine
   * gave on the last read of the stream.
   */
  readonly incomplete?: {
    readonly cause: 'engine_copy_differs' | 'engine_copy_short' | 'drain_stalled' | 'drain_deadline';
    readonly engine_bytes: number;
    readonly differs_at?: number;
  };
}

/** result.json `disk`: what the pair held on disk (cwd + outcome folder + writable layer), as measured. */
export interface DiskRecord {
  readonly limit_bytes: number;
  /** What its folders held before it ran (inputs, a shared cwd's files): only the bytes beyond it count. */
  readonly baseline_bytes: number;
  /** The most seen in one measurement (baseline included). */
  readonly peak_bytes: number;
  /** The pair went past `limit_bytes` (reason `disk_limit_exceeded`). */
  readonly exceeded: boolean;
  readonly polls: number;
  /** Measurements whose walk ran out of budget (their bytes a lower bound). */
  readonly incomplete_polls: number;
  /**
   * The pair's disk could not be measured (reason `disk_unmeasurable`): unmeasured polls in a row while it ran, or
   * an unmeasured last measurement (src/core/disk-rule.ts). Absent in results from before it was recorded.
   */
  readonly unmeasurable?: boolean;
  /** The most bytes seen held in files deleted while open (counted in `peak_bytes`). */
  readonly unlinked_open_bytes?: number;
  /**
   * Present when files held open after deletion could not be counted on this host, and why (the supervisor is not
   * root; the engine's processes are not on this host): those bytes were then not measured.
   */
  readonly open_files_unscanned?: string;
  /** The most bytes seen in the container's volumes (an image's `VOLUME`; counted in `peak_bytes`). */
  readonly volume_bytes?: number;
  /** What enforces the limit: `measurement` (the walk, no quota; a pair can overshoot between two polls). */
  readonly enforced_by?: 'measurement';
  /**
   * The outcome folder as it stays in the evidence, measured after the pair ended: its bytes, entries, whether the
   * walk finished, and its largest files (path relative to the folder, masked; most bytes first).
   */
  readonly outcome_folder?: {
    readonly bytes: number;
    readonly entries: number;
    readonly complete: boolean;
    readonly largest: readonly { readonly path: string; readonly bytes: number }[];
  };
}

/** result.json `limits`: what the pair's container ran under (src/core/pair-limits.ts). */
export interface LimitsRecord {
  readonly pids_limit: number;
  readonly memory_mib: number;
  readonly cpus: number | null;
  readonly disk_limit_bytes: number;
}

export interface ResultRecord {
  readonly schema: typeof RESULT_SCHEMA;
  readonly job_id: string;
  readonly batch_id: string;
  readonly claim_id: string;
  readonly classification: Classification;
  readonly reasons: readonly Reason[];
  /** The parsed outcome with every secret masked (see outcome_redactions); null when absent or unparseable. */
  readonly outcome: unknown;
  /** Strings, keys and numbers of `outcome` that held a secret and were masked. */
  readonly outcome_redactions: number;
  /**
   * SHA-256 of the outcome bytes kept in the evidence (`outcome/` of the pair's folder: the driver's bytes with every
   * secret masked, so the same bytes whenever nothing had to be masked); null when absent or not kept.
   */
  readonly outcome_sha256: string | null;
  /**
   * Each rule of the outcome contract (SPEC §5.2) the driver's file broke, with its JSON path (`outcome`: the whole
   * file: missing, unparseable, too large or too deep); empty when the outcome is valid. Absent from results written
   * before it was recorded.
   */
  readonly outcome_problems?: readonly OutcomeProblem[];
  readonly container: ContainerRecord;
  readonly logs: { readonly stdout: LogRecord; readonly stderr: LogRecord };
  readonly sessions: { readonly files: number; readonly bytes: number; readonly refusals: readonly string[] };
  readonly provider_failure: ProviderFailure | null;
  readonly provider_failure_error_kind: string | null;
  readonly cleanup: CleanupRecord;
  readonly engine_error: { readonly kind: string; readonly message: string } | null;
  /** The limits the container ran under; absent in results from before issue 22 and for a lost worker. */
  readonly limits?: LimitsRecord;
  /** The pair's disk use as measured; absent where it was not measured (a lost worker, a result from before issue 22). */
  readonly disk?: DiskRecord;
  /** An allowlisted pair's attempts, counted (every one is in its `egress.jsonl`; docs/spec.md §5.6). */
  readonly egress?: EgressSummary;
  /**
   * Host paths (masked) under the pair's cwd and outcome folder whose setuid/setgid bits were cleared after it ran
   * (docs/secrets.md "host privilege"): a file the seccomp profile should have made impossible, or one the host put
   * there. Present only when one was found.
   */
  readonly host_privilege_stripped?: readonly string[];
  /**
   * Milliseconds the lifecycle spent in each phase (create, run, drain, collect, remove: src/core/pair-phases.ts);
   * absent for a lost worker and in results from before issue 45.
   */
  readonly phases?: PhasesRecord;
  readonly started_at: string;
  readonly finished_at: string;
}

/** The check `result.json` is read back through: its kind and the names its readers use. */
export const isResultRecord = taggedRecord<ResultRecord>(RESULT_SCHEMA, [
  'job_id',
  'claim_id',
  'classification',
]);
