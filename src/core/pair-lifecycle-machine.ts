/**
 * The phases of one pair (docs/spec.md section 7) as a pure state machine: `decide(state, event)` returns the next
 * state and the effects to perform. The use-case (src/app/pair/pair-lifecycle.ts) performs each effect through the ports
 * and feeds back what happened as an event; it decides nothing itself. No clock, no I/O: every moment arrives in an
 * event (`atMs`, read from the injected clock), every failure as data.
 *
 * create → record the container id → attach → start → wait → (controlled stop) → collect → drain the logs → remove →
 * close logs. The logs are drained (read to their end and fsynced) before the removal, which destroys the engine's copy.
 * A reattach (resume) follows the logs instead, asks whether an engine restart stopped the container while no
 * supervisor watched, and skips the wait for a container that already exited within its budget. An engine that
 * goes away is probed until it answers or the deadline; what it says decides (judgeEngineReturn). Collection and
 * removal run whatever happened before.
 */
import {
  describeEngineLoss,
  judgeEngineReturn,
  type EngineLoss,
  type ReturnedContainer,
} from './engine-loss.js';
import {
  COLLECT_STEPS,
  LifecycleTransitionError,
  type CallFailure,
  type CollectEffect,
  type CollectStep,
  type Decision,
  type LifecycleEffect,
  type LifecycleEvent,
  type LifecycleFacts,
  type LifecyclePhase,
  type LifecycleState,
  type ReturnOutcome,
  type WaitEnd,
} from './pair-lifecycle-state.js';
import type { CleanupRecord } from './cleanup-record.js';

const NOTHING_TO_REMOVE: CleanupRecord = { removed: false, verified_absent: true, attempts: 0 };

/** The first decision: create a container, or follow the one a previous supervisor created. */
export function beginLifecycle(launch: {
  readonly deadlineMs: number;
  readonly stopBudgetSec: number;
  readonly reattachTo: string | null;
}): Decision {
  const facts: LifecycleFacts = {
    containerId: launch.reattachTo,
    createdAtMs: null,
    timedOut: false,
    terminated: false,
    engineFault: null,
    engineLoss: null,
    engineError: null,
    receiptUpdateFailed: false,
    logFailure: null,
    exitCode: null,
    oomKilled: false,
    cleanup: NOTHING_TO_REMOVE,
  };
  const base = { facts, deadlineMs: launch.deadlineMs, stopBudgetSec: launch.stopBudgetSec };
  return launch.reattachTo === null
    ? { state: { ...base, at: { phase: 'creating' } }, effects: [{ kind: 'create' }] }
    : {
        state: { ...base, at: { phase: 'following' } },
        effects: [{ kind: 'follow', containerId: launch.reattachTo }],
      };
}

export function decide(state: LifecycleState, event: LifecycleEvent): Decision {
  if (event.kind === 'failed') return onFailure(state, event.failure, event.atMs);
  const next =
    state.at.phase === 'collecting' || state.at.phase === 'settling'
      ? onCollection(state, event)
      : onRun(state, event);
  if (next === null) throw new LifecycleTransitionError(state.at.phase, event.kind);
  return next;
}

function idOf(state: LifecycleState): string {
  if (state.facts.containerId === null)
    throw new LifecycleTransitionError(state.at.phase, 'a step that needs a container');
  return state.facts.containerId;
}

function go(
  state: LifecycleState,
  at: LifecyclePhase,
  effect: LifecycleEffect,
  facts: Partial<LifecycleFacts> = {},
): Decision {
  return { state: { ...state, at, facts: { ...state.facts, ...facts } }, effects: [effect] };
}

function waitFor(state: LifecycleState, facts: Partial<LifecycleFacts> = {}): Decision {
  return go(
    state,
    { phase: 'waiting' },
    { kind: 'wait', containerId: idOf(state), deadlineMs: state.deadlineMs },
    facts,
  );
}

/** The phases up to the end of the wait (or of the controlled stop). */
function onRun(state: LifecycleState, event: LifecycleEvent): Decision | null {
  const { phase } = state.at;
  switch (event.kind) {
    case 'created':
      if (phase !== 'creating') return null;
      return go(
        state,
        { phase: 'recording' },
        { kind: 'record_created', containerId: event.containerId },
        { containerId: event.containerId, createdAtMs: event.atMs },
      );
    case 'recorded':
      return phase === 'recording'
        ? go(state, { phase: 'attaching' }, { kind: 'attach', containerId: idOf(state) })
        : null;
    case 'attached':
      return phase === 'attaching'
        ? go(state, { phase: 'starting' }, { kind: 'start', containerId: idOf(state) })
        : null;
    case 'started':
      return phase === 'starting' ? waitFor(state) : null;
    case 'followed':
      return phase === 'following'
        ? go(
            state,
            { phase: 'checking_unwatched' },
            { kind: 'check_unwatched_stop', containerId: idOf(state), deadlineMs: state.deadlineMs },
          )
        : null;
    case 'unwatched_stop':
      return phase === 'checking_unwatched' ? onUnwatchedStop(state, event.message) : null;
    case 'exited_in_time':
      if (phase !== 'checking_exit') return null;
      return event.exited ? settle(state) : waitFor(state);
    case 'wait_ended':
      return phase === 'waiting' || phase === 'engine_away'
        ? onWaitEnded(state, event.end, event.byTerminate)
        : null;
    case 'engine_lost':
      if (phase !== 'waiting') return null;
      return go(
        state,
        { phase: 'engine_away', lastSeenAliveMs: event.lastSeenAliveMs, lostAtMs: event.atMs },
        { kind: 'await_engine', containerId: idOf(state), deadlineMs: state.deadlineMs },
      );
    case 'node_lost':
      return phase === 'waiting' ? endByLoss(state, 'node_lost', event.message) : null;
    default:
      return onEngineReturn(state, event);
  }
}

function onUnwatchedStop(state: LifecycleState, message: string | null): Decision {
  const facts: Partial<LifecycleFacts> =
    message === null
      ? {}
      : { engineLoss: 'engine_restarted', engineError: { kind: 'engine_restarted', message } };
  return go(
    state,
    { phase: 'checking_exit' },
    { kind: 'check_exited_in_time', containerId: idOf(state), deadlineMs: state.deadlineMs },
    facts,
  );
}

function onWaitEnded(state: LifecycleState, end: WaitEnd, byTerminate: boolean): Decision {
  if (end === 'exited') return settle(state);
  const stop: LifecycleEffect = {
    kind: 'stop',
    containerId: idOf(state),
    stopBudgetSec: state.stopBudgetSec,
    why: end,
  };
  return go(
    state,
    { phase: 'stopping' },
    stop,
    end === 'deadline' ? { timedOut: true } : { terminated: byTerminate },
  );
}

/** The engine went away, the wait ended by its return or its silence, or the phase after it. */
function onEngineReturn(state: LifecycleState, event: LifecycleEvent): Decision | null {
  const { at } = state;
  switch (event.kind) {
    case 'engine_back': {
      if (at.phase !== 'engine_away') return null;
      const then = returnOutcome(at, event.container, event.atMs);
      if (event.container === null) return afterReturn(state, then);
      const neverStarted = event.container.status === 'created';
      return go(
        state,
        { phase: 'reconnecting', then },
        { kind: 'reconnect_logs', containerId: idOf(state), neverStarted },
      );
    }
    case 'engine_silent': {
      if (at.phase !== 'engine_away') return null;
      const message = describeEngineLoss({
        loss: 'engine_unreachable',
        lostAt: iso(at.lostAtMs),
        answeredAt: null,
        finishedAt: null,
        exitCode: null,
      });
      return endByLoss(state, 'engine_unreachable', message);
    }
    case 'logs_reconnected':
      return at.phase === 'reconnecting' ? afterReturn(state, at.then) : null;
    case 'logs_forgiven':
      return at.phase === 'forgiving' ? settle(state) : null;
    case 'stopped':
      return at.phase === 'stopping' ? settle(state) : null;
    case 'found':
      if (at.phase !== 'finding') return null;
      return settle(state, {
        containerId: event.containerId,
        ...(event.known ? {} : { cleanup: { removed: false, verified_absent: false, attempts: 0 } }),
      });
    default:
      return null;
  }
}

function returnOutcome(
  at: { readonly lastSeenAliveMs: number; readonly lostAtMs: number },
  container: ReturnedContainer | null,
  answeredAtMs: number,
): ReturnOutcome {
  const verdict = judgeEngineReturn(container, at.lastSeenAliveMs);
  if (verdict.kind === 'still_running') return { kind: 'wait_again' };
  if (verdict.kind === 'exited_before_loss') return { kind: 'exited' };
  const message = describeEngineLoss({
    loss: verdict.loss,
    lostAt: iso(at.lostAtMs),
    answeredAt: iso(answeredAtMs),
    finishedAt: container?.finishedAt ?? null,
    exitCode: verdict.exitCode,
  });
  return { kind: 'lost', loss: verdict.loss, message };
}

function afterReturn(state: LifecycleState, then: ReturnOutcome): Decision {
  if (then.kind === 'wait_again') return waitFor(state);
  if (then.kind === 'exited') return settle(state);
  return endByLoss(state, then.loss, then.message);
}

/** The pair ended because of the engine. After a restart the logs were read again, so their failures stand. */
function endByLoss(state: LifecycleState, loss: EngineLoss, message: string): Decision {
  const facts: Partial<LifecycleFacts> = { engineLoss: loss, engineError: { kind: loss, message } };
  if (loss === 'engine_restarted') return settle(state, facts);
  return go(state, { phase: 'forgiving' }, { kind: 'forgive_cut_logs' }, facts);
}

function onFailure(state: LifecycleState, failure: CallFailure, atMs: number): Decision {
  const { phase } = state.at;
  if (phase === 'collecting' || phase === 'settling' || phase === 'done')
    throw new LifecycleTransitionError(phase, 'failed');
  const lostBeforeWait =
    (phase === 'attaching' || phase === 'starting') &&
    failure.kind === 'engine' &&
    failure.fault === 'engine_unavailable';
  if (lostBeforeWait) {
    // The engine stopped answering between create and the wait: probe it; what it says decides.
    const lastSeenAliveMs = state.facts.createdAtMs ?? atMs;
    return go(
      state,
      { phase: 'engine_away', lastSeenAliveMs, lostAtMs: atMs },
      { kind: 'await_engine', containerId: idOf(state), deadlineMs: state.deadlineMs },
    );
  }
  const facts = recordFailure(failure);
  if (phase === 'creating' && failure.kind === 'engine' && failure.statusCode === null) {
    return go(state, { phase: 'finding' }, { kind: 'find_by_claim' }, facts);
  }
  return settle(state, facts);
}

function recordFailure(failure: CallFailure): Partial<LifecycleFacts> {
  switch (failure.kind) {
    case 'log_open':
      return { logFailure: `open: ${failure.code}` };
    case 'receipt':
      return { receiptUpdateFailed: true };
    case 'engine':
      return { engineFault: failure.fault, engineError: { kind: failure.fault, message: failure.message } };
    case 'internal':
      return {
        engineFault: 'engine_error',
        engineError: { kind: failure.errorKind, message: 'internal error in the pair lifecycle' },
      };
  }
}

/**
 * The way to collection. The container's layer changes are asked only for a container that stopped the ordinary
 * way (exited, or the controlled stop returned): after an engine fault the sessions are always copied out.
 */
function settle(state: LifecycleState, facts: Partial<LifecycleFacts> = {}): Decision {
  const next = { ...state.facts, ...facts };
  const probeChangesOf = next.engineFault === null && next.engineLoss === null ? next.containerId : null;
  return {
    state: { ...state, at: { phase: 'settling' }, facts: next },
    effects: [{ kind: 'settle_logs', probeChangesOf }],
  };
}

/** Steps that need a container are skipped without one; a lost node has no outcome folder to copy back. */
function applies(step: CollectStep, facts: LifecycleFacts): boolean {
  if (step === 'read_outcome' || step === 'diagnose' || step === 'close_logs') return true;
  if (facts.containerId === null) return false;
  return step !== 'collect_mounts' || facts.engineLoss !== 'node_lost';
}

function collectEffect(step: CollectStep, state: LifecycleState): CollectEffect {
  const { facts } = state;
  switch (step) {
    case 'inspect_exit':
      // A lost node or an engine that never came back is not waited for again.
      return {
        kind: 'inspect_exit',
        containerId: idOf(state),
        waitForEngine: facts.engineLoss !== 'engine_unreachable' && facts.engineLoss !== 'node_lost',
      };
    case 'collect_mounts':
      return { kind: 'collect_mounts', containerId: idOf(state) };
    case 'collect_sessions':
      return { kind: 'collect_sessions', containerId: idOf(state), engineLoss: facts.engineLoss };
    case 'drain_logs':
      return { kind: 'drain_logs', containerId: idOf(state), deadlineMs: state.deadlineMs };
    case 'remove':
      return { kind: 'remove', containerId: idOf(state), stopBudgetSec: state.stopBudgetSec };
    case 'close_logs':
      return { kind: 'close_logs', containerExisted: facts.containerId !== null };
    default:
      return { kind: step };
  }
}

function nextStep(
  state: LifecycleState,
  after: CollectStep | null,
  facts: Partial<LifecycleFacts>,
): Decision {
  const next: LifecycleState = { ...state, facts: { ...state.facts, ...facts } };
  const from = after === null ? 0 : COLLECT_STEPS.indexOf(after) + 1;
  const step = COLLECT_STEPS.slice(from).find((s) => applies(s, next.facts));
  if (step === undefined) return { state: { ...next, at: { phase: 'done' } }, effects: [] };
  return { state: { ...next, at: { phase: 'collecting', step } }, effects: [collectEffect(step, next)] };
}

/** Collection, diagnosis, the logs' drain, removal and the logs' close: one step after the other, none of them skippable. */
function onCollection(state: LifecycleState, event: LifecycleEvent): Decision | null {
  const { at } = state;
  if (at.phase === 'settling') return event.kind === 'settled' ? nextStep(state, null, {}) : null;
  if (at.phase !== 'collecting') return null;
  const expected: Record<CollectStep, LifecycleEvent['kind']> = {
    inspect_exit: 'exit_inspected',
    collect_mounts: 'step_done',
    read_outcome: 'step_done',
    collect_sessions: 'step_done',
    diagnose: 'step_done',
    drain_logs: 'logs_drained',
    remove: 'removed',
    close_logs: 'logs_closed',
  };
  if (event.kind !== expected[at.step]) return null;
  if (event.kind === 'exit_inspected') return nextStep(state, at.step, event.exit ?? {});
  if (event.kind === 'removed') return nextStep(state, at.step, { cleanup: event.cleanup });
  if (event.kind === 'logs_closed')
    return nextStep(state, at.step, { logFailure: state.facts.logFailure ?? event.failure });
  return nextStep(state, at.step, {});
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}
