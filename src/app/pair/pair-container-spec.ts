// The container of one pair: its labels, its private outcome folder, its spec and its limits.
import { dirname, join } from 'node:path';
import { b1PortEnvironment } from '../../core/b1-config.js';
import { deviceRequestsFor } from '../../core/gpu/device-requests.js';
import { containerName, privateOutcomeRel } from '../../core/receipt.js';
import {
  containerLimitsOf,
  effectiveLimits,
  limitDefaults,
  type PairLimits,
} from '../../core/pair-limits.js';
import type { ContainerSpec } from '../ports/container-runtime.js';
import type { ExecutePairInput } from './execute-pair-types.js';

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
