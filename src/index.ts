/**
 * Library API for TypeScript callers (the CLI is a thin layer over the same use-cases): the use-cases, the pure rules
 * and the types of their records. The adapters (the engine, files, the registry, nvidia-smi) and the wiring helpers
 * that build them are the subpath `roboguide-eval/adapters` (`src/adapters-entry.ts`). Everything here is stable in
 * the sense of SPEC §11: add, never rename without a schema bump.
 */
export { runPair } from './app/pair/run-pair.js';
export type { RunPairOptions, RunPairOutcome } from './app/pair/run-pair-types.js';
export type { StartBatchOptions } from './app/batch/start-batch-types.js';
export { supervise } from './app/batch/supervisor.js';
export type { SupervisorDeps } from './app/batch/supervisor-deps.js';
export type { BatchStatus, Summary } from './app/batch/status-shapes.js';
export { reconcilePair, reconcileBatch, type ReconcileReport } from './app/pair/reconcile-pair.js';
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
export { parseManifest, parsePairSpec } from './core/manifest/parse.js';
export { manifestJsonSchema } from './core/manifest/json-schema.js';
export { MANIFEST_SCHEMA_ID } from './core/manifest/constants.js';
export type { Manifest, Job, PairSpec } from './core/manifest/schema.js';
export { parseB1Config, renderB1Config } from './core/b1-config.js';
export { parseNvidiaSmi, type GpuObservation } from './core/gpu/nvidia-smi-parse.js';
export { EvidenceStore } from './app/evidence/evidence-store.js';
export { RoboguideError, InvalidInputError, ExitCode, type ErrorCode, type Issue } from './core/errors.js';
export type { ResultRecord, Classification, Reason, ProviderFailure } from './core/result.js';
export type { Receipt } from './core/receipt.js';
