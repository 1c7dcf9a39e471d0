/**
 * The host-wide capacity registry (SPEC §7) and the board of runs that terminal
 * reconciliation writes to (SPEC §8 steps 2-4). Every batch on the host shares one.
 *
 * All methods are synchronous: the SQLite implementation runs each write as one
 * `BEGIN IMMEDIATE` transaction, which serializes writers across processes.
 */
import type { Classification } from '../../core/result.js';

/** Host limits, stored in the registry so that every batch on the host sees the same ones. */
export interface HostLimits {
  /** Most reservations held at once on this host (all batches together). Default 2. */
  readonly maxReservations: number;
  /** Sum of `gpuMib` over held reservations may not exceed this; `null` = no GPU limit (default). */
  readonly gpuMib: number | null;
}

export const DEFAULT_HOST_LIMITS: HostLimits = { maxReservations: 2, gpuMib: null };

export interface AdmitRequest {
  readonly batchId: string;
  readonly jobId: string;
  /** The claim (run id) this reservation belongs to; admission is idempotent on it. */
  readonly claimId: string;
  /** GPU memory budgeted for the pair, 0 when it uses no GPU. */
  readonly gpuMib: number;
}

export type AdmitRefusalReason = 'host_full' | 'gpu_budget';

export type AdmitResult =
  | { readonly kind: 'admitted'; readonly reservationId: string }
  /** `held`/`limit`: reservations for `host_full`, MiB for `gpu_budget`. The refused request is not counted in `held`. */
  | {
      readonly kind: 'refused';
      readonly reason: AdmitRefusalReason;
      readonly held: number;
      readonly limit: number;
    }
  /** The same claim was admitted before (same batch and job); nothing was inserted. */
  | { readonly kind: 'already_admitted'; readonly reservationId: string };

export type ReleaseResult =
  | { readonly kind: 'released' }
  | { readonly kind: 'already_released' }
  | { readonly kind: 'refused'; readonly reason: 'not_held_by_claim' | 'unknown_reservation' };

export type ReservationState = 'held' | 'released';

export interface Reservation {
  readonly id: string;
  readonly batchId: string;
  readonly jobId: string;
  readonly claimId: string;
  readonly containerId: string | null;
  readonly gpuMib: number;
  readonly state: ReservationState;
  /** ISO-8601 timestamps from the injected clock. */
  readonly createdAt: string;
  readonly releasedAt: string | null;
  /** Digest of the terminal proof that released it; `null` when held or released outside reconciliation. */
  readonly proofSha256: string | null;
}

export type BoardRowState = 'running' | 'terminal';

/** One row per run (claim). `score`/`notes` are later fields that reconciliation never overwrites. */
export interface BoardRow {
  readonly batchId: string;
  readonly jobId: string;
  /** = the claim id. */
  readonly runId: string;
  readonly state: BoardRowState;
  readonly classification: string | null;
  readonly outcomeSha256: string | null;
  readonly proofSha256: string | null;
  readonly updatedAt: string;
  readonly score: string | null;
  readonly notes: string | null;
}

export interface TerminalCommit {
  readonly batchId: string;
  readonly jobId: string;
  /** = the claim id. */
  readonly runId: string;
  readonly reservationId: string;
  readonly classification: Classification;
  /** `null` when the outcome file was missing. */
  readonly outcomeSha256: string | null;
  readonly proofSha256: string;
}

export type TerminalCommitRefusal =
  'run_owned_by_other_batch' | 'reservation_not_held_by_claim' | 'proof_mismatch' | 'unknown_reservation';

export type TerminalCommitResult =
  /** Board row written terminal and read back; reservation released and read back. */
  | { readonly kind: 'committed'; readonly steps: readonly string[] }
  /** Replay: the same proof is already terminal and the reservation already released; nothing changed. */
  | { readonly kind: 'already_committed'; readonly steps: readonly string[] }
  /** Nothing changed; the reservation stays as it was (held when it was held). */
  | { readonly kind: 'refused'; readonly reason: TerminalCommitRefusal; readonly detail: string };

export interface ReservationFilter {
  readonly batchId?: string;
}

export interface BoardFilter {
  readonly batchId?: string;
  readonly runId?: string;
}

export interface BoardAnnotation {
  readonly score?: string;
  readonly notes?: string;
}

/** Who supervises a batch: one live supervisor per batch, host-wide. */
export interface SupervisorLease {
  readonly pid: number;
  readonly start_ticks: string | null;
  readonly boot_id: string | null;
}

export type LeaseResult = { readonly kind: 'acquired' } | { readonly kind: 'held'; readonly holder: SupervisorLease };

export interface CapacityRegistry {
  /**
   * Take the batch's supervisor lease in one transaction: granted when free or when `isAlive(holder)` says the
   * recorded holder is gone (same pid, start time and boot id are the test). Two supervisors never hold it.
   */
  acquireLease(batchId: string, lease: SupervisorLease, isAlive: (holder: SupervisorLease) => boolean): LeaseResult;
  /** Give the lease back (only the holder's own pid releases it). */
  releaseLease(batchId: string, pid: number): void;
  limits(): HostLimits;
  /** Throws `InvalidInputError` for a limit that is not a positive integer (GPU: non-negative integer or null). */
  setLimits(limits: HostLimits): void;
  /** One transaction: count held reservations, check limits, insert reservation + board row `running`. */
  admit(request: AdmitRequest): AdmitResult;
  /** Records the container of a held reservation. Idempotent for the same id; throws `E_REGISTRY` otherwise. */
  attachContainer(reservationId: string, containerId: string): void;
  /** Requires the reservation held by exactly that claim; a second release reports `already_released`. */
  release(reservationId: string, claimId: string): ReleaseResult;
  /** SPEC §8 steps 2-4 in one transaction, with read-backs. */
  commitTerminal(commit: TerminalCommit): TerminalCommitResult;
  reservation(reservationId: string): Reservation | null;
  reservationForClaim(claimId: string): Reservation | null;
  /** Held reservations, oldest first. */
  held(filter?: ReservationFilter): Reservation[];
  board(filter?: BoardFilter): BoardRow[];
  /** Sets later fields on a board row; throws `E_REGISTRY` for an unknown run. */
  annotate(runId: string, fields: BoardAnnotation): void;
  close(): void;
}
