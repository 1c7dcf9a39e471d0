import type { LifecycleEffectKind } from './pair-lifecycle-state.js';

/**
 * The phases of a pair that `result.json` `phases` times and the metrics exporter shows as histograms (issue 45):
 * every effect of the lifecycle machine belongs to exactly one (a kind without a phase does not compile).
 */
export const PAIR_PHASES = ['create', 'run', 'drain', 'collect', 'remove'] as const;

export type PairPhase = (typeof PAIR_PHASES)[number];

/** result.json `phases`: milliseconds spent in each phase (effects of that phase, summed; the injected clock). */
export type PhasesRecord = { readonly [P in PairPhase as `${P}_ms`]: number };

const PHASE_OF: { readonly [K in LifecycleEffectKind]: PairPhase } = {
  // From nothing to a started container whose logs are attached.
  create: 'create',
  record_created: 'create',
  attach: 'create',
  start: 'create',
  find_by_claim: 'create',
  // The container runs: waiting for its end, an engine that went away, the controlled stop.
  follow: 'run',
  wait: 'run',
  check_unwatched_stop: 'run',
  check_exited_in_time: 'run',
  await_engine: 'run',
  reconnect_logs: 'run',
  forgive_cut_logs: 'run',
  stop: 'run',
  // The logs read to their end before the removal destroys the engine's copy.
  settle_logs: 'drain',
  drain_logs: 'drain',
  // Exit code, outcome, sessions, diagnosis, the log files closed.
  inspect_exit: 'collect',
  collect_mounts: 'collect',
  read_outcome: 'collect',
  collect_sessions: 'collect',
  diagnose: 'collect',
  close_logs: 'collect',
  // Stop if running, force-remove, the engine's 404.
  remove: 'remove',
};

export function phaseOf(kind: LifecycleEffectKind): PairPhase {
  return PHASE_OF[kind];
}

/** Sums effect durations per phase; `record()` is the result.json field. */
export class PhaseTimer {
  readonly #ms: Record<PairPhase, number> = { create: 0, run: 0, drain: 0, collect: 0, remove: 0 };

  add(kind: LifecycleEffectKind, elapsedMs: number): void {
    this.#ms[phaseOf(kind)] += Math.max(0, elapsedMs);
  }

  record(): PhasesRecord {
    const m = this.#ms;
    return {
      create_ms: m.create,
      run_ms: m.run,
      drain_ms: m.drain,
      collect_ms: m.collect,
      remove_ms: m.remove,
    };
  }
}
