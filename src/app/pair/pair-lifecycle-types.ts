import type { PhasesRecord } from '../../core/pair-phases.js';
import type { Readable, Transform } from 'node:stream';
import type { OutcomeRead } from '../../core/outcome.js';
import type { ContainerRecord, LogRecord, ProviderFailure } from '../../core/result.js';
import type { LifecycleFacts } from '../../core/pair-lifecycle-state.js';
import type { ImageSessionsMemo } from '../../core/sessions-skip.js';
import type { SessionsReport } from './pair-collection.js';
import type { OpenLogs } from './pair-log-types.js';
import type { Clock } from '../ports/clock.js';
import type { ContainerRuntime, ContainerSpec } from '../ports/container-runtime.js';
import type { Logger } from '../ports/logger.js';

/* The pair lifecycle's inputs and its report (src/app/pair/pair-lifecycle.ts). */

/** Everything the lifecycle does to the world besides the engine, injectable for tests. */
export interface PairLifecycleDeps {
  readonly runtime: ContainerRuntime;
  /** The only source of time: deadlines, the waits between probes, the engine's return, removal polling. */
  readonly clock: Clock;
  readonly logger: Logger;
  readonly createRedactor: (secrets: readonly string[]) => Transform;
  /** Open a log file; `append` when reattaching after a supervisor restart (the file holds a prefix already). */
  readonly openLogs: OpenLogs;
  readonly readOutcome: (path: string) => Promise<OutcomeRead>;
  /**
   * Copy the sessions archive into the job's evidence. `null`: no sessions dir in the container; `'empty'`: the dir
   * holds nothing (known without copying). `nothingInside`: the archive held the directory alone.
   */
  readonly collectSessions: (
    archive: Readable | null | 'empty',
  ) => Promise<SessionsReport & { readonly nothingInside?: boolean }>;
  /**
   * What images hold at their sessions dir, learned from earlier pairs of this process: a container that did not
   * touch the dir (its layer's changes, its mounts) is not copied from when its image is known to hold nothing
   * there. Absent: always copied.
   */
  readonly imageSessions?: ImageSessionsMemo;
  /** Provider-failure diagnosis over the collected sessions. May throw: the lifecycle isolates it. */
  readonly diagnose: () => Promise<ProviderFailure | null>;
  /** How long to wait for the engine to confirm the container is gone. */
  readonly verifyAbsentTimeoutMs?: number;
  /** Log streams still open after the container is gone (the drain before the removal was cut) get this long to end. */
  readonly logDrainTimeoutMs?: number;
  /** The drain before the removal stops when no byte arrived for this long (default 30 s). */
  readonly logStallMs?: number;
  /** ... or at the later of the wall-budget deadline and this long after the drain began (default 10 min). */
  readonly logDrainAfterDeadlineMs?: number;
  /** Collection waits this long for an engine that stopped answering (default 120 s). */
  readonly collectionEngineWaitMs?: number;
}

export interface PairLaunch {
  readonly container: ContainerSpec;
  readonly outcomePath: string;
  readonly sessionsDir: string;
  readonly stopBudgetSec: number;
  readonly secrets: readonly string[];
  /** Aborting it performs the controlled stop (`stop --terminate`). */
  readonly terminate?: AbortSignal;
  /** Aborting it during (or before) a controlled stop kills the container at once: the stop budget is cut short. */
  readonly killNow?: AbortSignal;
  /**
   * Aborting it performs the controlled stop too, for a limit the pair went past (its disk, issue 22): like a log
   * that reached its cap, not an operator's terminate. The caller records why.
   */
  readonly halt?: AbortSignal;
  /** Called once the container exists (the supervisor records its id in the receipt). A throw is a harness fault. */
  readonly onCreated?: (containerId: string) => Promise<void>;
  /**
   * Reattach to a container a previous supervisor created (docs/spec.md 8.4 resume): no create/start; logs are read
   * again from the engine's log API from the beginning, the bytes already on disk are checked against it and skipped,
   * so the log files continue without duplicated or lost lines (or the gap is named, docs/spec.md 6.6). `claimedAtMs`: the claim, where the engine's history is read from.
   */
  readonly reattach?: { readonly containerId: string; readonly claimedAtMs: number };
  /** The wall budget: one deadline in epoch ms, fixed at claim time (src/core/wall-budget.ts). */
  readonly deadlineMs: number;
}

/**
 * What a pair's lifecycle observed, for its result: the machine's facts (timed out, terminated, the engine's fault,
 * loss and error, a failed receipt update, `src/core/pair-lifecycle-state.ts`) and what was collected.
 */
export interface PairExecution extends Pick<
  LifecycleFacts,
  'timedOut' | 'terminated' | 'engineFault' | 'engineLoss' | 'engineError' | 'receiptUpdateFailed' | 'cleanup'
> {
  readonly container: ContainerRecord;
  readonly logs: { readonly stdout: LogRecord; readonly stderr: LogRecord };
  readonly logFailure: string | null;
  /** The stream whose log reached its cap (the pair was stopped for it), or null. */
  readonly logLimitExceeded: 'stdout' | 'stderr' | null;
  readonly outcome: OutcomeRead;
  readonly sessions: SessionsReport;
  readonly providerFailure: ProviderFailure | null;
  readonly providerFailureErrorKind: string | null;
  readonly startedAt: string;
  readonly finishedAt: string;
  /** Milliseconds spent in each phase (src/core/pair-phases.ts); absent for a pair no lifecycle watched (lost worker). */
  readonly phases?: PhasesRecord;
}
