import type { BatchState } from './batch-state-name.js';
import { decideDispatch, type CapacityConfig } from './dispatch-policy.js';
import type { JournalFieldsOf } from './journal-events.js';
import { pausesFor, type FinishedPair, type PauseReason, type PauseTrigger } from './pause-rules.js';
import type { Classification } from './result.js';
import type { PauseCause } from './pause-cause.js';

/**
 * The batch supervisor's decisions (SPEC §5) as a reducer: `decide(state, event) → { state, effects }`. Pure: the
 * app loop (`app/batch/supervisor-loop.ts`) performs the effects in order and feeds what happens back as events.
 * Every time comes in an event (`nowMs`, from the injected clock); nothing here reads a clock.
 */

/** After a refused admission, the next attempt waits this long unless one of our pairs frees a slot. */
export const REGISTRY_RETRY_MS = 2_000;
/** The longest the loop sleeps with nothing to do (a wake-up, a pair finishing or a stop, ends it sooner). */
export const IDLE_WAIT_MS = 60_000;

/** `kill`: a third signal (Ctrl-C) cuts the running pairs' stop budget short (SIGKILL now). */
export type StopLevel = 'none' | 'stop' | 'terminate' | 'kill';

export interface SupervisorState {
  /** Manifest order. */
  readonly jobIds: readonly string[];
  readonly capacity: CapacityConfig;
  /** A receipt exists, or a dispatch is under way: never dispatched again (a refused admission gives it back). */
  readonly claimed: ReadonlySet<string>;
  /** Pairs launched (dispatched or recovered) and not settled yet. */
  readonly inFlight: ReadonlySet<string>;
  /** Pairs with a result. */
  readonly finishedCount: number;
  /** Results of this supervisor, in finish order (the infrastructure streak counts from start or resume). */
  readonly finishedHere: readonly FinishedPair[];
  readonly pauseReasons: readonly PauseReason[];
  readonly stop: StopLevel;
  /** After a refused admission, no attempt before this (epoch ms; 0: none pending). */
  readonly registryRetryAtMs: number;
  /** The source pins were checked before the first dispatch. */
  readonly sourcesChecked: boolean;
}

/** How a launched pair ended, as the loop saw it. */
export type PairOutcome =
  | {
      readonly kind: 'finished';
      readonly classification: Classification;
      readonly pauseReasons: readonly PauseReason[];
      readonly cause?: PauseCause;
    }
  /** The registry had no room: nothing was claimed. */
  | { readonly kind: 'refused'; readonly reason: string }
  | { readonly kind: 'claim_failed'; readonly reason: 'receipt_write_failed' | 'already_claimed' }
  /** The pair's task threw (a fault of the tool, logged where it was caught): `registry_unavailable` or `harness`. */
  | { readonly kind: 'failed'; readonly cause?: PauseCause };

export type SupervisorEvent =
  /** Claimed pairs without a result, found at start: recovered, never launched again; then the first status.json. */
  | { readonly type: 'recover'; readonly jobIds: readonly string[] }
  /** The loop's turn: dispatch, check the sources, wait, or leave. */
  | { readonly type: 'next'; readonly nowMs: number; readonly gpuPeaksMib: readonly number[] }
  | { readonly type: 'sources_checked'; readonly ok: boolean }
  /** A reason to pause found outside the loop (start-up recovery). */
  | {
      readonly type: 'pause_needed';
      readonly reasons: readonly PauseReason[];
      readonly jobId: string | null;
      readonly cause?: PauseCause;
    }
  /** The supervisor itself failed (logged where caught): pause (`registry_unavailable` or `harness`); running pairs finish first. */
  | { readonly type: 'fault'; readonly cause?: PauseCause }
  /** A stop request (`e1-batch stop`, the stop file). */
  | { readonly type: 'stop_requested'; readonly terminate: boolean }
  /** SIGTERM/SIGINT: the first stops, the next terminates, the third kills the running pairs now. */
  | { readonly type: 'signal' }
  /** A launched pair has its handle (its container may not exist yet). */
  | { readonly type: 'pair_running'; readonly jobId: string }
  | {
      readonly type: 'pair_done';
      readonly jobId: string;
      readonly nowMs: number;
      readonly outcome: PairOutcome;
    }
  /** After the loop: whether every job has a result, and whether the manifest pins sources. */
  | { readonly type: 'drain_checked'; readonly allResults: boolean; readonly pinsSources: boolean };

export type SupervisorJournal =
  | ({ readonly type: 'paused' } & JournalFieldsOf<'paused'>)
  | ({ readonly type: 'stop_requested' } & JournalFieldsOf<'stop_requested'>)
  | ({ readonly type: 'admission_refused' } & JournalFieldsOf<'admission_refused'>);

export type SupervisorEffect =
  /** Best effort: the decision holds in memory whatever happens to the journal (fail closed). */
  | { readonly kind: 'journal'; readonly event: SupervisorJournal }
  | {
      readonly kind: 'log_pause';
      readonly reasons: readonly PauseReason[];
      readonly jobId: string | null;
      readonly cause?: PauseCause;
    }
  /** A change that matters (a pair finished, a pause, a stop): status.json now. */
  | { readonly kind: 'write_status' }
  /** A change that can wait (a pair started): coalesced. */
  | { readonly kind: 'status_soon' }
  | { readonly kind: 'terminate'; readonly jobIds: readonly string[] }
  /** Cut the pairs' stop budget short: SIGKILL now (their evidence is still collected, their removal verified). */
  | { readonly kind: 'kill'; readonly jobIds: readonly string[] }
  /** Swarm: ask where the pair was placed, journal it once known. */
  | { readonly kind: 'watch_placement'; readonly jobId: string }
  /** End the loop's wait now. */
  | { readonly kind: 'wake' }
  | { readonly kind: 'check_sources'; readonly phase: 'before_first_dispatch' | 'drain' }
  | { readonly kind: 'dispatch'; readonly jobId: string }
  | { readonly kind: 'recover'; readonly jobId: string }
  | { readonly kind: 'wait'; readonly ms: number }
  /** Leave the dispatch loop: drained, or paused/stopped with nothing in flight. */
  | { readonly kind: 'leave' };

export type SupervisorEffectKind = SupervisorEffect['kind'];

/** The effect of one kind. */
export type SupervisorEffectOf<K extends SupervisorEffectKind> = Extract<
  SupervisorEffect,
  { readonly kind: K }
>;

/**
 * How the shell performs each effect: one handler per kind, derived from `SupervisorEffect`, so that a new kind does
 * not compile until it is handled (`satisfies SupervisorEffectHandlers<R>`).
 */
export type SupervisorEffectHandlers<R> = {
  readonly [K in SupervisorEffectKind]: (effect: SupervisorEffectOf<K>) => R;
};

/** Performs `effect` with its kind's handler. */
export function performEffect<R>(handlers: SupervisorEffectHandlers<R>, effect: SupervisorEffect): R {
  // The table is exhaustive by its type; TypeScript cannot correlate a kind with its handler's parameter.
  const handle = handlers[effect.kind] as (effect: SupervisorEffect) => R;
  return handle(effect);
}

export interface Decision {
  readonly state: SupervisorState;
  readonly effects: readonly SupervisorEffect[];
}

export function initialSupervisorState(init: {
  readonly jobIds: readonly string[];
  readonly capacity: CapacityConfig;
  readonly claimed: Iterable<string>;
  readonly finishedCount: number;
  readonly pauseReasons: readonly PauseReason[];
}): SupervisorState {
  return {
    jobIds: init.jobIds,
    capacity: init.capacity,
    claimed: new Set(init.claimed),
    inFlight: new Set(),
    finishedCount: init.finishedCount,
    finishedHere: [],
    pauseReasons: [...new Set(init.pauseReasons)],
    stop: 'none',
    registryRetryAtMs: 0,
    sourcesChecked: false,
  };
}

export function decide(state: SupervisorState, event: SupervisorEvent): Decision {
  switch (event.type) {
    case 'recover':
      return {
        state: { ...state, inFlight: new Set([...state.inFlight, ...event.jobIds]) },
        effects: [
          ...event.jobIds.map((jobId) => ({ kind: 'recover', jobId }) as const),
          { kind: 'write_status' },
        ],
      };
    case 'next':
      return next(state, event.nowMs, event.gpuPeaksMib);
    case 'sources_checked':
      return pauseFor(state, { kind: 'sources_checked', ok: event.ok }, null);
    case 'pause_needed':
      return pause(state, event.reasons, event.jobId, event.cause);
    case 'fault':
      return pauseFor(state, { kind: 'fault', cause: event.cause }, null, event.cause);
    case 'stop_requested':
      return requestStop(state, event.terminate);
    case 'signal':
      return state.stop === 'terminate' || state.stop === 'kill'
        ? requestKill(state)
        : requestStop(state, state.stop !== 'none');
    case 'pair_running':
      return {
        state,
        effects: [
          ...(state.stop === 'terminate' || state.stop === 'kill'
            ? [{ kind: 'terminate', jobIds: [event.jobId] } as const]
            : []),
          ...(state.stop === 'kill' ? [{ kind: 'kill', jobIds: [event.jobId] } as const] : []),
          { kind: 'status_soon' },
          { kind: 'watch_placement', jobId: event.jobId },
        ],
      };
    case 'pair_done':
      return pairDone(state, event.jobId, event.nowMs, event.outcome);
    case 'drain_checked':
      return {
        state,
        effects: event.allResults && event.pinsSources ? [{ kind: 'check_sources', phase: 'drain' }] : [],
      };
  }
}

/** Pause for what the pause policy (`pausesFor`, src/core/pause-rules.ts) says this trigger means. */
function pauseFor(
  state: SupervisorState,
  trigger: PauseTrigger,
  jobId: string | null,
  cause?: PauseCause,
): Decision {
  return pause(state, pausesFor(trigger), jobId, cause);
}

/** Pause for the reasons not already held: journal them, say so, write status. Nothing new: nothing to do. */
function pause(
  state: SupervisorState,
  reasons: readonly PauseReason[],
  jobId: string | null,
  cause?: PauseCause,
): Decision {
  const fresh = reasons.filter((r) => !state.pauseReasons.includes(r));
  if (fresh.length === 0) return { state, effects: [] };
  const withCause = cause !== undefined ? { cause } : {};
  return {
    state: { ...state, pauseReasons: [...new Set([...state.pauseReasons, ...fresh])] },
    effects: [
      {
        kind: 'journal',
        event: { type: 'paused', reasons: fresh, ...(jobId !== null ? { job_id: jobId } : {}), ...withCause },
      },
      { kind: 'log_pause', reasons: fresh, jobId, ...withCause },
      { kind: 'write_status' },
    ],
  };
}

/** A stop: running pairs finish. A terminating one (or a stop made terminating): they are terminated too. */
function requestStop(state: SupervisorState, terminate: boolean): Decision {
  const escalates = terminate && (state.stop === 'none' || state.stop === 'stop');
  const fresh = state.stop === 'none' || escalates;
  const stop: StopLevel = escalates ? 'terminate' : state.stop === 'none' ? 'stop' : state.stop;
  const effects: SupervisorEffect[] = [];
  if (escalates) effects.push({ kind: 'terminate', jobIds: [...state.inFlight] });
  effects.push({ kind: 'wake' });
  if (fresh)
    effects.push({ kind: 'journal', event: { type: 'stop_requested', terminate } }, { kind: 'write_status' });
  return { state: { ...state, stop }, effects };
}

/** A signal after the terminate: the running pairs are killed now (once; later signals change nothing). */
function requestKill(state: SupervisorState): Decision {
  if (state.stop === 'kill') return { state, effects: [] };
  return {
    state: { ...state, stop: 'kill' },
    effects: [{ kind: 'kill', jobIds: [...state.inFlight] }, { kind: 'wake' }],
  };
}

function next(state: SupervisorState, nowMs: number, gpuPeaksMib: readonly number[]): Decision {
  const paused = state.pauseReasons.length > 0;
  const decision = decideDispatch({
    jobIds: state.jobIds,
    claimed: state.claimed,
    running: state.inFlight.size,
    inFlight: state.inFlight,
    finishedCount: state.finishedCount,
    gpuPeaksMib,
    capacity: state.capacity,
    paused,
    stopping: state.stop !== 'none',
    registryRefused: nowMs < state.registryRetryAtMs,
  });
  if (decision.kind === 'drained') return { state, effects: [{ kind: 'leave' }] };
  if (decision.kind === 'dispatch') {
    if (!state.sourcesChecked)
      return {
        state: { ...state, sourcesChecked: true },
        effects: [{ kind: 'check_sources', phase: 'before_first_dispatch' }],
      };
    const jobId = decision.jobId;
    return {
      state: {
        ...state,
        claimed: new Set([...state.claimed, jobId]),
        inFlight: new Set([...state.inFlight, jobId]),
      },
      effects: [{ kind: 'dispatch', jobId }],
    };
  }
  if (state.inFlight.size === 0 && (paused || state.stop !== 'none'))
    return { state, effects: [{ kind: 'leave' }] };
  const ms = state.registryRetryAtMs > nowMs ? state.registryRetryAtMs - nowMs : IDLE_WAIT_MS;
  return { state, effects: [{ kind: 'wait', ms }] };
}

function pairDone(before: SupervisorState, jobId: string, nowMs: number, outcome: PairOutcome): Decision {
  const inFlight = new Set(before.inFlight);
  inFlight.delete(jobId);
  const state: SupervisorState = { ...before, inFlight };
  const settled = settleOutcome(state, jobId, nowMs, outcome);
  return { state: settled.state, effects: [...settled.effects, { kind: 'write_status' }, { kind: 'wake' }] };
}

function settleOutcome(state: SupervisorState, jobId: string, nowMs: number, outcome: PairOutcome): Decision {
  switch (outcome.kind) {
    case 'finished':
      return finished(state, jobId, outcome.classification, outcome.pauseReasons, outcome.cause);
    case 'refused': {
      const claimed = new Set(state.claimed);
      claimed.delete(jobId);
      // One record per run of refusals: the first after a pair freed a slot (or since start).
      const effects: SupervisorEffect[] =
        state.registryRetryAtMs === 0
          ? [{ kind: 'journal', event: { type: 'admission_refused', job_id: jobId, reason: outcome.reason } }]
          : [];
      return { state: { ...state, claimed, registryRetryAtMs: nowMs + REGISTRY_RETRY_MS }, effects };
    }
    case 'claim_failed':
      return pauseFor(state, { kind: 'claim_failed', reason: outcome.reason }, jobId);
    case 'failed':
      return pauseFor(state, { kind: 'fault', cause: outcome.cause }, jobId, outcome.cause);
  }
}

/** A result: a slot is free again (retry admission at once), count it, pause for what it says and for a streak. */
function finished(
  before: SupervisorState,
  jobId: string,
  classification: Classification,
  reasons: readonly PauseReason[],
  cause?: PauseCause,
): Decision {
  const finishedHere = [...before.finishedHere, { jobId, classification }];
  const state: SupervisorState = {
    ...before,
    registryRetryAtMs: 0,
    finishedCount: before.finishedCount + 1,
    finishedHere,
  };
  const first = reasons.length > 0 ? pause(state, reasons, jobId, cause) : { state, effects: [] };
  const streak = pauseFor(first.state, { kind: 'finished_since_resume', finished: finishedHere }, jobId);
  return { state: streak.state, effects: [...first.effects, ...streak.effects] };
}

/**
 * The state a supervisor leaves the batch in: drained when every job has a result; else paused when a pause is
 * held (in memory, or in the journal should a record have failed to land); else stopped.
 */
export function exitState(
  allResults: boolean,
  journalPauseReasons: readonly PauseReason[],
  state: SupervisorState,
): BatchState {
  if (allResults) return 'drained';
  return journalPauseReasons.length > 0 || state.pauseReasons.length > 0 ? 'paused' : 'stopped';
}
