import { pipeline } from 'node:stream/promises';
import { PassThrough, Transform, type Readable, type TransformCallback, type Writable } from 'node:stream';
import { errorKind } from '../core/errors.js';
import type { OutcomeRead } from '../core/outcome.js';
import type { CleanupRecord, ContainerRecord, LogRecord, ProviderFailure } from '../core/result.js';
import type { EngineFault } from './ports/engine-error.js';
import { EngineError } from './ports/engine-error.js';
import { untouchedByContainer, type ImageSessionsMemo, type FilesystemChanges } from '../core/sessions-skip.js';
import { describeUnwatchedStop, judgeUnwatchedStop, type EngineLoss } from '../core/engine-loss.js';
import { awaitEngineReturn, isEngineUnavailable, waitThroughEngineLoss } from './engine-return.js';
import { pausepoint } from './failpoints.js';
import type { Clock } from './ports/clock.js';
import type { ContainerOutput, ContainerRuntime, ContainerSpec } from './ports/container-runtime.js';
import type { Logger } from './ports/logger.js';

/** A sink for one container stream: bytes reach disk as they arrive; `finish` reports what was kept. */
export interface LogTarget {
  readonly stream: Writable;
  finish(): Promise<{ bytes: number; closed: boolean; failure: string | null; limitExceeded?: boolean }>;
  /**
   * Settles when the pair must be stopped for this log's sake: its cap was reached (`limit_exceeded`), or the
   * file cannot take more bytes (`write_failed`, e.g. ENOSPC). Absent or never settling: no such stop.
   */
  readonly halted?: Promise<'limit_exceeded' | 'write_failed'>;
}

export interface SessionsReport {
  readonly files: number;
  readonly bytes: number;
  readonly refusals: readonly string[];
}

/** Everything the lifecycle does to the world besides the engine, injectable for tests. */
export interface PairLifecycleDeps {
  readonly runtime: ContainerRuntime;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly createRedactor: (secrets: readonly string[]) => Transform;
  /** Open a log file; `append` when reattaching after a supervisor restart (the file holds a prefix already). */
  readonly openLog: (stream: 'stdout' | 'stderr', append: boolean) => Promise<LogTarget & { readonly existingBytes: number }>;
  readonly readOutcome: (path: string) => Promise<OutcomeRead>;
  /**
   * Copy the sessions archive into the job's evidence. `null`: no sessions dir in the container; `'empty'`: the dir
   * holds nothing (known without copying). `nothingInside`: the archive held the directory alone.
   */
  readonly collectSessions: (archive: Readable | null | 'empty') => Promise<SessionsReport & { readonly nothingInside?: boolean }>;
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
  /** Log streams get this long to end after the container is gone before they are cut. */
  readonly logDrainTimeoutMs?: number;
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
  /** Called once the container exists (the supervisor records its id in the receipt). A throw is a harness fault. */
  readonly onCreated?: (containerId: string) => Promise<void>;
  /**
   * Reattach to a container a previous supervisor created (SPEC §5 resume): no create/start; logs are read
   * again from the engine's log API from the beginning and the bytes already on disk are skipped, so the log
   * files continue without duplicated or lost lines.
   */
  readonly reattach?: { readonly containerId: string; readonly claimedAtMs: number };
  /** The wall budget: one deadline in epoch ms, fixed at claim time (src/core/wall-budget.ts). */
  readonly deadlineMs: number;
}

export interface PairExecution {
  readonly container: ContainerRecord;
  readonly timedOut: boolean;
  readonly terminated: boolean;
  readonly engineFault: EngineFault | null;
  /** The engine went away during the pair and what was found when it answered again (issue 10). */
  readonly engineLoss: EngineLoss | null;
  readonly engineError: { readonly kind: string; readonly message: string } | null;
  readonly receiptUpdateFailed: boolean;
  readonly logs: { readonly stdout: LogRecord; readonly stderr: LogRecord };
  readonly logFailure: string | null;
  /** The stream whose log reached its cap (the pair was stopped for it), or null. */
  readonly logLimitExceeded: 'stdout' | 'stderr' | null;
  readonly outcome: OutcomeRead;
  readonly sessions: SessionsReport;
  readonly providerFailure: ProviderFailure | null;
  readonly providerFailureErrorKind: string | null;
  readonly cleanup: CleanupRecord;
  readonly startedAt: string;
  readonly finishedAt: string;
}

const DEFAULT_VERIFY_ABSENT_MS = 15_000;
const DEFAULT_LOG_DRAIN_MS = 10_000;
/** Collection waits this long for an engine that went away after the container stopped. */
const COLLECTION_ENGINE_WAIT_MS = 120_000;
const REMOVE_ATTEMPTS = 3;

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

interface LogPipe {
  readonly name: 'stdout' | 'stderr';
  readonly source: Readable;
  done: Promise<void>;
  readonly target: LogTarget;
  /** Why the stream stopped early (a pipeline error, or cut after the drain deadline), if it did. */
  failure: string | null;
  settled: boolean;
}

/** A log file could not be opened: the pair cannot keep its evidence (harness), whatever the engine did. */
class LogOpenError extends Error {
  constructor(readonly code: string) {
    super(`log file could not be opened (${code})`);
  }
}

/**
 * One pair, from container creation to verified removal (SPEC §5 steps 3–8). Never throws for anything the
 * pair or the engine does: every observation is returned as data for classification. The removal runs in a
 * finally path that nothing before it (outcome, sessions, diagnosis, logs) can skip.
 */
export async function runPairLifecycle(deps: PairLifecycleDeps, launch: PairLaunch): Promise<PairExecution> {
  const { runtime, logger } = deps;
  const startedAt = deps.clock.now();
  let containerId: string | null = null;
  let exitCode: number | null = null;
  let oomKilled = false;
  let timedOut = false;
  let terminated = false;
  let engineFault: EngineFault | null = null;
  let engineLoss: EngineLoss | null = null;
  let engineError: PairExecution['engineError'] = null;
  let receiptUpdateFailed = false;
  const pipes: LogPipe[] = [];
  let outcome: OutcomeRead;
  let sessions: SessionsReport = { files: 0, bytes: 0, refusals: [] };
  let providerFailure: ProviderFailure | null = null;
  let providerFailureErrorKind: string | null = null;
  let cleanup: CleanupRecord = { removed: false, verified_absent: true, attempts: 0 };
  let logs: PairExecution['logs'];
  let logFailure: string | null = null;
  // A log that reaches its cap (or cannot be written) stops the pair the controlled way, like `stop --terminate`.
  const logHalt = new AbortController();
  let logLimitExceeded: 'stdout' | 'stderr' | null = null;
  const watchHalts = (): void => {
    for (const p of pipes) {
      void p.target.halted?.then((why) => {
        if (why === 'limit_exceeded') logLimitExceeded ??= p.name;
        if (!logHalt.signal.aborted) logger.warn({ container: containerId, stream: p.name, why }, 'log halted: controlled stop');
        logHalt.abort();
      });
    }
  };

  const recordEngineFailure = (err: unknown): void => {
    if (err instanceof EngineError) {
      engineFault = err.fault;
      engineError = { kind: err.fault, message: err.engineMessage };
    } else {
      engineFault = 'engine_error';
      engineError = { kind: errorKind(err), message: 'internal error in the pair lifecycle' };
    }
  };

  const { deadlineMs } = launch;
  let exitedInTime = false;
  try {
    // Set when the engine stopped answering before the wait (attach/start refused): the last moment it answered.
    let lostSinceMs: number | undefined;
    if (launch.reattach) {
      containerId = launch.reattach.containerId;
      const output = await runtime.follow(containerId);
      await connectLogs(deps, launch, output, pipes, true);
      const unwatched = await unwatchedStop(deps, launch.reattach, deadlineMs);
      if (unwatched !== null) {
        engineLoss = 'engine_restarted';
        engineError = { kind: 'engine_restarted', message: unwatched };
        logger.warn({ container: containerId }, 'container was stopped by an engine restart while no supervisor watched it');
      }
      watchHalts();
      // A container that already exited within its budget is not waited for: after the deadline the wait would
      // report `deadline` and the pair would be called timed out though it finished in time.
      exitedInTime = await exitedBefore(runtime, containerId, deadlineMs);
    } else {
      const handle = await runtime.create(launch.container);
      containerId = handle.id;
      const createdAtMs = Date.now();
      logger.info({ container: containerId }, 'container created');
      if (launch.onCreated) {
        try {
          await launch.onCreated(containerId);
        } catch (err) {
          receiptUpdateFailed = true;
          logger.error({ container: containerId, err: errorKind(err) }, 'recording the container id failed');
          throw err;
        }
      }
      try {
        await connectLogs(deps, launch, await runtime.attach(containerId), pipes, false);
        watchHalts();
        await runtime.start(containerId);
      } catch (err) {
        if (!isEngineUnavailable(err)) throw err;
        lostSinceMs = createdAtMs;
      }
    }
    const id = containerId;
    const stopSignal = launch.terminate ? AbortSignal.any([launch.terminate, logHalt.signal]) : logHalt.signal;
    const ended = exitedInTime
      ? ({ kind: 'exited' } as const)
      : await waitThroughEngineLoss(
          {
            runtime,
            logger,
            reconnectLogs: async (neverStarted) => {
              await reconnectLogs(deps, launch, id, pipes, neverStarted);
              watchHalts();
            },
          },
          containerId,
          { deadlineMs, signal: stopSignal, ...(lostSinceMs !== undefined ? { lostSinceMs } : {}) },
        );
    if (ended.kind === 'engine_loss') {
      engineLoss = ended.loss;
      engineError = { kind: ended.loss, message: ended.message };
      // Streams the engine cut that cannot be read again (no container, or no engine) are the engine's loss, not a
      // failed write of ours; after a restart they were read again from the engine's log (reconnectLogs).
      if (ended.loss !== 'engine_restarted') for (const p of pipes) if (p.settled) p.failure = null;
      logger.warn({ container: containerId, reason: ended.loss }, 'pair ended by an engine fault');
    } else if (ended.kind !== 'exited') {
      timedOut = ended.kind === 'deadline';
      terminated = ended.kind === 'aborted' && launch.terminate?.aborted === true;
      logger.warn({ container: containerId, stopBudgetSec: launch.stopBudgetSec }, timedOut ? 'wall budget spent: controlled stop' : 'terminate requested: controlled stop');
      await runtime.stop(containerId, launch.stopBudgetSec);
    }
  } catch (err) {
    if (err instanceof LogOpenError) logFailure = `open: ${err.code}`;
    else if (!receiptUpdateFailed) recordEngineFailure(err);
    if (containerId === null && err instanceof EngineError && err.statusCode === null) {
      // The create request got no answer (timeout, lost connection): the engine may have made the container
      // anyway. Find it by its claim label so the finally path removes it; if we cannot ask, it stays unverified.
      const found = await findByClaim(runtime, launch.container.labels);
      containerId = found.id;
      if (!found.known) cleanup = { removed: false, verified_absent: false, attempts: 0 };
    }
    logger.warn({ container: containerId, fault: engineFault }, 'pair did not run to completion');
  } finally {
    // The container's layer changes (whether its sessions dir can hold anything), asked alongside the collection's
    // inspect. Only for a container that stopped the ordinary way (exited, or the controlled stop returned): after an
    // engine fault the sessions are always copied out.
    const stoppedId = engineFault === null && engineLoss === null ? containerId : null;
    const changes = stoppedId !== null && deps.imageSessions !== undefined ? filesystemChangesOrNull(deps, stoppedId) : Promise.resolve(null);
    // Logs normally end with the container's output; give them a moment before collecting.
    await withTimeout(Promise.all(pipes.map((p) => p.done)), 2_000);

    await pausepoint('before_collection');
    if (containerId !== null) {
      // An engine that went away after the container stopped is waited for (bounded): the evidence is still there.
      // A lost node (swarm) does not come back for this pair: nothing is waited for.
      const wait = engineLoss === 'engine_unreachable' || engineLoss === 'node_lost' ? 0 : (deps.collectionEngineWaitMs ?? COLLECTION_ENGINE_WAIT_MS);
      const back = await awaitEngineReturn(runtime, containerId, { untilMs: Date.now() + Math.max(1, wait) });
      if (back.kind === 'answered' && back.state) {
        exitCode = back.state.exitCode;
        oomKilled = back.state.oomKilled;
      } else if (back.kind !== 'answered') {
        logger.warn({ container: containerId }, 'engine did not answer before collection');
      }
    }

    if (containerId !== null && runtime.collectMounts && engineLoss !== 'node_lost') {
      // A runtime without this host's file system (swarm) copies the outcome folder back before it is read.
      try {
        await runtime.collectMounts(containerId);
      } catch (err) {
        logger.warn({ container: containerId, err: errorKind(err) }, 'collecting the outcome folder from the node failed');
      }
    }
    try {
      outcome = await deps.readOutcome(launch.outcomePath);
    } catch (err) {
      outcome = { state: 'unreadable', code: errorKind(err) };
    }

    if (containerId !== null) {
      try {
        sessions = await collectSessions(deps, containerId, launch.sessionsDir, engineLoss, await changes);
      } catch (err) {
        sessions = { files: 0, bytes: 0, refusals: [`collection failed: ${errorKind(err)}`] };
        logger.warn({ container: containerId, err: errorKind(err) }, 'session collection failed');
      }
    }

    try {
      providerFailure = await deps.diagnose();
    } catch (err) {
      providerFailureErrorKind = errorKind(err);
      logger.warn({ container: containerId, err: providerFailureErrorKind }, 'provider-failure diagnosis failed');
    }

    if (containerId !== null) {
      cleanup = await removeAndVerify(deps, containerId, launch.stopBudgetSec);
    }

    const drainMs = deps.logDrainTimeoutMs ?? DEFAULT_LOG_DRAIN_MS;
    if ((await withTimeout(Promise.all(pipes.map((p) => p.done)), drainMs)) === 'timeout') {
      for (const p of pipes) {
        if (p.settled) continue; // a stream that ended on its own is complete
        p.failure ??= 'cut after the drain deadline';
        p.source.destroy();
      }
      await withTimeout(Promise.all(pipes.map((p) => p.done)), 1_000);
    }
    const closed = await closeLogs(pipes, containerId !== null);
    logs = closed.logs;
    logFailure = logFailure ?? closed.failure;
  }

  return {
    container: { id: containerId, exit_code: exitCode, timed_out: timedOut, oom_killed: oomKilled },
    timedOut,
    terminated,
    engineFault,
    engineLoss,
    engineError,
    receiptUpdateFailed,
    logs,
    logFailure,
    logLimitExceeded,
    outcome,
    sessions,
    providerFailure,
    providerFailureErrorKind,
    cleanup,
    startedAt: startedAt.toISOString(),
    finishedAt: deps.clock.now().toISOString(),
  };
}

/**
 * On reattach: was the container stopped by an engine restart while no supervisor watched (judgeUnwatchedStop)?
 * Returns the message for result.json, or null. The engine's events are only a hint: any doubt gives null.
 */
async function unwatchedStop(
  deps: PairLifecycleDeps,
  { containerId, claimedAtMs }: NonNullable<PairLaunch['reattach']>,
  deadlineMs: number,
): Promise<string | null> {
  try {
    const state = await deps.runtime.inspect(containerId);
    if (state === null || (state.status !== 'exited' && state.status !== 'dead')) return null;
    const history = await deps.runtime.containerEventsSince(containerId, claimedAtMs);
    const judged = judgeUnwatchedStop({ container: state, deadlineMs, eventActions: history.actions, historyComplete: history.complete });
    if (judged === null) return null;
    return describeUnwatchedStop(state.finishedAt, state.exitCode);
  } catch (err) {
    deps.logger.warn({ container: containerId, err: errorKind(err) }, 'engine history unavailable on reattach');
    return null;
  }
}

async function filesystemChangesOrNull(deps: PairLifecycleDeps, containerId: string): Promise<FilesystemChanges | null> {
  try {
    return (await deps.runtime.filesystemChanges?.(containerId)) ?? null;
  } catch {
    return null; // unknown: the sessions are copied out as usual
  }
}

/**
 * Copy the sessions dir out, unless the container cannot have written there (no change of its layer at, under or
 * above the dir, no mount there) and its image is known to hold nothing there: then the copy would be the image's
 * own empty dir (or no dir), and the engine's archive call (a chrooted tar process, about 120 ms) is skipped.
 * What a copy from an untouched dir gives is learned for the image.
 */
async function collectSessions(
  deps: PairLifecycleDeps,
  containerId: string,
  sessionsDir: string,
  engineLoss: EngineLoss | null,
  changes: FilesystemChanges | null,
): Promise<SessionsReport> {
  const memo = deps.imageSessions;
  const untouched = memo !== undefined && changes !== null && untouchedByContainer(changes, sessionsDir);
  const known = untouched ? memo.get(changes.imageId, sessionsDir) : undefined;
  if (known !== undefined) {
    const skipped = await deps.collectSessions(known === 'absent' ? null : 'empty');
    return { files: skipped.files, bytes: skipped.bytes, refusals: skipped.refusals };
  }
  const archive = await getArchiveThroughEngineLoss(deps, containerId, sessionsDir, engineLoss);
  const report = await deps.collectSessions(archive);
  if (untouched) {
    if (archive === null) memo.learn(changes.imageId, sessionsDir, 'absent');
    else if (report.nothingInside === true) memo.learn(changes.imageId, sessionsDir, 'empty');
  }
  return { files: report.files, bytes: report.bytes, refusals: report.refusals };
}

/** The sessions archive; a refused connection is retried once after the engine answers again (bounded). */
async function getArchiveThroughEngineLoss(
  deps: PairLifecycleDeps,
  containerId: string,
  path: string,
  engineLoss: EngineLoss | null,
): Promise<Readable | null> {
  const { runtime } = deps;
  try {
    return await runtime.getArchive(containerId, path);
  } catch (err) {
    if (!isEngineUnavailable(err) || engineLoss === 'engine_unreachable' || engineLoss === 'node_lost') throw err;
    const untilMs = Date.now() + (deps.collectionEngineWaitMs ?? COLLECTION_ENGINE_WAIT_MS);
    const back = await awaitEngineReturn(runtime, containerId, { untilMs });
    if (back.kind !== 'answered') throw err;
    return runtime.getArchive(containerId, path);
  }
}

/**
 * The engine is back after a loss: if it cut the log streams, close those files and follow the container's log
 * again from the first byte, skipping what is already on disk (as a resume does). A write failure of the old
 * files is kept in the new pipe's place so it is not forgotten.
 */
async function reconnectLogs(
  deps: PairLifecycleDeps,
  launch: PairLaunch,
  containerId: string,
  pipes: LogPipe[],
  neverStarted: boolean,
): Promise<void> {
  // Streams the engine cut end within moments of its going away; ones still flowing after a second were not cut.
  await withTimeout(Promise.all(pipes.map((p) => p.done)), 1_000);
  if (pipes.length > 0 && !pipes.every((p) => p.settled)) return;
  const old = pipes.splice(0);
  const writeFailures = new Map<string, string>();
  for (const p of old) {
    const finished = await p.target.finish().catch((err: unknown) => ({ failure: errorKind(err) }));
    if (finished.failure !== null) writeFailures.set(p.name, finished.failure);
  }
  try {
    const output = neverStarted ? { stdout: new PassThrough().end(), stderr: new PassThrough().end() } : await deps.runtime.follow(containerId);
    await connectLogs(deps, launch, output, pipes, true);
  } catch (err) {
    // Not reconnected: keep the old pipes (their files are finished, their reports stand: bytes kept, a cap reached,
    // the cut stream's failure) so result.json still tells what was written.
    for (const p of pipes.splice(0)) await p.target.finish().catch(() => undefined);
    pipes.push(...old);
    throw err;
  }
  for (const p of pipes) p.failure = writeFailures.get(p.name) ?? null;
}

/** True when the container has exited (or died) and the engine says it finished no later than `deadlineMs`. */
async function exitedBefore(runtime: ContainerRuntime, containerId: string, deadlineMs: number): Promise<boolean> {
  const state = await runtime.inspect(containerId).catch(() => null); // unknown: wait as usual
  if (state === null || (state.status !== 'exited' && state.status !== 'dead') || state.finishedAt === null) return false;
  const finishedMs = Date.parse(state.finishedAt);
  return Number.isFinite(finishedMs) && finishedMs <= deadlineMs;
}

/** Our container for this claim, if the engine has one; `known: false` when the engine could not be asked. */
async function findByClaim(
  runtime: ContainerRuntime,
  labels: Readonly<Record<string, string>>,
): Promise<{ id: string | null; known: boolean }> {
  const claim = labels['roboguide.claim'];
  if (claim === undefined) return { id: null, known: true };
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const found = await runtime.listByLabel({ 'roboguide.claim': claim });
      return { id: found[0]?.id ?? null, known: true };
    } catch {
      await delay(1_000);
    }
  }
  return { id: null, known: false };
}

/** Drops the first `skip` bytes: the part of a re-read log that is already on disk. */
class SkipBytes extends Transform {
  #left: number;
  constructor(skip: number) {
    super();
    this.#left = skip;
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    if (this.#left >= chunk.length) {
      this.#left -= chunk.length;
      done();
      return;
    }
    const rest = this.#left > 0 ? chunk.subarray(this.#left) : chunk;
    this.#left = 0;
    done(null, rest);
  }
}

/** Close every log file and report it; a stream cut short or never opened is not a closed log. */
async function closeLogs(
  pipes: readonly LogPipe[],
  containerExisted: boolean,
): Promise<{ logs: PairExecution['logs']; failure: string | null }> {
  const report = { stdout: { bytes: 0, closed: !containerExisted }, stderr: { bytes: 0, closed: !containerExisted } };
  let failure: string | null = null;
  for (const p of pipes) {
    let finished: { bytes: number; closed: boolean; failure: string | null; limitExceeded?: boolean };
    try {
      finished = await p.target.finish();
    } catch (err) {
      finished = { bytes: 0, closed: false, failure: errorKind(err) };
    }
    const why = p.failure ?? finished.failure;
    report[p.name] = {
      bytes: finished.bytes,
      closed: finished.closed && p.failure === null,
      ...(finished.limitExceeded === true ? { limit_exceeded: true } : {}),
    };
    if (why !== null) failure ??= `${p.name}: ${why}`;
  }
  return { logs: report, failure };
}

async function connectLogs(
  deps: PairLifecycleDeps,
  launch: PairLaunch,
  output: ContainerOutput,
  pipes: LogPipe[],
  append: boolean,
): Promise<void> {
  for (const [name, source] of [['stdout', output.stdout], ['stderr', output.stderr]] as const) {
    let target: LogTarget & { readonly existingBytes: number };
    try {
      target = await deps.openLog(name, append);
    } catch (err) {
      // Nobody will read these streams now: end them so the engine connection is not left blocked.
      output.stdout.destroy();
      output.stderr.destroy();
      throw new LogOpenError((err as { context?: { errno?: string } }).context?.errno ?? errorKind(err));
    }
    const redactor = deps.createRedactor(launch.secrets);
    const stages: (Readable | Transform | Writable)[] = [source, redactor];
    // The redactor is deterministic, so the redacted re-read starts with exactly the bytes already kept.
    if (append && target.existingBytes > 0) stages.push(new SkipBytes(target.existingBytes));
    stages.push(target.stream);
    const pipe: LogPipe = { name, source, target, failure: null, settled: false, done: Promise.resolve() };
    pipe.done = pipeline(stages)
      .catch((err: unknown) => {
        pipe.failure ??= (err as NodeJS.ErrnoException).code ?? errorKind(err);
      })
      .finally(() => {
        pipe.settled = true;
      });
    pipes.push(pipe);
  }
}

/** Stop if running, remove with force, then insist on the engine's 404. Never throws. */
export async function removeAndVerify(
  deps: Pick<PairLifecycleDeps, 'runtime' | 'logger' | 'verifyAbsentTimeoutMs'>,
  containerId: string,
  stopBudgetSec: number,
): Promise<CleanupRecord> {
  const { runtime, logger } = deps;
  let removed = false;
  let attempts = 0;
  const verifyMs = deps.verifyAbsentTimeoutMs ?? DEFAULT_VERIFY_ABSENT_MS;
  while (attempts < REMOVE_ATTEMPTS) {
    attempts++;
    try {
      const state = await runtime.inspect(containerId);
      if (state === null) return { removed, verified_absent: true, attempts };
      if (state.status === 'running' || state.status === 'restarting' || state.status === 'paused') {
        await runtime.stop(containerId, stopBudgetSec);
      }
      removed = (await runtime.remove(containerId)) === 'removed' || removed;
    } catch (err) {
      logger.warn({ container: containerId, attempt: attempts, err: errorKind(err) }, 'container removal failed');
    }
    const until = Date.now() + verifyMs / REMOVE_ATTEMPTS;
    while (Date.now() < until) {
      try {
        if ((await runtime.inspect(containerId)) === null) return { removed, verified_absent: true, attempts };
      } catch {
        // engine hiccup: keep polling until the deadline
      }
      await delay(100);
    }
  }
  logger.error({ container: containerId, attempts }, 'container still present after removal: keeping its reservation');
  return { removed, verified_absent: false, attempts };
}
