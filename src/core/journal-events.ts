import type { BatchState } from './batch-state-name.js';
import type { PauseReason } from './pause-rules.js';
import type { Classification } from './result.js';
import type { PauseCause } from './pause-cause.js';

/**
 * The batch journal (`events.jsonl`, SPEC §6.10) as a closed union: every record this version appends, one type
 * each, with its fields. The store adds `seq`; `at` is the injected clock's ISO time. Pure types.
 *
 * Writers append only `JournalEvent`. Readers get `JournalRecord`: the same union as it was read back (the fields
 * of a record from an older writer may be missing, so a reader still checks each value it uses), plus
 * `ForeignJournalRecord` for a type this version does not know (an older or newer writer): kept as read, never
 * interpreted, never a crash. Readers take `knownEntry(record)` (null for a foreign one), then narrow by `type`.
 */

export interface BatchCreatedEvent {
  readonly type: 'batch_created';
  readonly at: string;
  readonly batch_id: string;
  readonly jobs: number;
}

export interface SupervisorStartedEvent {
  readonly type: 'supervisor_started';
  readonly at: string;
  readonly mode: 'start' | 'resume';
  readonly pid: number;
  /** `/proc/<pid>/stat` field 22 as read (null where it cannot be read), and the host's boot id. */
  readonly start_ticks: string | null;
  readonly boot_id: string | null;
}

export interface ResumedEvent {
  readonly type: 'resumed';
  readonly at: string;
  readonly cleared: readonly PauseReason[];
  readonly kept: readonly PauseReason[];
}

export interface PausedEvent {
  readonly type: 'paused';
  readonly at: string;
  readonly reasons: readonly PauseReason[];
  readonly job_id?: string;
  /** What caused it where an error did (code and masked message; issue 27). */
  readonly cause?: PauseCause;
}

export interface StopRequestedEvent {
  readonly type: 'stop_requested';
  readonly at: string;
  readonly terminate: boolean;
}

export interface SupervisorExitedEvent {
  readonly type: 'supervisor_exited';
  readonly at: string;
  readonly state: BatchState;
}

export interface SourceCheckEvent {
  readonly type: 'source_check';
  readonly at: string;
  readonly phase: 'before_first_dispatch' | 'drain';
  readonly ok: boolean;
  readonly checked: number;
  readonly mismatched: readonly string[];
}

export interface ReservationReleasedUnclaimedEvent {
  readonly type: 'reservation_released_unclaimed';
  readonly at: string;
  readonly job_id: string;
  readonly reservation_id: string;
}

/** A claimed pair a new supervisor found: finished but its slot held, reattached, or lost. */
export type RecoveredEvent =
  | {
      readonly type: 'recovered';
      readonly at: string;
      readonly job_id: string;
      readonly action: 'reconcile_finished';
    }
  | {
      readonly type: 'recovered';
      readonly at: string;
      readonly job_id: string;
      readonly action: 'reattach';
      readonly container_id: string;
      /** The engine's container status (the runtime port's `ContainerStatus`). */
      readonly status: string;
    }
  | {
      readonly type: 'recovered';
      readonly at: string;
      readonly job_id: string;
      readonly action: 'lost_worker';
      readonly container_id: string | null;
      readonly rebooted: boolean;
    };

export interface AdmissionRefusedEvent {
  readonly type: 'admission_refused';
  readonly at: string;
  readonly job_id: string;
  /** The registry's refusal (`host_full`, `gpu_budget`, `port_held`). */
  readonly reason: string;
}

export interface ClaimedEvent {
  readonly type: 'claimed';
  readonly at: string;
  readonly job_id: string;
  readonly claim_id: string;
  readonly reservation_id: string;
  readonly claimed_at: string;
  readonly deadline: string;
}

export interface ContainerCreatedEvent {
  readonly type: 'container_created';
  readonly at: string;
  readonly job_id: string;
  readonly container_id: string;
}

export interface PairPlacedEvent {
  readonly type: 'pair_placed';
  readonly at: string;
  readonly job_id: string;
  readonly node: string;
}

export type HarnessFaultEvent =
  /** `path` and `err` (the error's code, e.g. ENOSPC): what could not be written (issue 27; absent before). */
  | {
      readonly type: 'harness_fault';
      readonly at: string;
      readonly job_id: string;
      readonly fault: 'result_write_failed';
      readonly path?: string;
      readonly err?: string;
    }
  | {
      readonly type: 'harness_fault';
      readonly at: string;
      readonly job_id: string;
      readonly fault: 'receipt_write_failed';
      readonly err: string;
    };

export interface PairFinishedEvent {
  readonly type: 'pair_finished';
  readonly at: string;
  readonly job_id: string;
  readonly claim_id: string;
  readonly classification: Classification;
  readonly reasons: readonly string[];
  /** The outcome's broken rules (result.json `outcome_problems`), when there are any. */
  readonly outcome_problems?: readonly { readonly path: string; readonly message: string }[];
  readonly started_at: string;
  readonly finished_at: string;
  readonly gpu_peak_mib: number | null;
  /** Why it failed in words (core/next-steps.ts `explainResult`; its stderr's tail already masked), when there is more to say. */
  readonly why?: readonly string[];
  /** An allowlisted pair's attempts: counts and refused hosts (masked), as in its result.json (docs/spec.md §5.6). */
  readonly egress?: {
    readonly allowed: number;
    readonly refused: number;
    readonly refused_hosts: readonly string[];
  };
}

export interface ReconciledEvent {
  readonly type: 'reconciled';
  readonly at: string;
  readonly job_id: string;
  /** The reconciliation's kind and reason (`committed`, `hold` …). */
  readonly kind: string;
  readonly reason: string | null;
}

export interface CleanupRetriedEvent {
  readonly type: 'cleanup_retried';
  readonly at: string;
  readonly job_id: string;
  readonly containers: number;
  readonly verified_absent: boolean;
}

/**
 * The batch's image plan at work (issue 43): a pull started, done (with the bytes it takes in the store), retried,
 * failed; an image removed to stay within the budget; a pair that waited for its image (`waited_ms`). Never a
 * credential: messages are masked with the batch's secrets.
 */
export interface ImageEvent {
  readonly type: 'image';
  readonly at: string;
  readonly action: 'pull_started' | 'pulled' | 'pull_retry' | 'pull_failed' | 'evicted' | 'waited';
  readonly image: string;
  readonly ref: string;
  readonly bytes?: number;
  readonly attempt?: number;
  readonly message?: string;
  /** pull_failed: `unavailable` (the batch pauses) or `failed` (its pairs fail with image_pull_failed). */
  readonly kind?: 'unavailable' | 'failed';
  readonly job_id?: string;
  readonly waited_ms?: number;
  /** Swarm: the node whose engine pulled, removed or failed (`waited`: the nodes that held it when the wait ended). */
  readonly node?: string;
  readonly nodes?: readonly string[];
}

/** Every record this version appends. */
export type JournalEvent =
  | BatchCreatedEvent
  | SupervisorStartedEvent
  | ResumedEvent
  | PausedEvent
  | StopRequestedEvent
  | SupervisorExitedEvent
  | SourceCheckEvent
  | ReservationReleasedUnclaimedEvent
  | RecoveredEvent
  | AdmissionRefusedEvent
  | ClaimedEvent
  | ContainerCreatedEvent
  | PairPlacedEvent
  | HarnessFaultEvent
  | PairFinishedEvent
  | ReconciledEvent
  | CleanupRetriedEvent
  | ImageEvent;

export type JournalEventType = JournalEvent['type'];

/** An event without its time: what a writer decides; the journal adds `at` from the injected clock. */
export type JournalEventBody = JournalEvent extends infer E
  ? E extends JournalEvent
    ? Omit<E, 'at'>
    : never
  : never;

/** The fields of one event type, without `type` and `at` (a union where the type has several shapes). */
export type JournalFieldsOf<T extends JournalEventType> =
  Extract<JournalEvent, { readonly type: T }> extends infer E
    ? E extends JournalEvent
      ? Omit<E, 'type' | 'at'>
      : never
    : never;

/** How the batch code journals: the type and its fields; the journal adds `at` from the injected clock. */
export type JournalAppend = <T extends JournalEventType>(
  type: T,
  fields: JournalFieldsOf<T>,
) => Promise<void>;

const KNOWN_TYPES: ReadonlySet<string> = new Set<JournalEventType>([
  'batch_created',
  'supervisor_started',
  'resumed',
  'paused',
  'stop_requested',
  'supervisor_exited',
  'source_check',
  'reservation_released_unclaimed',
  'recovered',
  'admission_refused',
  'claimed',
  'container_created',
  'pair_placed',
  'harness_fault',
  'pair_finished',
  'reconciled',
  'cleanup_retried',
  'image',
]);

/**
 * An entry whose type this version does not know: its `type` (and `at`, `seq`) only are read. Its `type` is any
 * string, so a reader narrows with `knownEntry` first: the type checker refuses a field read before it.
 */
export type ForeignJournalEntry = {
  readonly type: string;
  readonly at?: string;
  readonly seq?: number;
};

/** An entry as read back: every field but `type` may be absent (an older writer) or hold another type: check it. */
type AsRead<E> = E extends JournalEvent
  ? { readonly type: E['type']; readonly at?: string; readonly seq?: number } & {
      readonly [F in Exclude<keyof E, 'type' | 'at'>]?: unknown;
    }
  : never;

export type KnownJournalEntry = AsRead<JournalEvent>;

/** What the folds take: a record read back, or one just appended (`seq` and `at` where the caller has them). */
export type JournalEntry = KnownJournalEntry | ForeignJournalEntry;

/** A complete record of `events.jsonl` as the store reads it back. */
export type JournalRecord = JournalEntry & { readonly at: string; readonly seq: number };

export function isKnownJournalType(type: string): type is JournalEventType {
  return KNOWN_TYPES.has(type);
}

/** The entry as one of ours, ready to narrow by `type`; null for a foreign type (an older or newer writer). */
export function knownEntry(entry: JournalEntry): KnownJournalEntry | null {
  return isKnownJournalType(entry.type) ? (entry as KnownJournalEntry) : null;
}
