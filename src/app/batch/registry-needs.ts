/** What a batch's pairs hold in the capacity registry (ports, GPU memory) and the start-time refusal over it. */
import { InvalidInputError, type Issue } from '../../core/errors.js';
import type { Manifest } from '../../core/manifest/schema.js';
import {
  heldPortIssues,
  neverFitIssues,
  type AdmissionNodes,
  type GpuNeed,
  type LeaseAlive,
  type PortNeed,
} from '../admission.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';

/** What the batch's pairs hold in the registry besides a slot, by manifest path (for start-time refusals). */
export interface RegistryNeeds {
  readonly ports: readonly PortNeed[];
  readonly gpu: readonly GpuNeed[];
  /** Swarm: the nodes a pair with given placement constraints may run on; absent: the registry's own node. */
  readonly nodes?: AdmissionNodes;
  /** Told what does not stop the batch (a port held by a batch whose supervisor is gone). */
  readonly warn?: (message: string) => void;
  /** Whether a holder batch's supervisor (its registry lease) still lives; absent: every holder counts as alive. */
  readonly isAlive?: LeaseAlive;
}

export function registryNeeds(
  manifest: Manifest,
  how: Pick<RegistryNeeds, 'nodes' | 'warn' | 'isAlive'> = {},
): RegistryNeeds {
  const placement = (job: Manifest['jobs'][number]): { placement?: readonly string[] } =>
    job.placement !== undefined ? { placement: job.placement } : {};
  return {
    ports: manifest.jobs.flatMap((job, i) =>
      job.ports.map((port, k) => ({
        path: `jobs[${i}].ports[${k}]`,
        jobId: job.job_id,
        port,
        ...placement(job),
      })),
    ),
    gpu: manifest.jobs.flatMap((job, i) =>
      job.gpu_mib !== undefined
        ? [{ path: `jobs[${i}].gpu_mib`, jobId: job.job_id, mib: job.gpu_mib, ...placement(job) }]
        : [],
    ),
    ...how,
  };
}

/**
 * Refuses (exit 2, naming each field) a batch that could not run: a declared port held, on every node the pair may
 * run on, by another batch whose supervisor is alive (a holder whose supervisor is gone gives a warning instead:
 * `heldPortIssues`), or a pair whose declared GPU memory exceeds the whole GPU budget of every such node (it could
 * never be admitted). Locally the only node is the registry's own.
 */
export async function checkRegistryNeeds(registry: CapacityRegistry, needs: RegistryNeeds): Promise<void> {
  const ports = await heldPortIssues(registry, needs.ports, needs.nodes, needs.isAlive ?? (() => true));
  const issues: Issue[] = [...ports.issues, ...(await neverFitIssues(registry, needs.gpu, needs.nodes))];
  if (issues.length > 0)
    throw new InvalidInputError('E_MANIFEST_INVALID', 'the batch cannot start on this host', issues);
  for (const warning of ports.warnings) needs.warn?.(warning);
}
