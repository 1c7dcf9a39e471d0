import { SESSIONS_DIR, STDERR_LOG, STDOUT_LOG } from '../core/evidence-names.js';
import { dirname, join } from 'node:path';
import type { Readable, Transform } from 'node:stream';
import { textRedactor } from '../core/redaction/redact-text.js';
import type { ExtractReport } from './ports/session-archive.js';
import type { EvidenceStore } from './evidence/evidence-store.js';
import type { LogSink } from './evidence/log-sink.js';
import type { OpenedLog } from './pair-logs.js';
import { b1PortEnvironment } from '../core/b1-config.js';
import { classify, type HarnessFault } from '../core/classify.js';
import { deviceRequestsFor } from '../core/gpu/device-requests.js';
import { checkOutcome, formatOutcomeProblem, outcomeProblemsOf, type OutcomeRead } from '../core/outcome.js';
import { errorDetail } from '../core/errors.js';
import { containerName, PRIVATE_OUTCOME_DIR, privateOutcomeRel } from '../core/receipt.js';
import type { DiskRecord, ProviderFailure, ResultRecord } from '../core/result.js';
import type { ImageSessionsMemo } from '../core/sessions-skip.js';
import type { NetworkChoice } from '../core/pair-network.js';
import {
  containerLimitsOf,
  effectiveLimits,
  limitDefaults,
  type PairLimits,
  type RequestedLimits,
} from '../core/pair-limits.js';
import { DiskWatch } from './disk-watch.js';
import type { DiskUsage } from './ports/disk-usage.js';
import { buildResult, outcomeForResult } from './build-result.js';
import { sha256Hex } from './digest.js';
import { runPairLifecycle, type PairExecution, type PairLifecycleDeps } from './pair-lifecycle.js';
import { systemClock, type Clock } from './ports/clock.js';
import type { ContainerRuntime, ContainerSpec } from './ports/container-runtime.js';
import type { FileSystem } from './ports/file-system.js';
import type { ExecutorInventory } from './ports/executor-inventory.js';
import type { HostIdentity } from './ports/host-identity.js';
import type { Logger } from './ports/logger.js';
import type { OutcomeReader } from './ports/outcome-reader.js';
import type { ProtectedPaths } from '../core/mount-policy.js';
import { resolveProtected } from './job-paths.js';
import { MountGuard } from './mount-guard.js';

const SESSIONS_TIMEOUT_MS = 120_000;

/** The fields of a manifest job (or a `pair run` spec) the lifecycle needs. */
export interface PairJob extends RequestedLimits {
  readonly job_id: string;
  readonly argv: readonly string[];
  readonly cwd: string;
  readonly outcome_path: string;
  readonly ports: readonly number[];
  /** `bridge` (absent: the same) or `none` (docs/spec.md §5.1, "network"). */
  readonly network?: NetworkChoice | undefined;
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
  readonly clock: Clock;
  /** How the lifecycle waits between probes (default: a real timer); a test pairs it with a fake clock. */
  readonly sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
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
}

/** Labels on every container we create (SPEC §11): nothing of ours runs unlabelled. */
export function pairLabels(batchId: string, jobId: string, claimId: string): Record<string, string> {
  return { 'roboguide.batch': batchId, 'roboguide.job': jobId, 'roboguide.claim': claimId };
}

/** The host folder of the pair's private outcome (inside its evidence folder), and the file in it. */
export function privateOutcomePaths(input: Pick<ExecutePairInput, 'store' | 'jobRel' | 'job'>): {
  readonly dir: string;
  readonly file: string;
} {
  const file = input.store.resolve(join(input.jobRel, privateOutcomeRel(input.job.outcome_path)));
  return { dir: dirname(file), file };
}

/**
 * The container: cwd bind-mounted at the same path, and the pair's private outcome folder at the outcome's
 * folder path (nested mounts are applied parent first), so the driver writes `outcome_path` as before but
 * no other pair can see or touch it, whatever the manifest's layout. Nothing else of the host is mounted.
 */
export function containerSpecFor(input: ExecutePairInput): ContainerSpec {
  const { job } = input;
  const binds = [
    { hostPath: job.cwd, containerPath: job.cwd, readOnly: false },
    {
      hostPath: privateOutcomePaths(input).dir,
      containerPath: dirname(job.outcome_path),
      readOnly: false,
      collect: true,
    },
  ];
  return {
    name: containerName(job.job_id, input.claimId),
    image: job.image,
    cmd: job.argv,
    workingDir: job.cwd,
    env: {
      ...input.environment,
      ...(job.b1_ports ? b1PortEnvironment(job.ports) : {}),
      ROBOGUIDE_BATCH_ID: input.batchId,
      ROBOGUIDE_JOB_ID: job.job_id,
      ROBOGUIDE_OUTCOME_PATH: job.outcome_path,
    },
    binds,
    ports: job.ports,
    bindAddress: input.bindAddress,
    network: job.network ?? 'bridge',
    deviceRequests: deviceRequestsFor(job.gpus),
    labels: pairLabels(input.batchId, job.job_id, input.claimId),
    stopTimeoutSec: input.stopBudgetSec,
    ...(job.placement !== undefined && job.placement.length > 0 ? { placement: job.placement } : {}),
    limits: containerLimitsOf(limitsOf(input)),
    ...(job.runtime !== undefined ? { runtime: job.runtime } : {}),
  };
}

/** The limits of this pair: the caller's, else the job's fields over the fallbacks of an unknown host. */
export function limitsOf(input: Pick<ExecutePairInput, 'limits' | 'job'>): PairLimits {
  return (
    input.limits ??
    effectiveLimits(
      input.job,
      limitDefaults({ memoryTotalBytes: null, outputFreeBytes: null, maxConcurrentPairs: 1 }),
    )
  );
}

/** The folders of one pair's evidence the lifecycle writes into, and the redactor of its texts. */
interface PairPaths {
  readonly sessionsRel: string;
  readonly sessionsAbs: string;
  readonly privateOutcomeFile: string;
  readonly redact: (text: string) => string;
}

/**
 * Run one pair through the lifecycle with the evidence wired to the store, then classify it and build its
 * result.json. Writing the result is the caller's (batch or `pair run`), because what a failed write means
 * differs between them.
 */
export async function executePair(deps: ExecutePairDeps, input: ExecutePairInput): Promise<ExecutedPair> {
  const { store, jobRel, job } = input;
  const sessionsRel = join(jobRel, SESSIONS_DIR);
  // Both bind-mount sources must exist: the driver's working directory (made by the mount guard, one folder at a
  // time, never through a link), and its private outcome folder.
  const privateOutcome = privateOutcomePaths(input);
  await store.ensureDir(join(jobRel, PRIVATE_OUTCOME_DIR));
  const guard = input.reattach ? null : await (input.mountGuard ?? mountGuardFor(deps, input));
  const paths: PairPaths = {
    sessionsRel,
    sessionsAbs: join(store.root, sessionsRel),
    privateOutcomeFile: privateOutcome.file,
    redact: textRedactor(input.secrets),
  };
  const lifecycleDeps = lifecycleDepsFor(deps, input, paths);
  const disk = diskWatchFor(deps, input, privateOutcome.dir);
  if (input.reattach) disk?.attach(input.reattach.containerId);
  disk?.start();
  let execution: PairExecution;
  let diskRecord: DiskRecord | undefined;
  try {
    execution = await runPairLifecycle(
      guard === null ? lifecycleDeps : { ...lifecycleDeps, runtime: guard.wrap(deps.runtime) },
      {
        container: containerSpecFor(input),
        outcomePath: privateOutcome.file,
        sessionsDir: input.sessionsDir,
        stopBudgetSec: input.stopBudgetSec,
        secrets: input.secrets,
        ...(input.terminate ? { terminate: input.terminate } : {}),
        ...(disk ? { halt: disk.halt } : {}),
        ...onCreatedWith(input.onCreated, disk),
        ...(input.reattach ? { reattach: input.reattach } : {}),
        deadlineMs: input.deadlineMs,
      },
    );
  } finally {
    // Measured once more at collection (this also ends the interval loop when the lifecycle threw).
    diskRecord = await disk?.finish();
  }
  const refusal = guard?.refusal ?? null;
  if (refusal !== null)
    deps.logger.warn(
      { job: job.job_id, mount: refusal.field, rule: refusal.rule },
      'mount refused at launch: the pair fails closed',
    );
  // A refused mount is the pair's reason, not an engine fault (the guard's throw ended the create or the start).
  let checked =
    refusal === null
      ? execution
      : {
          ...execution,
          engineFault: null,
          engineError: { kind: 'mount_refused', message: `${refusal.field}: ${refusal.rule}` },
        };
  const unremoved = guard?.unremoved ?? null;
  // Refused right after its create and not confirmed gone: the pair's container is known and its removal unverified.
  if (unremoved !== null)
    checked = {
      ...checked,
      container: { ...checked.container, id: unremoved },
      cleanup: { ...checked.cleanup, removed: false, verified_absent: false },
    };
  await publishOperatorCopy(deps, checked, job);
  return {
    result: await resultOf(deps, input, checked, paths, refusal !== null, diskRecord),
    execution: checked,
  };
}

/**
 * The launch-time mount guard of one pair (src/app/mount-guard.ts), with the rules resolved to real paths now. It
 * only reads (realpath, lstat): resolving it before the claim is durable changes nothing on disk.
 */
export async function mountGuardFor(
  deps: Pick<ExecutePairDeps, 'fs' | 'hostMountRules' | 'mountOwners'>,
  input: Pick<ExecutePairInput, 'mountRules' | 'store'>,
): Promise<MountGuard> {
  const host = (await deps.hostMountRules?.()) ?? {};
  const rules = await resolveProtected(deps.fs, {
    ...host,
    ...input.mountRules,
    outputDir: input.store.root,
  });
  return new MountGuard(deps.fs, {
    rules,
    ...(deps.mountOwners !== undefined ? { owners: deps.mountOwners } : {}),
  });
}

/** The caller's `onCreated`, with the disk watch told the container (its writable layer counts from then on). */
function onCreatedWith(
  onCreated: ExecutePairInput['onCreated'],
  disk: DiskWatch | undefined,
): { onCreated?: (containerId: string) => Promise<void> } {
  if (disk === undefined) return onCreated ? { onCreated } : {};
  return {
    onCreated: async (containerId) => {
      disk.attach(containerId);
      await onCreated?.(containerId);
    },
  };
}

/** The disk watch of this pair: its cwd and private outcome folder, and its container's writable layer. */
function diskWatchFor(
  deps: ExecutePairDeps,
  input: ExecutePairInput,
  privateOutcomeDir: string,
): DiskWatch | undefined {
  if (deps.disk === undefined) return undefined;
  return new DiskWatch(
    {
      disk: deps.disk,
      runtime: deps.runtime,
      clock: deps.clock,
      sleep: deps.sleep ?? systemClock.sleep,
      logger: deps.logger,
    },
    {
      folders: [input.job.cwd, privateOutcomeDir],
      limitBytes: limitsOf(input).disk_limit_bytes,
      ...(deps.diskPollIntervalMs !== undefined ? { intervalMs: deps.diskPollIntervalMs } : {}),
    },
  );
}

/** The lifecycle's evidence, wired to the store: the log files, the sessions folder, the diagnosis. */
function lifecycleDepsFor(
  deps: ExecutePairDeps,
  input: ExecutePairInput,
  paths: PairPaths,
): PairLifecycleDeps {
  const { store, jobRel, job } = input;
  const { sessionsRel, sessionsAbs, redact } = paths;
  return {
    runtime: deps.runtime,
    clock: deps.clock,
    ...(deps.sleep !== undefined ? { sleep: deps.sleep } : {}),
    logger: deps.logger,
    createRedactor: deps.createRedactor,
    openLogs: async (append) => {
      const [stdout, stderr] = await store.openLogs([join(jobRel, STDOUT_LOG), join(jobRel, STDERR_LOG)], {
        append,
        ...(job.log_limit_bytes !== undefined ? { limitBytes: job.log_limit_bytes } : {}),
      });
      const opened = (rel: string, sink: LogSink): OpenedLog => ({
        stream: sink,
        finish: () => sink.finish(),
        halted: sink.halted,
        existingBytes: sink.bytes,
        // A reattach checks the engine's copy against the bytes kept (a file at its cap takes nothing more: no check).
        ...(append && sink.bytes > 0 && !sink.limitExceeded
          ? { readBack: () => deps.fs.streamUserFile(store.resolve(rel)) }
          : {}),
      });
      return {
        stdout: opened(join(jobRel, STDOUT_LOG), stdout),
        stderr: opened(join(jobRel, STDERR_LOG), stderr),
      };
    },
    readOutcome: input.readOutcome,
    collectSessions: async (archive) => {
      if (archive === null) return { files: 0, bytes: 0, refusals: [] };
      await store.ensureDir(sessionsRel);
      // Known empty (the image's own empty dir, untouched by the container): the folder exists, as after a copy.
      if (archive === 'empty') return { files: 0, bytes: 0, refusals: [] };
      // A hung archive stream must not stall the cleanup that follows.
      const report = await deps.extractSessions(
        archive,
        sessionsAbs,
        () => deps.createRedactor(input.secrets),
        AbortSignal.timeout(SESSIONS_TIMEOUT_MS),
        redact,
      );
      const clean = report.files === 0 && report.refusals.length === 0 && !report.truncated;
      // Nothing planned, created or refused, and the folder still empty: the archive held the dir alone.
      const nothingInside =
        clean &&
        (await deps.fs.readdir(sessionsAbs).then(
          (names) => names.length === 0,
          () => false,
        ));
      return { files: report.files, bytes: report.bytes, refusals: report.refusals, nothingInside };
    },
    ...(deps.imageSessions !== undefined ? { imageSessions: deps.imageSessions } : {}),
    diagnose: () => deps.diagnose(sessionsAbs),
    ...(deps.verifyAbsentTimeoutMs !== undefined
      ? { verifyAbsentTimeoutMs: deps.verifyAbsentTimeoutMs }
      : {}),
  };
}

/** The operator's copy at the job's `outcome_path`; a failure is logged, never a verdict. */
async function publishOperatorCopy(
  deps: ExecutePairDeps,
  execution: PairExecution,
  job: PairJob,
): Promise<void> {
  if (execution.outcome.state !== 'present' || !deps.publishOutcome) return;
  try {
    await deps.publishOutcome(execution.outcome.bytes, job.outcome_path);
  } catch (err) {
    deps.logger.warn(
      { job: job.job_id, err: errorDetail(err) },
      'the operator copy of the outcome could not be written (the evidence keeps the private one)',
    );
  }
}

/**
 * SHA-256 of the outcome bytes the evidence keeps. The verdict comes from the driver's bytes; the evidence keeps them
 * with secrets masked, and the hash covers what is kept (the same bytes whenever nothing had to be masked).
 */
async function keptOutcomeSha256(
  deps: ExecutePairDeps,
  execution: PairExecution,
  input: ExecutePairInput,
  privateOutcomeFile: string,
): Promise<string | null> {
  let keptOutcome: Uint8Array | null = execution.outcome.state === 'present' ? execution.outcome.bytes : null;
  if (keptOutcome !== null && deps.maskOutcome) {
    const kept = await deps.maskOutcome(keptOutcome, privateOutcomeFile, input.secrets);
    keptOutcome = kept.kept;
    if (!kept.masked)
      deps.logger.warn(
        { job: input.job.job_id },
        "the evidence copy of the outcome could not be masked in place: it keeps the driver's bytes",
      );
  }
  return keptOutcome !== null ? sha256Hex(keptOutcome) : null;
}

/** The harness's own faults in a finished pair. */
function harnessFaultsOf(execution: PairExecution): HarnessFault[] {
  const harnessFaults: HarnessFault[] = [];
  if (execution.logFailure !== null || !execution.logs.stdout.closed || !execution.logs.stderr.closed)
    harnessFaults.push('log_write_failed');
  if (execution.receiptUpdateFailed) harnessFaults.push('receipt_write_failed');
  // A lost node cannot confirm the removal: the slot stays held (reconciliation needs the 404, or the operator's
  // `e1-batch node-down`), but that is the node's fault, not the harness's: no harness pause, dispatch goes on.
  if (!execution.cleanup.verified_absent && execution.engineLoss !== 'node_lost')
    harnessFaults.push('cleanup_unverified');
  return harnessFaults;
}

/** Classify the pair and build its result.json record, every text from the pair's side masked. */
async function resultOf(
  deps: ExecutePairDeps,
  input: ExecutePairInput,
  execution: PairExecution,
  paths: PairPaths,
  mountRefused: boolean,
  disk: DiskRecord | undefined,
): Promise<ResultRecord> {
  const { job } = input;
  const check = checkOutcome(execution.outcome);
  const outcomeSha256 = await keptOutcomeSha256(deps, execution, input, paths.privateOutcomeFile);
  const classified = classify({
    jobId: job.job_id,
    outcome: check,
    timedOut: execution.timedOut,
    logLimitExceeded: execution.logLimitExceeded !== null,
    oomKilled: execution.container.oom_killed,
    diskLimitExceeded: disk?.exceeded === true,
    logIncomplete:
      execution.logs.stdout.incomplete !== undefined || execution.logs.stderr.incomplete !== undefined,
    terminated: execution.terminated,
    engineFault: execution.engineFault,
    engineLoss: execution.engineLoss,
    harnessFaults: harnessFaultsOf(execution),
    mountRefused,
    allowedHttpStatuses: input.allowedHttpStatuses,
  });
  // The engine's own words are kept, but never with a resolved value in them.
  const engineError = execution.engineError && {
    ...execution.engineError,
    message: paths.redact(execution.engineError.message),
  };
  // Refusal texts hold archive names and error codes from the pair's side: masked before they are kept.
  const sessions = { ...execution.sessions, refusals: execution.sessions.refusals.map(paths.redact) };
  const problems = outcomeProblemsOf(check);
  if (problems.length > 0) {
    deps.logger.warn(
      { job: job.job_id, outcome_problems: problems.map(formatOutcomeProblem) },
      `the outcome breaks the contract (SPEC §5.2): ${problems.map(formatOutcomeProblem).join('; ')}`,
    );
  }
  return buildResult({
    batchId: input.batchId,
    jobId: job.job_id,
    claimId: input.claimId,
    execution: { ...execution, engineError, sessions },
    check,
    outcome: outcomeForResult(check, input.secrets),
    outcomeSha256,
    classified,
    limits: limitsOf(input),
    ...(disk !== undefined ? { disk } : {}),
  });
}
