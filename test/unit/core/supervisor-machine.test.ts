import { describe, expect, it } from 'vitest';
import type { PauseReason } from '../../../src/core/pause-rules.js';
import type { CapacityConfig } from '../../../src/core/dispatch-policy.js';
import { CLASSIFICATIONS, type Classification } from '../../../src/core/result.js';
import {
  decide,
  exitState,
  IDLE_WAIT_MS,
  initialSupervisorState,
  REGISTRY_RETRY_MS,
  type PairOutcome,
  type StopLevel,
  type SupervisorEffect,
  type SupervisorEvent,
  type SupervisorState,
} from '../../../src/core/supervisor-machine.js';

const SERIAL: CapacityConfig = { maxWorkers: 1 };
const TWO: CapacityConfig = { maxWorkers: 2, gpuTotalMib: 80_000, gpuBaselineMib: 1_000, gpuFraction: 0.9 };
const JOBS = ['p1', 'p2', 'p3', 'p4'];
const NOW = 1_000_000;

function state(over: Partial<SupervisorState> = {}): SupervisorState {
  return {
    ...initialSupervisorState({
      jobIds: JOBS,
      capacity: SERIAL,
      claimed: [],
      finishedCount: 0,
      pauseReasons: [],
    }),
    ...over,
  };
}

const next = (nowMs = NOW, gpuPeaksMib: readonly number[] = []): SupervisorEvent => ({
  type: 'next',
  nowMs,
  gpuPeaksMib,
});
const done = (jobId: string, outcome: PairOutcome, nowMs = NOW): SupervisorEvent => ({
  type: 'pair_done',
  jobId,
  nowMs,
  outcome,
});
const finished = (
  classification: Classification,
  pauseReasons: readonly PauseReason[] = [],
): PairOutcome => ({ kind: 'finished', classification, pauseReasons });
const kinds = (effects: readonly SupervisorEffect[]): string[] => effects.map((e) => e.kind);
const pausedEffects = (reasons: readonly PauseReason[], jobId: string | null): SupervisorEffect[] => [
  { kind: 'journal', event: { type: 'paused', reasons, ...(jobId !== null ? { job_id: jobId } : {}) } },
  { kind: 'log_pause', reasons, jobId },
  { kind: 'write_status' },
];

/** Runs events in order from `from`; returns the last state and every effect. */
function run(
  from: SupervisorState,
  events: readonly SupervisorEvent[],
): { state: SupervisorState; effects: SupervisorEffect[] } {
  let s = from;
  const effects: SupervisorEffect[] = [];
  for (const e of events) {
    const d = decide(s, e);
    s = d.state;
    effects.push(...d.effects);
  }
  return { state: s, effects };
}

describe('initial state', () => {
  it('holds what the files and the journal say, and nothing of a previous supervisor', () => {
    const s = initialSupervisorState({
      jobIds: JOBS,
      capacity: TWO,
      claimed: ['p1', 'p2'],
      finishedCount: 1,
      pauseReasons: ['fatal', 'fatal'],
    });
    expect(s).toEqual({
      jobIds: JOBS,
      capacity: TWO,
      claimed: new Set(['p1', 'p2']),
      inFlight: new Set(),
      finishedCount: 1,
      finishedHere: [],
      pauseReasons: ['fatal'],
      stop: 'none',
      registryRetryAtMs: 0,
      sourcesChecked: false,
    });
  });
});

describe('recover', () => {
  it('puts every claimed pair without a result in flight, recovers each, then writes status', () => {
    const d = decide(state({ claimed: new Set(['p1', 'p2']) }), { type: 'recover', jobIds: ['p1', 'p2'] });
    expect(d.state.inFlight).toEqual(new Set(['p1', 'p2']));
    expect(d.effects).toEqual([
      { kind: 'recover', jobId: 'p1' },
      { kind: 'recover', jobId: 'p2' },
      { kind: 'write_status' },
    ]);
  });

  it('with nothing to recover only writes status', () => {
    expect(decide(state(), { type: 'recover', jobIds: [] }).effects).toEqual([{ kind: 'write_status' }]);
  });
});

describe('next: the loop turn', () => {
  it('checks the sources once, before the first dispatch', () => {
    const first = decide(state(), next());
    expect(first.effects).toEqual([{ kind: 'check_sources', phase: 'before_first_dispatch' }]);
    expect(first.state.sourcesChecked).toBe(true);
    expect(first.state.claimed.size).toBe(0);
  });

  it('dispatches the first unclaimed pair in manifest order, claiming it and putting it in flight', () => {
    const d = decide(state({ sourcesChecked: true, claimed: new Set(['p1']), finishedCount: 1 }), next());
    expect(d.effects).toEqual([{ kind: 'dispatch', jobId: 'p2' }]);
    expect(d.state.claimed).toEqual(new Set(['p1', 'p2']));
    expect(d.state.inFlight).toEqual(new Set(['p2']));
  });

  it('runs the first pair alone: waits the idle time while it runs', () => {
    const s = run(state({ sourcesChecked: true }), [next()]).state;
    expect(decide(s, next()).effects).toEqual([{ kind: 'wait', ms: IDLE_WAIT_MS }]);
  });

  it('a second worker only with a fitting GPU peak after a result', () => {
    const s = state({
      capacity: TWO,
      sourcesChecked: true,
      claimed: new Set(['p1', 'p2']),
      inFlight: new Set(['p2']),
      finishedCount: 1,
    });
    expect(decide(s, next(NOW, [])).effects).toEqual([{ kind: 'wait', ms: IDLE_WAIT_MS }]);
    expect(decide(s, next(NOW, [30_000])).effects).toEqual([{ kind: 'dispatch', jobId: 'p3' }]);
    expect(decide(s, next(NOW, [40_000])).effects).toEqual([{ kind: 'wait', ms: IDLE_WAIT_MS }]);
  });

  it('leaves when drained: nothing unclaimed, nothing in flight', () => {
    const s = state({ claimed: new Set(JOBS), finishedCount: 4 });
    expect(decide(s, next()).effects).toEqual([{ kind: 'leave' }]);
  });

  it('waits while the last pairs run (nothing left to dispatch)', () => {
    const s = state({ claimed: new Set(JOBS), inFlight: new Set(['p4']), finishedCount: 3 });
    expect(decide(s, next()).effects).toEqual([{ kind: 'wait', ms: IDLE_WAIT_MS }]);
  });

  it.each<[string, Partial<SupervisorState>]>([
    ['paused', { pauseReasons: ['provider'] }],
    ['stopping', { stop: 'stop' }],
    ['terminating', { stop: 'terminate' }],
  ])('%s with nothing in flight: leaves; with pairs in flight: waits for them', (_name, over) => {
    expect(decide(state({ ...over, sourcesChecked: true }), next()).effects).toEqual([{ kind: 'leave' }]);
    const busy = state({
      ...over,
      sourcesChecked: true,
      claimed: new Set(['p1']),
      inFlight: new Set(['p1']),
    });
    expect(decide(busy, next()).effects).toEqual([{ kind: 'wait', ms: IDLE_WAIT_MS }]);
  });

  it('after a refused admission: waits until the retry time, then dispatches again', () => {
    const s = state({
      sourcesChecked: true,
      finishedCount: 1,
      claimed: new Set(['p1']),
      registryRetryAtMs: NOW + 1_500,
    });
    expect(decide(s, next(NOW)).effects).toEqual([{ kind: 'wait', ms: 1_500 }]);
    expect(decide(s, next(NOW + 1_499)).effects).toEqual([{ kind: 'wait', ms: 1 }]);
    expect(decide(s, next(NOW + 1_500)).effects).toEqual([{ kind: 'dispatch', jobId: 'p2' }]);
  });

  it('a retry time in the past does not shorten an idle wait', () => {
    const s = state({ claimed: new Set(JOBS), inFlight: new Set(['p4']), registryRetryAtMs: NOW - 1 });
    expect(decide(s, next(NOW)).effects).toEqual([{ kind: 'wait', ms: IDLE_WAIT_MS }]);
  });

  it('never changes the state when it does not dispatch or check', () => {
    const s = state({ claimed: new Set(JOBS), inFlight: new Set(['p4']) });
    expect(decide(s, next()).state).toBe(s);
  });
});

describe('sources_checked', () => {
  it('a match changes nothing', () => {
    const s = state({ sourcesChecked: true });
    expect(decide(s, { type: 'sources_checked', ok: true })).toEqual({ state: s, effects: [] });
  });

  it('a mismatch pauses the batch fatal + inputs_changed (no job), and the next turn leaves', () => {
    const d = decide(state({ sourcesChecked: true }), { type: 'sources_checked', ok: false });
    expect(d.state.pauseReasons).toEqual(['fatal', 'inputs_changed']);
    expect(d.effects).toEqual(pausedEffects(['fatal', 'inputs_changed'], null));
    expect(decide(d.state, next()).effects).toEqual([{ kind: 'leave' }]);
  });
});

describe('pauses', () => {
  it('pause_needed journals only the reasons not already held', () => {
    const d = decide(state({ pauseReasons: ['harness'] }), {
      type: 'pause_needed',
      reasons: ['harness', 'provider'],
      jobId: 'p1',
    });
    expect(d.state.pauseReasons).toEqual(['harness', 'provider']);
    expect(d.effects).toEqual(pausedEffects(['provider'], 'p1'));
  });

  it('a pause already held does nothing at all', () => {
    const s = state({ pauseReasons: ['harness'] });
    expect(decide(s, { type: 'pause_needed', reasons: ['harness'], jobId: null })).toEqual({
      state: s,
      effects: [],
    });
  });

  it('a supervisor fault pauses harness without a job', () => {
    const d = decide(state(), { type: 'fault' });
    expect(d.state.pauseReasons).toEqual(['harness']);
    expect(d.effects).toEqual(pausedEffects(['harness'], null));
  });
});

describe('stop requests and signals, from every stop level', () => {
  const inFlight = new Set(['p1', 'p2']);
  const cases: [StopLevel, SupervisorEvent, StopLevel, SupervisorEffect[]][] = [
    [
      'none',
      { type: 'stop_requested', terminate: false },
      'stop',
      [
        { kind: 'wake' },
        { kind: 'journal', event: { type: 'stop_requested', terminate: false } },
        { kind: 'write_status' },
      ],
    ],
    [
      'none',
      { type: 'stop_requested', terminate: true },
      'terminate',
      [
        { kind: 'terminate', jobIds: ['p1', 'p2'] },
        { kind: 'wake' },
        { kind: 'journal', event: { type: 'stop_requested', terminate: true } },
        { kind: 'write_status' },
      ],
    ],
    ['stop', { type: 'stop_requested', terminate: false }, 'stop', [{ kind: 'wake' }]],
    [
      'stop',
      { type: 'stop_requested', terminate: true },
      'terminate',
      [
        { kind: 'terminate', jobIds: ['p1', 'p2'] },
        { kind: 'wake' },
        { kind: 'journal', event: { type: 'stop_requested', terminate: true } },
        { kind: 'write_status' },
      ],
    ],
    ['terminate', { type: 'stop_requested', terminate: false }, 'terminate', [{ kind: 'wake' }]],
    ['terminate', { type: 'stop_requested', terminate: true }, 'terminate', [{ kind: 'wake' }]],
    // SIGTERM/SIGINT: the first stops, the second terminates, the third kills now, more change nothing.
    [
      'none',
      { type: 'signal' },
      'stop',
      [
        { kind: 'wake' },
        { kind: 'journal', event: { type: 'stop_requested', terminate: false } },
        { kind: 'write_status' },
      ],
    ],
    [
      'stop',
      { type: 'signal' },
      'terminate',
      [
        { kind: 'terminate', jobIds: ['p1', 'p2'] },
        { kind: 'wake' },
        { kind: 'journal', event: { type: 'stop_requested', terminate: true } },
        { kind: 'write_status' },
      ],
    ],
    ['terminate', { type: 'signal' }, 'kill', [{ kind: 'kill', jobIds: ['p1', 'p2'] }, { kind: 'wake' }]],
    ['kill', { type: 'signal' }, 'kill', []],
    // A stop request after the kill never lowers it.
    ['kill', { type: 'stop_requested', terminate: true }, 'kill', [{ kind: 'wake' }]],
    ['kill', { type: 'stop_requested', terminate: false }, 'kill', [{ kind: 'wake' }]],
  ];
  it.each(cases)('from %s, %j → %s', (from, event, to, effects) => {
    const d = decide(state({ stop: from, inFlight, claimed: inFlight }), event);
    expect(d.state.stop).toBe(to);
    expect(d.effects).toEqual(effects);
  });

  it('a stop keeps pauses and everything else', () => {
    const s = state({ pauseReasons: ['provider'], finishedCount: 2 });
    expect(decide(s, { type: 'signal' }).state).toEqual({ ...s, stop: 'stop' });
  });
});

describe('pair_running', () => {
  it.each<[StopLevel, string[]]>([
    ['none', ['status_soon', 'watch_placement']],
    ['stop', ['status_soon', 'watch_placement']],
    ['terminate', ['terminate', 'status_soon', 'watch_placement']],
    ['kill', ['terminate', 'kill', 'status_soon', 'watch_placement']],
  ])('stop level %s → %j (a pair starting after terminate is terminated at once)', (stop, expected) => {
    const s = state({ stop, inFlight: new Set(['p1']) });
    const d = decide(s, { type: 'pair_running', jobId: 'p1' });
    expect(d.state).toBe(s);
    expect(kinds(d.effects)).toEqual(expected);
    if (stop === 'terminate') expect(d.effects[0]).toEqual({ kind: 'terminate', jobIds: ['p1'] });
  });
});

describe('pair_done, for every outcome', () => {
  const busy = (over: Partial<SupervisorState> = {}): SupervisorState =>
    state({
      sourcesChecked: true,
      claimed: new Set(['p1', 'p2']),
      inFlight: new Set(['p1', 'p2']),
      finishedCount: 0,
      ...over,
    });
  const tail: SupervisorEffect[] = [{ kind: 'write_status' }, { kind: 'wake' }];

  it.each(CLASSIFICATIONS.map((c) => [c]))(
    'finished %s without pause reasons: counted, out of flight, status, wake',
    (classification) => {
      const d = decide(busy({ registryRetryAtMs: NOW + 500 }), done('p1', finished(classification)));
      expect(d.state.inFlight).toEqual(new Set(['p2']));
      expect(d.state.claimed).toEqual(new Set(['p1', 'p2']));
      expect(d.state.finishedCount).toBe(1);
      expect(d.state.finishedHere).toEqual([{ jobId: 'p1', classification }]);
      // A slot is free again: admission is retried at once.
      expect(d.state.registryRetryAtMs).toBe(0);
      expect(d.state.pauseReasons).toEqual([]);
      expect(d.effects).toEqual(tail);
    },
  );

  it.each<[Classification, PauseReason[]]>([
    ['fatal', ['fatal']],
    ['provider_stop', ['provider']],
    ['harness_failure', ['harness']],
    ['infrastructure_failure', ['harness']],
  ])('finished %s with pause reasons %j: pauses with the job named', (classification, reasons) => {
    const d = decide(busy(), done('p1', finished(classification, reasons)));
    expect(d.state.pauseReasons).toEqual(reasons);
    expect(d.effects).toEqual([...pausedEffects(reasons, 'p1'), ...tail]);
  });

  it('a pair lost with its node (no pause reasons) lets the batch go on', () => {
    const d = decide(busy(), done('p1', finished('infrastructure_failure', [])));
    expect(d.state.pauseReasons).toEqual([]);
    expect(decide(d.state, next()).effects).toEqual([{ kind: 'wait', ms: IDLE_WAIT_MS }]);
  });

  it('three infrastructure failures on different pairs in a row pause infrastructure_streak', () => {
    const s = state({ sourcesChecked: true, claimed: new Set(JOBS), inFlight: new Set(JOBS) });
    const r = run(s, [
      done('p1', finished('infrastructure_failure')),
      done('p2', finished('infrastructure_failure')),
    ]);
    expect(r.state.pauseReasons).toEqual([]);
    const d = decide(r.state, done('p3', finished('infrastructure_failure')));
    expect(d.state.pauseReasons).toEqual(['infrastructure_streak']);
    expect(d.effects).toEqual([...pausedEffects(['infrastructure_streak'], 'p3'), ...tail]);
  });

  it('a streak and the pair own reasons: two pause records, the pair own first', () => {
    const s = state({
      claimed: new Set(JOBS),
      inFlight: new Set(JOBS),
      finishedHere: [
        { jobId: 'p1', classification: 'infrastructure_failure' },
        { jobId: 'p2', classification: 'infrastructure_failure' },
      ],
    });
    const d = decide(s, done('p3', finished('infrastructure_failure', ['harness'])));
    expect(d.state.pauseReasons).toEqual(['harness', 'infrastructure_streak']);
    expect(d.effects).toEqual([
      ...pausedEffects(['harness'], 'p3'),
      ...pausedEffects(['infrastructure_streak'], 'p3'),
      ...tail,
    ]);
  });

  it('any other result breaks the streak', () => {
    const s = state({ claimed: new Set(JOBS), inFlight: new Set(JOBS) });
    const r = run(s, [
      done('p1', finished('infrastructure_failure')),
      done('p2', finished('completed')),
      done('p3', finished('infrastructure_failure')),
      done('p4', finished('infrastructure_failure')),
    ]);
    expect(r.state.pauseReasons).toEqual([]);
  });

  it('refused: gives the claim back, journals the first refusal of a run, retries after REGISTRY_RETRY_MS', () => {
    const s = state({
      sourcesChecked: true,
      claimed: new Set(['p1', 'p2']),
      inFlight: new Set(['p2']),
      finishedCount: 1,
    });
    const first = decide(s, done('p2', { kind: 'refused', reason: 'host_full' }));
    expect(first.state.claimed).toEqual(new Set(['p1']));
    expect(first.state.inFlight).toEqual(new Set());
    expect(first.state.registryRetryAtMs).toBe(NOW + REGISTRY_RETRY_MS);
    expect(first.state.finishedCount).toBe(1);
    expect(first.effects).toEqual([
      { kind: 'journal', event: { type: 'admission_refused', job_id: 'p2', reason: 'host_full' } },
      ...tail,
    ]);
    // Refused again before a slot freed: no second record, the retry time moves on.
    const later = NOW + REGISTRY_RETRY_MS;
    const again = run(first.state, [
      next(later),
      done('p2', { kind: 'refused', reason: 'gpu_budget' }, later),
    ]);
    expect(again.effects).toEqual([{ kind: 'dispatch', jobId: 'p2' }, ...tail]);
    expect(again.state.registryRetryAtMs).toBe(later + REGISTRY_RETRY_MS);
    // A pair finishing frees a slot: admission is retried at once, and the next refusal is journalled again.
    const freed = run(again.state, [
      next(later + REGISTRY_RETRY_MS),
      done('p2', finished('completed')),
      next(later),
      done('p3', { kind: 'refused', reason: 'port_held' }),
    ]);
    expect(kinds(freed.effects)).toEqual([
      'dispatch',
      'write_status',
      'wake',
      'dispatch',
      'journal',
      'write_status',
      'wake',
    ]);
    expect(freed.effects[4]).toEqual({
      kind: 'journal',
      event: { type: 'admission_refused', job_id: 'p3', reason: 'port_held' },
    });
  });

  it('claim failed (receipt write): pauses harness; the claim stays (it may have landed)', () => {
    const d = decide(busy(), done('p2', { kind: 'claim_failed', reason: 'receipt_write_failed' }));
    expect(d.state.claimed).toEqual(new Set(['p1', 'p2']));
    expect(d.state.pauseReasons).toEqual(['harness']);
    expect(d.effects).toEqual([...pausedEffects(['harness'], 'p2'), ...tail]);
  });

  it('claim failed (already claimed elsewhere): nothing but out of flight', () => {
    const d = decide(busy(), done('p2', { kind: 'claim_failed', reason: 'already_claimed' }));
    expect(d.state.claimed).toEqual(new Set(['p1', 'p2']));
    expect(d.state.pauseReasons).toEqual([]);
    expect(d.state.finishedCount).toBe(0);
    expect(d.effects).toEqual(tail);
  });

  it('a task that threw pauses harness with its job', () => {
    const d = decide(busy(), done('p1', { kind: 'failed' }));
    expect(d.state.pauseReasons).toEqual(['harness']);
    expect(d.state.inFlight).toEqual(new Set(['p2']));
    expect(d.effects).toEqual([...pausedEffects(['harness'], 'p1'), ...tail]);
  });

  it('the last pair ending while stopping lets the next turn leave', () => {
    const s = busy({ stop: 'stop', inFlight: new Set(['p1']) });
    const d = decide(s, done('p1', finished('completed')));
    expect(decide(d.state, next()).effects).toEqual([{ kind: 'leave' }]);
  });
});

describe('engine loss and return, as the supervisor sees them', () => {
  // The pair lifecycle waits through an engine restart; the supervisor sees only the pair's result.
  it('a pair that survived an engine restart finishes completed: the batch goes on', () => {
    const s = state({ sourcesChecked: true, claimed: new Set(['p1']), inFlight: new Set(['p1']) });
    const d = decide(s, done('p1', finished('completed')));
    expect(decide(d.state, next()).effects).toEqual([{ kind: 'dispatch', jobId: 'p2' }]);
  });

  it('a pair lost with the engine pauses for what its result says (harness: the slot is held)', () => {
    const s = state({ sourcesChecked: true, claimed: new Set(['p1']), inFlight: new Set(['p1']) });
    const d = decide(s, done('p1', finished('infrastructure_failure', ['harness'])));
    expect(decide(d.state, next()).effects).toEqual([{ kind: 'leave' }]);
  });
});

describe('drain_checked', () => {
  it.each([
    [true, true, [{ kind: 'check_sources', phase: 'drain' }]],
    [true, false, []],
    [false, true, []],
    [false, false, []],
  ])('all results %s, pins sources %s → %j', (allResults, pinsSources, effects) => {
    expect(decide(state(), { type: 'drain_checked', allResults, pinsSources }).effects).toEqual(effects);
  });

  it('a mismatch at the drain pauses fatal + inputs_changed', () => {
    const r = run(state({ claimed: new Set(JOBS), finishedCount: 4 }), [
      { type: 'drain_checked', allResults: true, pinsSources: true },
      { type: 'sources_checked', ok: false },
    ]);
    expect(r.state.pauseReasons).toEqual(['fatal', 'inputs_changed']);
  });
});

describe('a whole batch, event by event', () => {
  it('checks, dispatches serially, finishes, drains', () => {
    let s = state({ jobIds: ['a', 'b'] });
    const trace: string[] = [];
    const step = (e: SupervisorEvent): void => {
      const d = decide(s, e);
      s = d.state;
      trace.push(...d.effects.map((x) => ('jobId' in x ? `${x.kind}:${x.jobId}` : x.kind)));
    };
    step({ type: 'recover', jobIds: [] });
    step(next());
    step({ type: 'sources_checked', ok: true });
    step(next());
    step({ type: 'pair_running', jobId: 'a' });
    step(next());
    step(done('a', finished('completed')));
    step(next());
    step(done('b', finished('completed')));
    step(next());
    expect(trace).toEqual([
      'write_status',
      'check_sources',
      'dispatch:a',
      'status_soon',
      'watch_placement:a',
      'wait',
      'write_status',
      'wake',
      'dispatch:b',
      'write_status',
      'wake',
      'leave',
    ]);
    expect(s.finishedCount).toBe(2);
  });
});

describe('exitState', () => {
  it.each<[boolean, PauseReason[], PauseReason[], string]>([
    [true, ['fatal'], ['fatal'], 'drained'],
    [false, [], [], 'stopped'],
    [false, ['provider'], [], 'paused'],
    // The pause held in memory although its record never landed: paused (fail closed).
    [false, [], ['harness'], 'paused'],
  ])('all results %s, journal pauses %j, held %j → %s', (allResults, journalled, held, expected) => {
    expect(exitState(allResults, journalled, state({ pauseReasons: held }))).toBe(expected);
  });
});
