import type Docker from 'dockerode';
import type { Logger } from '../../app/ports/logger.js';
import type { PlacementInventory } from '../../app/ports/executor-inventory.js';
import { errorKind } from '../../core/errors.js';
import { statusOf, toEngineError } from '../docker/engine-error.js';
import { MOUNTS_LABEL, type MountRecord } from './swarm-service-spec.js';
import type { SwarmNodes } from './swarm-nodes.js';
import { callOptions } from './swarm-connection.js';

/** Task states after which the task's container no longer runs. */
export const TERMINAL = new Set(['complete', 'failed', 'shutdown', 'rejected', 'orphaned', 'remove']);
export const RUNNING = new Set(['running']);

/** The newest task of a pair's service, as the manager reports it. */
export interface TaskView {
  readonly id: string;
  readonly nodeId: string | null;
  readonly state: string;
  readonly containerId: string | null;
  readonly exitCode: number | null;
  readonly err: string | null;
  readonly timestamp: string | null;
}

/**
 * Where a pair's task ran: kept so removal can be verified on that node after the service (and its tasks) are gone.
 * `nodeId` is '' until the swarm placed the task.
 */
export interface Placement {
  nodeId: string;
  containerId: string | null;
  mounts: readonly MountRecord[];
}

interface RawTask {
  ID: string;
  NodeID?: string;
  Version?: { Index?: number };
  Status?: {
    State?: string;
    Err?: string;
    Timestamp?: string;
    ContainerStatus?: { ContainerID?: string; ExitCode?: number };
  };
}

/**
 * Each pair's task (the manager's view) and where it was placed: every task read records the node and container,
 * so that what follows the service's removal (verifying the container's 404, removing the volumes) finds them.
 */
export class SwarmTasks implements PlacementInventory {
  readonly #manager: Docker;
  readonly #nodes: SwarmNodes;
  readonly #logger: Logger;
  readonly #placements = new Map<string, Placement>();

  constructor(manager: Docker, nodes: SwarmNodes, logger: Logger) {
    this.#manager = manager;
    this.#nodes = nodes;
    this.#logger = logger;
  }

  /** A service just created: its volumes are known, its node not yet. */
  created(id: string, mounts: readonly MountRecord[]): void {
    this.#placements.set(id, { nodeId: '', containerId: null, mounts });
  }

  /** What this process knows of the pair's placement (undefined: nothing; `nodeId` '': not placed yet). */
  known(id: string): Placement | undefined {
    return this.#placements.get(id);
  }

  /** The service's newest task, or null (none yet); undefined when the service does not exist. */
  async task(id: string): Promise<TaskView | null | undefined> {
    try {
      await this.#manager.getService(id).inspect(callOptions());
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw toEngineError(err, 'inspect a swarm service');
    }
    let tasks: unknown[];
    try {
      tasks = await this.#manager.listTasks({ filters: JSON.stringify({ service: [id] }), ...callOptions() });
    } catch (err) {
      throw toEngineError(err, 'list swarm tasks');
    }
    const newest = (tasks as RawTask[])
      .sort((a, b) => (a.Version?.Index ?? 0) - (b.Version?.Index ?? 0))
      .at(-1);
    if (newest === undefined) return null;
    const view: TaskView = {
      id: newest.ID,
      nodeId: newest.NodeID ?? null,
      state: newest.Status?.State ?? 'new',
      containerId: newest.Status?.ContainerStatus?.ContainerID ?? null,
      exitCode: newest.Status?.ContainerStatus?.ExitCode ?? null,
      err: newest.Status?.Err ?? null,
      timestamp: newest.Status?.Timestamp ?? null,
    };
    const placement = this.#placements.get(id) ?? { nodeId: '', containerId: null, mounts: [] };
    if (view.nodeId !== null && view.nodeId !== '') placement.nodeId = view.nodeId;
    if (view.containerId !== null && view.containerId !== '') placement.containerId = view.containerId;
    this.#placements.set(id, placement);
    return view;
  }

  /**
   * The task read again for its placement, where a failure to read it is not the caller's: what this process
   * already knows then answers. Logged at debug: the caller's next engine call meets the same manager.
   */
  async refresh(id: string): Promise<void> {
    try {
      await this.task(id);
    } catch (err) {
      this.#logger.debug(
        { service: id, err: errorKind(err) },
        'swarm task not read again; the known placement answers',
      );
    }
  }

  /** Where the pair's task ran, or null when the task was never placed (for status and the node-loss policy). */
  async placementOf(
    id: string,
  ): Promise<{ readonly nodeId: string; readonly node: string; readonly containerId: string | null } | null> {
    await this.refresh(id);
    const placement = this.#placements.get(id);
    if (placement === undefined || placement.nodeId === '') return null;
    return {
      nodeId: placement.nodeId,
      node: await this.#nodes.nodeName(placement.nodeId),
      containerId: placement.containerId,
    };
  }

  /**
   * The placement of a service another process created: its volumes from the service's label, its node from its
   * task. undefined when the service is gone (404) or cannot be read now (logged: its outcome is then not collected).
   */
  async fromService(id: string): Promise<Placement | undefined> {
    try {
      const s = (await this.#manager.getService(id).inspect(callOptions())) as {
        Spec?: { Labels?: Record<string, string> };
      };
      const mounts = JSON.parse(s.Spec?.Labels?.[MOUNTS_LABEL] ?? '[]') as MountRecord[];
      const placement: Placement = { nodeId: '', containerId: null, mounts };
      this.#placements.set(id, placement);
      await this.task(id);
      return placement;
    } catch (err) {
      if (statusOf(err) !== 404)
        this.#logger.warn({ service: id, err: errorKind(err) }, "swarm service's volumes could not be read");
      return undefined;
    }
  }
}
