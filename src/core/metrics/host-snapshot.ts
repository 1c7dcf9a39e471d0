import type { Counts } from '../batch-state.js';
import type { BatchState } from '../batch-state-name.js';
import type { PairPhase } from '../pair-phases.js';
import type { PauseReason } from '../pause-rules.js';
import type { Classification } from '../result.js';

/**
 * What the metrics exporter (`roboguide-eval metrics`, issue 45) read from one host, as plain data: the adapter
 * (src/adapters/metrics/) turns it into Prometheus series. Every label it carries comes from a closed set (states,
 * pause reasons, classifications, reasons, phases, error codes) or a bounded one (the batches exported, each
 * batch's at most 10 recent failed job ids, the registry's nodes and operations): docs/metrics.md "Labels".
 */
export interface HostSnapshot {
  readonly batches: readonly BatchSnapshot[];
  /** The registry's view; null when it could not be read this scrape (`roboguide_registry_up` 0). */
  readonly registry: RegistrySnapshot | null;
  /** Batch folders found that could not be read this scrape (`roboguide_exporter_batches_unreadable`). */
  readonly unreadable: number;
  /** Batch folders found under the roots (exported or not). */
  readonly discovered: number;
}

export interface BatchSnapshot {
  readonly batchId: string;
  readonly state: BatchState;
  readonly pauseReasons: readonly PauseReason[];
  /** The error code of each pause in force that an error caused (`pause_causes`), never the message. */
  readonly pauseCauses: readonly { readonly reason: PauseReason; readonly code: string }[];
  readonly counts: Counts;
  readonly workersAllowed: number;
  /** status `eta.remaining_sec`; null when status gives none. */
  readonly etaSec: number | null;
  readonly supervisor: {
    /** The recorded supervisor is the same live process (pid, start time, boot id) and has not exited. */
    readonly up: boolean;
    /** Seconds since the batch's files last changed (status.json, events.jsonl, supervisor.json). */
    readonly heartbeatAgeSec: number | null;
  };
  /** status `failed.pairs`: at most 10 newest failed pairs (the one place a job id is a label). */
  readonly recentFailures: readonly {
    readonly jobId: string;
    readonly classification: Classification;
    readonly reason: string;
  }[];
  /** Pairs whose last removal record says the container was not proven gone (must be 0). */
  readonly containersUnverified: number;
  /** Finished pairs folded in since the previous scan (each once), or all of them after a `reset`. */
  readonly finished: readonly FinishedPair[];
  /** The journal was replaced or cut: the batch's counters start again from `finished`. */
  readonly reset: boolean;
}

/** One finished pair as the journal and its result.json tell it. */
export interface FinishedPair {
  readonly classification: Classification;
  readonly reasons: readonly string[];
  /** started_at to finished_at, seconds; null when either is unreadable. */
  readonly durationSec: number | null;
  /** result.json `phases`, seconds per phase; null for a result without them (lost worker, older results). */
  readonly phasesSec: Readonly<Record<PairPhase, number>> | null;
  /** result.json `logs.*.bytes`; null when the result could not be read. */
  readonly logBytes: { readonly stdout: number; readonly stderr: number } | null;
  /** result.json `outcome_redactions`. */
  readonly outcomeRedactions: number;
}

export interface RegistrySnapshot {
  readonly nodes: readonly NodeCapacity[];
}

export interface NodeCapacity {
  readonly node: string;
  readonly slotsHeld: number;
  readonly slotsLimit: number;
  readonly gpuMibHeld: number;
  /** The node's GPU budget; null: no GPU limit. */
  readonly gpuMibBudget: number | null;
}

/** Durations from ISO times, in seconds; null when either does not parse or the end precedes the start. */
export function secondsBetween(startIso: unknown, endIso: unknown): number | null {
  if (typeof startIso !== 'string' || typeof endIso !== 'string') return null;
  const ms = Date.parse(endIso) - Date.parse(startIso);
  return Number.isFinite(ms) && ms >= 0 ? ms / 1000 : null;
}
