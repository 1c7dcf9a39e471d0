// The refusals of a terminal commit (SPEC §8 step 2), written once: each registry applies them inside its commit
// transaction, and reconciliation's preview predicts the commit with them. Pure.
import type { BoardRow, Reservation, TerminalCommit, TerminalCommitRefusal } from './capacity-registry.js';

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
export function unknownReservation(commit: TerminalCommit): TerminalCommitRefused {
  return refuse('unknown_reservation', `no reservation ${commit.reservationId}`);
}

/**
 * Why the registry, holding `reservation` (see unknownReservation when it holds none) and `board` (the run's board row, if any), refuses `commit`; null when
 * the commit may proceed: the batch owns the run and the reservation, the claim holds the reservation, and a
 * terminal row or a release already made carries the same proof.
 */
export function terminalCommitRefusal(
  commit: TerminalCommit,
  reservation: Reservation,
  board: BoardRow | null,
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
