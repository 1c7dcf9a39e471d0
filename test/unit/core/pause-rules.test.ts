import { describe, expect, it } from 'vitest';
import {
  INFRA_STREAK_LENGTH,
  PAUSE_REASONS,
  survivingResume,
  infrastructureStreak,
  pausesFor,
  type PauseReason,
  type PauseTrigger,
} from '../../../src/core/pause-rules.js';
import type { Classified } from '../../../src/core/classify.js';
import type { FinishedPair } from '../../../src/core/pause-rules.js';
import { CLASSIFICATIONS } from '../../../src/core/result.js';
import type { Classification } from '../../../src/core/result.js';

const INFRA = 'infrastructure_failure';
const seq = (...items: [string, Classification][]): FinishedPair[] =>
  items.map(([jobId, classification]) => ({ jobId, classification }));

describe('infrastructureStreak', () => {
  it('needs three', () => {
    expect(INFRA_STREAK_LENGTH).toBe(3);
  });

  it.each([
    ['nothing finished', seq(), false],
    ['two infrastructure failures', seq(['a', INFRA], ['b', INFRA]), false],
    ['three on three pairs', seq(['a', INFRA], ['b', INFRA], ['c', INFRA]), true],
    ['three after a completed pair', seq(['x', 'completed'], ['a', INFRA], ['b', INFRA], ['c', INFRA]), true],
    ['broken by a completed pair', seq(['a', INFRA], ['b', INFRA], ['x', 'completed'], ['c', INFRA]), false],
    ['ended by a completed pair', seq(['a', INFRA], ['b', INFRA], ['c', INFRA], ['x', 'completed']), false],
    ['broken by a fatal pair', seq(['a', INFRA], ['x', 'fatal'], ['b', INFRA], ['c', INFRA]), false],
    [
      'broken by a provider stop',
      seq(['a', INFRA], ['x', 'provider_stop'], ['b', INFRA], ['c', INFRA]),
      false,
    ],
    [
      'broken by a harness failure',
      seq(['a', INFRA], ['b', INFRA], ['x', 'harness_failure'], ['c', INFRA]),
      false,
    ],
    ['three on two pairs', seq(['a', INFRA], ['b', INFRA], ['a', INFRA]), false],
    ['three on one pair', seq(['a', INFRA], ['a', INFRA], ['a', INFRA]), false],
    [
      'a run covering three pairs despite a repeat',
      seq(['c', INFRA], ['a', INFRA], ['b', INFRA], ['a', INFRA]),
      true,
    ],
  ])('%s → %s', (_name, finished, expected) => {
    expect(infrastructureStreak(finished)).toBe(expected);
  });

  it('on distinct pairs, is true exactly when the last three are infrastructure failures (all sequences up to 6)', () => {
    let cases = 0;
    const wrong: string[] = [];
    const visit = (prefix: Classification[]): void => {
      const finished = prefix.map((classification, i) => ({ jobId: `pair-${i}`, classification }));
      const last = prefix.slice(-INFRA_STREAK_LENGTH);
      const expected = last.length === INFRA_STREAK_LENGTH && last.every((c) => c === INFRA);
      cases += 1;
      if (infrastructureStreak(finished) !== expected) wrong.push(prefix.join(','));
      if (prefix.length < 6) for (const c of CLASSIFICATIONS) visit([...prefix, c]);
    };
    visit([]);
    expect(wrong).toEqual([]);
    expect(cases).toBe((5 ** 7 - 1) / 4);
  });
});

describe('survivingResume', () => {
  const subsets = (items: readonly PauseReason[]): PauseReason[][] =>
    items.reduce<PauseReason[][]>((acc, item) => [...acc, ...acc.map((s) => [...s, item])], [[]]);

  it.each(subsets(PAUSE_REASONS).map((s) => [s] as const))(
    'keeps only fatal and inputs_changed from %j',
    (reasons) => {
      expect(survivingResume(reasons)).toEqual(
        reasons.filter((r) => r === 'fatal' || r === 'inputs_changed'),
      );
    },
  );

  it('clears every pause an operator may continue past', () => {
    expect(survivingResume(['infrastructure_streak', 'harness', 'provider'])).toEqual([]);
  });

  it('keeps the order it was given and drops duplicates', () => {
    expect(survivingResume(['inputs_changed', 'provider', 'fatal', 'inputs_changed'])).toEqual([
      'inputs_changed',
      'fatal',
    ]);
  });
});

describe('pausesFor (the pause policy)', () => {
  const fatal: Classified = { classification: 'fatal', reasons: ['fatal_failure_flag'] };
  const infra: Classified = { classification: 'infrastructure_failure', reasons: ['oom_killed'] };
  const ok: Classified = { classification: 'completed', reasons: [] };

  it.each([
    [{ kind: 'pair_result', result: ok }, []],
    [{ kind: 'pair_result', result: infra }, []],
    [{ kind: 'result_unwritten', result: ok }, ['harness']],
    [{ kind: 'reconciled', released: true, registryUnavailable: false, nodeLost: false }, []],
    [
      { kind: 'reconciled', released: false, registryUnavailable: true, nodeLost: false },
      ['registry_unavailable'],
    ],
    [{ kind: 'reconciled', released: false, registryUnavailable: false, nodeLost: true }, []],
    [{ kind: 'reconciled', released: false, registryUnavailable: false, nodeLost: false }, ['harness']],
    [{ kind: 'recovered', released: false }, ['harness']],
    [{ kind: 'recovered', released: true }, []],
    [{ kind: 'sources_checked', ok: false }, ['fatal', 'inputs_changed']],
    [{ kind: 'sources_checked', ok: true }, []],
    [{ kind: 'claim_failed', reason: 'receipt_write_failed' }, ['harness']],
    [{ kind: 'claim_failed', reason: 'already_claimed' }, []],
    [{ kind: 'fault', cause: { code: 'E_REGISTRY_UNAVAILABLE', message: '' } }, ['registry_unavailable']],
    [{ kind: 'fault' }, ['harness']],
  ] satisfies [PauseTrigger, PauseReason[]][])('%j → %j', (trigger, reasons) => {
    expect(pausesFor(trigger)).toEqual(reasons);
  });

  it("a pair's own pauses come first, then the harness's or the registry's", () => {
    expect(pausesFor({ kind: 'result_unwritten', result: fatal })).toEqual(['fatal', 'harness']);
    expect(
      pausesFor({
        kind: 'reconciled',
        result: fatal,
        released: false,
        registryUnavailable: true,
        nodeLost: false,
      }),
    ).toEqual(['fatal', 'registry_unavailable']);
    expect(
      pausesFor({
        kind: 'reconciled',
        result: fatal,
        released: true,
        registryUnavailable: false,
        nodeLost: false,
      }),
    ).toEqual(['fatal']);
  });

  it('a streak of infrastructure failures on different pairs pauses', () => {
    const finished = ['a', 'b', 'c'].map((jobId) => ({
      jobId,
      classification: 'infrastructure_failure' as const,
    }));
    expect(pausesFor({ kind: 'finished_since_resume', finished })).toEqual(['infrastructure_streak']);
    expect(pausesFor({ kind: 'finished_since_resume', finished: finished.slice(1) })).toEqual([]);
  });
});
