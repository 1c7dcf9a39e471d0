import type Docker from 'dockerode';
import type { Readable } from 'node:stream';
import type {
  ContainerHandle,
  ContainerOutput,
  ContainerRuntime,
  ContainerSpec,
  ContainerState,
  EngineInfo,
  ImageNodes,
  RemoveResult,
  WaitResult,
} from '../../app/ports/container-runtime.js';
import type { ImagePlacement, MountCollection } from '../../app/ports/runtime-capabilities.js';
import type { Logger } from '../../app/ports/logger.js';
import { errorKind } from '../../core/errors.js';
import { sleep } from '../system-clock.js';
import { statusOf, toEngineError } from '../docker/engine-error.js';
import { EngineError } from '../../app/ports/engine-error.js';
import type { NodeContainers } from './node-containers.js';
import { callOptions, promised } from './swarm-connection.js';
import type { SwarmLogs } from './swarm-logs.js';
import type { SwarmNodes } from './swarm-nodes.js';
import { mountsOf, serviceSpecOf } from './swarm-service-spec.js';
import { RUNNING, TERMINAL, type SwarmTasks, type TaskView } from './swarm-tasks.js';
import { waitForTask, type SwarmWaitParts } from './swarm-wait.js';

/** The parts a swarm runtime is made of (built together by `openSwarmExecutor`, src/adapters/swarm/swarm-executor.ts). */
export interface SwarmRuntimeParts extends SwarmWaitParts {
  readonly manager: Docker;
  readonly nodes: Pick<SwarmNodes, 'configured' | 'engineNamed' | 'loss' | 'nodeName'>;
  readonly tasks: Pick<SwarmTasks, 'task' | 'refresh' | 'created' | 'fromService'>;
  readonly logs: Pick<SwarmLogs, 'open' | 'complete' | 'completeSoon' | 'endNow'>;
  readonly containers: Pick<
    NodeContainers,
    'removeTaskContainer' | 'removeVolumes' | 'inspectRemoved' | 'archive' | 'collect'
  >;
  readonly logger: Logger;
}

/**
 * The pair lifecycle's ContainerRuntime on Docker Swarm (issue 13, docs/scale-out.md). One replicated service per
 * pair (replicas 1, restart condition none, init, our labels on service and container); the handle's id is the
 * service id. The manager's API places the pair, reports its task (exit code, node) and streams its logs; each
 * node's own engine (`--node-engine`) is used only for what the manager cannot do: read the pair's volumes back
 * (outcome, Codex sessions) and confirm that the task's container is gone (404) after the service is removed.
 *
 * This class is the lifecycle's view; the work is in its parts: the nodes (swarm-nodes.ts), each pair's task and
 * placement (swarm-tasks.ts), its log (swarm-logs.ts, log-feed.ts), its container and volumes on the node
 * (node-containers.ts), the service spec (swarm-service-spec.ts) and the wait (swarm-wait.ts).
 */
export class SwarmContainerRuntime implements ContainerRuntime, ImagePlacement, MountCollection {
  readonly manager: Docker;
  readonly #parts: SwarmRuntimeParts;

  constructor(parts: SwarmRuntimeParts) {
    this.manager = parts.manager;
    this.#parts = parts;
  }

  async info(): Promise<EngineInfo> {
    try {
      const [info, version] = await Promise.all([
        this.manager.info() as Promise<{
          ID?: string;
          Runtimes?: Record<string, unknown>;
          LoggingDriver?: string;
          Swarm?: { LocalNodeState?: string; ControlAvailable?: boolean; Cluster?: { ID?: string } };
        }>,
        this.manager.version(),
      ]);
      if (info.Swarm?.LocalNodeState !== 'active' || info.Swarm.ControlAvailable !== true) {
        throw new EngineError(
          'engine_error',
          'the --manager engine is not a swarm manager (docker info: Swarm not active or not a manager)',
          {
            statusCode: null,
            engineMessage: `swarm state ${info.Swarm?.LocalNodeState ?? 'unknown'}`,
            suggestions: ['give --manager the engine of a swarm manager node (`docker node ls` works there)'],
          },
        );
      }
      return {
        id: info.Swarm.Cluster?.ID ?? info.ID ?? '',
        version: version.Version,
        apiVersion: version.ApiVersion,
        runtimes: info.Runtimes ? Object.keys(info.Runtimes) : [],
        loggingDriver: info.LoggingDriver,
      };
    } catch (err) {
      throw toEngineError(err, 'query the swarm manager');
    }
  }

  /** Present on every configured node's engine (a node without it would fail the pair placed there). */
  async imageExists(image: string): Promise<boolean> {
    return (await this.imageNodes(image)).absent.length === 0;
  }

  /** Each configured node's engine asked (issue 43): the nodes holding the image and those lacking it (404). */
  async imageNodes(image: string): Promise<ImageNodes> {
    const present: string[] = [];
    const absent: string[] = [];
    for (const node of this.#parts.nodes.configured()) {
      const engine = await this.#parts.nodes.engineNamed(node);
      try {
        await engine.getImage(image).inspect();
        present.push(node);
      } catch (err) {
        if (statusOf(err) !== 404) throw toEngineError(err, `inspect an image on node ${node}`, image);
        absent.push(node);
      }
    }
    return { present, absent };
  }

  async create(spec: ContainerSpec): Promise<ContainerHandle> {
    const mounts = mountsOf(spec);
    const serviceSpec = serviceSpecOf(spec, mounts);
    try {
      const service = (await this.manager.createService(serviceSpec)) as unknown as { id: string };
      this.#parts.tasks.created(service.id, mounts);
      return { id: service.id, name: spec.name };
    } catch (err) {
      throw toEngineError(err, 'create a swarm service', spec.image);
    }
  }

  attach(id: string): Promise<ContainerOutput> {
    return this.#parts.logs.open(id);
  }

  /**
   * A follow of a task that already ended (the lifecycle reads a reattached pair's log once more after it stopped) is
   * completed at once: nothing else would end it, since the service log's follow never ends on its own.
   */
  async follow(id: string): Promise<ContainerOutput> {
    const output = await this.#parts.logs.open(id);
    let task: TaskView | null | undefined;
    try {
      task = await this.#parts.tasks.task(id);
    } catch (err) {
      // Not known to have ended: the wait (or inspect) that follows completes the log once it sees the end.
      this.#parts.logger.debug({ service: id, err: errorKind(err) }, 'swarm task not read after follow');
    }
    if (task !== undefined && task !== null && TERMINAL.has(task.state)) this.#parts.logs.completeSoon(id);
    return output;
  }

  /**
   * Nothing to do, by design (a capability difference documented in src/app/ports/executor-inventory.ts): the
   * service starts its one task when it is created (replicas 1).
   */
  async start(_id: string): Promise<void> {}

  wait(id: string, options: { deadlineMs: number; signal?: AbortSignal }): Promise<WaitResult> {
    return waitForTask(this.#parts, id, options);
  }

  /** Controlled stop: scale to 0 (SIGTERM, SIGKILL after `timeoutSec`), then wait for the task to end within that budget. */
  async stop(id: string, timeoutSec: number): Promise<void> {
    const service = this.manager.getService(id);
    try {
      const current = (await service.inspect(callOptions())) as {
        Version: { Index: number };
        Spec: Record<string, unknown> & { TaskTemplate: { ContainerSpec: Record<string, unknown> } };
      };
      const spec = current.Spec;
      await promised(service.update.bind(service))({
        version: current.Version.Index,
        ...spec,
        TaskTemplate: {
          ...spec.TaskTemplate,
          ContainerSpec: { ...spec.TaskTemplate.ContainerSpec, StopGracePeriod: timeoutSec * 1e9 },
        },
        Mode: { Replicated: { Replicas: 0 } },
        ...callOptions(),
      });
    } catch (err) {
      if (statusOf(err) === 404) return;
      throw toEngineError(err, 'scale a swarm service to 0');
    }
    const until = Date.now() + (timeoutSec + 15) * 1000;
    while (Date.now() < until) {
      const task = await this.#parts.tasks.task(id);
      if (task === undefined || task === null || TERMINAL.has(task.state)) return;
      // A task on a lost node never reports its end: nothing to wait for.
      if (task.nodeId !== null && task.nodeId !== '' && (await this.#parts.nodes.loss(task.nodeId)) !== null)
        return;
      await sleep(this.#parts.pollMs);
    }
  }

  /**
   * Remove the service (its task's container goes with it) and the pair's volumes on its node. The node's agent
   * removes the task's container on its own, some time after the service is gone; removing it through the node's
   * engine now lets the verified removal (its 404 there) and the volumes' removal follow at once. Neither is the
   * verdict: a failure is logged, and `inspect` (the verified removal) still finds what was left.
   */
  async remove(id: string): Promise<RemoveResult> {
    const { tasks, logs, containers } = this.#parts;
    await tasks.refresh(id);
    await logs.complete(id);
    let result: RemoveResult = 'removed';
    try {
      await this.manager.getService(id).remove(callOptions());
    } catch (err) {
      if (statusOf(err) !== 404) throw toEngineError(err, 'remove a swarm service');
      result = 'absent';
    }
    await containers
      .removeTaskContainer(id)
      .catch((err: unknown) => this.#cleanupFailed(id, 'container', err));
    await containers.removeVolumes(id).catch((err: unknown) => this.#cleanupFailed(id, 'volumes', err));
    return result;
  }

  #cleanupFailed(id: string, what: 'container' | 'volumes', err: unknown): void {
    this.#parts.logger.warn(
      { service: id, err: errorKind(err) },
      `the pair's ${what} not removed on its node yet (the verified removal looks again)`,
    );
  }

  /**
   * The pair's state: from the task while the service exists; after removal, from the task's container on its node
   * (null once that engine answers 404, the verified removal). Throws when that node's engine does not answer.
   */
  async inspect(id: string): Promise<ContainerState | null> {
    const task = await this.#parts.tasks.task(id);
    // Not known here (another process placed it): every node's engine is asked for a container of this service.
    if (task === undefined) return this.#parts.containers.inspectRemoved(id);
    const state = { id, oomKilled: false, startedAt: null, labels: {} };
    if (task === null) return { ...state, status: 'created', exitCode: null, finishedAt: null };
    if (TERMINAL.has(task.state)) {
      this.#parts.logs.completeSoon(id);
      return { ...state, status: 'exited', exitCode: task.exitCode, finishedAt: task.timestamp };
    }
    const status = RUNNING.has(task.state) ? 'running' : 'created';
    return { ...state, status, exitCode: null, finishedAt: null };
  }

  async environmentOf(id: string): Promise<Record<string, string> | null> {
    try {
      const s = (await this.manager.getService(id).inspect(callOptions())) as {
        Spec?: { TaskTemplate?: { ContainerSpec?: { Env?: string[] } } };
      };
      const env: Record<string, string> = {};
      for (const entry of s.Spec?.TaskTemplate?.ContainerSpec?.Env ?? []) {
        const eq = entry.indexOf('=');
        if (eq > 0) env[entry.slice(0, eq)] = entry.slice(eq + 1);
      }
      return env;
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, 'inspect a swarm service');
    }
  }

  /** Through the engine of the node that ran the task (the container keeps its volumes until removed). */
  getArchive(id: string, path: string): Promise<Readable | null> {
    return this.#parts.containers.archive(id, path);
  }

  /** The pair's collected volumes (its outcome folder) copied back into their host folders (node-containers.ts). */
  collectMounts(id: string): Promise<void> {
    return this.#parts.containers.collect(id);
  }

  async listByLabel(labels: Readonly<Record<string, string>>): Promise<ContainerState[]> {
    let services: { ID: string }[];
    try {
      services = (await promised(this.manager.listServices.bind(this.manager))({
        filters: JSON.stringify({ label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) }),
        ...callOptions(),
      })) as { ID: string }[];
    } catch (err) {
      throw toEngineError(err, 'list swarm services');
    }
    const states: ContainerState[] = [];
    for (const s of services) {
      await this.#parts.tasks.fromService(s.ID);
      const state = await this.inspect(s.ID);
      if (state !== null) states.push({ ...state, labels: { ...labels } });
    }
    return states;
  }

  /**
   * Never conclusive, by design (a capability difference documented in src/app/ports/executor-inventory.ts): the
   * swarm keeps no per-container event history we could trust.
   */
  containerEventsSince(
    _id: string,
    _sinceMs: number,
  ): Promise<{ actions: readonly string[]; complete: boolean }> {
    return Promise.resolve({ actions: [], complete: false });
  }
}
