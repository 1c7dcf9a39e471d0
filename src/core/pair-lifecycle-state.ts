/**
 * The states, events and effects of the pair lifecycle machine (src/core/pair-lifecycle-machine.ts): plain data.
 */
import type { EngineFault } from './engine-fault.js';
import { ToolError } from './errors.js';
import type { EngineLoss, ReturnedContainer } from './engine-loss.js';
import type { CleanupRecord } from './cleanup-record.js';

/** A call of the lifecycle that failed, as data (the use-case maps what was thrown). */
export type CallFailure =
  /** The engine refused or failed the call (`statusCode` null: no answer at all). */
  | {
      readonly kind: 'engine';
      readonly fault: EngineFault;
      readonly message: string;
      readonly statusCode: number | null;
    }
  /** A log file could not be opened: the pair cannot keep its evidence. */
  | { readonly kind: 'log_open'; readonly code: string }
  /** Recording the container id (receipt, registry) failed. */
  | { readonly kind: 'receipt' }
  /** A fault of the tool itself (not the engine's words). */
  | { readonly kind: 'internal'; readonly errorKind: string };

/** Everything observed so far that the result reports. */
export interface LifecycleFacts {
  readonly containerId: string | null;
  /** When the engine last answered about the created container (create's return). */
  readonly createdAtMs: number | null;
  readonly timedOut: boolean;
  readonly terminated: boolean;
  readonly engineFault: EngineFault | null;
  readonly engineLoss: EngineLoss | null;
  readonly engineError: { readonly kind: string; readonly message: string } | null;
  readonly receiptUpdateFailed: boolean;
  /** A log file that could not be opened (`open: <code>`); stream failures are the log sink's. */
  readonly logFailure: string | null;
  readonly exitCode: number | null;
  readonly oomKilled: boolean;
  readonly cleanup: CleanupRecord;
}

/** What the engine's return means once the logs are reconnected. */
export type ReturnOutcome =
  | { readonly kind: 'wait_again' }
  | { readonly kind: 'exited' }
  | { readonly kind: 'lost'; readonly loss: EngineLoss; readonly message: string };

/**
 * The collection steps, in the order they run (the logs are drained before the removal: removing the container
 * destroys the engine's copy of what was not read). Each is also an effect kind, performed as one.
 */
export const COLLECT_STEPS = [
  'inspect_exit',
  'collect_mounts',
  'read_outcome',
  'collect_sessions',
  'diagnose',
  'drain_logs',
  'remove',
  'close_logs',
] as const;

export type CollectStep = (typeof COLLECT_STEPS)[number];

/** The engine calls whose failure is the pair's (or the tool's) to report: a throw becomes a `failed` event. */
export const ENGINE_CALLS = [
  'create',
  'record_created',
  'attach',
  'start',
  'follow',
  'stop',
  'wait',
] as const;

export type EngineCall = (typeof ENGINE_CALLS)[number];

export type LifecyclePhase =
  | { readonly phase: 'creating' }
  | { readonly phase: 'recording' }
  | { readonly phase: 'attaching' }
  | { readonly phase: 'starting' }
  | { readonly phase: 'following' }
  | { readonly phase: 'checking_unwatched' }
  | { readonly phase: 'checking_exit' }
  | { readonly phase: 'waiting' }
  | { readonly phase: 'engine_away'; readonly lastSeenAliveMs: number; readonly lostAtMs: number }
  | { readonly phase: 'reconnecting'; readonly then: ReturnOutcome }
  | { readonly phase: 'stopping' }
  | { readonly phase: 'finding' }
  | { readonly phase: 'forgiving' }
  | { readonly phase: 'settling' }
  | { readonly phase: 'collecting'; readonly step: CollectStep }
  | { readonly phase: 'done' };

export interface LifecycleState {
  readonly at: LifecyclePhase;
  readonly facts: LifecycleFacts;
  /** The wall budget (src/core/wall-budget.ts). */
  readonly deadlineMs: number;
  readonly stopBudgetSec: number;
}

export type LifecycleEffect =
  | { readonly kind: 'create' }
  | { readonly kind: 'record_created'; readonly containerId: string }
  | { readonly kind: 'attach'; readonly containerId: string }
  | { readonly kind: 'start'; readonly containerId: string }
  | { readonly kind: 'follow'; readonly containerId: string }
  | { readonly kind: 'check_unwatched_stop'; readonly containerId: string; readonly deadlineMs: number }
  | { readonly kind: 'check_exited_in_time'; readonly containerId: string; readonly deadlineMs: number }
  /** Until the container exits, the deadline, the stop signal (terminate or a halted log), or an engine fault. */
  | { readonly kind: 'wait'; readonly containerId: string; readonly deadlineMs: number }
  /** Probe the engine that went away until it answers, the deadline, or the stop signal. */
  | { readonly kind: 'await_engine'; readonly containerId: string; readonly deadlineMs: number }
  | { readonly kind: 'reconnect_logs'; readonly containerId: string; readonly neverStarted: boolean }
  /** The controlled stop: SIGTERM, the stop budget, then kill. */
  | {
      readonly kind: 'stop';
      readonly containerId: string;
      readonly stopBudgetSec: number;
      readonly why: 'deadline' | 'aborted';
    }
  /** create got no answer: the engine may have made the container anyway; find it by its claim label. */
  | { readonly kind: 'find_by_claim' }
  /** Streams the engine cut and that cannot be read again are the engine's loss, not a failed write of ours. */
  | { readonly kind: 'forgive_cut_logs' }
  /** Give the logs a moment to end, then the failpoint before collection; `probeChangesOf`: ask the layer changes. */
  | { readonly kind: 'settle_logs'; readonly probeChangesOf: string | null }
  /** Exit code and OOM flag; `waitForEngine`: an engine that went away after the stop is waited for (bounded). */
  | { readonly kind: 'inspect_exit'; readonly containerId: string; readonly waitForEngine: boolean }
  | { readonly kind: 'collect_mounts'; readonly containerId: string }
  | { readonly kind: 'read_outcome' }
  | {
      readonly kind: 'collect_sessions';
      readonly containerId: string;
      readonly engineLoss: EngineLoss | null;
    }
  | { readonly kind: 'diagnose' }
  /**
   * Before the removal (which destroys the engine's copy): read the log streams to their end, bounded by progress and
   * by the pair's wall budget (`deadlineMs`), and fsync what they gave. What could not be read is recorded, not cut silently.
   */
  | { readonly kind: 'drain_logs'; readonly containerId: string; readonly deadlineMs: number }
  | { readonly kind: 'remove'; readonly containerId: string; readonly stopBudgetSec: number }
  | { readonly kind: 'close_logs'; readonly containerExisted: boolean };

export type LifecycleEffectKind = LifecycleEffect['kind'];

/** The effect of one kind. */
export type LifecycleEffectOf<K extends LifecycleEffectKind> = Extract<LifecycleEffect, { readonly kind: K }>;

/** An effect for every collection step and every engine call (a step without one does not compile). */
export type CollectEffect = LifecycleEffectOf<CollectStep>;
export type EngineCallEffect = LifecycleEffectOf<EngineCall>;

export function isEngineCall(effect: LifecycleEffect): effect is EngineCallEffect {
  return (ENGINE_CALLS as readonly string[]).includes(effect.kind);
}

export type WaitEnd = 'exited' | 'deadline' | 'aborted';

export type LifecycleEvent =
  | { readonly kind: 'created'; readonly containerId: string; readonly atMs: number }
  | { readonly kind: 'recorded' }
  | { readonly kind: 'attached' }
  | { readonly kind: 'started' }
  | { readonly kind: 'followed' }
  | { readonly kind: 'failed'; readonly failure: CallFailure; readonly atMs: number }
  | { readonly kind: 'unwatched_stop'; readonly message: string | null }
  | { readonly kind: 'exited_in_time'; readonly exited: boolean }
  /** `byTerminate`: an abort that came from the operator's terminate (not a halted log). */
  | { readonly kind: 'wait_ended'; readonly end: WaitEnd; readonly byTerminate: boolean }
  | { readonly kind: 'engine_lost'; readonly lastSeenAliveMs: number; readonly atMs: number }
  | { readonly kind: 'node_lost'; readonly message: string }
  | { readonly kind: 'engine_back'; readonly container: ReturnedContainer | null; readonly atMs: number }
  | { readonly kind: 'engine_silent' }
  | { readonly kind: 'logs_reconnected' }
  | { readonly kind: 'logs_forgiven' }
  | { readonly kind: 'stopped' }
  | { readonly kind: 'found'; readonly containerId: string | null; readonly known: boolean }
  | { readonly kind: 'settled' }
  | {
      readonly kind: 'exit_inspected';
      readonly exit: { readonly exitCode: number | null; readonly oomKilled: boolean } | null;
    }
  | { readonly kind: 'step_done' }
  | { readonly kind: 'logs_drained' }
  | { readonly kind: 'removed'; readonly cleanup: CleanupRecord }
  | { readonly kind: 'logs_closed'; readonly failure: string | null };

export interface Decision {
  readonly state: LifecycleState;
  readonly effects: readonly LifecycleEffect[];
}

/** A transition the machine does not know: a fault of the use-case that fed it, never of the pair. */
export class LifecycleTransitionError extends ToolError {
  constructor(phase: string, event: string) {
    super('E_INTERNAL', `pair lifecycle: no transition from ${phase} on ${event}`);
  }
}
