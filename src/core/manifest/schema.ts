import { z } from 'zod';
import {
  DEFAULT_LOG_LIMIT_BYTES,
  DEFAULT_STOP_BUDGET_SECONDS,
  DEFAULT_TIMEOUT_SECONDS,
  MANIFEST_SCHEMA_ID,
} from './constants.js';
import {
  AbsoluteFilePath,
  AbsolutePath,
  AllowedHttpStatuses,
  Argv,
  Egress,
  Environment,
  Gpus,
  JobId,
  limitFields,
  LogLimitBytes,
  Network,
  NonEmptyString,
  Placement,
  Ports,
  SessionsDir,
  SourceSha256,
  StopBudgetSeconds,
  TimeoutSeconds,
} from './fields.js';
import { DEFAULT_RUNTIME, RuntimeName } from '../oci-runtime.js';

/**
 * Manifest `roboguide.e1.batch/v0.1` and the `pair run` spec (SPEC §2, §3). Unknown keys are
 * errors everywhere. Rules spanning fields or jobs (unique ids, disjoint ports, b1_ports,
 * image presence, capacity) live in cross-rules.ts so they are reported alongside field errors.
 */
const jobShape = {
  job_id: JobId,
  argv: Argv,
  cwd: AbsolutePath,
  outcome_path: AbsoluteFilePath,
  environment: Environment.default({}),
  ports: Ports.default([]),
  network: Network.default('bridge').meta({
    description:
      '"bridge": our guarded bridge network (outbound only; no other pair, no cloud metadata address, no address of the host); "none": loopback only (no published ports)',
  }),
  egress: Egress.optional().meta({
    description:
      'egress policy (docs/spec.md 5.6): {"mode": "none"|"open"|"allowlist", "allow": ["api.openai.com", "*.anthropic.com", "pypi.internal:8443"], "methods": ["GET", …]}; absent: the manifest\'s "egress", else network "none" is mode "none" and "bridge" is "open"',
  }),
  timeout_seconds: TimeoutSeconds.default(DEFAULT_TIMEOUT_SECONDS),
  log_limit_bytes: LogLimitBytes.default(DEFAULT_LOG_LIMIT_BYTES).meta({
    description: 'cap on each of stdout and stderr; past it the pair is stopped (reason log_limit_exceeded)',
  }),
  image: NonEmptyString.optional(),
  gpus: Gpus.optional().meta({ description: '"all" | count | ["0", "GPU-<uuid>"]; absent = no GPU' }),
  gpu_mib: z
    .int({ error: 'must be an integer ≥ 0 (MiB)' })
    .min(0, { error: 'must be an integer ≥ 0 (MiB)' })
    .max(16_777_216, { error: 'must be an integer ≥ 0 (MiB) and at most 16777216 (16 TiB)' })
    .optional()
    .meta({
      description:
        'GPU memory the pair is expected to use (MiB): what admission reserves from the host GPU budget until the batch has measured a peak',
    }),
  b1_ports: z.boolean().default(false).meta({
    description: 'inject the six ports as ROBOGUIDE_B1_*_PORT; requires exactly six ports',
  }),
  sessions_dir: AbsolutePath.optional().meta({ description: 'container path of Codex session files' }),
  placement: Placement.optional().meta({
    description:
      'swarm placement constraints (--executor swarm), e.g. ["node.labels.gpu==h100"]; ignored by the local executor',
  }),
  ...limitFields,
  runtime: RuntimeName.optional().meta({
    description: `OCI runtime of this pair's container (absent: the manifest's "runtime", else "${DEFAULT_RUNTIME}"): "runc", "runsc" (gVisor) or any runtime the engine registers`,
  }),
};

export const JobSchema = z.strictObject(jobShape);

const GPU_FRACTION_RULE = 'must be a number in (0, 1]';
const MIB_RULE = 'must be a non-negative integer (MiB)';
export const CapacitySchema = z.strictObject({
  max_workers: z.literal([1, 2], { error: 'must be 1 or 2' }).default(1).meta({
    description:
      '2: a second pair at once; by memory and CPU for a batch that declares no GPUs, else by the GPU rule (needs gpu_total_mib, gpu_baseline_mib, gpu_fraction)',
  }),
  gpu_total_mib: z
    .int({ error: 'must be an integer ≥ 1 (MiB)' })
    .min(1, { error: 'must be an integer ≥ 1 (MiB)' })
    .optional(),
  gpu_baseline_mib: z.int({ error: MIB_RULE }).min(0, { error: MIB_RULE }).optional(),
  gpu_fraction: z
    .number({ error: GPU_FRACTION_RULE })
    .gt(0, { error: GPU_FRACTION_RULE })
    .lte(1, { error: GPU_FRACTION_RULE })
    .optional(),
});

export const ProviderSchema = z.strictObject({
  allowed_http_statuses: AllowedHttpStatuses.default([]),
});

export const ContinuationSchema = z.strictObject({
  batch_id: NonEmptyString,
  output: AbsolutePath,
  code_version: NonEmptyString,
});

export const ManifestSchema = z
  .strictObject({
    schema: z.literal(MANIFEST_SCHEMA_ID, { error: `must be "${MANIFEST_SCHEMA_ID}"` }),
    image: NonEmptyString.optional().meta({ description: 'default image for jobs without their own' }),
    jobs: z.array(JobSchema).min(1, { error: 'must list at least one job' }),
    source_sha256: SourceSha256.default({}),
    capacity: CapacitySchema.default({ max_workers: 1 }),
    provider: ProviderSchema.optional(),
    sessions_dir: SessionsDir,
    stop_budget_seconds: StopBudgetSeconds.default(DEFAULT_STOP_BUDGET_SECONDS),
    continuation_of: ContinuationSchema.optional(),
    runtime: RuntimeName.optional().meta({
      description: `OCI runtime of every job without its own "runtime" (absent: "${DEFAULT_RUNTIME}")`,
    }),
    egress: Egress.optional().meta({ description: 'egress policy of every job without its own "egress"' }),
  })
  .meta({ title: MANIFEST_SCHEMA_ID, description: 'roboguide-eval batch manifest' });

export const PairSpecSchema = z
  .strictObject({
    ...jobShape,
    image: NonEmptyString,
    sessions_dir: SessionsDir,
    stop_budget_seconds: StopBudgetSeconds.default(DEFAULT_STOP_BUDGET_SECONDS),
    allowed_http_statuses: AllowedHttpStatuses.default([]),
  })
  .meta({ title: 'roboguide-eval pair run spec' });

export type Manifest = z.output<typeof ManifestSchema>;
export type Job = z.output<typeof JobSchema>;
export type PairSpec = z.output<typeof PairSpecSchema>;
export type Capacity = z.output<typeof CapacitySchema>;
export type ContinuationOf = z.output<typeof ContinuationSchema>;
export type GpuRequest = 'all' | number | readonly string[];
