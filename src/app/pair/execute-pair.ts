import { SESSIONS_DIR, STDERR_LOG, STDOUT_LOG, PRIVATE_OUTCOME_DIR } from '../../core/evidence-names.js';
import { join } from 'node:path';
import { textRedactor } from '../../core/redaction/redact-text.js';
import { errorDetail } from '../../core/errors.js';
import type { LogSink } from '../evidence/log-sink.js';
import type { OpenedLog } from './pair-log-types.js';
import type { DiskRecord } from '../../core/result.js';
import { DiskWatch } from './disk-watch.js';
import { runPairLifecycle } from './pair-lifecycle.js';
import type { PairExecution, PairLifecycleDeps } from './pair-lifecycle-types.js';
import { resolveProtected } from '../job-paths.js';
import { MountGuard } from './mount-guard.js';
import type { ExecutePairDeps, ExecutePairInput, ExecutedPair, PairPaths } from './execute-pair-types.js';
import { containerSpecFor, limitsOf, privateOutcomePaths } from './pair-container-spec.js';
import { publishOperatorCopy, resultOf } from './pair-result.js';
import { PairEgress } from './pair-egress.js';
import { effectiveEgress, networkOfEgress } from '../../core/egress/policy.js';

const SESSIONS_TIMEOUT_MS = 120_000;

/**
 * Run one pair through the lifecycle with the evidence wired to the store, then classify it and build its
 * result.json. Writing the result is the caller's (batch or `pair run`), because what a failed write means
 * differs between them.
 */
export async function executePair(deps: ExecutePairDeps, given: ExecutePairInput): Promise<ExecutedPair> {
  const egress = new PairEgress(deps, effectiveEgress(given.job.network, given.job.egress));
  // A reattached pair keeps the token its container holds (issue 42: registered again below).
  if (given.reattach) await egress.adopt(deps.runtime, given.reattach.containerId);
  // The proxy token is in the pair's environment: masked in its texts like a secret.
  const secrets = egress.allowlisted ? [...given.secrets, egress.token] : given.secrets;
  // The policy decides the network: none → "none", open → the guarded pairs network, allowlist → the egress network.
  const input = { ...given, secrets, job: { ...given.job, network: networkOfEgress(egress.policy) } };
  const { store, jobRel, job } = input;
  const sessionsRel = join(jobRel, SESSIONS_DIR);
  // Both bind-mount sources must exist: the driver's working directory (made by the mount guard, one folder at a
  // time, never through a link), and its private outcome folder.
  const privateOutcome = privateOutcomePaths(input);
  await store.ensureDir(join(jobRel, PRIVATE_OUTCOME_DIR));
  if (!input.reattach) await deps.handOverOutcomeFolder?.(privateOutcome.dir);
  const guard = input.reattach ? null : await (input.mountGuard ?? mountGuardFor(deps, input));
  const paths: PairPaths = {
    sessionsRel,
    sessionsAbs: join(store.root, sessionsRel),
    privateOutcomeFile: privateOutcome.file,
    redact: textRedactor(input.secrets),
  };
  egress.begin(store, jobRel, paths.redact);
  if (input.reattach) await reattachEgress(deps, egress, input.reattach.containerId, job.job_id);
  const lifecycleDeps = lifecycleDepsFor(deps, input, paths);
  const disk = diskWatchFor(deps, input, privateOutcome.dir);
  if (input.reattach) disk?.attach(input.reattach.containerId);
  disk?.start();
  let execution: PairExecution;
  let diskRecord: DiskRecord | undefined;
  try {
    execution = await runPairLifecycle(
      {
        ...lifecycleDeps,
        runtime: guard === null ? egress.wrap(deps.runtime) : guard.wrap(egress.wrap(deps.runtime)),
      },
      {
        container: containerSpecFor(input),
        outcomePath: privateOutcome.file,
        sessionsDir: input.sessionsDir,
        stopBudgetSec: input.stopBudgetSec,
        secrets: input.secrets,
        ...(input.terminate ? { terminate: input.terminate } : {}),
        ...(input.killNow ? { killNow: input.killNow } : {}),
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
  // umount(8) runs beside the result's own steps and its writing (none reads a staging point): the caller awaits
  // `released` once the result is written; awaited here when there is no result.
  const released = unstage(deps, input, execution, guard);
  let executed: Omit<ExecutedPair, 'released'>;
  try {
    executed = await finishExecution(
      deps,
      input,
      execution,
      guard,
      egress,
      diskRecord,
      paths,
      job,
      privateOutcome,
    );
  } catch (err) {
    await released;
    throw err;
  }
  return { ...executed, released };
}

/** The staging points go once the container is seen gone (or was never made); a reattached pair's are swept. */
async function unstage(
  deps: ExecutePairDeps,
  input: ExecutePairInput,
  execution: PairExecution,
  guard: MountGuard | null,
): Promise<void> {
  const gone = execution.cleanup.verified_absent || execution.container.id === null;
  if (!gone || (guard?.unremoved ?? null) !== null) return;
  await guard?.release();
  if (input.reattach) await deps.mountStager?.sweep().catch(() => undefined);
}

/** What the lifecycle saw, checked against the guard's refusals and turned into the pair's result. */
async function finishExecution(
  deps: ExecutePairDeps,
  input: ExecutePairInput,
  execution: PairExecution,
  guard: MountGuard | null,
  egress: PairEgress,
  diskRecord: DiskRecord | undefined,
  paths: PairPaths,
  job: ExecutePairInput['job'],
  privateOutcome: { readonly dir: string },
): Promise<Omit<ExecutedPair, 'released'>> {
  const { store, jobRel } = input;
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
  const egressSummary = await egress.finish(store, jobRel, paths.redact).catch((err: unknown) => {
    deps.logger.warn({ job: job.job_id, err: errorDetail(err) }, 'egress.jsonl could not be written');
    return undefined;
  });
  const plain = await resultOf(deps, input, checked, paths, refusal !== null, diskRecord);
  const result = egressSummary !== undefined ? { ...plain, egress: egressSummary } : plain;
  const stripped = await stripHostPrivilege(deps, input, [job.cwd, privateOutcome.dir], paths.redact);
  return {
    result: stripped.length > 0 ? { ...result, host_privilege_stripped: stripped } : result,
    execution: checked,
  };
}

/**
 * A supervisor restart: the reattached pair registered again at the proxy with its policy (docs/spec.md §5.6). When
 * that fails it stays refused everything (fail closed), said in the log; the pair runs on and is collected.
 */
async function reattachEgress(
  deps: ExecutePairDeps,
  egress: PairEgress,
  containerId: string,
  jobId: string,
): Promise<void> {
  await egress.reattach(containerId).catch((err: unknown) => {
    deps.logger.warn(
      { job: jobId, err: errorDetail(err) },
      'the reattached pair could not be registered with the egress proxy: it reaches nothing',
    );
  });
}

/**
 * The second line against host privilege, once the container is gone: setuid/setgid bits under the pair's folders
 * are cleared and their paths (masked) kept. A failed sweep is logged, never a verdict.
 */
async function stripHostPrivilege(
  deps: ExecutePairDeps,
  input: ExecutePairInput,
  folders: readonly string[],
  redact: (text: string) => string,
): Promise<string[]> {
  if (deps.privilegeSweep === undefined) return [];
  try {
    const report = await deps.privilegeSweep.strip(folders);
    const stripped = report.stripped.map(redact);
    if (stripped.length > 0 || !report.complete)
      deps.logger.warn(
        { job: input.job.job_id, host_privilege_stripped: stripped, complete: report.complete },
        "setuid/setgid bits found under the pair's host folders were cleared",
      );
    return stripped;
  } catch (err) {
    deps.logger.warn(
      { job: input.job.job_id, err: errorDetail(err) },
      "the pair's host folders could not be swept for setuid/setgid bits",
    );
    return [];
  }
}

/**
 * The launch-time mount guard of one pair (src/app/pair/mount-guard.ts), with the rules resolved to real paths now. It
 * only reads (realpath, lstat): resolving it before the claim is durable changes nothing on disk.
 */
export async function mountGuardFor(
  deps: Pick<ExecutePairDeps, 'fs' | 'hostMountRules' | 'mountOwners' | 'mountStager'>,
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
    ...(deps.mountStager !== undefined ? { stager: deps.mountStager } : {}),
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

/** The disk watch of this pair: its cwd and private outcome folder, its container's layer, volumes and open files. */
function diskWatchFor(
  deps: ExecutePairDeps,
  input: ExecutePairInput,
  privateOutcomeDir: string,
): DiskWatch | undefined {
  if (deps.disk === undefined) return undefined;
  return new DiskWatch(
    {
      disk: deps.disk,
      ...(deps.openFiles !== undefined ? { openFiles: deps.openFiles } : {}),
      runtime: deps.runtime,
      clock: deps.clock,
      logger: deps.logger,
    },
    {
      folders: [input.job.cwd, privateOutcomeDir],
      outcomeFolder: privateOutcomeDir,
      limitBytes: limitsOf(input).disk_limit_bytes,
      ...(deps.diskPollIntervalMs !== undefined ? { intervalMs: deps.diskPollIntervalMs } : {}),
      ...(deps.diskWalkBudget !== undefined ? { budget: deps.diskWalkBudget } : {}),
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
    logger: deps.logger,
    createRedactor: deps.createRedactor,
    openLogs: async (append) => {
      const [stdout, stderr] = await store.openLogs([join(jobRel, STDOUT_LOG), join(jobRel, STDERR_LOG)], {
        append,
        clock: deps.clock,
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
