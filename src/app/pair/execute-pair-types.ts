// The inputs and outputs of executePair: the job fields, the dependencies, the input and the executed pair.
import type { Readable, Transform } from 'node:stream';
import type { ExtractReport } from '../ports/session-archive.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { OutcomeRead } from '../../core/outcome.js';
import type { ProviderFailure, ResultRecord } from '../../core/result.js';
import type { ImageSessionsMemo } from '../../core/sessions-skip.js';
import type { NetworkChoice } from '../../core/pair-network.js';
import type { EgressInput } from '../../core/egress/policy.js';
import type { EgressGate } from '../ports/egress.js';
import type { PairLimits, RequestedLimits } from '../../core/pair-limits.js';
import type { DiskUsage, DiskUsageBudget, OpenFileScan } from '../ports/disk-usage.js';
import type { PrivilegeSweep } from '../ports/privilege-sweep.js';
import type { PairExecution } from './pair-lifecycle-types.js';
import type { Clock } from '../ports/clock.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import type { FileSystem } from '../ports/file-system.js';
import type { ExecutorInventory } from '../ports/executor-inventory.js';
import type { HostIdentity } from '../ports/host-identity.js';
import type { Logger } from '../ports/logger.js';
import type { OutcomeReader } from '../ports/outcome-reader.js';
import type { ProtectedPaths } from '../../core/mount-policy.js';
import type { MountGuard } from './mount-guard.js';
import type { MountStager } from '../ports/mount-stager.js';

/** The fields of a manifest job (or a `pair run` spec) the lifecycle needs. */
export interface PairJob extends RequestedLimits {
  readonly job_id: string;
  readonly argv: readonly string[];
  readonly cwd: string;
  readonly outcome_path: string;
  readonly ports: readonly number[];
  /** `bridge` (absent: the same) or `none` (docs/spec.md §5.1, "network"). */
  readonly network?: NetworkChoice | undefined;
  /** The egress policy as written (docs/spec.md §5.6); absent: the network's (none → none, bridge → open). */
  readonly egress?: EgressInput | undefined;
  /** Cap on each of stdout and stderr (bytes); absent: no cap. */
  readonly log_limit_bytes?: number | undefined;
  readonly image: string;
  readonly gpus?: 'all' | number | readonly string[] | undefined;
  readonly b1_ports?: boolean | undefined;
  /** Swarm placement constraints (issue 13); the local executor has one node and ignores them. */
  readonly placement?: readonly string[] | undefined;
  /** The container's OCI runtime (`runc`, `runsc`…; absent: the engine's default). */
  readonly runtime?: string | undefined;
}

export interface ExecutePairDeps extends ExecutorInventory {
  readonly runtime: ContainerRuntime;
  /** The egress proxy (docs/spec.md §5.6); absent: an allowlisted pair fails closed (engine_error). */
  readonly egress?: EgressGate;
  /** Time: the pair's deadlines, its waits and timers. */
  readonly clock: Clock;
  readonly logger: Logger;
  readonly fs: FileSystem;
  /** Who this process is (the receipt's `supervisor`), the boot id, whether a recorded process still lives. */
  readonly host: HostIdentity;
  /** The driver's outcome file: read, digest, masked copy. */
  readonly outcomes: OutcomeReader;
  readonly createRedactor: (secrets: readonly string[]) => Transform;
  readonly extractSessions: (
    archive: Readable,
    targetDir: string,
    transform: () => Transform,
    signal: AbortSignal,
    /** Masks secrets in archive names before they become file names or refusal texts. */
    redactName: (name: string) => string,
  ) => Promise<ExtractReport>;
  readonly diagnose: (sessionsDir: string) => Promise<ProviderFailure | null>;
  /** What images hold at their sessions dir, shared by the pairs of this process (see PairLifecycleDeps). */
  readonly imageSessions?: ImageSessionsMemo;
  readonly verifyAbsentTimeoutMs?: number;
  /** Measures the pair's folders for its disk limit (issue 22). Absent: the disk is not watched. */
  readonly disk?: DiskUsage;
  /** The disk watch's interval (default DISK_POLL_INTERVAL_MS); tests shorten it. */
  readonly diskPollIntervalMs?: number;
  /** What one disk walk or open-file scan may cost (default DISK_WALK_BUDGET); tests shrink it. */
  readonly diskWalkBudget?: DiskUsageBudget;
  /** Counts the files a pair's processes hold open after deleting them. Absent: they are not counted. */
  readonly openFiles?: OpenFileScan;
  /** Clears setuid/setgid bits under the pair's host folders once it ran (docs/secrets.md "host privilege"). */
  readonly privilegeSweep?: PrivilegeSweep;
  /** Makes the private outcome folder writable by the container's root where the engine remaps it (userns-remap). */
  readonly handOverOutcomeFolder?: (dir: string) => Promise<void>;
  /**
   * After the container is gone: publish the outcome bytes at the job's host `outcome_path` (atomic replace),
   * the operator's copy. A failure is logged, never a verdict: the private copy is the evidence.
   */
  readonly publishOutcome?: (bytes: Uint8Array, hostPath: string) => Promise<void>;
  /**
   * The host's part of the mount rules (every user's home, the engine's sockets and real data root, our own state
   * folders), asked just before each create; absent: the built-in rules only (core/mount-policy.ts).
   */
  readonly hostMountRules?: () => Promise<
    Pick<ProtectedPaths, 'homeDir' | 'homeDirs' | 'engineSocketPaths' | 'ownedDirs'>
  >;
  /** Who may own each component of a bind source (root and the supervisor's user); absent: owners are not checked. */
  readonly mountOwners?: readonly number[];
  /** Stages bind sources onto points the engine gets (docs/spec.md 5.3); absent: the `walked` mode. */
  readonly mountStager?: MountStager;
  /**
   * After the container is gone: mask every secret in the private outcome copy (the evidence), replacing the file
   * when masking changed it and it still holds `bytes`; returns the bytes to hash, and `masked: false` when the
   * replace failed and the copy keeps the driver's bytes. Absent: the copy is kept as the driver wrote it.
   */
  readonly maskOutcome?: (
    bytes: Uint8Array,
    privatePath: string,
    secrets: readonly string[],
  ) => Promise<{ readonly kept: Uint8Array; readonly masked: boolean }>;
}

export interface ExecutePairInput {
  readonly store: EvidenceStore;
  /** Job folder relative to the store root ('jobs/<id>' in a batch, '.' for `pair run`). */
  readonly jobRel: string;
  readonly batchId: string;
  readonly claimId: string;
  readonly job: PairJob;
  /** The job's environment with references resolved. Never persisted. */
  readonly environment: Readonly<Record<string, string>>;
  readonly secrets: readonly string[];
  readonly sessionsDir: string;
  readonly stopBudgetSec: number;
  readonly bindAddress: string;
  readonly allowedHttpStatuses: readonly number[];
  readonly terminate?: AbortSignal;
  /** Aborting it during (or before) a controlled stop kills the container at once (the stop budget cut short). */
  readonly killNow?: AbortSignal;
  readonly onCreated?: (containerId: string) => Promise<void>;
  /**
   * The launch-time mount guard, resolved ahead by the caller (`mountGuardFor`; a batch resolves it while the claim
   * is written, issue 26). Absent: resolved here. Ignored on reattach.
   */
  readonly mountGuard?: Promise<MountGuard>;
  /** Reattach to the container of an earlier supervisor (resume), claimed at `claimedAtMs`. */
  readonly reattach?: { readonly containerId: string; readonly claimedAtMs: number };
  /** The wall budget: the claim time plus `timeout_seconds`, in epoch ms (src/core/wall-budget.ts). */
  readonly deadlineMs: number;
  readonly readOutcome: (path: string) => Promise<OutcomeRead>;
  /** The run's part of the mount rules: the registry file and the operator's `--mount-root` folders (the output directory is the store's root). */
  readonly mountRules?: Pick<ProtectedPaths, 'registryPath' | 'mountRoots'>;
  /**
   * The limits the container runs under (src/core/pair-limits.ts), resolved by the caller from the job's fields and
   * the batch's defaults. Absent: the job's fields over the fixed fallbacks of an unknown host.
   */
  readonly limits?: PairLimits;
}

export interface ExecutedPair {
  readonly result: ResultRecord;
  readonly execution: PairExecution;
  /**
   * The pair's staging points released (umount(8), begun once its container was seen gone; never rejects). The
   * caller awaits it after writing the result (issue 39: an umount waits out the kernel's RCU grace period, and
   * nothing of the result reads a staging point); a crash before it leaves points the next sweep removes.
   */
  readonly released: Promise<void>;
}

/** The folders of one pair's evidence the lifecycle writes into, and the redactor of its texts. */
export interface PairPaths {
  readonly sessionsRel: string;
  readonly sessionsAbs: string;
  readonly privateOutcomeFile: string;
  readonly redact: (text: string) => string;
}
