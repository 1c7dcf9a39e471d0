/**
 * The library API's use-cases that take ports, bound to this host's adapters so that their public signatures stay
 * as they were (SPEC §11: add, never rename). The CLI wires the same adapters in the composition root.
 */
import {
  diagnoseSessions as diagnoseWith,
  diagnoseSessionsReport as reportWith,
  type DiagnoseSessionsOptions,
  type SessionsReport,
} from './app/diagnose-sessions.js';
import { writeContinuation as continuationWith, type ContinuationOutcome } from './app/batch/continuation.js';
import { readStatus as statusWith } from './app/batch/read-status.js';
import { prepareBatch as prepareWith } from './app/batch/start-batch.js';
import type { StartBatchDeps, StartBatchOptions } from './app/batch/start-batch-types.js';
import type { BatchRecord } from './app/batch/layout.js';
import type { BatchStatus } from './app/batch/status-shapes.js';
import { stopBatch as stopWith, type StopOutcome } from './app/batch/stop-batch.js';
import type { EvidenceStore } from './app/evidence/evidence-store.js';
import type { Clock } from './app/ports/clock.js';
import type { ContainerRuntime } from './app/ports/container-runtime.js';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import { hostIdentity, sessionTails } from './composition-root.js';
import type { ProviderFailure } from './core/result.js';

/** See app/diagnose-sessions.ts: the diagnosis of the Codex session files under `dir`, with what it rests on. */
export async function diagnoseSessionsReport(
  dir: string,
  options: DiagnoseSessionsOptions = {},
): Promise<SessionsReport> {
  return reportWith(await sessionTails(), dir, options);
}

/** The provider failure alone (a pair's result.json carries only this). */
export async function diagnoseSessions(
  dir: string,
  options: DiagnoseSessionsOptions = {},
): Promise<ProviderFailure | null> {
  return diagnoseWith(await sessionTails(), dir, options);
}

/** A fresh status of the batch in `store` (see app/batch/read-status.ts); the supervisor's liveness from /proc. */
export function readStatus(
  store: EvidenceStore,
  runtime: ContainerRuntime | undefined,
  now: Date,
): Promise<BatchStatus> {
  return statusWith(store, runtime, now, hostIdentity);
}

/** Record a stop request and signal the live supervisor, if any (see app/batch/stop-batch.ts). */
export function stopBatch(store: EvidenceStore, clock: Clock, terminate: boolean): Promise<StopOutcome> {
  return stopWith(store, clock, terminate, hostIdentity);
}

/** Write the continuation manifest of a batch paused `fatal` (see app/batch/continuation.ts). */
export function writeContinuation(
  store: EvidenceStore,
  options: { manifestOut: string; codeVersion: string },
): Promise<ContinuationOutcome> {
  return continuationWith(store, { ...options, fs: new NodeFileSystem(), host: hostIdentity });
}

/** Validate a manifest and freeze it into a new output directory (see app/batch/start-batch.ts); `host` defaults to /proc. */
export function prepareBatch(
  deps: Omit<StartBatchDeps, 'host'> & Partial<Pick<StartBatchDeps, 'host'>>,
  options: StartBatchOptions,
): Promise<BatchRecord> {
  return prepareWith({ host: hostIdentity, ...deps }, options);
}
