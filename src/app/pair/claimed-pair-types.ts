// The claimed-pair use case's inputs (docs/claimed-pair-design.md): its ports, the plan (what differs between
// `pair run`, a batch pair and serve's pairs, as data) and the hooks (effects only the caller has).
import type { JournalAppend } from '../../core/journal-events.js';
import type { ProtectedPaths } from '../../core/mount-policy.js';
import type { PairLimits } from '../../core/pair-limits.js';
import type { Receipt } from '../../core/receipt.js';
import type { ResultRecord } from '../../core/result.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { ExecutePairDeps, PairJob } from './execute-pair-types.js';
import type { AdmitRefusal } from '../../core/admission-rule.js';
import type { AdmitRequest, CapacityRegistry } from '../ports/capacity-registry.js';
import type { ReconcileReport } from './reconcile-pair.js';

export interface ClaimedPairDeps {
  /** The store the pair's evidence lies in (`jobRel` inside it). */
  readonly store: EvidenceStore;
  readonly registry: CapacityRegistry;
  readonly execute: ExecutePairDeps;
}

/** The receipt's facts the caller knows (the claim, reservation, time, host and mount mode are added here). */
export interface ReceiptFacts {
  readonly image: string;
  readonly imageId?: string;
  readonly outcomePath: string;
  readonly sourceSha256: Readonly<Record<string, string>>;
  readonly codeVersion: string;
  readonly network: 'none' | 'bridge';
  readonly egress?: PairJob['egress'];
  readonly runtime: string;
  readonly registryPath?: string;
}

/** Data: what differs between `pair run` (and serve's pairs) and a batch pair. */
export interface PairPlan {
  readonly batchId: string;
  readonly claimId: string;
  /** The job as run (image reference or pinned id, runtime, egress); placement is pinned by admission. */
  readonly job: PairJob;
  /** One admission request, on the registry's own node (`nodes` null) or on the first of `nodes` with room. */
  readonly admission: { readonly request: AdmitRequest; readonly nodes: readonly string[] | null };
  readonly receipt: ReceiptFacts;
  /** The pair's folder in the store ('.' for `pair run`, `jobs/<id>` in a batch). */
  readonly jobRel: string;
  /** `pair run`: the store's root is the pair's own output directory, created (mode 0700) by the claim. */
  readonly createsRoot: boolean;
  readonly environment: {
    readonly values: Readonly<Record<string, string>>;
    readonly secrets: readonly string[];
  };
  readonly sessionsDir: string;
  readonly stopBudgetSec: number;
  readonly timeoutSeconds: number;
  readonly bindAddress: string;
  readonly allowedHttpStatuses: readonly number[];
  readonly mountRules: Pick<ProtectedPaths, 'registryPath' | 'mountRoots'>;
  /** The container's limits; a function is asked once the receipt is built (a `pair run` warns of a low default). */
  readonly limits: PairLimits | (() => Promise<PairLimits>);
  /** Issue 43: the image could not be pulled; the create is refused with this message (`image_pull_failed`). */
  readonly createRefusal?: string;
  /** A full host or a held port: `pair run` and serve fail (`E_REGISTRY`/`E_CAPACITY`); a batch waits. */
  readonly onAdmitRefused: 'throw' | 'wait';
  /** result.json unwritable: `pair run` and serve fail (`E_STORE`); a batch journals it and pauses. */
  readonly onResultUnwritten: 'throw' | 'pause';
  /** A claim that stands without a container is finished by a later resume (a batch) or released now (`pair run`). */
  readonly resumeFinishesClaim: boolean;
}

/** The running pair as its caller sees it (the supervisor's running set, serve's pair status). */
export interface RunningHandle {
  readonly jobId: string;
  containerId: string | null;
  readonly startedAt: string;
  readonly deadline: string;
  readonly terminate: AbortController;
  /** Aborted by a third Ctrl-C: the stop budget is cut short (SIGKILL now). */
  readonly killNow: AbortController;
  /** Swarm: the node the pair was placed on, once known. */
  node?: string;
}

/** Effects only the caller has. Each is optional: absent, nothing happens. */
export interface PairHooks {
  /** The batch journal (`claimed`, `container_created`, `harness_fault`, …); none for `pair run`. */
  readonly journal?: JournalAppend;
  /** The crash suite's kill points (`after_reserve`, `after_claim`, `after_container_created`, …). */
  readonly failpoint?: (name: string) => void;
  readonly pausepoint?: (name: string) => Promise<void>;
  /** The pair is claimed (its receipt published), before its container is made. */
  readonly onClaimed?: (receipt: Receipt) => void;
  /** The pair runs: the caller may stop it through the handle's controllers. */
  readonly onRunning?: (handle: RunningHandle) => void;
  /** result.json is written (durably), before reconciliation. */
  readonly onResultWritten?: (result: ResultRecord) => Promise<void>;
}

/** The claim did not stand (its slot given back by the release rule before this is reported). */
export interface ClaimFailure {
  readonly kind: 'claim_failed';
  readonly reason: 'receipt_write_failed' | 'already_claimed';
  /** receipt_write_failed: what the file system said. */
  readonly error?: unknown;
}

export type ClaimedPairOutcome =
  | { readonly kind: 'refused'; readonly admitted: AdmitRefusal }
  | ClaimFailure
  | {
      readonly kind: 'ran';
      readonly receipt: Receipt;
      readonly result: ResultRecord;
      readonly finish: FinishOutcome;
    };

/** How the finished pair ended: its result unwritten (slot kept), or reconciled (released, or why not). */
export type FinishOutcome =
  | { readonly kind: 'unwritten'; readonly error: unknown; readonly path: string }
  | { readonly kind: 'reconciled'; readonly report: ReconcileReport };
