import type { GpuObservation } from '../core/gpu/nvidia-smi-parse.js';
import type { BoardRow, CapacityRegistry, HostLimits, Reservation } from './ports/capacity-registry.js';

/** One node's limits and what is held on it. */
export interface NodeCapacity {
  readonly node: string;
  readonly limits: HostLimits;
  /** Whether the node has limits of its own (else the default applies). */
  readonly own_limits: boolean;
  readonly held: number;
  readonly held_gpu_mib: number;
  readonly held_ports: number[];
}

/** What `capacity` shows of the registry (the command adds the registry's location). */
export interface CapacityView {
  /** The default limits: every node without its own. */
  readonly limits: HostLimits;
  /** This host's node name (what local pairs are admitted to). */
  readonly local_node: string;
  readonly nodes: NodeCapacity[];
  readonly held: Reservation[];
  readonly board: BoardRow[];
  readonly gpu: GpuObservation;
}

export interface CapacityRequest {
  /** Only this batch's reservations and board rows. */
  readonly batchId?: string;
  /** The node whose own limits `set` changes (and that is listed even when it holds nothing); default: the default limits. */
  readonly node?: string;
  /** New limits; a field left undefined keeps its current value (`gpuMib: null` is "no GPU limit"). */
  readonly set?: { readonly maxReservations?: number; readonly gpuMib?: number | null };
}

export interface CapacityDeps {
  readonly registry: CapacityRegistry;
  readonly observeGpus: () => Promise<GpuObservation>;
}

/** Every node that has limits of its own or holds something, plus this host (and the node named by the request). */
export async function nodeCapacities(
  registry: CapacityRegistry,
  named: string | undefined,
): Promise<NodeCapacity[]> {
  const own = await registry.nodeLimits();
  const held = await registry.held();
  const names = new Set([
    registry.localNode,
    ...own.map((n) => n.node),
    ...held.map((r) => r.node),
    ...(named !== undefined ? [named] : []),
  ]);
  const nodes: NodeCapacity[] = [];
  for (const node of [...names].sort()) {
    const mine = held.filter((r) => r.node === node);
    nodes.push({
      node,
      limits: await registry.limits(node),
      own_limits: own.some((n) => n.node === node),
      held: mine.length,
      held_gpu_mib: mine.reduce((sum, r) => sum + r.gpuMib, 0),
      held_ports: mine.flatMap((r) => r.ports).sort((a, b) => a - b),
    });
  }
  return nodes;
}

/** `capacity`: apply new limits when asked (one node's own, or the default), then read the registry and the GPUs. */
export async function readCapacity(deps: CapacityDeps, request: CapacityRequest): Promise<CapacityView> {
  const { registry } = deps;
  const set = request.set;
  if (set !== undefined && (set.maxReservations !== undefined || set.gpuMib !== undefined)) {
    const current = await registry.limits(request.node);
    await registry.setLimits(
      {
        maxReservations: set.maxReservations ?? current.maxReservations,
        gpuMib: set.gpuMib !== undefined ? set.gpuMib : current.gpuMib,
      },
      request.node,
    );
  }
  const filter = request.batchId !== undefined ? { batchId: request.batchId } : {};
  return {
    limits: await registry.limits(),
    local_node: registry.localNode,
    nodes: await nodeCapacities(registry, request.node),
    held: await registry.held(filter),
    board: await registry.board(filter),
    gpu: await deps.observeGpus(),
  };
}
