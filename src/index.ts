/**
 * Library API for TypeScript callers (the CLI is a thin layer over the same use-cases). Everything here is
 * stable in the sense of SPEC §11: add, never rename without a schema bump.
 */
export { runPair, type RunPairOptions, type RunPairOutcome } from './app/run-pair.js';
export type { StartBatchOptions } from './app/batch/start-batch.js';
export { supervise } from './app/batch/supervisor.js';
export type { SupervisorDeps } from './app/batch/supervisor-deps.js';
export type { BatchStatus, Summary } from './app/batch/status.js';
export { reconcilePair, reconcileBatch, type ReconcileReport } from './app/reconcile-pair.js';
export {
  diagnoseSessions,
  diagnoseSessionsReport,
  prepareBatch,
  readStatus,
  stopBatch,
  writeContinuation,
} from './library.js';
export type { SessionsReport } from './app/diagnose-sessions.js';
export {
  diagnoseSessionTails,
  reduceSessionTails,
  type SessionDiagnosis,
  type SessionTail,
} from './core/provider-failure.js';
export {
  parseManifest,
  parsePairSpec,
  manifestJsonSchema,
  MANIFEST_SCHEMA_ID,
  type Manifest,
  type Job,
  type PairSpec,
} from './core/manifest/index.js';
export { parseB1Config, renderB1Config } from './core/b1-config.js';
export { parseNvidiaSmi, type GpuObservation } from './core/gpu/nvidia-smi-parse.js';
export { observeGpus } from './adapters/nvidia-smi.js';
export { createRedactStream } from './adapters/redact-stream.js';
export { EvidenceStore } from './app/evidence/evidence-store.js';
export { NodeFileSystem } from './adapters/fs/node-file-system.js';
export { SqliteCapacityRegistry } from './adapters/registry/sqlite-capacity-registry.js';
export { DockerContainerRuntime } from './adapters/docker/docker-container-runtime.js';
export { createExecutePairDeps, createContainerRuntime } from './composition-root.js';
export { RoboguideError, InvalidInputError, ExitCode, type ErrorCode, type Issue } from './core/errors.js';
export type { ResultRecord, Classification, Reason, ProviderFailure } from './core/result.js';
export type { Receipt } from './core/receipt.js';
