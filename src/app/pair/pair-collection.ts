import type { Readable } from 'node:stream';
import { describeUnwatchedStop, judgeUnwatchedStop, type EngineLoss } from '../../core/engine-loss.js';
import { errorDetail } from '../../core/errors.js';
import {
  untouchedByContainer,
  type FilesystemChanges,
  type ImageSessionsMemo,
} from '../../core/sessions-skip.js';
import { awaitEngineReturn, isEngineUnavailable, type EngineReturnDeps } from './engine-return.js';
import type { Clock } from '../ports/clock.js';
import type { ContainerRuntime, ContainerState } from '../ports/container-runtime.js';
import { canCheckLinks, canCollectMounts, canListLayerChanges } from '../ports/runtime-capabilities.js';
import type { Logger } from '../ports/logger.js';

/** Collection waits this long for an engine that went away after the container stopped (default). */
export const COLLECTION_ENGINE_WAIT_MS = 120_000;

export interface SessionsReport {
  readonly files: number;
  readonly bytes: number;
  readonly refusals: readonly string[];
}

export interface SessionsDeps extends EngineReturnDeps {
  /** See PairLifecycleDeps.collectSessions. */
  readonly collectSessions: (
    archive: Readable | null | 'empty',
  ) => Promise<SessionsReport & { readonly nothingInside?: boolean }>;
  readonly imageSessions?: ImageSessionsMemo;
  readonly collectionEngineWaitMs?: number;
}

/**
 * On reattach: was the container stopped by an engine restart while no supervisor watched (judgeUnwatchedStop)?
 * Returns the message for result.json, or null. The engine's events since the claim are only a hint: any doubt
 * gives null.
 */
export async function unwatchedStop(
  deps: { readonly runtime: ContainerRuntime; readonly logger: Logger },
  containerId: string,
  window: { readonly claimedAtMs: number; readonly deadlineMs: number },
): Promise<string | null> {
  try {
    const state = await deps.runtime.inspect(containerId);
    if (state === null || (state.status !== 'exited' && state.status !== 'dead')) return null;
    const history = await deps.runtime.containerEventsSince(containerId, window.claimedAtMs);
    const judged = judgeUnwatchedStop({
      container: state,
      deadlineMs: window.deadlineMs,
      eventActions: history.actions,
      historyComplete: history.complete,
    });
    if (judged === null) return null;
    return describeUnwatchedStop(state.finishedAt, state.exitCode);
  } catch (err) {
    deps.logger.warn(
      { container: containerId, err: errorDetail(err) },
      'engine history unavailable on reattach',
    );
    return null;
  }
}

/** True when the container has exited (or died) and the engine says it finished no later than `deadlineMs`. */
export async function exitedBefore(
  runtime: ContainerRuntime,
  containerId: string,
  deadlineMs: number,
): Promise<boolean> {
  const state = await runtime.inspect(containerId).catch(() => null); // unknown: wait as usual
  if (state === null || (state.status !== 'exited' && state.status !== 'dead') || state.finishedAt === null)
    return false;
  const finishedMs = Date.parse(state.finishedAt);
  return Number.isFinite(finishedMs) && finishedMs <= deadlineMs;
}

/** Our container for this claim, if the engine has one; `known: false` when the engine could not be asked. */
export async function findByClaim(
  runtime: ContainerRuntime,
  labels: Readonly<Record<string, string>>,
  clock: Pick<Clock, 'sleep'>,
): Promise<{ id: string | null; known: boolean }> {
  const claim = labels['roboguide.claim'];
  if (claim === undefined) return { id: null, known: true };
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const found = await runtime.listByLabel({ 'roboguide.claim': claim });
      return { id: found[0]?.id ?? null, known: true };
    } catch {
      await clock.sleep(1_000);
    }
  }
  return { id: null, known: false };
}

export async function filesystemChangesOrNull(
  runtime: ContainerRuntime,
  containerId: string,
  under?: string,
): Promise<FilesystemChanges | null> {
  try {
    if (!canListLayerChanges(runtime)) return null;
    return await (under === undefined
      ? runtime.filesystemChanges(containerId)
      : runtime.filesystemChanges(containerId, under));
  } catch {
    return null; // unknown: the sessions are copied out as usual
  }
}

/**
 * Exit code and OOM flag after the stop; null when the engine does not know the container or did not answer within
 * `waitMs` (an engine that went away after the container stopped is waited for: the evidence is still there).
 */
export async function inspectExit(
  deps: EngineReturnDeps & { readonly logger: Logger },
  containerId: string,
  waitMs: number,
  /** Told the state the engine answered with (the removal after collection uses it). */
  seen?: (state: ContainerState) => void,
): Promise<{ exitCode: number | null; oomKilled: boolean } | null> {
  const back = await awaitEngineReturn(deps, containerId, {
    untilMs: deps.clock.now().getTime() + Math.max(1, waitMs),
  });
  if (back.kind !== 'answered')
    deps.logger.warn({ container: containerId }, 'engine did not answer before collection');
  else if (back.state !== null) seen?.(back.state);
  return back.kind === 'answered' && back.state !== null
    ? { exitCode: back.state.exitCode, oomKilled: back.state.oomKilled }
    : null;
}

/** A runtime without this host's file system (swarm) copies the outcome folder back before it is read. */
export async function collectMounts(
  deps: { readonly runtime: ContainerRuntime; readonly logger: Logger },
  containerId: string,
): Promise<void> {
  const { runtime } = deps;
  if (!canCollectMounts(runtime)) return;
  try {
    await runtime.collectMounts(containerId);
  } catch (err) {
    deps.logger.warn(
      { container: containerId, err: errorDetail(err) },
      'collecting the outcome folder from the node failed',
    );
  }
}

/**
 * Copy the sessions dir out, unless the container cannot have written there (no change of its layer at, under or
 * above the dir, no mount there) and its image is known to hold nothing there: then the copy would be the image's
 * own empty dir (or no dir), and the engine's archive call (a chrooted tar process, about 120 ms) is skipped.
 * What a copy from an untouched dir gives is learned for the image.
 */
export async function collectSessions(
  deps: SessionsDeps,
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
  const learned = archive === null ? 'absent' : report.nothingInside === true ? 'empty' : null;
  // Learned only where no link could hide a write: through a link (the image's /root/.codex → /data, say) the
  // changes name the target, so the dir would look untouched to every later pair of the image.
  if (untouched && learned !== null && (await linkFree(deps.runtime, containerId, sessionsDir)))
    memo.learn(changes.imageId, sessionsDir, learned);
  return { files: report.files, bytes: report.bytes, refusals: report.refusals };
}

/** No symbolic link on the way to `dir` in the container; a runtime that cannot say, or fails to, gives false. */
async function linkFree(runtime: ContainerRuntime, containerId: string, dir: string): Promise<boolean> {
  if (!canCheckLinks(runtime)) return false;
  return runtime.linkFreePath(containerId, dir).catch(() => false);
}

/** The sessions archive; a refused connection is retried once after the engine answers again (bounded). */
async function getArchiveThroughEngineLoss(
  deps: SessionsDeps,
  containerId: string,
  path: string,
  engineLoss: EngineLoss | null,
): Promise<Readable | null> {
  try {
    return await deps.runtime.getArchive(containerId, path);
  } catch (err) {
    if (!isEngineUnavailable(err) || engineLoss === 'engine_unreachable' || engineLoss === 'node_lost')
      throw err;
    const untilMs = deps.clock.now().getTime() + (deps.collectionEngineWaitMs ?? COLLECTION_ENGINE_WAIT_MS);
    const back = await awaitEngineReturn(deps, containerId, { untilMs });
    if (back.kind !== 'answered') throw err;
    return deps.runtime.getArchive(containerId, path);
  }
}
