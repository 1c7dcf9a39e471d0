import type { Readable } from 'node:stream';
import type { ContainerState } from '../../app/ports/container-runtime.js';
import type { Logger } from '../../app/ports/logger.js';
import { errorKind } from '../../core/errors.js';
import { statusOf, toEngineError } from '../docker/engine-error.js';
import { extractArchiveSafely } from '../safe-extract.js';
import { callOptions, promised } from './swarm-connection.js';
import type { SwarmNodes } from './swarm-nodes.js';
import type { Placement, SwarmTasks } from './swarm-tasks.js';

/** The removal of a task's container on its node, after its service is gone (a node lost must not stall it). */
const CONTAINER_REMOVE_TIMEOUT_MS = 5_000;
const COLLECT_TIMEOUT_MS = 120_000;
const COLLECT_LIMITS = { maxFiles: 1_000, maxTotalBytes: 256 * 1024 * 1024, maxFileBytes: 256 * 1024 * 1024 };

interface RawContainer {
  State?: {
    Status?: string;
    ExitCode?: number;
    OOMKilled?: boolean;
    StartedAt?: string;
    FinishedAt?: string;
  };
  Config?: { Labels?: Record<string, string> };
}

/** A placement whose node and container are known. */
type Placed = Placement & { containerId: string };

function placed(placement: Placement | undefined): placement is Placed {
  return placement !== undefined && placement.nodeId !== '' && placement.containerId !== null;
}

/**
 * What only the engine of the pair's node can do (the manager cannot): read its volumes back, find and inspect its
 * container once the service is gone (the verified removal is that engine's 404), remove that container and volumes.
 */
export class NodeContainers {
  readonly #nodes: SwarmNodes;
  readonly #tasks: SwarmTasks;
  readonly #logger: Logger;

  constructor(nodes: SwarmNodes, tasks: SwarmTasks, logger: Logger) {
    this.#nodes = nodes;
    this.#tasks = tasks;
    this.#logger = logger;
  }

  /** Force-removes the task's container on its node (absent, or already being removed: nothing to do). */
  async removeTaskContainer(id: string): Promise<void> {
    const placement = this.#tasks.known(id);
    if (!placed(placement) || (await this.#nodes.isDeclaredDownById(placement.nodeId))) return;
    const { engine } = await this.#nodes.engineOf(placement.nodeId);
    try {
      await engine
        .getContainer(placement.containerId)
        .remove({ force: true, abortSignal: AbortSignal.timeout(CONTAINER_REMOVE_TIMEOUT_MS) });
    } catch (err) {
      if (statusOf(err) !== 404 && statusOf(err) !== 409) throw err;
    }
  }

  /** The pair's volumes on its node, once its container is gone there (in use before: 409, retried by `inspect`). */
  async removeVolumes(id: string): Promise<void> {
    const placement = this.#tasks.known(id);
    if (placement === undefined || placement.nodeId === '') return;
    const { engine } = await this.#nodes.engineOf(placement.nodeId);
    for (const m of placement.mounts) {
      try {
        const volume = engine.getVolume(m.volume);
        await promised(volume.remove.bind(volume))(callOptions());
      } catch (err) {
        if (statusOf(err) !== 404 && statusOf(err) !== 409) throw err;
      }
    }
  }

  /**
   * The state of a removed service's container: on its known node (null once that engine answers 404, its volumes
   * then removed, or when the node was declared down), else searched on every node. Throws when an engine that must
   * answer cannot.
   */
  async inspectRemoved(id: string): Promise<ContainerState | null> {
    const placement = this.#tasks.known(id);
    if (!placed(placement)) return this.#findOnNodes(id);
    if (await this.#nodes.isDeclaredDownById(placement.nodeId)) return null;
    const { engine, name } = await this.#nodes.engineOf(placement.nodeId);
    try {
      const c = (await engine.getContainer(placement.containerId).inspect(callOptions())) as RawContainer;
      return containerState(id, c);
    } catch (err) {
      if (statusOf(err) !== 404) throw toEngineError(err, `inspect the pair's container on node ${name}`);
    }
    await this.removeVolumes(id).catch((err: unknown) =>
      this.#logger.warn(
        { service: id, err: errorKind(err) },
        "the pair's volumes were not removed from its node",
      ),
    );
    return null;
  }

  /**
   * A removed service's container, searched on every configured node's engine (label `com.docker.swarm.service.id`):
   * null only when each of them answers without one (nodes declared down are skipped). Throws when one cannot say.
   */
  async #findOnNodes(id: string): Promise<ContainerState | null> {
    for (const node of this.#nodes.configured()) {
      if (this.#nodes.isDeclaredDown(node)) continue;
      const engine = await this.#nodes.engineNamed(node);
      let found: { Id: string }[];
      try {
        found = await engine.listContainers({
          all: true,
          filters: JSON.stringify({ label: [`com.docker.swarm.service.id=${id}`] }),
          ...callOptions(),
        });
      } catch (err) {
        throw toEngineError(err, `look for the pair's container on node ${node}`);
      }
      const first = found[0];
      if (first === undefined) continue;
      try {
        return containerState(id, await engine.getContainer(first.Id).inspect(callOptions()));
      } catch (err) {
        if (statusOf(err) === 404) continue;
        throw toEngineError(err, `inspect the pair's container on node ${node}`);
      }
    }
    return null;
  }

  /** A tar stream of `path` in the pair's container, through its node's engine (the container keeps its volumes). */
  async archive(id: string, path: string): Promise<Readable | null> {
    await this.#tasks.refresh(id);
    const placement = this.#tasks.known(id);
    if (!placed(placement)) return null;
    const { engine, name } = await this.#nodes.engineOf(placement.nodeId);
    try {
      const container = engine.getContainer(placement.containerId);
      return (await promised(container.getArchive.bind(container))({ path, ...callOptions() })) as Readable;
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, `read ${path} from the pair's container on node ${name}`);
    }
  }

  /**
   * Copy what the pair wrote into its collected volumes (the outcome folder) back into their host folders, through
   * its node's engine, with the same safe extraction as Codex sessions (the pair is hostile).
   */
  async collect(id: string): Promise<void> {
    const placement = this.#tasks.known(id) ?? (await this.#tasks.fromService(id));
    if (placement === undefined) return;
    for (const m of placement.mounts) {
      if (!m.collect) continue;
      const archive = await this.archive(id, m.target);
      if (archive === null) continue;
      const report = await extractArchiveSafely(archive, m.hostPath, {
        limits: COLLECT_LIMITS,
        signal: AbortSignal.timeout(COLLECT_TIMEOUT_MS),
      });
      if (report.refusals.length > 0)
        throw new Error(`collecting ${m.target} refused ${report.refusals.length} entr(ies)`);
    }
  }
}

function containerState(id: string, c: RawContainer): ContainerState {
  const status = (c.State?.Status ?? 'removing') as ContainerState['status'];
  return {
    id,
    status,
    exitCode: c.State?.ExitCode ?? null,
    oomKilled: c.State?.OOMKilled ?? false,
    startedAt: c.State?.StartedAt ?? null,
    finishedAt: c.State?.FinishedAt ?? null,
    labels: c.Config?.Labels ?? {},
  };
}
