import type { ExecutorConfig } from '../../core/executor.js';
import type { GpuObservation } from '../../core/gpu/nvidia-smi-parse.js';
import type { HostFactsRecord } from '../../core/host-facts.js';
import type { LimitDefaults } from '../../core/pair-limits.js';
import type { ImagePlanRecord } from '../../core/image-plan.js';

/** Where things live in a batch output directory (SPEC §4): the names are core/evidence-names.ts's. */
import { JOBS_DIR, RECEIPT_FILE, RESULT_FILE } from '../../core/evidence-names.js';
import { isObject, taggedRecord } from '../../core/json-object.js';

export function jobRel(jobId: string): string {
  return `${JOBS_DIR}/${jobId}`;
}
export function receiptRel(jobId: string): string {
  return `${jobRel(jobId)}/${RECEIPT_FILE}`;
}
export function resultRel(jobId: string): string {
  return `${jobRel(jobId)}/${RESULT_FILE}`;
}

export const BATCH_SCHEMA = 'roboguide.e1.batch_identity/v1' as const;

/** `batch.json`: the batch's identity, written once at start. */
export interface BatchRecord {
  readonly schema: typeof BATCH_SCHEMA;
  readonly batch_id: string;
  readonly created_at: string;
  readonly manifest_sha256: string;
  readonly code_version: string;
  readonly host_boot_id: string | null;
  readonly engine: { readonly id: string; readonly version: string; readonly api_version: string };
  readonly registry_path: string;
  readonly bind_address: string;
  readonly gpu_observation: BatchGpuObservation | null;
  /** `start --allow-short-secrets`: values under 8 characters are accepted (and masked) by every supervisor of the batch. */
  readonly allow_short_secrets?: boolean;
  /** The operator's `--mount-root` folders (real paths): every cwd must lie under one, at start and at each launch. */
  readonly mount_roots?: readonly string[];
  /** `start --executor` (issue 13); absent: local. `resume` uses the same. */
  readonly executor?: ExecutorConfig;
  /** Swarm: how many pairs the swarm can place at once (GPU slots, or nodes for pairs without GPUs), seen at start. */
  readonly executor_slots?: number;
  /**
   * Swarm: the nodes that took work at start (`node`: hostname; `id`: swarm node id, absent in batches from before),
   * with their GPUs (generic resources `NVIDIA-GPU`).
   */
  readonly executor_nodes?: readonly { readonly node: string; readonly id?: string; readonly gpus: number }[];
  /**
   * The images as `start` resolved them: tag → id (`sha256:…`). Pairs run by that id (the local executor), and
   * their receipts record both; status and the report say when a tag has moved since. Absent: run by tag (a swarm
   * batch, a batch from before).
   */
  readonly images?: Readonly<Record<string, string>>;
  /**
   * Issue 43: the images the engine lacked at start, resolved in their registries: image → digest (pairs run by
   * `repository@digest`), the disk budget and the pace of pulls (swarm: `nodes`, the budget per node). Absent: every
   * image was present (on a swarm: on every node).
   */
  readonly image_plan?: ImagePlanRecord;
  /**
   * Issue 43, swarm: image → the nodes whose engines held it at start (one a node lacked is in `image_plan`, pulled
   * by the nodes for their own pairs). Absent on the local executor.
   */
  readonly image_nodes?: Readonly<Record<string, readonly string[]>>;
  /** The host at start (systeminformation, each fact bounded in time: `{kind: "unknown", reason}` when it failed). */
  readonly host?: HostFactsRecord;
  /**
   * The limits of a job that gives none (issue 22), derived at start from `host` and `capacity.max_workers`
   * (src/core/pair-limits.ts); absent in batches from before: the fixed fallbacks apply.
   */
  readonly pair_limit_defaults?: LimitDefaults;
}

/** Recorded at start when the manifest asks for GPUs. */
export interface BatchGpuObservation {
  readonly observation: GpuObservation;
  readonly comparison: {
    readonly kind: 'match' | 'mismatch' | 'unobservable';
    readonly message: string;
  } | null;
  readonly warnings: readonly string[];
}

/** An unobservable GPU host never gets a second worker, whatever the pairs report. */
export function gpuHostUnobservable(batch: BatchRecord): boolean {
  return batch.gpu_observation?.observation.kind === 'unobservable';
}

export interface StopRequest {
  readonly terminate: boolean;
  readonly requested_at: string;
}

/** The check `batch.json` is read back through. */
export const isBatchRecord = taggedRecord<BatchRecord>(BATCH_SCHEMA, ['batch_id', 'registry_path']);

/** The check `stop.json` is read back through. */
export function isStopRequest(value: unknown): value is StopRequest {
  return isObject(value) && typeof value['terminate'] === 'boolean';
}
