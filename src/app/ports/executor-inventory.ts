import type { ContainerRuntime } from './container-runtime.js';

/**
 * What only an executor with several nodes (a swarm) can tell, beside its ContainerRuntime. The local engine has one
 * node and offers neither: admission then reserves on the registry's own node and no placement is journalled.
 *
 * Two capability differences of a swarm runtime are part of its ContainerRuntime, not of these: its `start` has
 * nothing to do (the service starts its one task when it is created), and its `containerEventsSince` is never
 * `complete` (the swarm keeps no per-container event history to trust), so the lifecycle never reads a verdict from it.
 */

/** The nodes that take work now. */
export interface NodeInventory {
  /**
   * The hostnames of the nodes that take work now (ready, active) and satisfy `constraints` (the job's placement).
   * Admission reserves a pair on one of them (the registry's limits, GPU budget and ports per node) and the pair's
   * service is pinned there. Rejects when the manager cannot list its nodes.
   */
  readyNodes(constraints?: readonly string[]): Promise<readonly string[]>;
}

/** Where each pair runs. */
export interface PlacementInventory {
  /** The node that runs (or ran) the pair with this handle id, null while it is not placed. */
  placementOf(id: string): Promise<{ readonly node: string } | null>;
}

/** The inventories an executor adds to its runtime; both absent for the local engine. */
export interface ExecutorInventory {
  readonly nodes?: NodeInventory;
  readonly placements?: PlacementInventory;
}

/** What the executor factory returns: the runtime pairs run on, and its inventories. */
export interface Executor extends ExecutorInventory {
  readonly runtime: ContainerRuntime;
}
