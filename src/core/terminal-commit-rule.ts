// The refusals of a terminal commit (SPEC §8 step 2), written once: each registry applies them inside its commit
// transaction, and reconciliation's preview predicts the commit with them. Pure: it reads plain facts, which the
// registry port's records (src/app/ports/capacity-registry.ts: TerminalCommit, Reservation, BoardRow) carry.

/** Why a registry refuses a terminal commit. */
export type TerminalCommitRefusal =
  'run_owned_by_other_batch' | 'reservation_not_held_by_claim' | 'proof_mismatch' | 'unknown_reservation';

/** The commit as the rule reads it: whose run, which reservation, which proof. */
export interface CommitClaim {
  readonly batchId: string;
  readonly jobId: string;
  readonly claimId: string;
  readonly reservationId: string;
  readonly proofSha256: string;
}

/** The reservation the registry holds, as the rule reads it. */
export interface HeldReservation {
  readonly id: string;
  readonly batchId: string;
  readonly jobId: string;
  readonly claimId: string;
  readonly state: 'held' | 'released';
  readonly proofSha256: string | null;
}

/** The run's board row, as the rule reads it. */
export interface BoardProof {
  readonly batchId: string;
  readonly state: 'running' | 'terminal';
  readonly proofSha256: string | null;
}

/** A refused terminal commit: the reason and what the registry holds instead. */
export interface TerminalCommitRefused {
  readonly kind: 'refused';
  readonly reason: TerminalCommitRefusal;
  readonly detail: string;
}

function refuse(reason: TerminalCommitRefusal, detail: string): TerminalCommitRefused {
  return { kind: 'refused', reason, detail };
}

/** The commit names a reservation the registry does not hold at all. */
export function unknownReservation(commit: Pick<CommitClaim, 'reservationId'>): TerminalCommitRefused {
  return refuse('unknown_reservation', `no reservation ${commit.reservationId}`);
}

/**
 * Why the registry, holding `reservation` (see unknownReservation when it holds none) and `board` (the run's board row, if any), refuses `commit`; null when
 * the commit may proceed: the batch owns the run and the reservation, the claim holds the reservation, and a
 * terminal row or a release already made carries the same proof.
 */
export function terminalCommitRefusal(
  commit: CommitClaim,
  reservation: HeldReservation,
  board: BoardProof | null,
): TerminalCommitRefused | null {
  if (board !== null && board.batchId !== commit.batchId)
    return refuse(
      'run_owned_by_other_batch',
      `run ${commit.claimId} is on the board under batch ${board.batchId}`,
    );
  if (reservation.batchId !== commit.batchId)
    return refuse(
      'run_owned_by_other_batch',
      `reservation ${reservation.id} belongs to batch ${reservation.batchId}`,
    );
  if (reservation.claimId !== commit.claimId || reservation.jobId !== commit.jobId)
    return refuse(
      'reservation_not_held_by_claim',
      `reservation ${reservation.id} is held by claim ${reservation.claimId} (job ${reservation.jobId})`,
    );
  if (board?.state === 'terminal' && board.proofSha256 !== commit.proofSha256)
    return refuse(
      'proof_mismatch',
      `run ${commit.claimId} is terminal with proof ${board.proofSha256 ?? 'none'}`,
    );
  if (reservation.state === 'released' && board?.state !== 'terminal')
    return refuse(
      'reservation_not_held_by_claim',
      `reservation ${reservation.id} was released without a terminal proof`,
    );
  if (reservation.proofSha256 !== null && reservation.proofSha256 !== commit.proofSha256)
    return refuse(
      'proof_mismatch',
      `reservation ${reservation.id} was released by proof ${reservation.proofSha256}`,
    );
  return null;
}
