import { describe, expect, it } from 'vitest';
import { classify } from '../../../src/core/classify.js';
import {
  engineProbeDelayMs,
  judgeEngineReturn,
  judgeUnwatchedStop,
  type ReturnedContainer,
} from '../../../src/core/engine-loss.js';
import { checkOutcome } from '../../../src/core/outcome.js';

const SEEN = Date.parse('2026-12-02T21:00:00Z');
const exited = (finishedAt: string | null, exitCode = 143): ReturnedContainer => ({
  status: 'exited',
  exitCode,
  finishedAt,
});

describe('judgeEngineReturn', () => {
  it('a container the engine no longer knows has vanished', () => {
    expect(judgeEngineReturn(null, SEEN)).toEqual({
      kind: 'lost',
      loss: 'container_vanished',
      exitCode: null,
    });
  });

  it('a container still running (dropped connection, live-restore) is waited for again', () => {
    for (const status of ['running', 'paused', 'restarting'] as const) {
      expect(judgeEngineReturn({ status, exitCode: null, finishedAt: null }, SEEN)).toEqual({
        kind: 'still_running',
      });
    }
  });

  it('one that stopped after we last saw it alive did not survive the engine: engine_restarted, with its exit code', () => {
    expect(judgeEngineReturn(exited('2026-12-02T21:00:05Z', 7), SEEN)).toEqual({
      kind: 'lost',
      loss: 'engine_restarted',
      exitCode: 7,
    });
    expect(judgeEngineReturn({ status: 'dead', exitCode: 137, finishedAt: null }, SEEN)).toMatchObject({
      loss: 'engine_restarted',
    });
  });

  it('one never started (lost between create and start) is engine_restarted too', () => {
    expect(judgeEngineReturn({ status: 'created', exitCode: null, finishedAt: null }, SEEN)).toMatchObject({
      loss: 'engine_restarted',
    });
  });

  it('an exit clearly before the last sighting is an ordinary exit; within the clock slack it is not', () => {
    expect(judgeEngineReturn(exited('2026-12-02T20:59:50Z', 0), SEEN)).toEqual({
      kind: 'exited_before_loss',
      exitCode: 0,
    });
    expect(judgeEngineReturn(exited('2026-12-02T20:59:59Z', 0), SEEN)).toMatchObject({ kind: 'lost' });
  });
});

describe('judgeUnwatchedStop (a resume finds the container stopped)', () => {
  const deadlineMs = Date.parse('2026-12-03T07:00:00Z');
  const stopped = exited('2026-12-02T21:00:05Z', 143);

  it('kill and die remembered, start not: the engine restarted after the container started and stopped it', () => {
    expect(
      judgeUnwatchedStop({
        container: stopped,
        deadlineMs,
        eventActions: ['kill', 'die', 'stop'],
        historyComplete: true,
      }),
    ).toBe('engine_restarted');
  });

  it('anything less conclusive is not called a restart', () => {
    const cases: (readonly string[])[] = [
      [], // an empty (lost) buffer
      ['die'], // exited on its own after a restart
      ['create', 'start', 'kill', 'die', 'stop'], // the same engine saw it start: stopped by someone, not a restart
    ];
    for (const eventActions of cases)
      expect(
        judgeUnwatchedStop({ container: stopped, deadlineMs, eventActions, historyComplete: true }),
      ).toBeNull();
    // A buffer that overflowed since the claim may have dropped the start: no conclusion.
    expect(
      judgeUnwatchedStop({
        container: stopped,
        deadlineMs,
        eventActions: ['kill', 'die'],
        historyComplete: false,
      }),
    ).toBeNull();
    expect(
      judgeUnwatchedStop({
        container: { status: 'running', exitCode: null, finishedAt: null },
        deadlineMs,
        eventActions: ['kill', 'die'],
        historyComplete: true,
      }),
    ).toBeNull();
    // Stopped at or after its deadline: our own controlled stop.
    expect(
      judgeUnwatchedStop({
        container: exited('2026-12-03T07:00:01Z'),
        deadlineMs,
        eventActions: ['kill', 'die'],
        historyComplete: true,
      }),
    ).toBeNull();
  });
});

describe('engineProbeDelayMs', () => {
  it('backs off from 250 ms to a 2 s ceiling', () => {
    expect([0, 1, 2, 3, 4, 10].map(engineProbeDelayMs)).toEqual([250, 500, 1000, 2000, 2000, 2000]);
  });
});

describe('classify with an engine loss', () => {
  const missing = checkOutcome({ state: 'missing' });
  const base = {
    jobId: 'p',
    outcome: missing,
    timedOut: false,
    terminated: false,
    engineFault: null,
    harnessFaults: [],
    allowedHttpStatuses: [],
  };

  it('is an infrastructure failure whose first reason names the engine, before the missing outcome', () => {
    for (const loss of ['engine_restarted', 'container_vanished', 'engine_unreachable'] as const) {
      expect(classify({ ...base, engineLoss: loss })).toEqual({
        classification: 'infrastructure_failure',
        reasons: [loss, 'outcome_missing'],
      });
    }
  });

  it('an unverified removal (engine still away) outranks it: harness failure, the batch pauses with the slot held', () => {
    const c = classify({ ...base, engineLoss: 'engine_unreachable', harnessFaults: ['cleanup_unverified'] });
    expect(c.classification).toBe('harness_failure');
    expect(c.reasons).toEqual(['cleanup_unverified', 'engine_unreachable', 'outcome_missing']);
  });
});
