/**
 * The host-wide capacity registry (SPEC §7) and the board of runs that terminal
 * reconciliation writes to (SPEC §8 steps 2-4). Every batch on the host shares one.
 *
 * Every method returns a Promise, so that a network database fits behind the same port. The SQLite
 * implementation runs each write as one `BEGIN IMMEDIATE` transaction, which serializes writers across
 * processes; the PostgreSQL one runs each check-and-reserve in one transaction holding row locks.
 */
import type { Classification } from '../../core/result.js';
import type { ProcessIdentity } from '../../core/process-identity.js';
import type { AdmitRefusal } from '../../core/admission-rule.js';
import type { TerminalCommitRefusal } from '../../core/terminal-commit-rule.js';

/** Host limits, stored in the registry so that every batch on the host sees the same ones. */
export interface HostLimits {
  /** Most reservations held at once on this host (all batches together). Default 2. */
  readonly maxReservations: number;
  /** Sum of `gpuMib` over held reservations may not exceed this; `null` = no GPU limit (default). */
  readonly gpuMib: number | null;
}

export const DEFAULT_HOST_LIMITS: HostLimits = { maxReservations: 2, gpuMib: null };

/** Limits set for one node (`setLimits(limits, node)`); a node without its own uses the default limits. */
export interface NodeLimits {
  readonly node: string;
  readonly limits: HostLimits;
}

/** A published host port held on a node by a held reservation. */
export interface PortHolder {
  readonly node: string;
  readonly port: number;
  readonly batchId: string;
  readonly jobId: string;
  readonly reservationId: string;
}

/** The registry's schema: what the database holds and what this tool writes. */
export interface RegistrySchemaVersion {
  readonly current: number;
  readonly supported: number;
}

export interface AdmitRequest {
  readonly batchId: string;
  readonly jobId: string;
  /** The claim (run id) this reservation belongs to; admission is idempotent on it. */
  readonly claimId: string;
  /** GPU memory budgeted for the pair, 0 when it uses no GPU. */
  readonly gpuMib: number;
  /** The node (host) the pair runs on; default: the registry's local node (this host's name). */
  readonly node?: string;
  /** Published host ports the pair binds on its node; held with the reservation. Default none. */
  readonly ports?: readonly number[];
  /**
   * The container's writable bind sources (absolute, link-free), held with the reservation: refused (`mount_nested`)
   * when one lies inside, or holds, a source another held reservation on the node records. Default none.
   */
  readonly writableMounts?: readonly string[];
  /**
   * The pair's own evidence folder (absolute, link-free), held exclusively with the reservation: no other container
   * may mount it, a folder inside it (its private outcome folder) or one holding it, equal included (`mount_nested`).
   */
  readonly evidenceFolder?: string;
  /** Read-only bind sources: not held, but refused (`mount_nested`) when one is, lies inside or holds a running pair's evidence. */
  readonly readOnlyMounts?: readonly string[];
}

export type AdmitResult =
  | { readonly kind: 'admitted'; readonly reservationId: string }
  /** The node's slots, GPU budget, a port or a nested mount refused it (`decideAdmission`, `src/core/admission-rule.ts`). */
  | AdmitRefusal
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
  readonly node: string;
  /** Published host ports held with the reservation, ascending. */
  readonly ports: readonly number[];
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
  /** The claim id (the board's `run_id` column, the terminal proof's `run_id` field). */
  readonly claimId: string;
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
  /** The claim id (the board's `run_id` column, the terminal proof's `run_id` field). */
  readonly claimId: string;
  readonly reservationId: string;
  readonly classification: Classification;
  /** `null` when the outcome file was missing. */
  readonly outcomeSha256: string | null;
  readonly proofSha256: string;
}

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
  readonly claimId?: string;
}

export interface BoardAnnotation {
  readonly score?: string;
  readonly notes?: string;
}

/** Who supervises a batch: one live supervisor per batch, host-wide. */
export type SupervisorLease = ProcessIdentity;

export type LeaseResult =
  { readonly kind: 'acquired' } | { readonly kind: 'held'; readonly holder: SupervisorLease };

export interface CapacityRegistry {
  /**
   * Take the batch's supervisor lease in one transaction: granted when free or when `isAlive(holder)` says the
   * recorded holder is gone (same pid, start time and boot id are the test). Two supervisors never hold it.
   */
  acquireLease(
    batchId: string,
    lease: SupervisorLease,
    isAlive: (holder: SupervisorLease) => boolean,
  ): Promise<LeaseResult>;
  /** Give the lease back (only the holder's own pid releases it). */
  releaseLease(batchId: string, pid: number): Promise<void>;
  /**
   * The batch's recorded lease holder, or null when none is recorded (never supervised, or its supervisor exited
   * and gave the lease back). A recorded holder may be dead (SIGKILLed): the caller tests it as `acquireLease` does.
   */
  supervisorLease(batchId: string): Promise<SupervisorLease | null>;
  /** The limits that apply to `node` (its own, else the default); without `node`, the default limits. */
  limits(node?: string): Promise<HostLimits>;
  /**
   * Sets `node`'s own limits, or the default limits (every node without its own) when `node` is absent.
   * Throws `InvalidInputError` for a limit that is not a positive integer (GPU: non-negative integer or null).
   */
  setLimits(limits: HostLimits, node?: string): Promise<void>;
  /** Nodes with limits of their own, by name. */
  nodeLimits(): Promise<NodeLimits[]>;
  /** The node admissions without `node` are for (this host's name unless the registry was opened with another). */
  readonly localNode: string;
  /**
   * One transaction holding the node's lock: count the node's held reservations and GPU MiB, check that none of
   * the request's ports is held on the node, insert reservation + ports + board row `running`.
   */
  admit(request: AdmitRequest): Promise<AdmitResult>;
  /** Records the container of a held reservation. Idempotent for the same id; throws `E_REGISTRY` otherwise. */
  attachContainer(reservationId: string, containerId: string): Promise<void>;
  /** Requires the reservation held by exactly that claim; a second release reports `already_released`. */
  release(reservationId: string, claimId: string): Promise<ReleaseResult>;
  /** SPEC §8 steps 2-4 in one transaction, with read-backs. */
  commitTerminal(commit: TerminalCommit): Promise<TerminalCommitResult>;
  reservation(reservationId: string): Promise<Reservation | null>;
  reservationForClaim(claimId: string): Promise<Reservation | null>;
  /** Held reservations, oldest first. */
  held(filter?: ReservationFilter): Promise<Reservation[]>;
  /** The folders a reservation records (writable sources; its evidence folder marked by a trailing `/`), ascending. */
  reservationSources(reservationId: string): Promise<string[]>;
  /** Which of `ports` are held on `node`, by which batch (ascending port). */
  portHolders(node: string, ports: readonly number[]): Promise<PortHolder[]>;
  /** The schema version the database holds and the one this tool writes (they are equal once opened). */
  schemaVersion(): Promise<RegistrySchemaVersion>;
  board(filter?: BoardFilter): Promise<BoardRow[]>;
  /** Sets later fields on a board row; throws `E_REGISTRY` for an unknown run. */
  annotate(claimId: string, fields: BoardAnnotation): Promise<void>;
  close(): Promise<void>;
}
