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

/**
 * What a commit the refusals let through does (SPEC §8 steps 3-4), in order, each step read back by the registry: the
 * board row written terminal unless it already is, then the reservation released unless it already is. A replay of
 * the same proof changes nothing (`already_committed`). `steps`: what the registry reports it did.
 */
export function terminalCommitSteps(
  reservation: Pick<HeldReservation, 'state'>,
  board: Pick<BoardProof, 'state'> | null,
): {
  readonly writeBoard: boolean;
  readonly release: boolean;
  readonly result: { readonly kind: 'committed' | 'already_committed'; readonly steps: readonly string[] };
} {
  const writeBoard = board?.state !== 'terminal';
  const release = reservation.state !== 'released';
  const steps = [
    ...(writeBoard ? ['board_written_terminal', 'board_read_back'] : ['board_already_terminal']),
    ...(release ? ['reservation_released', 'reservation_read_back'] : ['reservation_already_released']),
  ];
  return { writeBoard, release, result: { kind: release ? 'committed' : 'already_committed', steps } };
}

/** The board row read back after its terminal write holds exactly what the commit wrote. */
export function boardReadBackExact(
  commit: Pick<CommitClaim, 'batchId' | 'proofSha256'> & {
    readonly classification: string;
    readonly outcomeSha256: string | null;
  },
  back:
    (BoardProof & { readonly classification: string | null; readonly outcomeSha256: string | null }) | null,
): boolean {
  return (
    back?.state === 'terminal' &&
    back.batchId === commit.batchId &&
    back.classification === commit.classification &&
    back.outcomeSha256 === commit.outcomeSha256 &&
    back.proofSha256 === commit.proofSha256
  );
}

/** The release changed the one held row of the claim, and the reservation reads back released with the proof. */
export function releaseReadBackExact(
  commit: Pick<CommitClaim, 'proofSha256'>,
  changedRows: number,
  back: Pick<HeldReservation, 'state' | 'proofSha256'> | null,
): boolean {
  return changedRows === 1 && back?.state === 'released' && back.proofSha256 === commit.proofSha256;
}
