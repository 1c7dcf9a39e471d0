import { describe, expect, it } from 'vitest';
import { PAIR_PHASES, phaseOf, PhaseTimer } from '../../../src/core/pair-phases.js';

/** result.json `phases` (issue 45): every lifecycle effect belongs to one phase, and the timer sums them. */
describe('pair phases', () => {
  it('puts each effect in its phase and sums the milliseconds per phase (never negative)', () => {
    expect(PAIR_PHASES).toEqual(['create', 'run', 'drain', 'collect', 'remove']);
    expect(phaseOf('create')).toBe('create');
    expect(phaseOf('wait')).toBe('run');
    expect(phaseOf('drain_logs')).toBe('drain');
    expect(phaseOf('read_outcome')).toBe('collect');
    expect(phaseOf('remove')).toBe('remove');
    const timer = new PhaseTimer();
    timer.add('create', 120);
    timer.add('start', 30);
    timer.add('wait', 5000);
    timer.add('stop', 1000);
    timer.add('settle_logs', 5);
    timer.add('drain_logs', 15);
    timer.add('inspect_exit', 2);
    timer.add('remove', 300);
    timer.add('close_logs', -4);
    expect(timer.record()).toEqual({
      create_ms: 150,
      run_ms: 6000,
      drain_ms: 20,
      collect_ms: 2,
      remove_ms: 300,
    });
  });
});
