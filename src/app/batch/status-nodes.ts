/** The per-node view of a swarm batch in status: its nodes, the pairs running on each, their GPUs. */
import type { RunningPair } from '../../core/batch-state.js';
import type { Manifest } from '../../core/manifest/schema.js';
import type { BatchRecord } from './layout.js';
import type { NodeStatus } from './status-shapes.js';

function gpusOfJob(job: Manifest['jobs'][number] | undefined): number {
  const g = job?.gpus;
  if (g === undefined) return 0;
  if (g === 'all') return 1;
  return typeof g === 'number' ? g : g.length;
}

/** Per-node view of a swarm batch: its nodes at start (plus any a pair was placed on since), the pairs running there, GPUs. */
export function nodesStatus(
  batch: BatchRecord,
  jobs: ReadonlyMap<string, Manifest['jobs'][number]>,
  running: readonly RunningPair[],
): NodeStatus[] | undefined {
  if (batch.executor?.kind !== 'swarm') return undefined;
  const nodes = new Map<string, { running: string[]; gpus_total: number; gpus_in_use: number }>();
  for (const n of batch.executor_nodes ?? [])
    nodes.set(n.node, { running: [], gpus_total: n.gpus, gpus_in_use: 0 });
  for (const r of running) {
    if (r.node === undefined) continue;
    const n = nodes.get(r.node) ?? { running: [], gpus_total: 0, gpus_in_use: 0 };
    n.running.push(r.job_id);
    n.gpus_in_use += gpusOfJob(jobs.get(r.job_id));
    nodes.set(r.node, n);
  }
  return [...nodes].map(([node, n]) => ({ node, ...n }));
}
