/**
 * The registry side of terminal reconciliation (SPEC §8 steps 2-4): the commit with the same
 * storage-fault rule as the files (an error → read the registry back: committed by this proof →
 * done; otherwise one retry), and the read-only prediction that `--preview` shows.
 */
import type {
  BoardRow,
  CapacityRegistry,
  Reservation,
  TerminalCommit,
  TerminalCommitResult,
} from '../ports/capacity-registry.js';
import {
  type TerminalCommitRefusal,
  terminalCommitRefusal,
  unknownReservation,
} from '../../core/terminal-commit-rule.js';

/** Points where reconciliation calls `afterStep` (the crash-test hook). Board and release are one transaction. */
export type ReconcileStep =
  'evidence_read' | 'proof_built' | 'proof_written' | 'board_terminal' | 'reservation_released';

/** A step as reported to the operator, and the hook point it completes (none in a preview). */
export type CommitStep = readonly [text: string, point: ReconcileStep | undefined];

export type CommitOutcome =
  | {
      readonly kind: 'would_commit' | 'committed' | 'already_committed';
      readonly steps: readonly CommitStep[];
    }
  | { readonly kind: 'refused'; readonly reason: TerminalCommitRefusal; readonly detail: string }
  /** `unavailable`: the registry timed out or could not be reached (E_REGISTRY_UNAVAILABLE): retry later. */
  | { readonly kind: 'fault'; readonly detail: string; readonly unavailable?: boolean };

const REGISTRY_STEPS: Readonly<Record<string, CommitStep | null>> = {
  board_written_terminal: ['board row terminal (read back)', 'board_terminal'],
  board_already_terminal: ['board row already terminal', 'board_terminal'],
  reservation_released: ['reservation released (read back)', 'reservation_released'],
  reservation_already_released: ['reservation already released', 'reservation_released'],
  board_read_back: null,
  reservation_read_back: null,
};

function stepsOf(registrySteps: readonly string[]): CommitStep[] {
  const steps: CommitStep[] = [];
  for (const name of registrySteps) {
    const known = REGISTRY_STEPS[name];
    if (known === undefined) steps.push([name, undefined]);
    else if (known !== null) steps.push(known);
  }
  return steps;
}

function fromResult(result: TerminalCommitResult): CommitOutcome {
  if (result.kind === 'refused') return { kind: 'refused', reason: result.reason, detail: result.detail };
  return { kind: result.kind, steps: stepsOf(result.steps) };
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function unavailable(err: unknown): boolean {
  return typeof err === 'object' && err !== null && 'code' in err && err.code === 'E_REGISTRY_UNAVAILABLE';
}

/** The registry already shows this exact commit: board terminal and reservation released, both by this proof. */
async function committedByThisProof(registry: CapacityRegistry, commit: TerminalCommit): Promise<boolean> {
  try {
    const board = (await registry.board({ claimId: commit.claimId }))[0];
    const reservation = await registry.reservation(commit.reservationId);
    return (
      board?.state === 'terminal' &&
      board.batchId === commit.batchId &&
      board.proofSha256 === commit.proofSha256 &&
      reservation?.state === 'released' &&
      reservation.proofSha256 === commit.proofSha256
    );
  } catch {
    return false;
  }
}

/** commitTerminal; on an error, read back: committed by this proof → done; otherwise one retry. */
export async function commitWithReadBack(
  registry: CapacityRegistry,
  commit: TerminalCommit,
): Promise<CommitOutcome> {
  let lastError: unknown;
  for (let attempt = 1; attempt <= 2; attempt += 1) {
    try {
      const outcome = fromResult(await registry.commitTerminal(commit));
      if (attempt === 1 || outcome.kind === 'refused' || outcome.kind === 'fault') return outcome;
      return { ...outcome, steps: [['registry commit retried after an error', undefined], ...outcome.steps] };
    } catch (err) {
      lastError = err;
      // A registry past its deadline: no read-back and no retry (each would wait one more deadline); the commit is
      // replay-safe, so `resume` finds it committed by this proof, or commits it then.
      if (unavailable(err))
        return { kind: 'fault', detail: `terminal commit: ${message(err)}`, unavailable: true };
      if (await committedByThisProof(registry, commit)) {
        return {
          kind: 'committed',
          steps: [
            ['board row terminal (read back after an error)', 'board_terminal'],
            ['reservation released (read back after an error)', 'reservation_released'],
          ],
        };
      }
    }
  }
  return { kind: 'fault', detail: `terminal commit failed twice: ${message(lastError)}` };
}

/** The registry's refusal rules (the ones its commit transaction applies), on what it holds now. */
function refusalOf(
  commit: TerminalCommit,
  reservation: Reservation | null,
  board: BoardRow | null,
): CommitOutcome | null {
  return reservation === null
    ? unknownReservation(commit)
    : terminalCommitRefusal(commit, reservation, board);
}

/** What `commitWithReadBack` would do now; reads the registry only. */
export async function predictCommit(
  registry: CapacityRegistry,
  commit: TerminalCommit,
): Promise<CommitOutcome> {
  let reservation: Reservation | null;
  let board: BoardRow | null;
  try {
    reservation = await registry.reservation(commit.reservationId);
    board = (await registry.board({ claimId: commit.claimId }))[0] ?? null;
  } catch (err) {
    return {
      kind: 'fault',
      detail: `cannot read the registry: ${message(err)}`,
      ...(unavailable(err) ? { unavailable: true } : {}),
    };
  }
  const refused = refusalOf(commit, reservation, board);
  if (refused !== null) return refused;
  const boardStep: CommitStep =
    board?.state === 'terminal'
      ? ['board row already terminal', undefined]
      : ['would write the board row terminal (read back)', undefined];
  if (reservation?.state === 'released') {
    return { kind: 'already_committed', steps: [boardStep, ['reservation already released', undefined]] };
  }
  return {
    kind: 'would_commit',
    steps: [boardStep, [`would release reservation ${commit.reservationId} (read back)`, undefined]],
  };
}
