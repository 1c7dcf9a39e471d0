import type { PauseReason } from './pause-rules.js';
import { knownEntry, type JournalEntry } from './journal-events.js';
import { survivingResume } from './pause-rules.js';
import type { Classification } from './result.js';
import type { PauseCause } from './pause-cause.js';
import type { BatchState } from './batch-state-name.js';

export const STATUS_SCHEMA = 'roboguide.e1.status/v1' as const;

export interface JobView {
  readonly jobId: string;
  readonly claimed: boolean;
  readonly classification: Classification | null;
}

export interface RunningPair {
  readonly job_id: string;
  readonly container_id: string | null;
  readonly started_at: string;
  readonly deadline: string;
  /** Swarm executor: the node that runs the pair, once placed. */
  readonly node?: string;
}

export interface Counts {
  readonly total: number;
  readonly pending: number;
  readonly claimed: number;
  readonly running: number;
  readonly completed: number;
  readonly infrastructure_failure: number;
  readonly fatal: number;
  readonly provider_stop: number;
  readonly harness_failure: number;
}

export interface PauseHistoryEntry {
  readonly at: string;
  readonly event: 'paused' | 'resumed';
  readonly reasons: readonly string[];
  readonly job_id: string | null;
  /** A pause's cause where an error made it (code and masked message, issue 27). */
  readonly cause?: PauseCause;
}

/** The cause of a pause in force: which reason, when, after which pair, and the error's code and message. */
export interface PauseCauseEntry {
  readonly reason: PauseReason;
  readonly at: string;
  readonly job_id: string | null;
  readonly code: string;
  readonly message: string;
}

function causeOfEntry(value: unknown): PauseCause | null {
  if (typeof value !== 'object' || value === null) return null;
  const { code, message } = value as { code?: unknown; message?: unknown };
  return typeof code === 'string' && typeof message === 'string' ? { code, message } : null;
}

export interface JournalFold {
  readonly pauseReasons: PauseReason[];
  readonly stopRequested: boolean;
  readonly terminateRequested: boolean;
  readonly exitedAs: BatchState | null;
  readonly pauseHistory: PauseHistoryEntry[];
  /** The causes of the pauses in force (the latest per reason; absent when none): a pause without an error has none. */
  readonly pauseCauses?: PauseCauseEntry[];
}

function reasonsOf(value: unknown): PauseReason[] | null {
  return Array.isArray(value) ? (value as PauseReason[]) : null;
}

const BATCH_STATES: ReadonlySet<unknown> = new Set<BatchState>([
  'running',
  'stopping',
  'stopped',
  'paused',
  'drained',
]);

/** The fold's state between records: what status.json's `basis` keeps of it (the pause history is not kept). */
export interface JournalFoldState {
  readonly pause_reasons: PauseReason[];
  readonly stop_requested: boolean;
  readonly terminate_requested: boolean;
  readonly exited_as: BatchState | null;
  /** Absent in a basis written before issue 27. */
  readonly pause_causes?: PauseCauseEntry[];
}

/**
 * The journal fold, one record at a time: `apply` each record in journal order, read `fold()` whenever. The same
 * rules whether it folds the whole journal (cold status), a supervisor's own records as it appends them, or the
 * records past the offset a status.json was written at. Every supervisor start resets stop/exit facts.
 */
export class JournalFolder {
  readonly #reasons: Set<PauseReason>;
  #stopRequested: boolean;
  #terminateRequested: boolean;
  #exitedAs: BatchState | null;
  readonly #pauseHistory: PauseHistoryEntry[] = [];
  readonly #causes = new Map<PauseReason, PauseCauseEntry>();

  constructor(from?: JournalFoldState) {
    this.#reasons = new Set(from?.pause_reasons ?? []);
    for (const c of from?.pause_causes ?? []) this.#causes.set(c.reason, c);
    this.#stopRequested = from?.stop_requested ?? false;
    this.#terminateRequested = from?.terminate_requested ?? false;
    this.#exitedAs = from?.exited_as ?? null;
  }

  /** One entry of the closed union (`journal-events.ts`); a foreign type, or a field of another type, changes nothing. */
  apply(entry: JournalEntry): void {
    const e = knownEntry(entry);
    switch (e?.type) {
      case 'paused': {
        const reasons = reasonsOf(e.reasons);
        if (reasons === null) return;
        for (const r of reasons) this.#reasons.add(r);
        const jobId = typeof e.job_id === 'string' ? e.job_id : null;
        const cause = causeOfEntry(e.cause);
        this.#pauseHistory.push({
          at: e.at ?? '',
          event: 'paused',
          reasons: [...reasons],
          job_id: jobId,
          ...(cause !== null ? { cause } : {}),
        });
        if (cause !== null)
          for (const r of reasons)
            this.#causes.set(r, { reason: r, at: e.at ?? '', job_id: jobId, ...cause });
        return;
      }
      case 'resumed': {
        const kept = survivingResume([...this.#reasons]);
        const cleared = [...this.#reasons].filter((r) => !kept.includes(r));
        this.#reasons.clear();
        for (const r of kept) this.#reasons.add(r);
        for (const r of cleared) this.#causes.delete(r);
        this.#pauseHistory.push({ at: e.at ?? '', event: 'resumed', reasons: cleared, job_id: null });
        return;
      }
      case 'supervisor_started':
        this.#stopRequested = false;
        this.#terminateRequested = false;
        this.#exitedAs = null;
        return;
      case 'stop_requested':
        this.#stopRequested = true;
        this.#terminateRequested = this.#terminateRequested || e.terminate === true;
        return;
      case 'supervisor_exited':
        // An unknown state (a newer writer) reads as no exit record: status fails closed on it.
        this.#exitedAs = BATCH_STATES.has(e.state) ? (e.state as BatchState) : null;
        return;
      default:
        return;
    }
  }

  fold(): JournalFold {
    return {
      pauseReasons: [...this.#reasons],
      stopRequested: this.#stopRequested,
      terminateRequested: this.#terminateRequested,
      exitedAs: this.#exitedAs,
      pauseHistory: [...this.#pauseHistory],
      ...(this.#causes.size > 0 ? { pauseCauses: [...this.#causes.values()] } : {}),
    };
  }

  state(): JournalFoldState {
    return {
      pause_reasons: [...this.#reasons],
      stop_requested: this.#stopRequested,
      terminate_requested: this.#terminateRequested,
      exited_as: this.#exitedAs,
      ...(this.#causes.size > 0 ? { pause_causes: [...this.#causes.values()] } : {}),
    };
  }
}

/** Fold the journal into the facts status needs. Every supervisor start resets stop/exit facts. */
export function foldJournal(events: readonly JournalEntry[]): JournalFold {
  const folder = new JournalFolder();
  for (const e of events) folder.apply(e);
  return folder.fold();
}

export function countJobs(jobs: readonly JobView[], runningCount: number): Counts {
  const counts = {
    total: jobs.length,
    pending: 0,
    claimed: 0,
    running: runningCount,
    completed: 0,
    infrastructure_failure: 0,
    fatal: 0,
    provider_stop: 0,
    harness_failure: 0,
  };
  for (const j of jobs) {
    if (!j.claimed) counts.pending++;
    else if (j.classification === null) counts.claimed++;
    else counts[j.classification]++;
  }
  return counts;
}

/**
 * The batch state from the journal fold, the job files and whether a supervisor is alive. `drained` when
 * every job has a result; otherwise a live supervisor is running/stopping, and a dead one left the batch
 * stopped, paused, or (crashed) paused with a harness reason for resume to clear.
 */
export function deriveState(fold: JournalFold, counts: Counts, supervisorAlive: boolean): BatchState {
  if (counts.pending === 0 && counts.claimed === 0) return 'drained';
  if (supervisorAlive) {
    if (fold.stopRequested) return 'stopping';
    return fold.pauseReasons.length > 0 ? 'paused' : 'running';
  }
  if (fold.pauseReasons.length > 0) return 'paused';
  if (fold.exitedAs === 'stopped' || fold.stopRequested) return 'stopped';
  // No live supervisor, no pause recorded, work left: the supervisor died. Fail closed.
  return 'paused';
}
