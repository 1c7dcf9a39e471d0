import { createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  DEFAULT_REGISTRY_DEADLINE_MS,
  isUnreachable,
  registryDeadlineMs,
  withDeadline,
} from '../../src/adapters/registry/deadline.js';
import { PostgresCapacityRegistry } from '../../src/adapters/registry/postgres-capacity-registry.js';
import { commitWithReadBack } from '../../src/app/pair/reconcile-commit.js';
import type { CapacityRegistry, TerminalCommit } from '../../src/app/ports/capacity-registry.js';
import { ExitCode, RoboguideError } from '../../src/core/errors.js';
import { causeOf, errnoOf } from '../../src/core/pause-cause.js';
import { pauseReasonOfFault, survivingResume } from '../../src/core/pause-rules.js';
import { JournalFolder } from '../../src/core/batch-state.js';
import { rawJournalRecord } from '../support/raw-journal.js';
import { decide, initialSupervisorState } from '../../src/core/supervisor-machine.js';

/**
 * Issue 27: every registry call has a deadline, a late or unreachable registry is E_REGISTRY_UNAVAILABLE, and the
 * supervisor pauses on it as `registry_unavailable` with its cause.
 */

/** Timers the test fires by hand. */
class ManualTimers {
  readonly pending = new Map<number, () => void>();
  #next = 1;
  readonly set = (fn: () => void): unknown => {
    const id = this.#next++;
    this.pending.set(id, fn);
    return id;
  };
  readonly clear = (handle: unknown): void => {
    this.pending.delete(handle as number);
  };
  fireAll(): void {
    for (const [id, fn] of [...this.pending]) {
      this.pending.delete(id);
      fn();
    }
  }
}

const WHAT = { operation: 'admit', registry: 'postgres://h/db', deadlineMs: 5_000 };

describe('withDeadline', () => {
  it('passes on the work’s value and clears its timer', async () => {
    const timers = new ManualTimers();
    let timedOut = 0;
    await expect(
      withDeadline(
        WHAT,
        () => Promise.resolve(7),
        () => (timedOut += 1),
        timers,
      ),
    ).resolves.toBe(7);
    expect(timers.pending.size).toBe(0);
    expect(timedOut).toBe(0);
  });

  it('passes on the work’s own error unchanged', async () => {
    const timers = new ManualTimers();
    const own = new RoboguideError('E_REGISTRY', 'claim already admitted');
    await expect(
      withDeadline(
        WHAT,
        () => Promise.reject(own),
        () => undefined,
        timers,
      ),
    ).rejects.toBe(own);
    expect(timers.pending.size).toBe(0);
  });

  it('past the deadline: frees what the work holds once, rejects E_REGISTRY_UNAVAILABLE naming the operation and the deadline; the late end is ignored', async () => {
    const timers = new ManualTimers();
    let finishLate: (value: number) => void = () => undefined;
    let timedOut = 0;
    const call = withDeadline(
      WHAT,
      () => new Promise<number>((resolve) => (finishLate = resolve)),
      () => (timedOut += 1),
      timers,
    );
    timers.fireAll();
    const err = await call.then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RoboguideError);
    expect(err).toMatchObject({
      code: 'E_REGISTRY_UNAVAILABLE',
      context: { operation: 'admit', deadline_ms: 5_000 },
    });
    expect((err as Error).message).toBe(
      'registry admit did not finish within its deadline of 5000 ms (postgres://h/db)',
    );
    expect(timedOut).toBe(1);
    finishLate(1);
    await Promise.resolve();
    expect(timedOut).toBe(1);
  });

  it('a work that throws synchronously is a rejection, not a crash', async () => {
    const timers = new ManualTimers();
    await expect(
      withDeadline(
        WHAT,
        () => {
          throw new Error('sync');
        },
        () => undefined,
        timers,
      ),
    ).rejects.toThrow('sync');
  });
});

describe('registryDeadlineMs (ROBOGUIDE_REGISTRY_DEADLINE_MS)', () => {
  it('defaults to 10 s and takes an integer in range', () => {
    expect(DEFAULT_REGISTRY_DEADLINE_MS).toBe(10_000);
    expect(registryDeadlineMs({})).toBe(10_000);
    expect(registryDeadlineMs({ ROBOGUIDE_REGISTRY_DEADLINE_MS: '' })).toBe(10_000);
    expect(registryDeadlineMs({ ROBOGUIDE_REGISTRY_DEADLINE_MS: '2500' })).toBe(2_500);
  });

  it.each(['abc', '1.5', '-1', '99', '600001', '1e4'])(
    'refuses %j (exit 2, naming the variable and the rule)',
    (raw) => {
      let caught: unknown;
      try {
        registryDeadlineMs({ ROBOGUIDE_REGISTRY_DEADLINE_MS: raw });
      } catch (err) {
        caught = err;
      }
      expect(caught).toMatchObject({
        code: 'E_USAGE',
        exitCode: ExitCode.invalidInput,
        issues: [{ path: 'ROBOGUIDE_REGISTRY_DEADLINE_MS' }],
      });
      expect((caught as Error).message).toMatch(/integer number of milliseconds from 100 to 600000/);
    },
  );
});

describe('isUnreachable', () => {
  it.each([
    [Object.assign(new Error('connect ENOENT /tmp/s/.s.PGSQL.5432'), { code: 'ENOENT' }), true],
    [Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }), true],
    [Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' }), true],
    [new Error('Connection terminated unexpectedly'), true],
    [new Error('timeout exceeded when trying to connect'), true],
    [new RoboguideError('E_REGISTRY_UNAVAILABLE', 'late'), true],
    [Object.assign(new Error('duplicate key'), { code: '23505' }), false],
    [new RoboguideError('E_REGISTRY', 'claim already admitted'), false],
  ])('%s → %s', (err, expected) => {
    expect(isUnreachable(err)).toBe(expected);
  });
});

describe('causes and the pause they make', () => {
  it('a cause is the code and the masked, bounded message; never just the class name', () => {
    expect(
      causeOf(new RoboguideError('E_REGISTRY_UNAVAILABLE', 'registry held did not finish\nwithin 5000 ms')),
    ).toEqual({
      code: 'E_REGISTRY_UNAVAILABLE',
      message: 'registry held did not finish within 5000 ms',
    });
    expect(
      causeOf(Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' })),
    ).toEqual({ code: 'ENOSPC', message: 'ENOSPC: no space left on device, write' });
    expect(causeOf(new TypeError('x is undefined'))).toEqual({
      code: 'TypeError',
      message: 'x is undefined',
    });
    expect(
      causeOf(new Error('token s3cr3t-value leaked'), (t) => t.replaceAll('s3cr3t-value', '***')).message,
    ).toBe('token *** leaked');
    expect(causeOf(new Error('y'.repeat(2_000))).message).toHaveLength(500);
  });

  it('errnoOf finds the system error code through wrapping errors (E_STORE → ENOSPC), or none', () => {
    const enospc = Object.assign(new Error('no space left on device'), { code: 'ENOSPC' });
    expect(
      errnoOf(
        new RoboguideError('E_STORE', 'cannot write temp file: jobs/d3/result.json (ENOSPC)', {
          cause: enospc,
        }),
      ),
    ).toBe('ENOSPC');
    expect(errnoOf(new Error('wrapped', { cause: enospc }))).toBe('ENOSPC');
    expect(errnoOf(new Error('plain'))).toBeNull();
  });

  it('E_REGISTRY_UNAVAILABLE pauses as registry_unavailable, anything else as harness; resume clears both', () => {
    expect(pauseReasonOfFault({ code: 'E_REGISTRY_UNAVAILABLE', message: '' })).toBe('registry_unavailable');
    expect(pauseReasonOfFault({ code: 'E_REGISTRY', message: '' })).toBe('harness');
    expect(pauseReasonOfFault(undefined)).toBe('harness');
    expect(survivingResume(['registry_unavailable', 'harness'])).toEqual([]);
  });

  it('the machine: a fault of the registry pauses registry_unavailable and journals and logs its cause; a pair failing so does too', () => {
    const state = initialSupervisorState({
      jobIds: ['a', 'b'],
      capacity: { maxWorkers: 1 },
      claimed: [],
      finishedCount: 0,
      pauseReasons: [],
    });
    const cause = {
      code: 'E_REGISTRY_UNAVAILABLE',
      message: 'registry held did not finish within its deadline of 5000 ms (pg)',
    };
    const fault = decide(state, { type: 'fault', cause });
    expect(fault.state.pauseReasons).toEqual(['registry_unavailable']);
    expect(fault.effects).toEqual([
      { kind: 'journal', event: { type: 'paused', reasons: ['registry_unavailable'], cause } },
      { kind: 'log_pause', reasons: ['registry_unavailable'], jobId: null, cause },
      { kind: 'write_status' },
    ]);
    const dispatched = decide(
      { ...state, sourcesChecked: true },
      { type: 'next', nowMs: 0, gpuPeaksMib: [] },
    );
    const failed = decide(dispatched.state, {
      type: 'pair_done',
      jobId: 'a',
      nowMs: 1,
      outcome: { kind: 'failed', cause },
    });
    expect(failed.state.pauseReasons).toEqual(['registry_unavailable']);
    expect(failed.effects[0]).toEqual({
      kind: 'journal',
      event: { type: 'paused', reasons: ['registry_unavailable'], job_id: 'a', cause },
    });
    // Nothing more is dispatched: the loop leaves once nothing runs.
    expect(decide(failed.state, { type: 'next', nowMs: 2, gpuPeaksMib: [] }).effects).toEqual([
      { kind: 'leave' },
    ]);
  });
});

describe('commitWithReadBack with an unavailable registry', () => {
  const COMMIT: TerminalCommit = {
    batchId: 'B',
    jobId: 'j1',
    claimId: 'k1',
    reservationId: 'r1',
    classification: 'completed',
    outcomeSha256: null,
    proofSha256: 'p1',
  };

  it('one call, no read-back and no retry (each would wait one more deadline): a fault marked unavailable', async () => {
    const calls: string[] = [];
    const late = new RoboguideError(
      'E_REGISTRY_UNAVAILABLE',
      'registry commit_terminal did not finish within its deadline of 5000 ms (pg)',
    );
    const registry: Pick<CapacityRegistry, 'commitTerminal' | 'board' | 'reservation'> = {
      commitTerminal: () => {
        calls.push('commit');
        return Promise.reject(late);
      },
      board: () => {
        calls.push('board');
        return Promise.resolve([]);
      },
      reservation: () => {
        calls.push('reservation');
        return Promise.resolve(null);
      },
    };
    const outcome = await commitWithReadBack(registry as CapacityRegistry, COMMIT);
    expect(outcome).toEqual({ kind: 'fault', detail: `terminal commit: ${late.message}`, unavailable: true });
    expect(calls).toEqual(['commit']);
  });
});

describe('PostgresCapacityRegistry against a server that never answers', () => {
  let server: Server | undefined;
  const accepted: Socket[] = [];
  afterEach(async () => {
    for (const s of accepted) s.destroy();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  });

  it('open() fails E_REGISTRY_UNAVAILABLE within its deadline (a frozen server: the connection is accepted, nothing comes back)', async () => {
    let closed = 0;
    server = createServer((socket) => {
      accepted.push(socket);
      socket.resume();
      socket.on('close', () => (closed += 1));
    });
    await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    const port = typeof address === 'object' && address !== null ? address.port : 0;
    const t0 = performance.now();
    const err = await PostgresCapacityRegistry.open({
      connection: { host: '127.0.0.1', port, user: 'u', password: 'p', database: 'db', options: {} },
      display: `postgresql://u@127.0.0.1:${port}/db`,
      deadlineMs: 400,
    }).then(
      () => null,
      (e: unknown) => e,
    );
    const elapsed = performance.now() - t0;
    expect(err).toMatchObject({ code: 'E_REGISTRY_UNAVAILABLE' });
    expect((err as Error).message).toMatch(/400 ms/);
    expect(elapsed).toBeLessThan(2_000);
    // Its sockets were destroyed: the server sees every accepted connection closed.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(accepted.length).toBeGreaterThan(0);
    expect(closed).toBe(accepted.length);
  });
});

describe('the journal fold keeps the causes of the pauses in force', () => {
  const cause = {
    code: 'E_REGISTRY_UNAVAILABLE',
    message: 'registry held did not finish within its deadline of 5000 ms (pg)',
  };

  it('a paused record with a cause: in the history and in force; resume clears it; a basis carries it over', () => {
    const folder = new JournalFolder();
    folder.apply({ type: 'paused', at: 't1', reasons: ['registry_unavailable'], job_id: 'j1', cause });
    folder.apply({ type: 'paused', at: 't2', reasons: ['fatal'] });
    const fold = folder.fold();
    expect(fold.pauseHistory[0]).toEqual({
      at: 't1',
      event: 'paused',
      reasons: ['registry_unavailable'],
      job_id: 'j1',
      cause,
    });
    expect(fold.pauseCauses).toEqual([{ reason: 'registry_unavailable', at: 't1', job_id: 'j1', ...cause }]);
    // status.json's basis: an incremental status folds on from it and still shows the cause.
    const again = new JournalFolder(folder.state());
    expect(again.fold().pauseCauses).toEqual(fold.pauseCauses);
    folder.apply({ type: 'resumed', at: 't3', cleared: [], kept: [] });
    expect(folder.fold().pauseReasons).toEqual(['fatal']);
    expect(folder.fold().pauseCauses).toBeUndefined();
  });

  it('a cause of the wrong shape (an older or foreign writer) is ignored, the pause is not', () => {
    const folder = new JournalFolder();
    folder.apply(
      rawJournalRecord({
        type: 'paused',
        at: 't1',
        reasons: ['harness'],
        cause: 'disk full',
      }),
    );
    expect(folder.fold().pauseReasons).toEqual(['harness']);
    expect(folder.fold().pauseCauses).toBeUndefined();
  });
});
