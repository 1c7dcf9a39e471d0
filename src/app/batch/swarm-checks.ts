/** Swarm-executor start checks: the manifest rules a swarm imposes, and how many pairs its nodes run at once. */
import type { Issue } from '../../core/errors.js';
import type { ExecutorConfig } from '../../core/executor.js';
import type { Manifest } from '../../core/manifest/schema.js';
import { DEFAULT_RUNTIME } from '../../core/oci-runtime.js';

/** On a swarm GPUs are generic resources counted per node: "all" has no meaning there. */
export function swarmJobIssues(manifest: Manifest, executor: ExecutorConfig | undefined): Issue[] {
  if (executor?.kind !== 'swarm') return [];
  const RUNTIME_RULE = `must be "${DEFAULT_RUNTIME}" with --executor swarm: a swarm service cannot choose its runtime`;
  return [
    ...(manifest.runtime !== undefined && manifest.runtime !== DEFAULT_RUNTIME
      ? [{ path: 'runtime', rule: RUNTIME_RULE }]
      : []),
    ...manifest.jobs.flatMap((job, i) => [
      ...(job.gpus === 'all'
        ? [
            {
              path: `jobs[${i}].gpus`,
              rule: 'must be a GPU count (or a device list) with --executor swarm: "all" cannot be placed',
            },
          ]
        : []),
      ...(job.runtime !== undefined && job.runtime !== DEFAULT_RUNTIME
        ? [{ path: `jobs[${i}].runtime`, rule: RUNTIME_RULE }]
        : []),
    ]),
  ];
}

/** Pairs needing `gpusPerPair` GPUs the swarm's nodes can run at once (one per node when they need none); at least 1. */
export function swarmSlots(nodes: readonly { readonly gpus: number }[], gpusPerPair: number): number {
  const total =
    gpusPerPair > 0 ? nodes.reduce((sum, n) => sum + Math.floor(n.gpus / gpusPerPair), 0) : nodes.length;
  return Math.max(1, total);
}

/** GPUs a job asks for, as a count (a list of ids counts its ids; "all" counts as one whole node's worth: 1). */
export function gpuCount(gpus: Manifest['jobs'][number]['gpus']): number {
  if (gpus === undefined) return 0;
  if (gpus === 'all') return 1;
  return typeof gpus === 'number' ? gpus : gpus.length;
}
