import type { Executor, NodeInventory } from '../../app/ports/executor-inventory.js';
import type { Logger } from '../../app/ports/logger.js';
import { NodeContainers } from './node-containers.js';
import { connectEngine } from './swarm-connection.js';
import { SwarmContainerRuntime } from './swarm-container-runtime.js';
import { SwarmLogs } from './swarm-logs.js';
import { SwarmNodes } from './swarm-nodes.js';
import { SwarmTasks } from './swarm-tasks.js';

const DEFAULT_POLL_MS = 250;
/** A node whose engine does not answer for this long while its pair runs (and the manager agrees it is not ready, or never answers either) is lost. */
const DEFAULT_NODE_LOSS_GRACE_MS = 5_000;

export interface SwarmRuntimeOptions {
  readonly manager: string;
  readonly nodeEngines: Readonly<Record<string, string>>;
  /** Where cleanup that failed and other non-fatal engine trouble is said. */
  readonly logger: Logger;
  readonly pollMs?: number;
  readonly nodeLossGraceMs?: number;
  /**
   * Nodes the operator declared down (`e1-batch node-down`, recorded in the batch): a container there counts as gone
   * without its engine's 404. Every other node must answer for a removal to be verified.
   */
  readonly downNodes?: readonly string[];
}

/** The swarm executor: its runtime and its inventories, sharing one manager connection and one view of the tasks. */
export interface SwarmExecutor extends Executor {
  readonly runtime: SwarmContainerRuntime;
  readonly nodes: NodeInventory & Pick<SwarmNodes, 'list'>;
  readonly placements: SwarmTasks;
}

/** Connects to the manager (its TLS files read now) and builds the executor's parts; node engines connect on first use. */
export async function openSwarmExecutor(options: SwarmRuntimeOptions): Promise<SwarmExecutor> {
  const manager = await connectEngine(options.manager);
  const { logger } = options;
  const nodes = new SwarmNodes(manager, options.nodeEngines, options.downNodes ?? []);
  const tasks = new SwarmTasks(manager, nodes, logger);
  const logs = new SwarmLogs(manager, nodes, tasks, logger);
  const containers = new NodeContainers(nodes, tasks, logger);
  const runtime = new SwarmContainerRuntime({
    manager,
    nodes,
    tasks,
    logs,
    containers,
    logger,
    pollMs: options.pollMs ?? DEFAULT_POLL_MS,
    nodeLossGraceMs: options.nodeLossGraceMs ?? DEFAULT_NODE_LOSS_GRACE_MS,
  });
  return { runtime, nodes, placements: tasks };
}
