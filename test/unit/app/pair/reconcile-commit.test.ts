import { describe, expect, it } from 'vitest';
import { commitWithReadBack, predictCommit } from '../../../../src/app/pair/reconcile-commit.js';
import type {
  BoardRow,
  CapacityRegistry,
  Reservation,
  TerminalCommit,
  TerminalCommitResult,
} from '../../../../src/app/ports/capacity-registry.js';
import { fakeRegistry } from '../../../support/fakes.js';

/**
 * The registry side of terminal reconciliation against a hand-written registry: the preview's refusal rules (each on
 * the registry state that triggers it) and the commit's read-back after an error.
 */

const COMMIT: TerminalCommit = {
  batchId: 'B',
  jobId: 'j1',
  claimId: 'k1',
  reservationId: 'r1',
  classification: 'completed',
  outcomeSha256: null,
  proofSha256: 'p1',
};

function reservation(extra: Partial<Reservation> = {}): Reservation {
  return {
    id: 'r1',
    batchId: 'B',
    jobId: 'j1',
    claimId: 'k1',
    containerId: 'c1',
    gpuMib: 0,
    node: 'h',
    ports: [],
    state: 'held',
    createdAt: '',
    releasedAt: null,
    proofSha256: null,
    ...extra,
  };
}
function board(extra: Partial<BoardRow> = {}): BoardRow {
  return {
    batchId: 'B',
    jobId: 'j1',
    claimId: 'k1',
    state: 'running',
    classification: null,
    outcomeSha256: null,
    proofSha256: null,
    updatedAt: '',
    score: null,
    notes: null,
    ...extra,
  };
}

/** A registry holding `res` and `row`; `commits` scripts what each commitTerminal call does. */
function registryOf(
  res: Reservation | null | Error,
  row: BoardRow | null,
  commits: (() => TerminalCommitResult)[] = [],
): CapacityRegistry {
  return fakeRegistry({
    reservation: () => (res instanceof Error ? Promise.reject(res) : Promise.resolve(res)),
    board: () => Promise.resolve(row === null ? [] : [row]),
    commitTerminal: () => {
      const next = commits.shift();
      if (next === undefined) return Promise.reject(new Error('unexpected commit'));
      try {
        return Promise.resolve(next());
      } catch (err) {
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passes on whatever the script threw
        return Promise.reject(err);
      }
    },
  });
}

describe('predictCommit', () => {
  it.each([
    ['no reservation', null, null, 'unknown_reservation', 'no reservation r1'],
    [
      'a board row under another batch',
      reservation(),
      board({ batchId: 'X' }),
      'run_owned_by_other_batch',
      'run k1 is on the board under batch X',
    ],
    [
      'a reservation of another batch',
      reservation({ batchId: 'X' }),
      null,
      'run_owned_by_other_batch',
      'reservation r1 belongs to batch X',
    ],
    [
      'a reservation held by another claim',
      reservation({ claimId: 'k2' }),
      null,
      'reservation_not_held_by_claim',
      'reservation r1 is held by claim k2 (job j1)',
    ],
    [
      'a reservation held for another job',
      reservation({ jobId: 'j2' }),
      null,
      'reservation_not_held_by_claim',
      'reservation r1 is held by claim k1 (job j2)',
    ],
    [
      'a terminal row with another proof',
      reservation(),
      board({ state: 'terminal', proofSha256: 'p0' }),
      'proof_mismatch',
      'run k1 is terminal with proof p0',
    ],
    [
      'a terminal row without a proof',
      reservation(),
      board({ state: 'terminal' }),
      'proof_mismatch',
      'run k1 is terminal with proof none',
    ],
    [
      'a reservation released without a terminal row',
      reservation({ state: 'released' }),
      board(),
      'reservation_not_held_by_claim',
      'reservation r1 was released without a terminal proof',
    ],
    [
      'a reservation released by another proof',
      reservation({ state: 'released', proofSha256: 'p0' }),
      board({ state: 'terminal', proofSha256: 'p1' }),
      'proof_mismatch',
      'reservation r1 was released by proof p0',
    ],
  ] as const)('refuses %s', async (_what, res, row, reason, detail) => {
    expect(await predictCommit(registryOf(res, row), COMMIT)).toEqual({ kind: 'refused', reason, detail });
  });

  it('already committed by this proof; would commit a held one (board terminal or not); a registry it cannot read is a fault', async () => {
    expect(
      await predictCommit(
        registryOf(
          reservation({ state: 'released', proofSha256: 'p1' }),
          board({ state: 'terminal', proofSha256: 'p1' }),
        ),
        COMMIT,
      ),
    ).toEqual({
      kind: 'already_committed',
      steps: [
        ['board row already terminal', undefined],
        ['reservation already released', undefined],
      ],
    });
    expect(await predictCommit(registryOf(reservation(), null), COMMIT)).toEqual({
      kind: 'would_commit',
      steps: [
        ['would write the board row terminal (read back)', undefined],
        ['would release reservation r1 (read back)', undefined],
      ],
    });
    expect(
      await predictCommit(registryOf(reservation(), board({ state: 'terminal', proofSha256: 'p1' })), COMMIT),
    ).toMatchObject({
      kind: 'would_commit',
      steps: [['board row already terminal', undefined], expect.anything()],
    });
    expect(await predictCommit(registryOf(new Error('database is locked'), null), COMMIT)).toEqual({
      kind: 'fault',
      detail: 'cannot read the registry: database is locked',
    });
  });
});

describe('commitWithReadBack', () => {
  it('maps the registry steps: known ones to their hook point, read-backs dropped, unknown ones kept as text', async () => {
    const registry = registryOf(null, null, [
      () => ({
        kind: 'committed',
        steps: [
          'board_written_terminal',
          'board_read_back',
          'reservation_released',
          'reservation_read_back',
          'something_new',
        ],
      }),
    ]);
    expect(await commitWithReadBack(registry, COMMIT)).toEqual({
      kind: 'committed',
      steps: [
        ['board row terminal (read back)', 'board_terminal'],
        ['reservation released (read back)', 'reservation_released'],
        ['something_new', undefined],
      ],
    });
  });

  it('an error after which the registry shows this commit is done, with the read-back steps', async () => {
    const registry = registryOf(
      reservation({ state: 'released', proofSha256: 'p1' }),
      board({ state: 'terminal', proofSha256: 'p1' }),
      [
        () => {
          throw new Error('connection reset');
        },
      ],
    );
    expect(await commitWithReadBack(registry, COMMIT)).toEqual({
      kind: 'committed',
      steps: [
        ['board row terminal (read back after an error)', 'board_terminal'],
        ['reservation released (read back after an error)', 'reservation_released'],
      ],
    });
  });

  it('an error, a read-back that does not show it, then a retry that commits: the retry is said', async () => {
    const registry = registryOf(reservation(), board(), [
      () => {
        throw new Error('connection reset');
      },
      () => ({
        kind: 'already_committed',
        steps: ['board_already_terminal', 'reservation_already_released'],
      }),
    ]);
    expect(await commitWithReadBack(registry, COMMIT)).toEqual({
      kind: 'already_committed',
      steps: [
        ['registry commit retried after an error', undefined],
        ['board row already terminal', 'board_terminal'],
        ['reservation already released', 'reservation_released'],
      ],
    });
  });

  it('a retry refused is returned as is; two errors (a read-back that fails too) are a fault naming the last', async () => {
    const refusedOnRetry = registryOf(reservation(), null, [
      () => {
        throw new Error('first');
      },
      () => ({ kind: 'refused', reason: 'proof_mismatch', detail: 'd' }),
    ]);
    expect(await commitWithReadBack(refusedOnRetry, COMMIT)).toEqual({
      kind: 'refused',
      reason: 'proof_mismatch',
      detail: 'd',
    });
    const failing = registryOf(new Error('read fails too'), null, [
      () => {
        throw new Error('first');
      },
      () => {
        // eslint-disable-next-line @typescript-eslint/only-throw-error -- a driver that throws a non-Error
        throw 'second, not an Error';
      },
    ]);
    expect(await commitWithReadBack(failing, COMMIT)).toEqual({
      kind: 'fault',
      detail: 'terminal commit failed twice: second, not an Error',
    });
  });
});
